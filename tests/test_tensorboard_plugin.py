"""gapscope's TensorBoard plugin without a browser: the runs it finds under a logdir, its JSON
routes against the CLI's own analysers, problems as data (never a 500), and its registration."""
from __future__ import annotations

import configparser
import importlib
import json
import re
import shutil
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

import user_loops
from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.results.compare import compare
from gapscope.analysis.results.explain import explain
from gapscope.analysis.model.run import load_run
from gapscope.analysis.tensorboard.plugin.plugin import PLUGIN_NAME, STATIC, GapscopePlugin
from gapscope.analysis.tensorboard.plugin.runs import find_runs
from gapscope.profilers.phases import PHASES

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory, torch_run, keras_run):
    """A torch run, a keras run, a foreign torch.profiler trace, a failed run, and a matrix
    folder whose state is corrupt: everything a logdir may hold."""
    root = tmp_path_factory.mktemp("plugin_logdir")
    shutil.copytree(torch_run, root / torch_run.name)
    shutil.copytree(keras_run, root / keras_run.name)
    user_loops.torch_profiler_tutorial(root / "foreign" / "profile")
    failed = root / "failed-run"
    shutil.copytree(torch_run, failed)
    manifest = json.loads((failed / "manifest.json").read_text())
    manifest.update(status="failed", error="boom")
    (failed / "manifest.json").write_text(json.dumps(manifest))
    (root / "broken-matrix").mkdir()
    (root / "broken-matrix" / "matrix.json").write_text("{not json")
    other = root / "other-model"   # the torch run, said to run another workload
    shutil.copytree(torch_run, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["workload"] = "cnn"
    (other / "manifest.json").write_text(json.dumps(manifest))
    return root


@pytest.fixture(scope="module")
def plugin(logdir):
    return GapscopePlugin(base_plugin.TBContext(logdir=str(logdir)))


def get(plugin, route, **query):
    response = Client(plugin.get_plugin_apps()[route]).get("/", query_string=query)
    return response.status_code, json.loads(response.get_data())


def test_finds_every_kind_of_run_by_its_path_under_the_logdir(logdir, torch_run, keras_run):
    found = find_runs(logdir)
    assert sorted(found) == sorted([torch_run.name, keras_run.name, "foreign/profile",
                                    "failed-run", "broken-matrix", "other-model"])
    assert found["broken-matrix"].path is None and "corrupt matrix state" in found["broken-matrix"].problem


def test_runs_route_gives_the_clis_breakdowns_and_one_line_problems(plugin, logdir, torch_run,
                                                                     keras_run):
    status, doc = get(plugin, "/runs")
    assert status == 200 and doc["phases"] == list(PHASES)
    runs = {r["name"]: r for r in doc["runs"]}
    for name in (torch_run.name, keras_run.name, "foreign/profile"):
        expected = breakdown(load_run(logdir / name)).to_json_dict()
        del expected["per_step"]
        assert runs[name]["problem"] is None and runs[name]["traced"]
        assert runs[name]["breakdown"] == json.loads(json.dumps(expected)), name
    assert runs[torch_run.name]["framework"] == "torch"
    assert runs[keras_run.name]["framework"] in ("keras", "tensorflow")
    assert runs["foreign/profile"]["framework"] == "torch"
    for name, fragment in (("failed-run", "failed: boom"), ("broken-matrix", "corrupt matrix")):
        assert runs[name]["breakdown"] is None and fragment in runs[name]["problem"]
        assert "\n" not in runs[name]["problem"]


def test_steps_route_marks_warmup_traced_and_unprofiled_steps(plugin, logdir, torch_run):
    status, doc = get(plugin, "/steps", run=torch_run.name)
    run = load_run(logdir / torch_run.name)
    assert status == 200 and doc["source"] == "steps.csv"
    assert [s["step_ms"] for s in doc["steps"]] == [r["step_ms"] for r in run.rows]
    kinds = [s["kind"] for s in doc["steps"]]
    assert kinds[:run.warmup_steps] == ["warm-up"] * run.warmup_steps
    assert kinds.count("traced") == sum(1 for r in run.rows[run.warmup_steps:] if r["traced"]) > 0
    assert kinds.count("unprofiled") > 0


def test_steps_of_a_foreign_trace_are_its_traced_steps(plugin):
    status, doc = get(plugin, "/steps", run="foreign/profile")
    assert status == 200 and doc["source"] == "trace"
    assert [s["kind"] for s in doc["steps"]] == ["traced"] * 4


def test_compare_route_is_the_clis_comparison(plugin, logdir, torch_run, keras_run):
    status, doc = get(plugin, "/compare", run=[torch_run.name, keras_run.name])
    assert status == 200 and "error" not in doc, doc
    expected = compare([explain(load_run(logdir / n)) for n in (torch_run.name, keras_run.name)])
    pair, want = doc["comparisons"][0], expected.pairs[0]
    assert pair["gap_ms"] == pytest.approx(want.gap_ms)
    assert sum(g["delta_ms"] for g in pair["phases"].values()) == pytest.approx(pair["gap_ms"], abs=1e-5)
    for phase, g in pair["phases"].items():
        interval = g["delta_ci95"]
        assert g["within_noise"] == (interval is not None and interval[0] <= 0 <= interval[1]), phase
    assert doc["verdicts"] and doc["baseline"] == want.a


def test_runs_of_different_workloads_are_refused_in_the_tabs_words(plugin, torch_run, keras_run):
    """Issue 45: the tab refused a later pick with the CLI's --different-workloads, a flag it
    lacks, and without naming the ticked runs out of view. It names each workload's runs."""
    status, doc = get(plugin, "/compare", run=[torch_run.name, keras_run.name, "other-model"])
    assert status == 200 and "--different-workloads" not in doc["error"]
    assert doc["error"] == (f"the ticked runs run different workloads (mlp: {torch_run.name}, "
                            f"{keras_run.name}; cnn: other-model): a gap between different models "
                            "is no framework's; untick the runs of all workloads but one")


def test_the_compare_route_gives_the_clis_cells(plugin, logdir, torch_run, keras_run):
    """The tab's Δ cells and verdicts are the CLI table's (compare_columns.phase_rows)."""
    from gapscope.analysis.renderers.compare_columns import phase_rows
    status, doc = get(plugin, "/compare", run=[torch_run.name, keras_run.name])
    expected = compare([explain(load_run(logdir / n)) for n in (torch_run.name, keras_run.name)])
    cells = doc["cells"][0]
    rows = phase_rows(expected)
    assert [cells["phases"][p]["delta"] for p in PHASES] + [cells["step"]["delta"]] == \
        [r[3] for r in rows[:len(PHASES) + 1]]
    if expected.pairs[0].inconclusive:
        assert {c["verdict"] for c in cells["phases"].values()} == {"no verdict"}


def test_details_route_is_explains_evidence_for_one_run(plugin, logdir, keras_run):
    status, doc = get(plugin, "/details", run=keras_run.name)
    assert status == 200 and doc["problem"] is None, doc
    expected = json.loads(json.dumps(explain(load_run(logdir / keras_run.name)).to_json_dict()))
    for part in ("kernels", "attribution", "compile", "transfers", "resources"):
        assert doc[part] == expected[part], part
    assert [w["name"] for w in doc["kernels"]["top"]]  # the view's top-kernel table has rows
    status, doc = get(plugin, "/details", run="failed-run")
    assert status == 200 and "failed: boom" in doc["problem"] and "kernels" not in doc


@pytest.mark.parametrize("names,fragment", [
    (["failed-run", "foreign/profile"], "failed: boom"),
    (["foreign/profile"], "two or more"),
])
def test_compare_problems_are_answers_not_errors(plugin, names, fragment):
    status, doc = get(plugin, "/compare", run=names)
    assert status == 200 and fragment in doc["error"]


def test_an_unknown_run_is_a_404_with_a_reason(plugin):
    status, doc = get(plugin, "/steps", run="../etc")
    assert status == 404 and "no run '../etc'" in doc["error"]


def test_page_is_served_by_the_plugin_and_requests_nothing_outside_it(plugin):
    apps = plugin.get_plugin_apps()
    module = plugin.frontend_metadata().es_module_path
    assert module in apps and "/static/style.css" in apps
    for name in sorted(path.name for path in STATIC.iterdir()):  # every script, dom.js included
        text = (STATIC / name).read_text()
        assert Client(apps[f"/static/{name}"]).get("/").get_data(as_text=True) == text
        # Only the SVG namespace (an identifier, never fetched) may look like a URL.
        assert set(re.findall(r"\w+://[^\s'\"`)]+", text)) <= {"http://www.w3.org/2000/svg"}, name
        assert "@import" not in text and "import(" not in text


def test_is_registered_as_a_tensorboard_plugin_entry_point():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["options.entry_points"]["tensorboard_plugins"].strip().splitlines()
    assert lines == [f"{PLUGIN_NAME} = gapscope.analysis.tensorboard.plugin.plugin:GapscopePlugin"]
    module, _, name = lines[0].split(" = ")[1].partition(":")
    assert getattr(importlib.import_module(module), name) is GapscopePlugin
    assert "static/*.js" in config["options.package_data"]["gapscope.analysis.tensorboard.plugin"]


def test_launcher_loads_gapscopes_plugin_once_and_torch_tb_profiler_only_when_asked(monkeypatch):
    from gapscope.analysis.tensorboard.main import plugins
    from gapscope.analysis.tensorboard.server import TORCH_TB_PROFILER_ENV
    for asked in ("0", "1"):
        monkeypatch.setenv(TORCH_TB_PROFILER_ENV, asked)
        loaded = plugins()
        assert loaded.count(GapscopePlugin) == 1
        assert [p for p in loaded if getattr(p, "plugin_name", None) == PLUGIN_NAME] == [GapscopePlugin]
        names = [getattr(p, "plugin_name", None) for p in loaded]
        assert ("pytorch_profiler" in names) == (asked == "1"), names


@pytest.mark.parametrize("asked", ["0", "1"])
def test_the_tab_says_what_the_profiler_tabs_show_offline(monkeypatch, logdir, asked):
    from gapscope.analysis.tensorboard.server import TORCH_TB_PROFILER_ENV, TORCH_TB_PROFILER_OFF, XPROF_NOTE
    monkeypatch.setenv(TORCH_TB_PROFILER_ENV, asked)
    _, doc = get(GapscopePlugin(base_plugin.TBContext(logdir=str(logdir))), "/runs")
    torch_note, xprof_note = doc["tab_notes"]
    assert (torch_note == TORCH_TB_PROFILER_OFF) == (asked == "0") and xprof_note == XPROF_NOTE
    if asked == "1":
        assert torch_note.startswith("torch-tb-profiler's tab (every view: Overview, Operator, Trace")
        assert "needs the internet" in torch_note


def test_two_runs_of_one_configuration_are_labelled_by_their_folder(tmp_path, torch_run):
    """Not by a run id's tail: in the runs list, the chart and the compare alike."""
    for folder in ("monday", "tuesday"):
        shutil.copytree(torch_run, tmp_path / folder / torch_run.name)
    plugin = GapscopePlugin(base_plugin.TBContext(logdir=str(tmp_path)))
    _, doc = get(plugin, "/runs")
    label = load_run(torch_run).label
    names = [f"{folder}/{torch_run.name}" for folder in ("monday", "tuesday")]
    assert [(r["name"], r["label"]) for r in doc["runs"]] == [(n, f"{label} ({n})") for n in names]
    response = Client(plugin.get_plugin_apps()["/compare"]).get(
        "/", query_string=urlencode([("run", n) for n in names]))
    pair, = json.loads(response.get_data())["comparisons"]
    assert (pair["a_label"], pair["b_label"]) == tuple(f"{label} ({n})" for n in names)


def test_a_run_from_a_busy_machine_is_marked_unreliable_in_the_tab(tmp_path, torch_run):
    busy = tmp_path / "busy-run"
    shutil.copytree(torch_run, busy)
    manifest = json.loads((busy / "manifest.json").read_text())
    manifest["machine_load"] = {"others_cpu_pct": 61.0, "steal_pct": 0.0, "cores": 2}
    (busy / "manifest.json").write_text(json.dumps(manifest))
    status, doc = get(GapscopePlugin(base_plugin.TBContext(logdir=str(tmp_path))), "/runs")
    (run,) = doc["runs"]
    assert status == 200 and run["breakdown"]["reliable"] is False
    assert run["breakdown"]["notes"][0].startswith("warning: busy machine: other processes used 61 %")
    # The page marks the step figure where it stands, from that field.
    assert "b.reliable === false" in (STATIC / "index.js").read_text()


def test_an_ab_folder_is_one_comparison_in_the_tab(ab_folder, tmp_path):
    """Its runs carry their A/B folder and configuration, and any two of its configurations
    compare as the measurement does in the CLI (verdict, interval, pair ratios), never as two
    single runs."""
    from gapscope.analysis.renderers.compare_columns import verdict_lines
    from gapscope.analysis.results.measured import compare_measurement
    logdir = tmp_path / "logs"
    shutil.copytree(ab_folder, logdir / ab_folder.name)
    plugin = GapscopePlugin(base_plugin.TBContext(logdir=str(logdir)))
    _, doc = get(plugin, "/runs")
    runs = {r["name"]: r for r in doc["runs"]}
    assert {r["measurement"] for r in runs.values()} == {ab_folder.name}
    by_config = {}
    for name, r in sorted(runs.items()):
        by_config.setdefault(r["config"], []).append(name)
    assert sorted(by_config) == ["linreg:torch", "linreg:torch:preload"]
    assert all(len(names) == 2 for names in by_config.values())
    status, compared = get(plugin, "/compare", run=[by_config["linreg:torch"][0],
                                                    by_config["linreg:torch:preload"][1]])
    expected = compare_measurement(ab_folder)
    assert status == 200 and compared["verdicts"] == verdict_lines(expected)
    (pair,) = compared["comparisons"]
    assert pair["repeats"] == 2 and pair["pair_ratios"] == [round(r, 4) for r in expected.pairs[0].pair_ratios]
    # Two repeats of one configuration stay two runs compared as they are.
    _, same = get(plugin, "/compare", run=by_config["linreg:torch"])
    assert same["comparisons"][0]["repeats"] == 1
    assert "defaultCompare" in (STATIC / "index.js").read_text() and "run.config !== first.config" in (
        STATIC / "index.js").read_text()


@pytest.mark.parametrize("wait", ["-1", "1e9", "abc", "nan", "61", "", "inf", "0x10"])
def test_a_wait_that_is_no_seconds_is_a_400_with_one_line(plugin, wait):
    """Issue 47 item 8: these were taken silently (as 0, the cap, or no wait)."""
    status, doc = get(plugin, "/runs", wait=wait)
    assert status == 400 and doc == {"error": f"wait={wait!r}: give seconds from 0 to 60"}


def test_a_wait_is_kept_even_while_a_run_is_analysed(logdir):
    """wait=2 answered in 5 s: an analysis begun inside the request ran past its deadline. Now
    the request only waits for the thread that analyses: its time is the wait and the scan of
    the logdir (timed here as a wait=0 request), whatever the analyses cost."""
    scan = time.monotonic()
    get(GapscopePlugin(base_plugin.TBContext(logdir=str(logdir))), "/runs", wait="0")
    scan = time.monotonic() - scan
    fresh = GapscopePlugin(base_plugin.TBContext(logdir=str(logdir)))
    start = time.monotonic()
    status, doc = get(fresh, "/runs", wait="0.3")
    # Answered while runs were still being analysed, and without an analysis' seconds on top
    # (the margin is for a loaded machine: 0.5 s failed 1 suite in 2 with the pool's workers busy).
    assert status == 200 and doc["pending"] > 0 and time.monotonic() - start < 0.3 + 2 * scan + 2.0
    assert doc["pending"] == sum(r["pending"] for r in doc["runs"])


def test_runs_not_analysed_in_time_are_pending_and_analysed_meanwhile(logdir, torch_run):
    # /runs?wait=0 answers at once: every run not analysed yet is listed as pending (the page
    # asks again each second); a thread analyses them meanwhile, into the figures /runs gives.
    fresh = GapscopePlugin(base_plugin.TBContext(logdir=str(logdir)))
    status, first = get(fresh, "/runs", wait="0")
    # Each run is pending, or done already: a broken one fails at once, and the thread may
    # finish it before this answer (a race the first version of this test lost now and then).
    assert status == 200 and first["pending"] == sum(r["pending"] for r in first["runs"]) >= 4
    assert all(r["pending"] or r["problem"] for r in first["runs"])
    pending = {r["name"]: r for r in first["runs"]}[torch_run.name]
    assert pending["pending"] and pending["breakdown"] is None and pending["problem"] is None
    deadline = time.monotonic() + 300
    while True:
        _, later = get(fresh, "/runs", wait="0")
        if not later["pending"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert later["pending"] == 0
    _, whole = get(GapscopePlugin(base_plugin.TBContext(logdir=str(logdir))), "/runs")
    assert later["runs"] == whole["runs"] and whole["pending"] == 0


def test_plain_runs_are_analysed_in_worker_processes_as_in_one(logdir, tmp_path, monkeypatch):
    """Plain /runs over 200 runs took 72 s in one process: runs are analysed in worker processes,
    one per core, with the same figures; a worker lost since is replaced."""
    from gapscope.analysis.tensorboard.plugin.views import Views

    copy = tmp_path / "logdir"
    shutil.copytree(logdir, copy)
    monkeypatch.setenv("GAPSCOPE_READ_WORKERS", "1")
    alone = Views(copy).runs()
    monkeypatch.setenv("GAPSCOPE_READ_WORKERS", "2")
    views = Views(copy)
    assert views.runs() == alone
    workers = list(views._pool._workers)
    assert len(workers) == 2 and all(w.process.poll() is None for w in workers)
    workers[0].process.kill()
    workers[0].process.wait()
    for manifest in copy.rglob("manifest.json"):  # every run changed: all read again
        manifest.touch()
    assert views.runs() == alone
    assert workers[0] not in views._pool._workers and len(views._pool._workers) == 2
    views.close()
    assert all(w.process.poll() is not None for w in workers[1:])


def test_a_worker_lost_mid_batch_leaves_its_runs_to_the_asking_process(logdir):
    import queue

    from gapscope.analysis.tensorboard.plugin.analysis_pool import AnalysisPool

    pool = AnalysisPool()
    (worker,) = pool._started(1)
    worker.process.kill()
    worker.process.wait()
    todo, left, done = queue.SimpleQueue(), [], []
    items = [(name, entry) for name, entry in find_runs(logdir).items()]
    for item in items:
        todo.put(item)
    pool._drain(worker, todo, done.append, left)
    assert done == [] and left == items
    pool.close()
