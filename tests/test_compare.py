"""`gapscope compare` on two hand-made run directories whose numbers follow from the fixtures:
A = marked_two_steps (CPU; per-step means in µs: data 30, forward 30, backward 35, optimizer
10, other 5; step 110), B = async_gpu_two_steps (data 15, forward 30, backward 30, optimizer
17.5, other 7.5; step 100). Gap B - A = -10 µs."""
import json
import shutil

import pytest
from click.testing import CliRunner

from gapscope.analysis.results.compare import compare
from gapscope.analysis.results.explain import explain_run
from gapscope.analysis.renderers import compare_markdown, compare_table, evidence_text
from gapscope.cli import cli
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.phases import PHASES


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
    with pytest.raises(GapscopeInputError, match="different models"):
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
    assert result.stderr.count("\n") == 1 and "--different-workloads to compare them" in result.stderr
    # On purpose: compared, and said.
    result = CliRunner().invoke(cli, ["compare", str(runs[0]), str(other), "--different-workloads",
                                      "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "different workloads compared on purpose: 'mlp' and 'cnn'" in json.loads(result.stdout)["warnings"]


def test_own_loops_are_never_given_a_command_that_cannot_run(runs, tmp_path, fixtures_dir):
    loops = [_run_dir(tmp_path, f"loop-{i}", "marked_two_steps.pt.trace.json", fixtures_dir,
                      workload="my-loop") for i in (1, 2)]
    for loop in loops:
        manifest = json.loads((loop / "manifest.json").read_text())
        (loop / "manifest.json").write_text(json.dumps({**manifest, "variant": "user"}))
    result = CliRunner().invoke(cli, ["compare", *map(str, loops)])
    assert result.exit_code == 0, result.output
    assert "--measure" not in result.stdout and "my-loop:torch" not in result.stdout
    assert "run each side again in fresh processes" in " ".join(result.stdout.split())


def test_table_and_markdown_show_the_gap(runs):
    comparison = compare([explain_run(r) for r in runs])
    table = compare_table.render(comparison, verbose=True)
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


def test_a_lopsided_interval_is_printed_as_low_high_not_plus_minus():
    """Issue 23 item 2: '+1.452 ±7.964' called slower; the interval is [1.273, 9.416]."""
    from gapscope.analysis.renderers.columns import plus_minus
    from gapscope.analysis.renderers.compare_columns import delta
    assert delta(1.452, (1.273, 9.416)) == "+1.452 [+1.273, +9.416]"
    assert delta(-0.2, (-1.5, 0.1)) == "-0.200 [-1.500, +0.100] ~"
    assert delta(1.0, (0.9, 1.1)) == "+1.000 ±0.100"
    assert plus_minus(12.0, (11.5, 12.6)) == "12.000 ±0.600"  # 0.5 / 0.6: about symmetric
    assert plus_minus(12.0, (11.9, 13.0)) == "12.000 [11.900, 13.000]"


def test_two_plain_runs_say_their_interval_holds_one_process_each(runs):
    """Issue 23 item 1: a plain compare and `compare --measure` must not read as two answers."""
    comparison = compare([explain_run(r) for r in runs])
    table = compare_table.render(comparison)
    said = " ".join(table.split())
    # One configuration twice: `--measure` refuses a configuration named twice, so no command.
    assert "one process each: the drift between processes is not in this interval; run each side " \
           "again in fresh processes before taking the gap as a fact" in said
    assert "--measure mlp:torch" not in said


def test_trace_derived_tables_say_so_and_why_they_can_exceed_the_step(runs):
    """Issue 23 item 4: the host-vs-device figure (traced) beside the breakdown's (unprofiled)."""
    comparison = compare([explain_run(r) for r in runs])
    for text in (compare_table.render(comparison, verbose=True), compare_markdown.render(comparison)):
        said = " ".join(text.split())
        assert ("host vs device time per phase (traced steps, profiler cost inside; ms per step)"
                in said)
        assert "evidence per run (traced steps, profiler cost inside)" in said
        assert "a figure here can exceed the breakdown's phase, even its step" in said
        assert "the evidence from traced steps, profiler cost inside:" in said


def test_the_default_compare_is_short_and_verbose_has_every_table(runs, tmp_path, fixtures_dir):
    """Issue 23 item 6: a 3-run compare printed 177 lines; by default the gap, its top 3
    phases and top 3 causes, in 40 lines."""
    third = _run_dir(tmp_path, "run-c", "async_gpu_two_steps.pt.trace.json", fixtures_dir)
    short = CliRunner().invoke(cli, ["compare", *map(str, runs), str(third)])
    verbose = CliRunner().invoke(cli, ["compare", *map(str, runs), str(third), "--verbose"])
    assert short.exit_code == 0 and verbose.exit_code == 0, short.output + verbose.output
    lines = short.stdout.splitlines()
    assert len(lines) <= 40, short.stdout
    tops = [line for line in lines if ", top phases: " in line]
    assert len(tops) == 2 and tops[0].startswith("mlp torch")
    # run-b's largest deltas: data_load -0.015, optimizer +0.0075, backward -0.005
    said = " ".join(short.stdout.split())
    top = said.split(", top phases: ")[1].split(" causes ")[0]
    assert top.index("data_load -0.015") < top.index("optimizer +0.00") < top.index("backward -0.005")
    assert "host vs device time per phase" not in short.stdout and "--verbose" in short.stdout
    assert "host vs device time per phase" in " ".join(verbose.stdout.split())
    assert "gapscope compare: where the step-time gap goes" in " ".join(verbose.stdout.split())
    assert len(verbose.stdout.splitlines()) > len(lines)
