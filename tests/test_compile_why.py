"""Why compiled is (or is not) faster: graph breaks, recompiles and compile stages from real
torch.compile runs on the CPU, and the amortisation point checked by hand."""
from __future__ import annotations

import inspect
import json
import math

import pytest

from gapscope.analysis.results.compile_why import compile_why, failed_guard, stage_split

# Fast real compiles: the aot_eager backend runs Dynamo and AOT autograd without Inductor's
# C++ compile (seconds, not the ~30 s of a first Inductor step here).
BATCHES = (4, 4, 6)


def _planted_model():
    import torch

    class Planted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 3)

        def forward(self, x):
            x = self.linear(x)
            print("planted print")
            scale = x.sum().item()
            if x.mean() > 0:
                x = x * 2
            return x.sum() + scale

    return Planted()


def _line_of(text: str) -> int:
    lines, first = inspect.getsourcelines(_planted_model)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """One real compile of the planted model, batch size changed at step 2."""
    import torch
    import torch._dynamo

    from gapscope.analysis.readers.compile_records import read_compile_records
    from gapscope.workloads.runners.dynamo_records import DynamoRecorder
    run_dir = tmp_path_factory.mktemp("planted")
    torch._dynamo.reset()
    model = torch.compile(_planted_model(), backend="aot_eager")
    with DynamoRecorder(run_dir) as recorder:
        for step, batch in enumerate(BATCHES):
            model(torch.ones(batch, 3)).backward()
            recorder.end_step(step)
    torch._dynamo.reset()
    return read_compile_records(run_dir)


def test_planted_print_item_and_branch_each_give_a_graph_break_with_reason_and_line(planted):
    why = compile_why(planted, None, warmup_steps=3)
    by_line = {b.line: b for b in why.graph_breaks}
    assert set(by_line) == {_line_of('print("planted'), _line_of(".item()"), _line_of("if x.mean()")}
    assert "print" in by_line[_line_of('print("planted')].explanation
    assert "Tensor.item()" in by_line[_line_of(".item()")].explanation
    assert by_line[_line_of("if x.mean()")].reason == "Data-dependent branching"
    assert all(b.file == __file__ and b.first_step == 0 for b in why.graph_breaks)
    assert f"Data-dependent branching at test_compile_why.py:{_line_of('if x.mean()')}" in why.line()


def test_a_new_batch_size_gives_a_recompile_with_its_guard(planted):
    why = compile_why(planted, None, warmup_steps=3)
    at_step_2 = [r for r in why.recompiles if r.step == 2]
    forward = next(r for r in at_step_2 if r.function == "forward")
    assert forward.guard == "tensor 'x' size mismatch at index 0. expected 4, actual 6"
    assert forward.line == _line_of("def forward")
    # Before step 2 nothing changed shape: the first graphs compiled once, at step 0.
    assert {g.step for g in why.graphs if g.function == "forward"} == {0, 2}


def test_the_stages_of_the_planted_compiles_add_up_to_torchs_own_compile_time(planted):
    forward_us = sum(c["dynamo_cumulative_compile_time_us"] for c in planted["compiles"] if c["is_forward"])
    backward_us = sum(c["backward_cumulative_compile_time_us"] for c in planted["compiles"]
                      if c["is_forward"] is False)
    why = compile_why(planted, measured_ms=None, warmup_steps=3)
    assert why.attributed_ms == pytest.approx((forward_us + backward_us) / 1000.0)
    assert why.stages_ms["dynamo"] > 0 and why.stages_ms["aot_autograd"] > 0
    # aot_eager runs no Inductor: said in one line, not shown as 0 s.
    assert why.stages_ms["inductor"] == 0 and any(line.startswith("Inductor stages not recorded")
                                                 for line in why.unseen)


def test_stage_split_of_one_forward_and_one_backward_compile_by_hand():
    forward = {"is_forward": True, "dynamo_cumulative_compile_time_us": 10_000,
               "aot_autograd_cumulative_compile_time_us": 8_000,
               "inductor_cumulative_compile_time_us": 5_000,
               "inductor_code_gen_cumulative_compile_time_us": 4_000}
    backward = {"is_forward": False, "backward_cumulative_compile_time_us": 3_000,
                "inductor_cumulative_compile_time_us": 2_000,
                "inductor_code_gen_cumulative_compile_time_us": 500}
    assert stage_split(forward) == {"dynamo": 2.0, "aot_autograd": 3.0, "inductor": 1.0,
                                    "codegen_and_kernel_compile": 4.0}
    assert stage_split(backward) == {"dynamo": 0.0, "aot_autograd": 1.0, "inductor": 1.5,
                                     "codegen_and_kernel_compile": 0.5}
    records = {"compiles": [{**forward, "step": 0}, {**backward, "step": 0},
                            {**forward, "step": 7, "recompile_reason": "0/0: x == 1  # y"}],
               "graph_breaks": [], "unavailable": []}
    why = compile_why(records, measured_ms=16.0, warmup_steps=5)
    assert why.attributed_ms == 13.0 and why.unattributed_ms == 3.0 and why.later_compile_ms == 10.0
    assert why.recompiles[0].guard == "x == 1"
    assert not any(why.cache_hits.values()) and "cache" not in why.line()


def test_the_stage_line_says_how_many_graphs_came_from_the_compile_cache():
    """Issue 45: "AOT autograd 15.3 s, Inductor 0.5 s" hid that 5 graphs came from the cache
    (only the JSON said so): the line says it beside the stages."""
    hit = {"is_forward": True, "step": 0, "dynamo_cumulative_compile_time_us": 2_000_000,
           "aot_autograd_cumulative_compile_time_us": 1_500_000,
           "inductor_cumulative_compile_time_us": 100_000, "inductor_fx_local_cache_hit_count": 1}
    why = compile_why({"compiles": [hit] * 5, "graph_breaks": [], "unavailable": []}, None, 3)
    assert why.cache_hits["fx_graph"] == 5 and why.to_json_dict()["cache_hits"]["fx_graph"] == 5
    # By hand, a graph: Dynamo 2.0 - 1.5, AOT 1.5 - 0.1, Inductor 0.1 s; five of them.
    assert why.line().startswith("compile 10.0 s once: Dynamo 2.5 s, AOT autograd 7.0 s, Inductor "
                                 "0.5 s, 5 graphs from Inductor's FX graph cache (no code generation timed);")


def test_failed_guard_drops_the_compile_id_and_the_source_comment():
    reason = ("3/0: v == 0.52                          # return x.sum() + v  # probe.py:12\n"
              "User stack trace:\n  File ...")
    assert failed_guard(reason) == "v == 0.52"


def _hand_breakdown(step_ms: float, compile_ms: float, variant: str):
    from gapscope.analysis.results.records import Breakdown, PhaseSource
    return Breakdown(source=PhaseSource.TIMERS, steps=[], step_times_ms=[step_ms] * 4, phases={},
                     compile_ms=compile_ms, variant=variant, label=variant)


def test_amortisation_point_by_hand():
    from gapscope.analysis.results.amortisation import amortisation, amortisation_line
    eager, compiled = _hand_breakdown(10.0, 100.0, "default"), _hand_breakdown(6.0, 9100.0, "compile")
    pays = amortisation(eager, compiled)
    # (9100 − 100) ms extra once ÷ (10 − 6) ms gained a step = 2250 steps.
    assert pays["steps"] == 2250 and pays["extra_ms"] == 9000.0 and pays["gain_ms_per_step"] == 4.0
    assert "after 2,250 steps" in amortisation_line(pays)
    slower = amortisation(eager, _hand_breakdown(11.0, 9100.0, "compile"))
    assert slower["steps"] is None and "never at this size" in amortisation_line(slower)
    assert amortisation(eager, _hand_breakdown(9.0, 50.0, "default")) is None
    # Keras under XLA against Keras' default graph: the same rule (jit is the compiled side).
    keras_jit = amortisation(_hand_breakdown(8.0, 1500.0, "jit"), _hand_breakdown(9.0, 500.0, "default"))
    assert keras_jit["steps"] == 1000 and keras_jit["compiled"] == "jit"


@pytest.fixture(scope="module")
def dynamic_runs(tmp_path_factory):
    """The `dynamic` workload traced, compiled (Inductor) and eager: one real pair."""
    from gapscope.workloads.launch import launch
    from gapscope.workloads.settings import RunSettings
    out = tmp_path_factory.mktemp("dynamic")
    runs = {}
    for name, variant in (("compiled", "compile"), ("eager", "default")):
        outcome = launch(RunSettings("dynamic", "torch", variant=variant, steps=16, warmup_steps=3,
                                     trace_steps=4), out)
        assert outcome.status == "complete", outcome.error
        runs[name] = outcome.run_dir
    return runs


def test_dynamic_under_compile_names_its_data_dependent_branch(dynamic_runs):
    from click.testing import CliRunner

    from gapscope.cli import cli
    from gapscope.workloads.models import dynamic
    result = CliRunner().invoke(cli, ["breakdown", str(dynamic_runs["compiled"]), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    doc = doc[0] if isinstance(doc, list) else doc
    lines, first = inspect.getsourcelines(dynamic.build_torch)
    branch = first + next(i for i, line in enumerate(lines) if "if torch.mean(x) > THRESHOLD" in line)
    breaks = doc["compile"]["graph_breaks"]
    assert [(b["place"], b["reason"]) for b in breaks] == [(f"dynamic.py:{branch}", "Data-dependent branching")]
    compile_ = doc["compile"]
    assert compile_["recompiles"] == [] and len(compile_["graphs"]) >= 2
    # Stages and the unattributed rest add up to the measured warm-up excess.
    assert sum(compile_["stages"].values()) + compile_["unattributed_ms"] == pytest.approx(
        compile_["measured_ms"], abs=0.01)
    assert compile_["measured_ms"] == pytest.approx(doc["compile_ms"], abs=0.01)
    assert compile_["stages"]["dynamo"] > 0 and compile_["stages"]["aot_autograd"] > 0
    # Inductor's stages, unless its FX graph cache (kept between runs) served the graphs: then
    # one line says so.
    assert compile_["stages"]["codegen_and_kernel_compile"] > 0 or any(
        "FX graph cache" in line for line in compile_["unseen"])
    assert f"1 graph break (Data-dependent branching at dynamic.py:{branch})" in compile_["line"]
    assert compile_["line"] in result.output or compile_["line"] in " ".join(doc["notes"])


def test_compare_eager_against_compiled_gives_the_amortisation_point_of_the_two_runs(dynamic_runs):
    from click.testing import CliRunner

    from gapscope.cli import cli
    from gapscope.profilers.errors import EXIT_INCONCLUSIVE
    runner = CliRunner()
    figures = {}
    for name, path in dynamic_runs.items():
        out = runner.invoke(cli, ["breakdown", str(path), "--format", "json"])
        doc = json.loads(out.stdout)
        doc = doc[0] if isinstance(doc, list) else doc
        figures[name] = (doc["step_ms"]["mean"], doc["compile_ms"])
    result = runner.invoke(cli, ["compare", str(dynamic_runs["eager"]), str(dynamic_runs["compiled"]),
                                 "--format", "json"])
    # 3: a busy machine makes the verdict inconclusive; the evidence is there all the same.
    assert result.exit_code in (0, EXIT_INCONCLUSIVE), result.output
    doc = json.loads(result.stdout)
    evidence = next(e for e in doc["comparisons"][0]["evidence"] if e["kind"] == "compile")
    pays = evidence["b"]["amortisation"]
    (eager_step, eager_once), (compiled_step, compiled_once) = figures["eager"], figures["compiled"]
    assert pays["extra_ms"] == pytest.approx(max(compiled_once - eager_once, 0.0), abs=0.01)
    assert pays["gain_ms_per_step"] == pytest.approx(eager_step - compiled_step, abs=1e-3)
    gain = pays["gain_ms_per_step"]
    known = not pays["not_known"]
    assert pays["steps"] == (math.ceil(pays["extra_ms"] / gain) if gain > 0 and known else None)
    assert evidence["b"]["why"]["graph_breaks"][0]["reason"] == "Data-dependent branching"
    # In the default output, under the verdict: the same line the JSON's facts give.
    from gapscope.analysis.results.amortisation import amortisation_line
    table = runner.invoke(cli, ["compare", str(dynamic_runs["eager"]), str(dynamic_runs["compiled"])])
    assert amortisation_line(pays) in " ".join(table.stdout.split())
    if doc["comparisons"][0]["inconclusive"]:
        assert "pays back: not known: a side ran on a busy machine" in amortisation_line(pays)


def test_a_tf_function_called_with_a_new_python_scalar_retraces_with_its_reason(tmp_path):
    """A real tf.function: the framework's own tracing count and the recorded traces agree."""
    import tensorflow as tf

    from gapscope.analysis.readers.compile_records import read_compile_records
    from gapscope.workloads.runners.tf_traces import TraceLog
    log = TraceLog()

    def scale(x, factor):
        return x * factor

    function = log.watch(tf.function(log.wrap(scale)))
    for step, (rows, factor) in enumerate([(4, 0.1), (4, 0.1), (4, 0.2), (6, 0.2)]):
        log.step = step
        function(tf.ones([rows, 3]), factor)
    log.write(tmp_path, jit_compile=False)
    records = read_compile_records(tmp_path)
    assert records["tf_tracing_counts"] == {"scale": 3}
    why = compile_why(records, None, warmup_steps=10)
    assert why.tf_traces == {"scale": 3}
    assert [(r.step, r.reason) for r in why.retraces] == [
        (2, "Python value changed: arg 1 0.1 → 0.2"),
        (3, "new input signature: arg 0 shape [4, 3] → [6, 3]")]
    assert "scale traced 3 times (retrace of scale at step 2: Python value changed" in why.line()
    assert not any("gapscope saw" in line for line in why.unseen)


def test_the_gpu_days_compile_check_passes_on_the_real_compiled_run_and_fails_without_records(dynamic_runs):
    from benchmarks import gpu_checks as C
    from benchmarks.gpu_check_plan import Planned, evaluate
    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.results.breakdown import breakdown
    doc = breakdown(load_run(dynamic_runs["compiled"])).to_json_dict()
    check = C.compile_recorded(doc)
    assert check.status == C.PASS, check.detail
    assert "1 graph break (Data-dependent branching at dynamic.py:" in check.detail
    assert C.compile_recorded({k: v for k, v in doc.items() if k != "compile"}).status == C.FAIL
    broken = {**doc, "compile": {**doc["compile"], "unattributed_ms": doc["compile"]["unattributed_ms"] + 5}}
    assert C.compile_recorded(broken).detail.startswith("stages + unattributed")
    checks, _ = evaluate(dynamic_runs["compiled"], Planned("dynamic-compile", "dynamic", "compile", "test"),
                         cuda=False)
    assert [c.status for c in checks if c.name == "compile stages and breaks"] == [C.PASS]


def test_the_amortisation_point_carries_the_gaps_interval_or_says_it_is_not_known():
    """Eager 10 ms, compiled 6 ms, 9 s extra once: the gap (compiled − eager) -4 ms [-5, -3]
    gives 9000/5 = 1,800 to 9000/3 = 3,000 steps. The issue's case, compiled 6.065 ms slower
    ±123.4: within noise, so neither a figure nor "never"; a busy side: not known either."""
    from gapscope.analysis.results.amortisation import amortisation, amortisation_line
    eager, compiled = _hand_breakdown(10.0, 100.0, "default"), _hand_breakdown(6.0, 9100.0, "compile")
    pays = amortisation(eager, compiled, gap_ci95=(-5.0, -3.0))
    assert (pays["steps"], pays["steps_ci95"], pays["not_known"]) == (2250, [1800, 3000], None)
    assert amortisation_line(pays) == ("compile: 9 s once (compile); pays back after 2,250 "
                                       "[1,800, 3,000] steps (4.000 ms gained a step)")
    # The same pair the other way round (compiled first): the gap's sign turns with it.
    assert amortisation(compiled, eager, gap_ci95=(3.0, 5.0))["steps_ci95"] == [1800, 3000]
    noisy = amortisation(eager, _hand_breakdown(16.065, 9100.0, "compile"),
                         gap_ci95=(6.065 - 123.4, 6.065 + 123.4))
    assert noisy["steps"] is None and noisy["not_known"] == "the step gap is within noise"
    assert amortisation_line(noisy) == ("compile: 9 s once (compile); pays back: not known: the "
                                        "step gap is within noise")
    busy = amortisation(eager, compiled, gap_ci95=(-5.0, -3.0), untrusted=True)
    assert busy["steps"] is None and "never" not in amortisation_line(busy)
    slower = amortisation(eager, _hand_breakdown(11.0, 9100.0, "compile"), gap_ci95=(0.5, 1.5))
    assert slower["steps"] is None and "never at this size" in amortisation_line(slower)


def test_where_compiling_never_pays_the_line_names_the_dynamo_guard_time():
    from gapscope.analysis.results.amortisation import amortisation, amortisation_line
    eager, compiled = _hand_breakdown(10.0, 100.0, "default"), _hand_breakdown(11.0, 9100.0, "compile")
    pays = amortisation(compiled, eager, guard_ms=(0.4, 0.0))
    assert pays["guard_ms_per_step"] == 0.4 and pays["gain_ms_per_step"] == -1.0
    assert amortisation_line(pays).endswith("Dynamo guards 0.400 ms a step")


def test_a_keras_run_keeps_each_trace_of_its_train_step_with_the_input_signature(keras_run):
    """The session's Keras run (shared with other tests): fit traced the marked train_step."""
    from gapscope.analysis.readers.compile_records import read_compile_records
    from gapscope.workloads.registry import get_workload
    records = read_compile_records(keras_run)
    first = records["tf_traces"][0]
    assert first["function"] == "train_step" and first["step"] == 0
    spec = get_workload("mlp")
    x = next(a for a in first["signature"] if a["arg"] == "0.0")
    assert x["kind"] == "tensor" and x["shape"][1:] == list(spec.input_shape) and x["dtype"] == "float32"
    why = compile_why(records, None, warmup_steps=3)
    assert why.tf_traces["train_step"] == len(records["tf_traces"])


def test_a_compile_suggestion_already_measured_names_where_that_run_breaks_its_graph():
    from gapscope.analysis.renderers.evidence_text import suggestion
    from gapscope.analysis.results.suggestions import Rule, Suggestion
    s = Suggestion(Rule.DISPATCH, "dynamic torch", "dynamic:torch", "dynamic:torch:compile",
                   {"other_ms": 2.0, "other_share": 0.5},
                   already={"run": "dynamic torch compile", "ratio": 2.5,
                            "graph_breaks": ["Data-dependent branching at dynamic.py:24"]})
    assert suggestion(s) == (
        "dynamic:torch:compile: already measured here: 2.50x slower than dynamic torch (dynamic "
        "torch compile; per-step overhead: other 2.000 ms, 50 % of the step); it breaks its graph: "
        "Data-dependent branching at dynamic.py:24")


def test_the_compile_view_lists_each_break_and_recompile_with_its_place_and_the_amortisation_line(planted):
    """The compile panel (the tab's and the report's figures) and the report's section from it:
    the planted breaks with reason and line, the recompile with its guard, and a hand-made
    pair's amortisation point."""
    from gapscope.analysis.renderers.panels.report_sections import compile_markdown
    from gapscope.analysis.results.amortisation import amortisation
    from gapscope.analysis.results.panels.compile_panel import compile_panel, pair_compile_panel
    panel = compile_panel(compile_why(planted, None, warmup_steps=3))
    places = {b["place"] for b in panel["graph_breaks"]}
    assert places == {f"test_compile_why.py:{_line_of(text)}"
                      for text in ('print("planted', ".item()", "if x.mean()")}
    guard = "tensor 'x' size mismatch at index 0. expected 4, actual 6"
    assert any(r["guard"] == guard and r["step"] == 2 and
               r["place"] == f"test_compile_why.py:{_line_of('def forward')}" for r in panel["recompiles"])
    # (9100 - 100) ms once / (10 - 6) ms a step = 2250 steps.
    pays = pair_compile_panel(amortisation(_hand_breakdown(10.0, 100.0, "default"),
                                           _hand_breakdown(6.0, 9100.0, "compile")))
    text = "\n".join(compile_markdown([("planted", panel)], [pays["text"]]))
    assert "after 2,250 steps" in text and panel["line"] in text
    assert f"| Data-dependent branching | test_compile_why.py:{_line_of('if x.mean()')} |" in text
    assert f"| {guard} | forward | test_compile_why.py:{_line_of('def forward')} | 2 |" in text
    assert compile_panel(None) == {"note": "no compile record: this run compiled nothing gapscope "
                                           "records (torch.compile, tf.function)"}


def test_compare_leads_with_the_graph_break_where_the_compiled_run_is_slower(dynamic_runs):
    """Issue 32 item 4, on the real pair: the compiled run's step times and their bootstrap
    replicates are set to the eager run's x 1.5 (by hand, so that "slower" does not hang on
    the machine's load) and the busy marks dropped. The verdict line and the suggestions lead with its one graph break, its reason and
    line; the JSON holds the counts; with compiled faster, nothing of it is said."""
    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.renderers import compare_json
    from gapscope.analysis.renderers.compare_columns import lead_lines, verdict_lines
    from gapscope.analysis.results.compare import compare
    from gapscope.analysis.results.explain import explain
    from gapscope.workloads.models import dynamic
    lines, first = inspect.getsourcelines(dynamic.build_torch)
    branch = first + next(i for i, line in enumerate(lines) if "if torch.mean(x) > THRESHOLD" in line)

    def pair(compiled_factor: float):
        eager, compiled = (explain(load_run(dynamic_runs[k])) for k in ("eager", "compiled"))
        for run in (eager, compiled):
            run.breakdown.busy_load, run.breakdown.reliability_warnings = None, []
        fast, slow = eager.breakdown, compiled.breakdown
        slow.step_times_ms = [compiled_factor * t for t in fast.step_times_ms]
        slow.replicates = compiled_factor * fast.replicates
        slow.step_ci95 = tuple(compiled_factor * x for x in fast.step_ci95)
        return compare([eager, compiled])

    comparison = pair(1.5)
    found = comparison.pairs[0].compile_behind
    assert found["graph_breaks"] == 1 and found["recompiles"] == 0 and found["graphs"] >= 2
    assert found["first_break"] == f"Data-dependent branching at dynamic.py:{branch}"
    line = (f"dynamic torch compile is compiled and slower: 1 graph break (first: Data-dependent "
            f"branching at dynamic.py:{branch}), 0 recompiles")
    headline = verdict_lines(comparison)[0]
    assert headline.startswith("dynamic torch compile is 1.50x") and f"per step); {line}" in headline
    assert lead_lines(comparison.pairs[0])[0] == line
    doc = compare_json.document(comparison)["comparisons"][0]["compile_behind"]
    assert doc["text"] == line and doc["graph_breaks"] == 1
    faster = pair(0.5)
    assert faster.pairs[0].compile_behind is None and line not in " ".join(verdict_lines(faster))


def test_more_compiles_than_torch_keeps_are_all_recorded(tmp_path):
    """torch keeps its last 64 compile records only: the recorder takes them out after each step,
    so the 70th compile of a long run is still recorded (a count of those seen stopped at 64)."""
    import torch
    import torch._dynamo

    from gapscope.analysis.readers.compile_records import read_compile_records
    from gapscope.workloads.runners.dynamo_records import DynamoRecorder
    namespace: dict = {}
    for k in range(70):  # one code object each: a frame of its own, compiled once
        exec(f"def add_{k}(x):\n    return x + {k}\n", namespace)
    torch._dynamo.reset()
    with DynamoRecorder(tmp_path) as recorder:
        for step in range(70):
            torch.compile(namespace[f"add_{step}"], backend="eager")(torch.ones(2))
            recorder.end_step(step)
    torch._dynamo.reset()
    compiles = read_compile_records(tmp_path)["compiles"]
    assert [(c["co_name"], c["step"]) for c in compiles] == [(f"add_{k}", k) for k in range(70)]


def test_graphs_the_compile_caches_served_are_said():
    """Dynamo counts, per compile, the graphs Inductor's FX graph cache and AOT autograd's cache
    served: summed over the run (2 + 1 and 1), said beside the stages."""
    records = {"compiles": [
        {"step": 0, "is_forward": True, "graph_op_count": 3, "dynamo_cumulative_compile_time_us": 2000,
         "inductor_fx_local_cache_hit_count": 2, "aotautograd_local_cache_hit_count": 1},
        {"step": 0, "is_forward": False, "backward_cumulative_compile_time_us": 500,
         "inductor_fx_local_cache_hit_count": 1, "aotautograd_local_cache_hit_count": 0}],
        "graph_breaks": [], "unavailable": []}
    why = compile_why(records, None, warmup_steps=1)
    assert why.cache_hits == {"fx_graph": 3, "aot_autograd": 1}
    assert ("3 graphs from Inductor's FX graph cache and 1 graph from AOT autograd's cache (no "
            "code generation timed)") in why.line()
    assert why.to_json_dict()["cache_hits"] == {"fx_graph": 3, "aot_autograd": 1}
