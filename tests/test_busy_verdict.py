"""A comparison with a side measured on a busy machine gives no verdict, no suggestion, one warning, exit 3."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from gapscope.cli import cli

LOAD = {"others_cpu_pct": 96.0, "steal_pct": 0.0, "cores": 2}


def _copy(run, folder, load=None):
    shutil.copytree(run, folder)
    if load is not None:
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["machine_load"] = load
        (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture(scope="module")
def quiet_and_busy(tmp_path_factory, torch_run, keras_run):
    root = tmp_path_factory.mktemp("busy")
    return (_copy(torch_run, root / "torch-quiet", {"others_cpu_pct": 2.0, "steal_pct": 0.0, "cores": 2}),
            _copy(keras_run, root / "keras-busy", LOAD),
            _copy(torch_run, root / "torch-busy", {**LOAD, "others_cpu_pct": 41.0}))


def test_a_busy_side_makes_the_verdict_inconclusive_with_exit_3(quiet_and_busy):
    quiet, busy, _ = quiet_and_busy
    result = CliRunner().invoke(cli, ["compare", str(quiet), str(busy)])
    assert result.exit_code == 3, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("INCONCLUSIVE: ") and "busy machine while" in first
    assert " faster " not in first and " slower " not in first   # no factor to quote
    text = " ".join(result.stdout.split())   # the lines wrap at the terminal's width
    assert text.count("warning: busy machine") == 1, result.stdout   # said once, with the load
    assert "warning: busy machine while mlp keras ran: other processes used 96 % of the cores" in text
    assert "try " not in result.stdout
    # Causes are as distorted as the gap: the first only, the others counted.
    (causes,) = [line for line in result.stdout.splitlines() if "causes (" in line]
    verbose = CliRunner().invoke(cli, ["compare", str(quiet), str(busy), "--format", "json"])
    evidence = json.loads(verbose.stdout)["comparisons"][0]["evidence"]
    assert len(evidence) >= 2 and f"{len(evidence) - 1} more with --verbose" in causes
    assert result.stdout.count("\n  - ") == 1
    three = CliRunner().invoke(cli, ["compare", str(quiet), str(busy), str(quiet_and_busy[2])])
    assert three.exit_code == 3 and len(three.stdout.splitlines()) <= 40


def test_the_json_marks_the_pair_and_carries_no_suggestion(quiet_and_busy):
    quiet, busy, other_busy = quiet_and_busy
    result = CliRunner().invoke(cli, ["compare", str(quiet), str(busy), str(other_busy),
                                      "--format", "json"])
    assert result.exit_code == 3
    doc = json.loads(result.stdout)
    for pair in doc["comparisons"]:
        assert pair["inconclusive"].startswith("busy machine while ") and pair["suggestions"] == []
    (warning,) = [w for w in doc["warnings"] if w.startswith("busy machine")]
    # Both busy runs in one line, their loads as one range.
    assert "other processes used 41-96 % of the cores" in warning
    assert all(not w.startswith(("keras-busy: busy", "torch-busy: busy")) for w in doc["warnings"])


def test_two_quiet_runs_keep_their_verdict_and_exit_0(quiet_and_busy, keras_run, tmp_path):
    # Marked quiet by hand: the session's own runs may have run beside other work.
    quiet, _, _ = quiet_and_busy
    other = _copy(keras_run, tmp_path / "keras-quiet", {"others_cpu_pct": 1.0, "steal_pct": 0.0, "cores": 2})
    result = CliRunner().invoke(cli, ["compare", str(quiet), str(other), "--format", "json"])
    assert result.exit_code == 0, result.output
    (pair,) = json.loads(result.stdout)["comparisons"]
    assert pair["inconclusive"] is None


def test_the_profilers_cost_is_no_figure_where_the_machine_made_it(quiet_and_busy):
    from gapscope.analysis.results.breakdown import _overhead_unmeasured
    quiet = {"machine_load": {"others_cpu_pct": 1.0}}
    assert _overhead_unmeasured(27.0, quiet) is None
    assert _overhead_unmeasured(-4.0, quiet) is None            # within the steps' own spread
    assert "faster with the profiler" in _overhead_unmeasured(-58.0, quiet)
    assert "on a busy machine" in _overhead_unmeasured(29533.0, {"machine_load": LOAD})
    _, busy, _ = quiet_and_busy
    doc = json.loads(CliRunner().invoke(cli, ["breakdown", str(busy), "--format", "json"]).stdout)
    assert doc["trace_overhead_pct"] is None
    assert any(n.endswith("on a busy machine: no measure of the profiler's own cost") for n in doc["notes"])
