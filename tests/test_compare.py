"""`gapscope compare` on two hand-made run directories whose numbers follow from the fixtures:
A = marked_two_steps (CPU; per-step means in µs: data 30, forward 30, backward 35, optimizer
10, other 5; step 110), B = async_gpu_two_steps (data 15, forward 30, backward 30, optimizer
17.5, other 7.5; step 100). Gap B - A = -10 µs."""
import json
import shutil

import pytest
from click.testing import CliRunner

from analysis.results.compare import compare
from analysis.results.explain import explain_run
from analysis.renderers import compare_markdown, compare_table, evidence_text
from cli import cli
from profilers.errors import GapscopeInputError
from profilers.phases import PHASES


def _run_dir(root, name, trace, fixtures_dir, workload="mlp", device="Hand-made CPU", framework="torch"):
    run = root / name
    run.mkdir()
    shutil.copy(fixtures_dir / trace, run / trace)
    manifest = {"run_id": name, "workload": workload, "framework": framework, "variant": "default",
                "device": device, "status": "complete", "warmup_steps": 0}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


@pytest.fixture
def runs(tmp_path, fixtures_dir):
    a = _run_dir(tmp_path, "run-a", "marked_two_steps.pt.trace.json", fixtures_dir)
    b = _run_dir(tmp_path, "run-b", "async_gpu_two_steps.pt.trace.json", fixtures_dir, device="Hand-made GPU")
    return a, b


def test_phase_deltas_add_up_to_the_gap(runs):
    comparison = compare([explain_run(r) for r in runs])
    (pair,) = comparison.pairs
    assert pair.a_step_ms == pytest.approx(0.110) and pair.b_step_ms == pytest.approx(0.100)
    assert pair.gap_ms == pytest.approx(-0.010)
    deltas = {g.phase: g.delta_ms for g in pair.phases}
    assert deltas == pytest.approx({"data_load": -0.015, "forward": 0.0, "backward": -0.005,
                                    "optimizer": 0.0075, "other": 0.0025})
    assert sum(deltas.values()) == pytest.approx(pair.gap_ms, abs=1e-12)
    shares = {g.phase: g.share_of_gap for g in pair.phases}
    assert shares == pytest.approx({"data_load": 1.5, "forward": 0.0, "backward": 0.5,
                                    "optimizer": -0.75, "other": -0.25})
    assert {g.phase: g.ratio for g in pair.phases}["data_load"] == pytest.approx(0.5)


def test_evidence_is_derived_from_the_analyzers(runs):
    (pair,) = compare([explain_run(r) for r in runs]).pairs
    kinds = [e.kind for e in pair.evidence]
    assert kinds[0] == "kernels" and pair.evidence[0].phase == "data_load"
    assert {"transfers", "fusion", "compile", "unattributed"} <= set(kinds)
    transfers = next(e for e in pair.evidence if e.kind == "transfers")
    assert transfers.a["note"] == "no transfers: CPU-only run"
    assert transfers.b["by_direction"]["H2D"]["bytes_per_step"] == 40_000
    # The analyzer keeps facts; the renderer says them.
    assert ("0.5 H2D of 40.0 kB per step from pageable memory at 20.0 GB/s"
            in evidence_text.sentence(transfers, pair))
    fusion = next(e for e in pair.evidence if e.kind == "fusion")
    assert fusion.b["kernels_per_step"] == 3.5 and fusion.b["source"] == "device kernels"


def test_different_devices_are_flagged_and_workloads_refused(runs, tmp_path, fixtures_dir):
    comparison = compare([explain_run(r) for r in runs])
    assert comparison.pairs[0].devices_differ
    assert any("different devices" in w for w in comparison.warnings)
    other = _run_dir(tmp_path, "run-c", "marked_two_steps.pt.trace.json", fixtures_dir, workload="cnn")
    with pytest.raises(GapscopeInputError, match="different workloads"):
        compare([explain_run(runs[0]), explain_run(other)])


def test_json_contract(runs):
    result = CliRunner().invoke(cli, ["compare", str(runs[0]), str(runs[1]), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["baseline"] == "run-a" and len(doc["runs"]) == 2
    assert {"breakdown", "attribution", "kernels", "compile", "transfers", "resources"} <= set(doc["runs"][0])
    (pair,) = doc["comparisons"]
    assert set(pair["phases"]) == set(PHASES)
    assert set(pair["phases"]["forward"]) >= {"a_ms", "b_ms", "delta_ms", "share_of_gap"}
    assert sum(p["delta_ms"] for p in pair["phases"].values()) == pytest.approx(pair["gap_ms"], abs=1e-9)
    assert all({"kind", "phase", "a", "b", "text"} <= set(e) for e in pair["evidence"])
    assert pair["devices_differ"] is True
    assert doc["runs"][1]["resources"]["note"].startswith("n/a")


def test_cli_refuses_different_workloads_in_one_line(runs, tmp_path, fixtures_dir):
    other = _run_dir(tmp_path, "run-c", "marked_two_steps.pt.trace.json", fixtures_dir, workload="cnn")
    result = CliRunner().invoke(cli, ["compare", str(runs[0]), str(other)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "different workloads" in result.stderr


def test_table_and_markdown_show_the_gap(runs):
    comparison = compare([explain_run(r) for r in runs])
    table = compare_table.render(comparison)
    assert "-0.015" in table and "-0.010" in table and "different devices" in table
    markdown = compare_markdown.render(comparison)
    # The verdict comes first, then the table.
    assert markdown.startswith("**") and "\n| phase |" in markdown
    # Two steps a run: every delta's interval holds 0, so no phase is ranked as a cause.
    assert "| data_load | 0.030 | 0.015 | -0.015 ±0.015 ~ | 0.50x | ~ |" in markdown
    assert "within noise (ratio 0.91x [0.83, 1.00]" in markdown


def test_resources_csv_is_summarised(runs):
    (runs[1] / "resources.csv").write_text(
        "t_s,cpu_percent,gpu_util_percent,gpu_mem_mib,gpu_power_w\n0.0,50,40,1000,100\n0.5,100,60,1200,120\n")
    stats = explain_run(runs[1]).resources
    assert stats.samples == 2 and stats.cpu_percent_mean == 75 and stats.cpu_percent_max == 100
    assert stats.gpu_util_percent_mean == 50 and stats.gpu_mem_mib_max == 1200 and stats.gpu_power_w_mean == 110
    assert stats.note is None
