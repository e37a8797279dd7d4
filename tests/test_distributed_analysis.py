"""Job-level analysis on real 2-process gloo DDP runs: per-rank phases, the job step, the straggler,
refusals of failed and mixed jobs, and foreign per-rank traces."""
from __future__ import annotations

import csv
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))

from gapscope.analysis.results.distributed_breakdown import WaitSource, job_breakdown  # noqa: E402
from gapscope.analysis.model.job import is_job, load_job  # noqa: E402
from gapscope.analysis.model.locate import rank_from_name  # noqa: E402
from gapscope.analysis.results.rank_summary import summarize_ranks  # noqa: E402
from gapscope.analysis.model.run import expand_runs  # noqa: E402
from gapscope.profilers.errors import GapscopeInputError  # noqa: E402
from gapscope.profilers.phases import PHASES  # noqa: E402

import dist_job_loop  # noqa: E402


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    out = tmp_path_factory.mktemp("jobs")
    return {"plain": dist_job_loop.make_job(out / "plain"),
            "slow": dist_job_loop.make_job(out / "slow", slow_rank=1),
            "failed": dist_job_loop.make_job(out / "failed", fail_rank=1)}


def _steps_csv(path: Path) -> dict[int, dict]:
    with open(path / "steps.csv", newline="") as handle:
        return {int(r["step"]): r for r in csv.DictReader(handle)}


def test_per_rank_phases_add_up_and_job_step_is_the_slowest_rank(jobs):
    job = load_job(jobs["plain"])
    assert job.world_size == 2 and is_job(jobs["plain"])
    result = job_breakdown(job)
    for b in result.ranks:
        b.self_check()
        assert sum(b.phases[p].ms for p in PHASES) == pytest.approx(b.step_stats()["mean"], abs=1e-6)
    # Hand-computed: per step number, the max over the ranks' unprofiled steady steps.
    rows = [_steps_csv(jobs["plain"] / f"rank{r}") for r in range(2)]
    warmup = dist_job_loop.WARMUP
    steps = sorted(n for n in rows[0] if n >= warmup
                   and not any(int(rr[n]["traced"]) for rr in rows))
    expected = [max(float(rr[n]["step_ms"]) for rr in rows) for n in steps]
    assert [s for s, _, _ in result.job_steps] == steps
    assert [ms for _, ms, _ in result.job_steps] == pytest.approx(expected)
    assert result.job_step_ms == pytest.approx(sum(expected) / len(expected))
    lo, hi = result.job_step_ci95
    assert lo < result.job_step_ms < hi
    # The decomposition adds up to the job step.
    assert sum(result.decomposition().values()) == pytest.approx(result.job_step_ms, abs=1e-6)


def test_slowed_rank_is_the_straggler_in_data_load(jobs):
    result = job_breakdown(load_job(jobs["slow"]))
    assert result.straggler == 1 and result.straggler_phase == "data_load"
    assert not result.skew_within_noise
    # The straggler's extra data_load is what its own timers measured over rank 0's: the sleep,
    # which a loaded machine stretches (32 ms for a 20 ms sleep at load 10) but never shortens.
    measured = _data_load_gap_ms(jobs["slow"])
    assert measured > 0.75 * dist_job_loop.SLOW_MS
    assert result.straggler_extra_ms == pytest.approx(measured, rel=0.2)
    assert result.straggler_extra_ci95[0] > 0.5 * dist_job_loop.SLOW_MS
    # Raw step times hide it (rank 0 waits in backward); time not waiting shows it.
    assert result.step_skew_ms < 0.5 * result.skew_ms
    assert result.busy_ms[1] - result.busy_ms[0] > 0.5 * dist_job_loop.SLOW_MS


def _data_load_gap_ms(job: Path) -> float:
    """Rank 1's mean data_load over rank 0's, from the ranks' own steps.csv (unprofiled steady steps)."""
    rows = [_steps_csv(job / f"rank{r}") for r in range(2)]
    steps = [n for n in rows[0] if n >= dist_job_loop.WARMUP
             and not any(int(rr[n]["traced"]) for rr in rows)]
    return sum(float(rows[1][n]["data_load_ms"]) - float(rows[0][n]["data_load_ms"])
               for n in steps) / len(steps)


def test_cli_breakdown_of_a_job(jobs):
    from gapscope.cli import cli
    res = CliRunner().invoke(cli, ["breakdown", str(jobs["slow"])])
    assert res.exit_code == 0, res.output
    assert "rank0" in res.output and "rank1" in res.output
    assert "straggler: rank 1" in res.output and "data_load" in res.output
    assert "communication" in res.output
    res = CliRunner().invoke(cli, ["breakdown", str(jobs["slow"]), "--format", "json"])
    doc = json.loads(res.stdout)
    assert doc["job"]["straggler"]["rank"] == 1 and len(doc["ranks"]) == 2
    assert doc["ranks"][1]["phases"]["data_load"]["ms"] > 0.75 * dist_job_loop.SLOW_MS
    for fmt, expected in (("csv", ",1,"), ("markdown", "| phase | rank0 ms |")):
        res = CliRunner().invoke(cli, ["breakdown", str(jobs["slow"]), "--format", fmt])
        assert res.exit_code == 0 and expected in res.stdout, res.output
    # A folder holding the job gives the job, not its ranks as separate runs.
    assert [e.path for e in expand_runs([jobs["slow"].parent])] == [jobs["slow"]]


def test_failed_rank_refused_with_its_number(jobs):
    with pytest.raises(GapscopeInputError, match=r"job .* failed: rank 1: .*broke on purpose"):
        load_job(jobs["failed"])
    from gapscope.cli import cli
    res = CliRunner().invoke(cli, ["breakdown", str(jobs["failed"])])
    assert res.exit_code == 2 and "rank 1" in res.output and "Traceback" not in res.output


def test_a_job_nobody_ended_is_refused_naming_the_rank(jobs, tmp_path):
    # A user's rank 0 SIGKILLed: the job and rank 0 stay `running`, their process gone.
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    job = shutil.copytree(jobs["plain"], tmp_path / "job")
    for manifest_path in (job / "manifest.json", job / "rank0" / "manifest.json"):
        manifest = json.loads(manifest_path.read_text())
        manifest.update(status="running", pid=gone.pid, host=socket.gethostname(), error=None)
        manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(GapscopeInputError) as refused:
        load_job(job)
    assert str(refused.value) == (f"job {json.loads((job / 'manifest.json').read_text())['run_id']} "
                                  f"failed: rank 0: interrupted (process {gone.pid} on "
                                  f"{socket.gethostname()} is gone) (the job was never ended)")


def test_folder_mixing_two_jobs_refused(jobs, tmp_path):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copytree(jobs["plain"] / "rank0", mixed / "rank0")
    shutil.copytree(jobs["slow"] / "rank1", mixed / "rank1")
    with pytest.raises(GapscopeInputError, match="mixes ranks of different jobs"):
        load_job(mixed)
    # A job directory whose rank1 came from another job.
    swapped = tmp_path / "swapped"
    shutil.copytree(jobs["plain"], swapped)
    shutil.rmtree(swapped / "rank1")
    shutil.copytree(jobs["slow"] / "rank1", swapped / "rank1")
    with pytest.raises(GapscopeInputError, match="mixes ranks of different jobs"):
        load_job(swapped)
    # Same rank twice among foreign traces.
    twice = tmp_path / "twice"
    twice.mkdir()
    for i, job in enumerate((jobs["plain"], jobs["slow"])):
        shutil.copy(next((job / "rank1").glob("*.pt.trace.json.gz")), twice / f"t{i}.pt.trace.json.gz")
    with pytest.raises(GapscopeInputError, match="rank 1 appears 2 times"):
        load_job(twice)


def _foreign(job: Path, folder: Path, strip_info: bool = False) -> Path:
    folder.mkdir()
    for r in range(2):
        trace = next((job / f"rank{r}").glob("*.pt.trace.json.gz"))
        if strip_info:  # no distributedInfo: the rank comes from the file name
            data = json.loads(gzip.decompress(trace.read_bytes()))
            del data["distributedInfo"]
            (folder / f"worker_rank{r}.pt.trace.json").write_text(json.dumps(data))
        else:
            shutil.copy(trace, folder / f"host_{1000 + r}.123.pt.trace.json.gz")
    return folder


def test_foreign_per_rank_traces_break_down_like_the_job(jobs, tmp_path):
    own = job_breakdown(load_job(jobs["slow"]), source="trace")
    for strip in (False, True):
        folder = _foreign(jobs["slow"], tmp_path / f"foreign{strip}", strip)
        assert is_job(folder)
        job = load_job(folder)
        assert job.foreign and job.world_size == 2
        theirs = job_breakdown(job)
        for a, b in zip(own.ranks, theirs.ranks):
            assert a.phase_means() == pytest.approx(b.phase_means())
        assert theirs.job_steps == own.job_steps
        assert theirs.job_step_ms == pytest.approx(own.job_step_ms)
        assert theirs.straggler == 1 and theirs.straggler_phase == "data_load"
    assert rank_from_name(Path("x/host_1234.5678.pt.trace.json"), Path("x")) is None
    assert rank_from_name(Path("x/rank3/t.pt.trace.json"), Path("x")) == 3


def test_pool_gives_the_serial_figures(jobs):
    job = load_job(jobs["plain"])
    pooled = summarize_ranks(job, workers=2)
    serial = summarize_ranks(job, workers=1)
    for a, b in zip(pooled, serial):
        assert a.rank == b.rank
        assert a.breakdown.phase_means() == pytest.approx(b.breakdown.phase_means())
        assert a.breakdown.step_times_ms == b.breakdown.step_times_ms


def test_straggler_from_timers_alone(jobs):
    """No trace read: the fast rank's wait is its backward beyond the straggler's."""
    result = job_breakdown(load_job(jobs["slow"]), source="timers")
    assert result.wait_source == WaitSource.TIMERS and result.comm_phase == "backward"
    assert result.wait_ms[1]["backward"] == 0.0  # the straggler never waits
    assert result.wait_ms[0]["backward"] > 15.0
    assert result.straggler == 1 and result.straggler_phase == "data_load"
    assert not result.skew_within_noise
    assert any("estimated from the step timers" in n for n in result.notes)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The same loop on one process: an ordinary run directory."""
    return dist_job_loop.make_job(tmp_path_factory.mktemp("single"), world=1)


def test_compare_one_process_against_the_job(jobs, single):
    from gapscope.analysis.results.breakdown import breakdown
    from gapscope.analysis.model.job import batch_size
    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.results.scaling import PARTS, job_side, run_side, scaling
    from gapscope.cli import cli
    run = load_run(single)
    base = breakdown(run)
    job = load_job(jobs["slow"])
    jb = job_breakdown(job)
    result = scaling(run_side(base, batch_size(run)), job_side(jb, job.batch_size))
    assert [g.phase for g in result.parts] == list(PARTS)
    # The parts' deltas add up to the step gap; the job step is the slowest rank's.
    assert sum(g.delta_ms for g in result.parts) == pytest.approx(result.gap_ms, abs=1e-9)
    assert result.gap_ms == pytest.approx(jb.job_step_ms - base.step_stats()["mean"])
    assert result.efficiency == pytest.approx(base.step_stats()["mean"] / jb.job_step_ms)
    assert result.throughput_ratio == pytest.approx(2 * result.efficiency)
    lo, hi = result.efficiency_ci95
    assert lo <= result.efficiency <= hi
    # The slowed rank's 20 ms of data loading: half of it in the ranks' mean data_load, the
    # other half as rank 0 waiting on the all-reduce.
    parts = {g.phase: g for g in result.parts}
    assert 7.0 < parts["data_load"].delta_ms < 13.0
    assert parts["communication"].delta_ms > 5.0
    res = CliRunner().invoke(cli, ["compare", str(single), str(jobs["slow"])])
    assert res.exit_code == 0, res.output
    assert "scaling efficiency" in res.output and "exposed communication" in res.output
    res = CliRunner().invoke(cli, ["compare", str(single), str(jobs["slow"]), "--format", "json"])
    doc = json.loads(res.stdout)
    assert doc["scaling_efficiency"] == pytest.approx(result.efficiency, abs=1e-4)


ROOT = Path(__file__).resolve().parent.parent


def _gapscope(*args, timeout=240):
    import subprocess
    return subprocess.run([sys.executable, str(ROOT / "cli.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_torchrun_user_loop_straggler(tmp_path):
    """The launch helper's user script under torchrun, rank 1's data loading slowed."""
    import subprocess
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                           str(ROOT / "tests" / "ddp_user_loop.py"), "--out", str(tmp_path),
                           "--steps", "16", "--slow-rank", "1"],
                          capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    (job,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    result = job_breakdown(load_job(job))
    assert result.wait_source == WaitSource.TRACE  # gloo all-reduces found in both traces
    assert result.straggler == 1 and result.straggler_phase == "data_load"
    assert not result.skew_within_noise
    assert result.last_arrival[1] > 0.5  # rank 1 reaches the all-reduce last


def test_gapscope_run_nproc_breakdown_and_compare(tmp_path):
    common = ["--framework", "torch", "--steps", "12", "--warmup", "3", "--trace-steps", "3",
              "--out", tmp_path, "-q"]
    for nproc in (1, 2):
        done = _gapscope("run", "mlp", "--nproc", nproc, *common)
        assert done.returncode == 0, done.stderr[-2000:]
    one, = tmp_path.glob("mlp-torch-default-2*")
    two, = tmp_path.glob("mlp-torch-default-x2-*")
    assert "rank1" in done.stdout and "all_reduce count" in done.stdout  # run prints the job
    shown = _gapscope("breakdown", two, "--format", "json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert [r["rank"] for r in doc["job"]["per_rank"]] == [0, 1]
    for rank, comm in enumerate(doc["job"]["communication"]):
        assert comm["per_kind"]["all_reduce"]["count"] >= 1
        assert comm["exposed_ms"] <= comm["comm_ms"] + 1e-6
        # The trace has no sizes; DDP's buckets give them: the mlp's one bucket, every gradient.
        ddp = json.loads((two / f"rank{rank}" / "manifest.json").read_text())["ddp"]
        assert comm["per_kind"]["all_reduce"]["count"] == len(ddp["rebuilt_bucket_sizes"]) == 1
        assert comm["per_kind"]["all_reduce"]["bytes"] == ddp["total_parameter_size_bytes"] \
            == 4 * (100 * 128 + 128 + 128 * 10 + 10)
    assert doc["job"]["samples_per_step"] == 2 * 256  # two ranks of the mlp batch
    compared = _gapscope("compare", one, two, "--format", "json")
    assert compared.returncode == 0, compared.stderr
    scaling = json.loads(compared.stdout)
    assert scaling["a"]["world_size"] == 1 and scaling["b"]["world_size"] == 2
    # torchrun gives each rank one thread; the one-process run used every core.
    omp = os.environ.get("OMP_NUM_THREADS")
    assert (scaling["a"]["threads"], scaling["b"]["threads"]) == (
        f"OMP_NUM_THREADS {omp or 'unset'}", f"OMP_NUM_THREADS {omp or 1}")
    assert scaling["scaling_efficiency"] == pytest.approx(
        scaling["a"]["step_ms"] / scaling["b"]["step_ms"], rel=1e-3)
    assert sum(p["delta_ms"] for p in scaling["parts"].values()) == pytest.approx(
        scaling["gap_ms"], abs=1e-5)


def test_report_lists_the_job_with_its_ranks_and_scaling(jobs, single, tmp_path):
    from gapscope.analysis.report import write_report
    files = write_report([single, jobs["slow"]], tmp_path / "r" / "report.md")
    text = files.markdown.read_text()
    assert "## Distributed jobs" in text
    assert "| phase | rank0 ms |" in text and "rank1 ms" in text
    assert "straggler: rank 1" in text and "Scaling against" in text
    assert "scaling efficiency" in text


def test_tensorboard_plugin_lists_the_job_ranks(jobs, tmp_path):
    from gapscope.analysis.tensorboard.plugin.views import Views
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    for kind in ("slow", "failed"):
        shutil.copytree(jobs[kind], logdir / jobs[kind].name)
    documents = {d["name"]: d for d in Views(logdir).runs()["runs"]}
    slow, failed = jobs["slow"].name, jobs["failed"].name
    assert set(documents) == {f"{slow}/rank0", f"{slow}/rank1", failed}
    assert documents[f"{slow}/rank1"]["label"].endswith("x2 rank1")
    assert documents[f"{slow}/rank1"]["breakdown"]["phases"]["data_load"]["ms"] > 15.0
    assert "failed: rank 1" in documents[failed]["problem"]


def test_clock_offsets_across_hosts(jobs, tmp_path):
    """On one host the clocks agree (offsets 0); rank 1 "on another host" with its clock 50 ms
    behind: the offset is recovered from the collectives, and once applied rank 1 is still
    the one reaching each all-reduce last (without it, it would seem the first)."""
    same = job_breakdown(load_job(jobs["slow"]))
    assert same.clock_offsets_us == {0: 0.0, 1: 0.0} and "one host" in same.clocks
    assert same.last_arrival[1] == 1.0
    moved = tmp_path / "moved"
    shutil.copytree(jobs["slow"], moved)
    manifest = json.loads((moved / "manifest.json").read_text())
    manifest["distributed"]["ranks"][1]["host"] = "node-b"
    (moved / "manifest.json").write_text(json.dumps(manifest))
    trace = next((moved / "rank1").glob("*.pt.trace.json.gz"))
    data = json.loads(gzip.decompress(trace.read_bytes()))
    for event in data["traceEvents"]:
        if isinstance(event.get("ts"), (int, float)):
            event["ts"] -= 50_000
    trace.write_bytes(gzip.compress(json.dumps(data).encode()))
    result = job_breakdown(load_job(moved))
    assert "2 hosts" in result.clocks
    assert result.clock_offsets_us[0] == 0.0
    assert result.clock_offsets_us[1] == pytest.approx(50_000, abs=2_000)
    assert result.last_arrival[1] == 1.0
    assert result.straggler == 1 and result.straggler_phase == "data_load"


def test_tensorboard_page_shows_the_job(jobs, tmp_path):
    """The gapscope tab draws the job: a row per rank, the straggler marked, the CLI's lines."""
    from gapscope.analysis.tensorboard.server import TensorBoardServer
    from browser import HeadlessChromium, ensure_chromium
    from test_tensorboard_browser import assert_offline_and_clean, open_fresh, wait_in_gapscope
    chromium = ensure_chromium()
    if chromium is None:
        pytest.skip("Chromium is missing and could not be installed here")
    logdir = tmp_path / "logdir"
    logdir.mkdir()
    for kind in ("slow", "failed"):
        shutil.copytree(jobs[kind], logdir / jobs[kind].name)
    with TensorBoardServer(logdir, ready_timeout=60) as server, HeadlessChromium(chromium) as page:
        page.watch()
        open_fresh(page, server.url + "#gapscope")
        page.wait_for_text(["Distributed jobs", "straggler: rank 1", "data_load",
                            "cannot be analysed", "failed: rank 1"], timeout=120)
        rows = wait_in_gapscope(page, """(doc) => {
          const rows = [...doc.querySelectorAll('tr.job-rank')].map(
            (tr) => [...tr.children].map((td) => td.textContent));
          return rows.length ? rows : null;
        }""")
        assert [r[0] for r in rows] == ["rank 0", "rank 1 (straggler)"]
        busy = [float(r[4]) for r in rows]
        assert busy[1] - busy[0] > 0.5 * dist_job_loop.SLOW_MS
        assert_offline_and_clean(page, server.url)
