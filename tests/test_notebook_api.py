"""gapscope.compare, .measure and .load return the objects the CLI renders (equal to its JSON),
with the verdict as fields and DataFrames per phase and per layer; docs/notebook.py runs whole,
and nothing of this (nor mcp) is imported by the CLI's start or by `import gapscope`."""
from __future__ import annotations

import json
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.renderers import registry
from gapscope.cli import cli
from gapscope.profilers.phases import PHASES
REPO = Path(__file__).resolve().parents[1]
CNN = REPO / "tests" / "fixtures" / "cnn_cpu"   # two real runs, marked busy (their README)


def quiet_copy(run: Path, folder: Path) -> Path:
    """The fixture run as if recorded on a quiet machine (the figures are unchanged)."""
    shutil.copytree(run, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["machine_load"] = {"others_cpu_pct": 1.0, "steal_pct": 0.0, "cores": 2}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture(scope="module")
def notebook(tmp_path_factory):
    """docs/notebook.py run as a script from the repository's root; its globals. Its measurement
    (2 repeats of linreg, torch against preloaded data) goes to a folder of the test's own."""
    out = tmp_path_factory.mktemp("notebook")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        patch.setenv("GAPSCOPE_OUT", str(out))
        found = runpy.run_path(str(REPO / "docs" / "notebook.py"))
    return found, out


@pytest.fixture(scope="module")
def quiet_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("quiet")
    return (quiet_copy(CNN / "torch", root / "torch"), quiet_copy(CNN / "keras", root / "keras"),
            quiet_copy(CNN / "keras", root / "keras-again"))


def _cli(*args):
    result = CliRunner().invoke(cli, [*args, "--format", "json"])
    return json.loads(result.stdout), result.exit_code


def test_compare_is_the_comparison_the_cli_prints(quiet_runs):
    import gapscope
    torch_run, keras_run, _ = quiet_runs
    comparison = gapscope.compare(torch_run, keras_run)
    expected, code = _cli("compare", str(torch_run), str(keras_run))
    assert json.loads(registry.COMPARE["json"].render(comparison)) == expected and code == 0
    assert comparison.verdict.to_json_dict() == {"verdict": "faster", "inconclusive": False, "reason": None}
    busy = gapscope.compare(CNN / "torch", CNN / "keras")
    assert json.loads(registry.COMPARE["json"].render(busy)) == _cli("compare", str(CNN / "torch"),
                                                                     str(CNN / "keras"))[0]
    assert (str(busy.verdict), busy.verdict.inconclusive) == ("inconclusive", True)
    assert busy.verdict.reason == "busy machine while cnn torch and cnn keras ran"


def test_to_pandas_has_a_row_per_phase_and_per_layer(quiet_runs):
    import gapscope
    torch_run, keras_run, again = quiet_runs
    phases = gapscope.compare(torch_run, keras_run).to_pandas()
    assert list(phases.index) == [("cnn keras", p) for p in PHASES]
    # The steady unprofiled step of each run is its steps.csv step 2 (warm-up 2, step 3 traced).
    assert phases.loc[("cnn keras", "forward"), "a_ms"] == pytest.approx(284.265927)
    assert phases.loc[("cnn keras", "backward"), "a_ms"] == pytest.approx(428.692425)
    assert phases["delta_ms"].sum() == pytest.approx(239.275 - 715.685, abs=1e-2)
    layers = gapscope.compare(keras_run, again).to_pandas(by="layer")
    found, _ = _cli("breakdown", "--layers", str(keras_run))
    by_name = {r["name"]: r for r in found["layers"]["layers"]}
    assert sorted(name for _, name in layers.index) == sorted(by_name) and len(by_name) == 4
    for (_, name), row in layers.iterrows():
        assert row["a_forward_ms"] == pytest.approx(by_name[name]["forward_ms"], abs=1e-6)
        assert row["b_backward_ms"] == pytest.approx(by_name[name]["backward_ms"], abs=1e-6)
        assert row["delta_ms"] == pytest.approx(0.0)   # a run against its own copy
    # Runs that share no layer (torch's trace names none) give an empty table, not an error.
    assert gapscope.compare(torch_run, keras_run).to_pandas(by="layer").empty


def test_to_pandas_without_pandas_says_so_in_one_line(quiet_runs, monkeypatch):
    import gapscope
    comparison = gapscope.compare(*quiet_runs[:2])
    monkeypatch.setitem(sys.modules, "pandas", None)   # import pandas now raises ImportError
    with pytest.raises(ImportError, match=r"^Comparison.to_pandas\(\) needs pandas: pip install pandas$"):
        comparison.to_pandas()


def test_load_returns_the_run():
    import gapscope
    run = gapscope.load(CNN / "torch")
    assert run.run_id == "cnn-torch-default-20261126-222948-62fb" and run.label == "cnn torch"
    assert len(run.rows) == 5


def test_the_notebook_runs_and_its_measurement_is_the_clis(notebook):
    found, out = notebook
    assert found["phases"].shape[0] == len(PHASES)
    assert found["layers"].shape[0] == 4
    (folder,) = out.glob("ab-linreg-*")
    expected, code = _cli("compare", str(folder))
    measured = found["measured"]
    assert json.loads(registry.COMPARE["json"].render(measured)) == expected
    assert code == (3 if measured.verdict.inconclusive else 0)
    (pair,) = expected["comparisons"]
    assert pair["repeats"] == 2 and pair["a_label"] == "linreg:torch"
    assert measured.verdict.inconclusive == (pair["inconclusive"] is not None)


def test_the_cli_and_import_gapscope_import_none_of_it():
    code = ("import sys, gapscope, gapscope.cli\n"
            "from click.testing import CliRunner\n"
            "CliRunner().invoke(gapscope.cli.cli, ['--help'])\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'pandas')\n"
            "             or m in ('gapscope.api', 'gapscope.agent')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
