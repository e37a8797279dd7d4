"""A user's own compiled loop, captured: torch.compile's graph break and recompile named with
reason, line and guard; a recompile or a tf.function retrace after the warm-up is an event,
left out of the steady steps (real tiny runs, the aot_eager backend: no C++ compile)."""
from __future__ import annotations

import csv
import inspect
import json
import statistics

import pytest
from click.testing import CliRunner

import user_loops
from gapscope.cli import cli


# The JSON prints a mean to 6 decimals (ns): it is the exact mean within half that digit
# (0.3962865 printed 0.396286 failed a relative 1e-6).
PRINTED_MS = 0.5e-6 + 1e-12


def _rows(run_dir) -> dict[int, dict]:
    with open(run_dir / "steps.csv") as handle:
        return {int(r["step"]): r for r in csv.DictReader(handle)}


def _found(doc, key: str) -> list:
    """Every value of `key` anywhere in a JSON document."""
    if isinstance(doc, dict):
        return [v for k, v in doc.items() if k == key] + [x for v in doc.values() for x in _found(v, key)]
    if isinstance(doc, list):
        return [x for v in doc for x in _found(v, key)]
    return []


def _line_of(function, text: str) -> int:
    lines, first = inspect.getsourcelines(function)
    return first + next(i for i, line in enumerate(lines) if text in line)


def _branch_line() -> int:
    """The line of the compiled model's data-dependent `if`, where Dynamo breaks the graph."""
    return _line_of(user_loops.compiled_torch_loop, "if x.mean() > 0")


def _resume() -> str:
    """The function Dynamo makes of the frame's rest after the break (and recompiles too)."""
    return f"torch_dynamo_resume_in_forward_at_{_branch_line()}"


def _breakdown(run_dir, *args) -> tuple[dict, str]:
    runner = CliRunner()
    doc = runner.invoke(cli, ["breakdown", str(run_dir), "--format", "json", *args])
    text = runner.invoke(cli, ["breakdown", str(run_dir), *args])
    assert doc.exit_code == 0 and text.exit_code == 0, doc.output + text.output
    return json.loads(doc.stdout), " ".join(text.output.split())


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    import torch._dynamo
    torch._dynamo.reset()
    try:
        return user_loops.compiled_torch_loop(tmp_path_factory.mktemp("own_compiled"))
    finally:
        torch._dynamo.reset()


@pytest.fixture(scope="module")
def retraced(tmp_path_factory):
    return user_loops.tf_retrace_loop(tmp_path_factory.mktemp("own_retrace"))


def test_the_graph_break_is_named_with_its_reason_and_line(compiled):
    doc, text = _breakdown(compiled.run_dir)
    line = _branch_line()
    (brk,) = doc["compile"]["graph_breaks"]
    assert (brk["reason"], brk["place"], brk["first_step"]) == (
        "Data-dependent branching", f"user_loops.py:{line}", 0)
    assert brk["file"].endswith("tests/user_loops.py") and brk["line"] == line
    assert f"1 graph break (Data-dependent branching at user_loops.py:{line})" in text


def test_the_new_batch_size_is_a_recompile_with_its_guard(compiled):
    doc, text = _breakdown(compiled.run_dir)
    at = user_loops.COMPILED_NEW_SHAPE_AT
    guard = (f"tensor 'x' size mismatch at index 0. expected {user_loops.COMPILED_BATCH}, "
             f"actual {user_loops.COMPILED_BATCH // 2}")
    # The frame and its resume function after the break each recompile, both at that step.
    recompiles = doc["compile"]["recompiles"]
    assert {(r["function"], r["guard"], r["step"]) for r in recompiles} == {
        ("forward", guard, at), (_resume(), guard, at)}
    assert f"2 recompiles ({guard} in forward" in text
    # Two graphs at step 0 (before and after the break), two again at the recompile.
    assert sorted(g["step"] for g in doc["compile"]["graphs"]) == [0, 0, at, at]
    stages = doc["compile"]["stages"]
    assert stages["dynamo"] > 0 and stages["aot_autograd"] > 0 and stages["inductor"] == 0


def test_the_recompiled_step_is_left_out_of_the_steady_mean_and_named(compiled):
    doc, text = _breakdown(compiled.run_dir)
    at, rows = user_loops.COMPILED_NEW_SHAPE_AT, _rows(compiled.run_dir)
    # Steps 9-12 ran under the profiler (its warm-up step, the window 10-11, the teardown step).
    steady = [s for s in range(user_loops.WARMUP, user_loops.COMPILED_STEPS)
              if s != at and rows[s]["traced"] == "0"]
    assert steady == [3, 4, 5, 6, 7, 13] and doc["steps"] == 6
    expected = statistics.fmean(float(rows[s]["step_ms"]) for s in steady)
    assert doc["step_ms"]["mean"] == pytest.approx(expected, abs=PRINTED_MS)
    assert doc["compile"]["steady_events"] == [{"step": at, "what": (
        f"recompile of forward: tensor 'x' size mismatch at index 0. expected 8, actual 4; "
        f"recompile of {_resume()}: tensor 'x' size mismatch at index 0. expected 8, actual 4")}]
    assert f"1 step after the warm-up compiling ({at}), left out of the steady steps" in text
    assert f"step {at} {float(rows[at]['step_ms']):.1f} ms (recompile of forward" in text


def test_a_loop_that_compiles_nothing_writes_no_compile_record(tmp_path):
    cap = user_loops.torch_loop(tmp_path)
    assert not (cap.run_dir / "compile.json").exists()


def test_the_tf_retrace_is_named_and_left_out_of_the_steady_mean(retraced):
    doc, text = _breakdown(retraced.run_dir, "--source", "timers")
    at, rows = user_loops.RETRACE_AT, _rows(retraced.run_dir)
    assert len(rows) == user_loops.RETRACE_STEPS
    (retrace,) = doc["compile"]["retraces"]
    reason = "new input signature: arg 0 shape [64, 100] → [32, 100], arg 1 shape [64] → [32]"
    assert (retrace["function"], retrace["step"], retrace["reason"]) == ("train_step", at, reason)
    assert doc["compile"]["tf_traces"] == {"train_step": 2}
    steady = [s for s in range(user_loops.WARMUP, user_loops.RETRACE_STEPS) if s != at]
    assert doc["steps"] == len(steady) == 14
    expected = statistics.fmean(float(rows[s]["step_ms"]) for s in steady)
    assert doc["step_ms"]["mean"] == pytest.approx(expected, abs=PRINTED_MS)
    assert f"retrace of train_step at step {at}: {reason}" in text
    assert f"step {at} {float(rows[at]['step_ms']):.1f} ms (retrace of train_step: {reason})" in text


def test_a_keras_fit_records_its_trace_and_a_short_last_batch_is_no_retrace(tmp_path):
    """capture_keras records train_step's tf.function traces into compile.json, as `gapscope run`
    does. Keras traces it for an unknown batch size, so the short last batch (32 of 64) traces
    nothing again and no step leaves the steady state."""
    cap, _ = user_loops.keras_fit(tmp_path, short_last_batch=32, trace_steps=None)
    records = json.loads((cap.run_dir / "compile.json").read_text())
    (trace,) = records["tf_traces"]
    assert (trace["function"], trace["step"]) == ("train_step", 0)
    assert [a["shape"] for a in trace["signature"]] == [[None, 100], [None]]
    doc, text = _breakdown(cap.run_dir)
    assert doc["compile"]["retraces"] == [] and doc["compile"]["steady_events"] == []
    assert doc["steps"] == user_loops.BATCHES - user_loops.WARMUP
    assert "train_step traced 1 time, no retrace" in text


def test_compare_and_report_show_the_own_loops_compile(compiled, tmp_path):
    """compare holds the user's compiled loop against the plain one (amortisation), report and
    the tab's panel list its recompile and the step left out."""
    eager = user_loops.compiled_torch_loop(tmp_path, compiled=False)
    assert not (eager.run_dir / "compile.json").exists()
    result = CliRunner().invoke(cli, ["compare", str(eager.run_dir), str(compiled.run_dir),
                                      "--format", "json"])
    assert result.exit_code in (0, 3), result.output  # 3: inconclusive on a busy machine
    (pays,) = {json.dumps(p, sort_keys=True) for p in _found(json.loads(result.stdout), "amortisation")
               if p is not None}
    pays = json.loads(pays)
    from gapscope import breakdown
    a, b = breakdown(eager.run_dir), breakdown(compiled.run_dir)
    assert pays["compiled"].endswith(compiled.run_dir.name.rsplit("-", 1)[-1])
    assert pays["extra_ms"] == pytest.approx(max(b.compile_ms - a.compile_ms, 0.0), abs=1e-3)
    assert pays["graph_breaks"] == [f"Data-dependent branching at user_loops.py:{_branch_line()}"]
    assert len(pays["recompiles"]) == 2
    from gapscope.analysis.results.panels.compile_panel import compile_panel
    from gapscope import breakdown
    panel = compile_panel(breakdown(compiled.run_dir).compile_why)
    assert [e["step"] for e in panel["steady_events"]] == [user_loops.COMPILED_NEW_SHAPE_AT]
    from gapscope.analysis.renderers.panels.report_sections import compile_markdown
    markdown = "\n".join(compile_markdown([("own", panel)], []))
    assert "Steps left out of the steady state, compiling (1):" in markdown
