"""gapscope against the anchors, on the same files: torch-tb-profiler's overview (its priority-
ordered roles) on a real torch trace, XProf's input_pipeline_analyzer on a real Keras profile,
and a real Keras run under XLA whose HLO ops must all map to phases."""
import gzip
import json
import statistics

import pytest

from gapscope.analysis.results.breakdown import breakdown_from_trace
from gapscope.analysis.results.explain import explain_run
from gapscope.analysis.events.hlo_metadata import MIXED, UNATTRIBUTED
from gapscope.analysis.readers.hlo_proto import read_hlo_protos
from gapscope.analysis.readers.hlo_text import read_hlo_dump_dir
from gapscope.analysis.readers.torch_trace import read_torch_trace
from gapscope.analysis.readers.xplane import read_xplane
from gapscope.analysis.events.trace import Trace
from conftest import SMALL_RUN, _launch, compare_exit_code, tf_profile

DATALOADER = "enumerate(DataLoader)#"


def _tb_profile(path, cache_dir):
    from torch_tb_profiler.profiler.data import RunProfileData
    return RunProfileData.parse("worker", "span", str(path), str(cache_dir))


def _tb_costs(profile, role):
    return {int(name): c.costs[role] for name, c in zip(profile.steps_names, profile.steps_costs)}


def test_torch_steps_and_dataloader_share_match_torch_tb_profiler(torch_run, tmp_path):
    from torch_tb_profiler.profiler.event_parser import ProfileRole
    (path,) = torch_run.glob("*.pt.trace.json.gz")
    trace = read_torch_trace(path)
    ours = breakdown_from_trace(trace)

    # Step time per ProfilerStep: both take the ProfilerStep range on a CPU run.
    profile = _tb_profile(path, tmp_path)
    tb_total = _tb_costs(profile, ProfileRole.Total)
    assert sorted(tb_total) == [s.step for s in ours.steps]
    for step in ours.steps:
        assert step.step_ms * 1000 == pytest.approx(tb_total[step.step], rel=0.02)

    # torch-tb-profiler 0.4.3 keeps only ProfilerStep among user_annotation events, and torch
    # >= 2 records `enumerate(DataLoader)#...__next__` as user_annotation: it reports 0 data
    # loading on today's traces. That is its limitation, shown here, then set aside by giving
    # those ranges the cpu_op category older torch wrote.
    assert any(e.name.startswith(DATALOADER) for e in trace.events)
    assert set(_tb_costs(profile, ProfileRole.DataLoader).values()) == {0}
    doc = json.loads(gzip.decompress(path.read_bytes()))
    for event in doc["traceEvents"]:
        if event.get("name", "").startswith(DATALOADER):
            event["cat"] = "cpu_op"
    old_style = tmp_path / "old_style.pt.trace.json"
    old_style.write_text(json.dumps(doc))
    profile = _tb_profile(old_style, tmp_path)
    tb_data = _tb_costs(profile, ProfileRole.DataLoader)
    tb_share = profile.avg_costs.costs[ProfileRole.DataLoader] / profile.avg_costs.costs[ProfileRole.Total]

    # Same markers, same answer: gapscope on the trace without its own marks uses DataLoader's.
    unmarked = Trace(trace.source_format, trace.path,
                     [e for e in trace.events if not e.name.startswith("gapscope/")])
    by_markers = breakdown_from_trace(unmarked)
    assert by_markers.phase_sources["data_load"] == "framework markers"
    for step in by_markers.steps:
        assert step.phase_ms["data_load"] * 1000 == pytest.approx(tb_data[step.step], rel=0.02)
    assert by_markers.to_json_dict()["phases"]["data_load"]["share"] == pytest.approx(tb_share, rel=0.02)

    # gapscope's own data_load range also holds the `.to(device)` calls and the `next()` call
    # around DataLoader's range: it contains it. How much longer it is depends on the load (~2 %
    # quiet); a bound of 25 % failed in a suite at load 7, where a step can be preempted there.
    ranges = [(e.start_us, e.start_us + e.dur_us) for e in trace.events if e.name == "gapscope/data_load"]
    loader = [e for e in trace.events if e.name.startswith(DATALOADER)]
    assert loader and all(any(a <= e.start_us and e.start_us + e.dur_us <= b for a, b in ranges)
                          for e in loader)
    for step in ours.steps:
        assert step.phase_ms["data_load"] * 1000 >= tb_data[step.step]


def test_tf_step_times_match_xprof_input_pipeline(keras_run):
    from xprof.convert.raw_to_tool_data import xspace_to_tool_data
    path = tf_profile(keras_run)
    data, _ = xspace_to_tool_data([str(path)], "input_pipeline_analyzer", {})
    table = json.loads(data)[1]
    column = [c["id"] for c in table["cols"]].index("stepTimeMs")
    xprof = {int(row["c"][0]["v"].split()[-1]): row["c"][column]["v"] for row in table["rows"]}
    ours = {s.step: s.step_ms for s in breakdown_from_trace(read_xplane(path)).steps}
    # XProf drops the window's first and last step (it cannot tell they are whole); the rest
    # must be the same steps with the same times.
    assert set(xprof) <= set(ours) and len(xprof) >= len(ours) - 2
    for step, ms in xprof.items():
        assert ours[step] == pytest.approx(ms, rel=0.05)
    common = sorted(xprof)
    assert statistics.fmean(ours[s] for s in common) == pytest.approx(
        statistics.fmean(xprof[s] for s in common), rel=0.05)


@pytest.fixture(scope="module")
def keras_jit_run(runs_dir):
    return _launch("keras", runs_dir, variant="jit")


def test_real_xla_run_maps_every_hlo_op(keras_jit_run):
    path = tf_profile(keras_jit_run)
    trace = read_xplane(path)
    assert trace.metadata["hlo_protos"], "XLA keeps the HloProto of each program in the profile"
    from_profile = read_hlo_protos(trace.metadata["hlo_protos"])
    dump = keras_jit_run / "xla_dump"
    if dump.is_dir():  # the run's own dump: same instructions, same phases
        from_dump = read_hlo_dump_dir(dump)
        for module, ops in from_profile.modules.items():
            assert {n: o.phase for n, o in ops.items()} == {n: o.phase for n, o in from_dump.modules[module].items()}

    result = explain_run(keras_jit_run)
    result.breakdown.self_check()
    assert len(result.breakdown.steps) == SMALL_RUN["trace_steps"]
    phases = result.breakdown.phase_means()
    assert all(phases[p] > 0 for p in ("forward", "backward", "optimizer"))
    kernels = result.kernels
    assert kernels.source == "XLA thunks" and kernels.fused_share > 0
    assert kernels.per_phase["forward"] > 0 and kernels.per_phase["backward"] > 0
    # What no phase claims is small: metric updates and copies XLA added.
    unclaimed = kernels.time_ms_per_phase.get(UNATTRIBUTED, 0) + kernels.time_ms_per_phase.get(MIXED, 0)
    assert unclaimed < 0.25 * kernels.time_ms_per_step
    assert result.compile.xla_modules and result.transfers.note == "no transfers: CPU-only run"


def test_compare_real_torch_and_keras_runs(torch_run, keras_jit_run):
    from click.testing import CliRunner
    from gapscope.cli import cli
    result = CliRunner().invoke(cli, ["compare", str(torch_run), str(keras_jit_run), "--format", "json"])
    assert result.exit_code == compare_exit_code(torch_run, keras_jit_run), result.output
    (pair,) = json.loads(result.stdout)["comparisons"]
    assert sum(p["delta_ms"] for p in pair["phases"].values()) == pytest.approx(pair["gap_ms"], abs=1e-9)
    fusion = next(e for e in pair["evidence"] if e["kind"] == "fusion")
    assert fusion["a"]["kernels_per_step"] != fusion["b"]["kernels_per_step"]
    compile_line = next(e for e in pair["evidence"] if e["kind"] == "compile")
    assert compile_line["b"]["warmup_excess_ms"] > 0 and compile_line["b"]["xla_modules"]
