"""Torch traces as older torch and other tools write them: Kineto's first schema (torch 1.8-1.10),
backward ops named without evaluate_function, and trace files named *.json or *.json.gz."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.events.phase_rules import framework_phase
from gapscope.analysis.events.event import Event
from gapscope.analysis.events.timeline import PhaseTimeline, phase_timeline
from gapscope.analysis.events.trace import KERNEL, MEMCPY, RUNTIME, STEP
from gapscope.analysis.measures.kernels import find_work, kernel_stats
from gapscope.analysis.measures.transfers import direction, transfer_stats
from gapscope.analysis.model.locate import ForeignRanks, ForeignTrace, locate
from gapscope.analysis.model.run import load_run
from gapscope.analysis.readers.run_dir import find_files
from gapscope.analysis.readers.torch_trace import read_torch_trace
from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.results.distributed_breakdown import breakdown_of
from gapscope.cli import cli
from gapscope.profilers.errors import GapscopeInputError

# Hand-made in torch 1.9's schema: categories Operator, Runtime, Kernel, Memcpy and Trace;
# ProfilerStep#5 at 1000-2000 us and #6 at 2000-3000 us, each: the DataLoader range (200 us,
# then 300 us), forward ops to the loss (240 us), zero_grad (20 us) inside them, the backward
# ops NllLossBackward, CudnnConvolutionBackward and torch::autograd::AccumulateGrad (280 us),
# Optimizer.step (100 us, then 80 us); one H2D copy and two kernels per step.
TORCH19 = Path(__file__).parent / "fixtures" / "foreign" / "torch19"
TORCH19_TRACE = TORCH19 / "worker0.1623000000000.json"
TORCH2_TRACE = TORCH19.parent / "torch2" / "worker0.1700000000000.json.gz"
XPLANE = Path(__file__).parent / "fixtures" / "distributed" / "tf_mwms_worker0_four_steps.xplane.pb"


@pytest.fixture
def runner():
    return CliRunner()


def test_torch19_schema_reads_steps_devices_and_phases():
    trace = read_torch_trace(TORCH19_TRACE)
    kinds = [e.kind for e in trace.events]
    assert kinds.count(KERNEL) == 4 and kinds.count(MEMCPY) == 2
    assert sorted(e.nbytes for e in trace.events if e.kind == MEMCPY) == [4096, 4096]

    result = breakdown_of(TORCH19)
    result.self_check()
    assert [s.step for s in result.steps] == [5, 6]
    assert [s.step_ms for s in result.steps] == pytest.approx([1.0, 1.0])
    # data_load is the DataLoader ranges, step by step, and the batch's H2D copy after each
    # (aten::to, 40 us: issue 19, the batch's H2D goes to data_load).
    assert [s.phase_ms["data_load"] for s in result.steps] == pytest.approx([0.240, 0.340], rel=0.01)
    # forward: aten::conv2d .. aten::nll_loss less zero_grad's range; optimizer: zero_grad + step.
    assert [s.phase_ms for s in result.steps] == [
        pytest.approx({"data_load": 0.240, "forward": 0.200, "backward": 0.280,
                       "optimizer": 0.120, "other": 0.160}),
        pytest.approx({"data_load": 0.340, "forward": 0.200, "backward": 0.280,
                       "optimizer": 0.100, "other": 0.080})]
    assert result.phase_sources == {"data_load": "framework markers", "forward": "inferred",
                                    "backward": "framework markers", "optimizer": "framework markers"}
    assert result.unidentified_phases == []
    # The DataLoader ranges alone (200 and 300 us: torch-tb-profiler's DataLoader time) stay readable.
    assert ("data_load 0.290 ms a step: the data loader's ranges 0.250 ms and the batch's copy "
            "to the device after them 0.040 ms") in result.notes


@pytest.mark.parametrize("name", ["CudnnConvolutionBackward", "AddmmBackward", "NllLossBackward",
                                  "NllLossBackward0", "torch::autograd::AccumulateGrad",
                                  "autograd::engine::evaluate_function: AddmmBackward0"])
def test_old_and_new_backward_names_are_backward(name):
    assert framework_phase(name) == "backward"


@pytest.mark.parametrize("name", ["aten::addmm", "Backward", "aten::convolution_backward",
                                  "MyBackwardHook", "gradients/dense/MatMulBackward:MatMul"])
def test_names_that_only_look_like_backward_are_not(name):
    assert framework_phase(name) is None


def _trace_folder(tmp_path: Path, *names: str) -> Path:
    """A folder holding the torch-1.9 trace under each name (gzip where it ends in .gz), and
    JSON files that are no torch trace: a config, and a Chrome trace of another tool."""
    folder = tmp_path / "profile"
    (folder / "logs").mkdir(parents=True)
    for name in names:
        data = TORCH19_TRACE.read_bytes()
        (folder / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    (folder / "config.json").write_text(json.dumps({"lr": 0.1, "traceEvents": "no"}))
    (folder / "logs" / "host.trace.json.gz").write_bytes(
        gzip.compress(b'{"displayTimeUnit": "ns", "traceEvents": []}'))
    return folder


@pytest.mark.parametrize("name", ["worker0.1629000000000.json", "worker0.1629000000000.json.gz"])
def test_folder_trace_found_by_content(tmp_path, name):
    folder = _trace_folder(tmp_path, name)
    assert find_files(folder).torch_traces == [folder / name]
    result = breakdown_of(folder)
    assert len(result.steps) == 2 and result.phase_means()["data_load"] == pytest.approx(0.290)


def test_two_sessions_in_a_folder_are_named_not_chosen(tmp_path, runner):
    folder = _trace_folder(tmp_path, "worker0.1629000000000.json", "worker0.1629000009999.json.gz")
    place = locate(folder)
    assert isinstance(place, ForeignTrace)
    with pytest.raises(GapscopeInputError) as refused:
        place.readable()
    message = str(refused.value)
    # Each named with its number, start (from the file name's epoch ms) and steps, oldest first.
    assert ("[1] worker0.1629000000000.json (started 2021-08-15 04:00:00 UTC, steps 5-6); "
            "[2] worker0.1629000009999.json.gz (started 2021-08-15 04:00:09 UTC, steps 5-6)") in message
    assert "--session N" in message and "--session all" in message

    result = runner.invoke(cli, ["breakdown", str(folder)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("gapscope: error:") and "2 torch trace sessions" in lines[0]
    # The file path named chooses one, and so do --session N and --session FILE.
    for args in ([str(folder / "worker0.1629000009999.json.gz")], [str(folder), "--session", "2"],
                 [str(folder), "--session", "worker0.1629000009999.json.gz"]):
        chosen = runner.invoke(cli, ["breakdown", *args, "--format", "json"])
        assert chosen.exit_code == 0, chosen.output
        assert json.loads(chosen.stdout)["steps"] == 2


def _windows(tmp_path: Path, later_steps=(15, 16), rank=None) -> Path:
    """Two profiler windows of one process, as tensorboard_trace_handler writes them: the torch-2
    fixture, and a copy of it 10 s later whose steps are `later_steps`."""
    folder = tmp_path / "windows"
    folder.mkdir(parents=True)
    text = gzip.decompress(TORCH2_TRACE.read_bytes()).decode()
    info = f'"distributedInfo": {{"rank": {rank}, "world_size": 2}},\n' if rank is not None else ""
    (folder / "host_7.1700000000000.pt.trace.json").write_text(text)
    later = text.replace("1700000000000000000", "1700000010000000000")
    for old, new in reversed(list(zip((5, 6), later_steps))):  # 6 first: 5 may become 6
        later = later.replace(f'"ProfilerStep#{old}"', f'"ProfilerStep#{new}"')
    (folder / "host_7.1700000010000.pt.trace.json").write_text(info + later if not info else
                                                              later.replace("{", "{" + info, 1))
    return folder


def test_successive_windows_of_one_process_combine_on_purpose(tmp_path, runner):
    folder = _windows(tmp_path)
    refused = runner.invoke(cli, ["breakdown", str(folder)])
    assert refused.exit_code == 2 and "[2] host_7.1700000010000.pt.trace.json (started " \
        "2023-11-14 22:13:30 UTC, steps 15-16)" in refused.stderr

    result = runner.invoke(cli, ["breakdown", str(folder), "--session", "all", "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [s["step"] for s in out["per_step"]] == [5, 6, 15, 16]
    assert out["step_ms"]["mean"] == pytest.approx(1.0)
    assert out["phases"]["backward"]["ms"] == pytest.approx(0.280)
    assert any("2 profiler sessions read as one run" in n for n in out["notes"])
    # The second window's events sit 10 s later on the first one's clock, its launches still
    # tied to their kernels (correlation ids kept apart).
    trace = load_run(locate(folder, session="all")).trace
    kernels = sorted(e.start_us for e in trace.events if e.kind == KERNEL)
    assert kernels[4] - kernels[0] == pytest.approx(10_000_000, abs=1)
    work = find_work(trace, phase_timeline(trace))
    assert [w.phase for w in work.kernels()] == ["forward", "backward"] * 4


def test_sessions_that_repeat_steps_or_ranks_are_not_combined(tmp_path, runner):
    for later, rank, why in (((6, 7), None, "repeats steps [6]"), ((15, 16), 1, "ranks")):
        folder = _windows(tmp_path / why.split()[0], later, rank)
        result = runner.invoke(cli, ["breakdown", str(folder), "--session", "all"])
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and why in lines[0], result.output
    # The refusal names a session's rank where its distributedInfo says it.
    listing = runner.invoke(cli, ["breakdown", str(folder)]).stderr
    assert "host_7.1700000010000.pt.trace.json (started 2023-11-14 22:13:30 UTC, steps 15-16, rank 1)" \
        in listing and "host_7.1700000000000.pt.trace.json (started 2023-11-14 22:13:20 UTC, steps 5-6);" \
        in listing


@pytest.mark.parametrize("args,why", [
    (["--session", "3"], "--session 3: no such session"),
    (["--session", "1", "EXTRA"], "give one folder, not 2 paths"),
])
def test_a_bad_session_choice_is_one_line(tmp_path, runner, args, why):
    folder = _windows(tmp_path)
    extra = [str(tmp_path / a) if a == "EXTRA" else a for a in args]
    result = runner.invoke(cli, ["breakdown", str(folder), *extra])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and why in lines[0], result.output


def test_session_of_a_file_or_an_empty_folder_is_refused(tmp_path, runner):
    for path, why in ((TORCH19_TRACE, "chooses among the sessions of a folder"),
                      (tmp_path, "holds no trace sessions")):
        result = runner.invoke(cli, ["breakdown", str(path), "--session", "1"])
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and len(lines) == 1 and why in lines[0], result.output


def test_trace_exports_combined_sessions(tmp_path, runner):
    out = tmp_path / "both.trace.json"
    result = runner.invoke(cli, ["trace", str(_windows(tmp_path)), "--session", "all", "--out", str(out)])
    assert result.exit_code == 0, result.output
    steps = [e["name"] for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "gapscope.step"]
    assert steps == ["step 5", "step 6", "step 15", "step 16"]


def test_several_xplane_sessions_are_named_and_chosen(tmp_path, runner):
    folder = tmp_path / "tf"
    for stamp, host in (("2026_01_02_10_00_00", "worker0"), ("2026_01_01_09_00_00", "worker0")):
        (folder / "plugins" / "profile" / stamp).mkdir(parents=True)
        shutil.copy(XPLANE, folder / "plugins" / "profile" / stamp / f"{host}.xplane.pb")
    result = runner.invoke(cli, ["breakdown", str(folder)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "2 XSpace (.xplane.pb) sessions: [1] plugins/profile/2026_01_01_09_00_00/worker0.xplane.pb" \
        in lines[0] and "--session all" not in lines[0]
    chosen = runner.invoke(cli, ["breakdown", str(folder), "--session", "1", "--format", "json"])
    assert chosen.exit_code == 0, chosen.output
    assert json.loads(chosen.stdout)["steps"] == 4
    combined = runner.invoke(cli, ["breakdown", str(folder), "--session", "all"])
    assert combined.exit_code == 2 and "only torch traces are combined" in combined.stderr


def test_ranks_found_by_content_are_a_job_not_two_sessions(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    text = TORCH19_TRACE.read_text()
    for rank in (0, 1):
        info = json.dumps({"backend": "nccl", "rank": rank, "world_size": 2})
        (folder / f"worker{rank}.1629000000000.json").write_text(
            text.replace('"traceEvents"', f'"distributedInfo": {info},\n"traceEvents"', 1))
    place = locate(folder)
    assert isinstance(place, ForeignRanks)
    assert [(rank, world) for rank, (_, world) in place.traces] == [(0, 2), (1, 2)]


def test_cli_breakdown_of_a_torch19_folder(runner):
    result = runner.invoke(cli, ["breakdown", str(TORCH19), "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["steps"] == 2 and out["step_ms"]["mean"] == pytest.approx(1.0)
    assert out["phases"]["data_load"]["ms"] == pytest.approx(0.290, rel=0.01)
    assert out["phases"]["backward"]["ms"] == pytest.approx(0.280)


ROCM_TRACE = Path(__file__).parent / "fixtures" / "foreign" / "rocm" / "mi250_4242.1700000000000.pt.trace.json"
GPU_ONLY = Path(__file__).parent / "fixtures" / "foreign" / "gpuonly" / "device_only.1700000000000.json"


def test_rocm_names_read_as_their_cuda_twins():
    trace = read_torch_trace(ROCM_TRACE)
    kinds = {e.name: e.kind for e in trace.events}
    assert kinds["hipLaunchKernel"] == kinds["hipMemcpyWithStream"] == kinds["hipDeviceSynchronize"] == RUNTIME
    # roctracer's copy carries no bytes: they come from its runtime call's "size".
    assert [e.nbytes for e in trace.events if e.kind == MEMCPY] == [4096, 4096]
    stats = transfer_stats(find_work(trace, phase_timeline(trace)))
    assert stats.by_direction["H2D"]["bytes_per_step"] == 4096 and stats.by_direction["H2D"]["bytes_known"]
    # hipDeviceSynchronize, outside every phase, is the host waiting for the device.
    result = breakdown_of(ROCM_TRACE)
    assert result.phase_means()["other"] == pytest.approx(0.180)
    assert result.to_json_dict()["phases"]["other"]["parts"]["device wait"] == pytest.approx(0.060)


def test_a_copy_without_bytes_or_a_sized_call_stays_unknown(tmp_path):
    text = ROCM_TRACE.read_text().replace('"size": "4096", ', "", 1)
    (tmp_path / "t.json").write_text(text)
    assert sorted(e.nbytes or 0 for e in read_torch_trace(tmp_path / "t.json").events
                  if e.kind == MEMCPY) == [0, 4096]


def test_a_gpu_only_trace_is_read_and_its_kernels_and_copies_measured():
    """No host event, no step marker: the reader takes it, and over one window holding the
    whole trace the kernel and transfer measures give its figures (the window is helper P's)."""
    trace = read_torch_trace(GPU_ONLY)
    assert {e.kind for e in trace.events} == {KERNEL, MEMCPY}
    start = min(e.start_us for e in trace.events)
    end = max(e.end_us for e in trace.events)
    window = PhaseTimeline([Event("trace", STEP, start, end - start, "host/0/0", 0)], [[]], {})
    work = find_work(trace, window)
    kernels = kernel_stats(work)
    assert kernels.per_step == 6 and kernels.time_ms_per_step == pytest.approx(1.2)
    copies = transfer_stats(work).by_direction
    assert copies["H2D"]["bytes_per_step"] == 3 * 2**20 and copies["D2H"]["bytes_per_step"] == 12


def test_gapscope_reads_back_its_own_trace_export(tmp_path, runner):
    out = tmp_path / "t19.phases.trace.json"
    assert runner.invoke(cli, ["trace", str(TORCH19), "--out", str(out)]).exit_code == 0
    original = json.loads(runner.invoke(cli, ["breakdown", str(TORCH19), "--format", "json"]).stdout)
    result = runner.invoke(cli, ["breakdown", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    back = json.loads(result.stdout)
    assert back["steps"] == original["steps"] == 2
    assert back["phases"] == original["phases"] and back["phase_sources"] == original["phase_sources"]
    # Its kernels and copies stay on the device, its steps and phase tracks are not read as events.
    trace = read_torch_trace(out)
    assert sum(e.kind == KERNEL and e.track.startswith("device") for e in trace.events) == 4
    assert sorted(e.step_num for e in trace.events if e.kind == STEP) == [5, 6]
    assert not any(e.name in ("data_load", "step 5") for e in trace.events)


def test_the_tensorboard_tab_lists_foreign_traces_by_content(tmp_path):
    """TensorBoard's own plugin context over a logdir of traces named as other tools name them:
    each listed as a run with the CLI's figures, a folder of two sessions as one run each."""
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from gapscope.analysis.tensorboard.plugin.plugin import GapscopePlugin
    logdir = tmp_path / "logdir"
    (logdir / "hta").mkdir(parents=True)
    shutil.copy(TORCH19_TRACE, logdir / "hta" / "worker0.1629000000000.json")
    (logdir / "gz").mkdir()
    shutil.copy(TORCH2_TRACE, logdir / "gz")
    _windows(logdir)
    for stamp in ("2026_01_01_09_00_00", "2026_01_02_10_00_00"):  # TF's sessions of one logdir
        (logdir / "tf" / "plugins" / "profile" / stamp).mkdir(parents=True)
        shutil.copy(XPLANE, logdir / "tf" / "plugins" / "profile" / stamp / "worker0.xplane.pb")
    (logdir / "notes").mkdir()
    (logdir / "notes" / "config.json").write_text('{"traceEvents": "no", "lr": 0.1}')
    plugin = GapscopePlugin(base_plugin.TBContext(logdir=str(logdir)))
    response = Client(plugin.get_plugin_apps()["/runs"]).get("/")
    runs = {r["name"]: r for r in json.loads(response.get_data())["runs"]}
    tf = [f"tf/plugins/profile/{stamp}/worker0.xplane.pb"
          for stamp in ("2026_01_01_09_00_00", "2026_01_02_10_00_00")]
    assert sorted(runs) == ["gz", "hta", *tf, "windows/host_7.1700000000000.pt.trace.json",
                            "windows/host_7.1700000010000.pt.trace.json"]
    assert all(r["problem"] is None for r in runs.values())
    assert [r["framework"] for name, r in runs.items() if name not in tf] == ["torch"] * 4
    assert [runs[name]["breakdown"]["steps"] for name in tf] == [4, 4]
    # The DataLoader ranges (0.250 ms a step) and the batch's copy to the device after them.
    assert runs["hta"]["breakdown"]["phases"]["data_load"]["ms"] == pytest.approx(0.290)
    assert runs["gz"]["breakdown"]["steps"] == runs["windows/host_7.1700000010000.pt.trace.json"][
        "breakdown"]["steps"] == 2


@pytest.mark.parametrize("fixture", [TORCH19, TORCH2_TRACE])
def test_gapscope_reads_back_its_xspace_export_of_a_torch_trace(tmp_path, runner, fixture):
    """The XSpace keeps no categories: the torch threads' events are read as host ops and
    runtime calls again, and give the phases the trace gave."""
    out = tmp_path / "plugins" / "profile" / "gapscope" / "me.xplane.pb"
    assert runner.invoke(cli, ["trace", str(fixture), "--out", str(out)]).exit_code == 0
    original = json.loads(runner.invoke(cli, ["breakdown", str(fixture), "--format", "json"]).stdout)
    back = json.loads(runner.invoke(cli, ["breakdown", str(out), "--format", "json"]).stdout)
    assert back["steps"] == 2
    read, first = ({k: v["ms"] for k, v in doc["phases"].items()} for doc in (back, original))
    # The XSpace keeps no link from the batch's copy op to its memcpy (no correlation ids), so
    # the copy that the original puts in data_load (0.040 ms a step) reads back in forward.
    moved = first["data_load"] - read["data_load"]
    assert moved == pytest.approx(0.040)
    assert read == pytest.approx({**first, "data_load": first["data_load"] - moved,
                                  "forward": first["forward"] + moved})
    assert back["phase_sources"] == original["phase_sources"]


@pytest.mark.parametrize("name,way", [("Memcpy HtoD (Host -> Device)", "H2D"), ("CopyHostToDevice", "H2D"),
                                      ("CopyDeviceToHost", "D2H"), ("CopyDeviceToDevice", "D2D"),
                                      ("Memcpy DtoD (Device -> Device)", "D2D"), ("FillBuffer", "other")])
def test_rocm_copy_names_have_their_direction(name, way):
    assert direction(name) == way


def test_a_folder_of_json_files_that_are_no_trace_names_each_and_why(tmp_path):
    """A folder's .json files that are no torch trace are skipped, and the refusal says which
    and why: another tool's Chrome trace, JSON that is no object, traceEvents past the head."""
    (tmp_path / "tf_viewer.json").write_text(json.dumps(
        {"traceEvents": [{"ph": "X", "name": "MatMul", "pid": 1, "tid": 1, "ts": 0, "dur": 5}]}))
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "late.json").write_text('{"metadata": "' + "x" * (300 << 10) + '", "traceEvents": []}')
    result = CliRunner().invoke(cli, ["breakdown", str(tmp_path)])
    assert result.exit_code == 2
    assert "holds no trace file; skipped" in result.output
    assert "tf_viewer.json (traceEvents without Kineto's keys or event categories" in result.output
    assert "list.json (not a JSON object)" in result.output
    assert "late.json (no traceEvents in its first 256 kB)" in result.output


MTIA = Path(__file__).parent / "fixtures" / "foreign" / "mtia"


@pytest.mark.parametrize("process,device_ops", [("MTIA 0", 4), ("XPU 0", 4), ("python worker", 0)])
def test_device_events_are_known_by_their_track_not_their_names(tmp_path, process, device_ops):
    """A device category the reader has no name for counts as device work on a process named
    after a device; elsewhere it is no kernel."""
    doc = json.loads(next(MTIA.glob("*.pt.trace.json")).read_text())
    for event in doc["traceEvents"]:
        if event.get("cat") == "mtia_ccp_events":
            event["cat"] = "accelerator_op"
        if event["ph"] == "M" and event["pid"] == 1:
            event["args"]["name"] = process
    path = tmp_path / "w.pt.trace.json"
    path.write_text(json.dumps(doc))
    trace = read_torch_trace(path)
    kernels = [e for e in trace.events if e.kind == "kernel"]
    assert len(kernels) == device_ops
    assert all(e.track == "device/1/3" for e in kernels)


def test_device_work_past_the_last_host_event_gets_a_note(tmp_path):
    """The last backward op's device op made to run to 3520 µs, the host's last event ending at
    3000: 0.52 ms of device time after it, said in the kernels' notes."""
    doc = json.loads(next(MTIA.glob("*.pt.trace.json")).read_text())
    (last,) = [e for e in doc["traceEvents"] if e.get("name") == "fc_bwd_kernel" and e["ts"] == 2520]
    last["dur"] = 1000
    (tmp_path / "w.pt.trace.json").write_text(json.dumps(doc))
    result = CliRunner().invoke(cli, ["compare", str(tmp_path), str(MTIA), "--format", "json"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert "1 device event(s) run past the last host event: 0.520 ms of device time after it" \
        in " ".join(runs[0]["kernels"]["notes"])
    assert not any("past the last host event" in n for n in runs[1]["kernels"]["notes"])


def test_xspace_steps_from_group_ids_where_no_steps_line(tmp_path):
    """Without the device's Steps line, the group_id the profiler gave each host event of a step
    makes the steps: each spans its group's host events (1000-1900 and 2000-2900 µs)."""
    import importlib.util
    make = Path(__file__).parent / "fixtures" / "foreign" / "xspace_steps" / "make.py"
    spec = importlib.util.spec_from_file_location("xspace_steps_make", make)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = tmp_path / "worker0.xplane.pb"
    path.write_bytes(module.space(with_steps_line=False).SerializeToString())
    result = breakdown(load_run(path))
    assert [(s.step, s.step_ms) for s in result.steps] == [(1, pytest.approx(0.9)), (2, pytest.approx(0.9))]
    assert result.phases["backward"].ms == pytest.approx(0.28)


def test_a_jax_xspace_is_labelled_jax(tmp_path):
    """JAX's jitted call (PjitFunction(train_step)) and its XLA module jit_train_step mark the
    XSpace as JAX's, not TensorFlow's; a TF XSpace stays tensorflow."""
    from xspace_builder import PlaneBuilder, new_space
    space = new_space()
    host = PlaneBuilder(space, 1, "/host:CPU")
    python = host.line(10, "python3")
    for base in (0, 100):
        host.event(python, "PjitFunction(train_step)", base, 90)
        host.event(python, "dot.1", base + 10, 50, hlo_op="dot.1", hlo_module="jit_train_step")
    path = tmp_path / "jax" / "host.xplane.pb"
    path.parent.mkdir()
    path.write_bytes(space.SerializeToString())
    result = CliRunner().invoke(cli, ["breakdown", str(path.parent), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["framework"] == "jax"
    tf = CliRunner().invoke(cli, ["breakdown", str(Path(__file__).parent / "fixtures" / "foreign"
                                                    / "xspace_steps"), "--format", "json"])
    assert json.loads(tf.stdout)["framework"] == "tensorflow"


def test_xspace_steps_lines_of_two_gpus_are_the_steps_once(tmp_path):
    """MirroredStrategy: each GPU plane carries a Steps line for the same steps; the job has its
    steps once, each the longer GPU's (GPU:1's 990 µs spans lie inside GPU:0's 1000 µs)."""
    import importlib.util
    from xspace_builder import PlaneBuilder
    make = Path(__file__).parent / "fixtures" / "foreign" / "xspace_steps" / "make.py"
    spec = importlib.util.spec_from_file_location("xspace_steps_make", make)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    space = module.space()
    second = PlaneBuilder(space, 3, "/device:GPU:1")
    steps = second.line(1, "Steps")
    for group, base in ((1, 1000), (2, 2000)):
        second.event(steps, str(group), base + 5, 990, group_id=group)
    path = tmp_path / "worker0.xplane.pb"
    path.write_bytes(space.SerializeToString())
    result = breakdown(load_run(path))
    assert [(s.step, s.step_ms) for s in result.steps] == [(1, pytest.approx(1.0)), (2, pytest.approx(1.0))]


def test_a_rocprofiler_sdk_file_is_refused_by_its_format_name(tmp_path):
    """rocprofv3 --output-format json writes <pid>_results.json with one "rocprofiler-sdk-tool"
    list (cereal's indented layout, its keys as in rocprofiler-sdk's own tests); ROCm 7's
    default rocpd output is an SQLite file. Both are refused in one line that names them."""
    tool = {"metadata": {"pid": 4242, "init_time": 1, "fini_time": 2}, "agents": [],
            "counters": [], "strings": {"buffer_records": []}, "kernel_symbols": [],
            "buffer_records": {"kernel_dispatch": [], "memory_copy": [], "hip_api": []}}
    (tmp_path / "4242_results.json").write_text(json.dumps({"rocprofiler-sdk-tool": [tool]}, indent=4))
    import sqlite3
    with sqlite3.connect(tmp_path / "4242_results.db") as db:
        db.execute("CREATE TABLE rocpd_kernel_dispatch (id INTEGER)")
    db.close()
    for name, says in (("4242_results.json", "a rocprofiler-sdk (rocprofv3) JSON file, not a torch profiler trace"),
                       ("4242_results.db", "an SQLite database (rocprofv3's rocpd output")):
        result = CliRunner().invoke(cli, ["breakdown", str(tmp_path / name)])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1 and says in result.output, result.output
    folder = CliRunner().invoke(cli, ["breakdown", str(tmp_path)])
    assert folder.exit_code == 2
    assert "4242_results.json (a rocprofiler-sdk (rocprofv3) JSON file)" in " ".join(folder.output.split())


# Real Itanium names as HIP's clang and g++ write them (c++filt gives the C++ names checked below).
FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
AXPY = ("_ZN2at6native12_GLOBAL__N_125multi_tensor_apply_kernelINS1_18TensorListMetadataILi3EEENS1_11"
        "AxpyFunctorIfEEJfEEEvT_T0_DpT1_")


def test_mangled_kernel_names_are_demangled_and_shortened():
    from gapscope.analysis.events.kernel_names import demangled, short_kernel_name
    assert demangled(FILL) == ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
                               "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")
    assert short_kernel_name(FILL) == "vectorized_elementwise_kernel<4, FillFunctor<float>, array<char*, 1ul>>"
    assert short_kernel_name(AXPY) == "multi_tensor_apply_kernel<TensorListMetadata<3>, AxpyFunctor<float>, float>"
    # Not mangled, or not demangled: as they are (an op keeps its namespace).
    for name in ("aten::addmm", "Cijk_Alik_Bljk_SB_MT64x64", "_Zbad", "triton_poi_fused_addmm_relu_0"):
        assert short_kernel_name(name) == name


def test_a_rocm_traces_mangled_kernels_read_demangled_in_compare(tmp_path):
    """The ROCm fixture with its GEMM kernel under a mangled HIP name: compare names it in C++."""
    rocm = MTIA.parent / "rocm"
    source = next(rocm.glob("*.pt.trace.json"))
    (tmp_path / source.name).write_text(source.read_text().replace('"Cijk_Alik_Bljk_SB_MT64x64"', f'"{FILL}"'))
    result = CliRunner().invoke(cli, ["compare", str(tmp_path), str(rocm), "--format", "json"])
    assert result.exit_code == 0, result.output
    names = [k["name"] for k in json.loads(result.stdout)["runs"][0]["kernels"]["top"]]
    assert any(n.startswith("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>")
               for n in names)
    assert FILL not in names


MIRRORED = Path(__file__).parent / "fixtures" / "foreign" / "mirrored_steps"


def _xprof_step_ms(path: Path, tmp_path: Path) -> dict[int, float]:
    """XProf's own step times of an .xplane.pb (its input-pipeline table), by step number. Read
    from a copy: XProf caches its result (ALL_HOSTS.op_stats_v2.pb) beside the file it reads, and
    would answer from that cache after the fixture changed."""
    raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data")
    copy = tmp_path / "xprof" / path.name
    copy.parent.mkdir()
    shutil.copy(path, copy)
    data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "input_pipeline_analyzer", {})
    table = json.loads(data)[1]
    column = [c["id"] for c in table["cols"]].index("stepTimeMs")
    return {int(row["c"][0]["v"].split()[-1]): row["c"][column]["v"] for row in table["rows"]}


def _mirrored_space(**kwargs):
    import importlib.util
    spec = importlib.util.spec_from_file_location("mirrored_steps_make", MIRRORED / "make.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.space(**kwargs)


def test_mirrored_steps_are_the_longest_gpu_s_as_xprof_times_them(tmp_path):
    """Two GPUs, each with its own Steps line (the span of its work in the step): step 1 is
    GPU:1's 250-880 µs, step 2 GPU:0's 220-900 µs, as XProf's converter gives on the same file;
    the first GPU's line alone (580 and 680 µs) was 3.8 % short, and the note says so."""
    result = breakdown(load_run(MIRRORED / "worker0.xplane.pb"))
    assert [(s.step, s.step_ms) for s in result.steps] == [(1, pytest.approx(0.63)), (2, pytest.approx(0.68))]
    assert result.step_stats()["mean"] == pytest.approx(0.655)
    assert any("Steps lines of 2 devices" in n and "0.630 ms against 0.655 ms" in n for n in result.notes), \
        result.notes
    assert _xprof_step_ms(MIRRORED / "worker0.xplane.pb", tmp_path) == {1: pytest.approx(0.63),
                                                                        2: pytest.approx(0.68)}


@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "as-tf-2.21-stores-it"])
def test_host_step_ranges_stay_the_steps_and_the_note_gives_xprof_s(tmp_path, grouped):
    """With a root `train` range per step (0-900 and 0-700 µs), gapscope's steps are those host
    ranges, which its phases lie in; XProf ignores host markers when there is a device and keeps
    the longest GPU's spans (0.63 and 0.68 ms): the note names both means. Stored ungrouped (no
    group_id, no Steps lines), XProf groups the work by the train range its launch lies in, and
    gapscope's note derives the same spans."""
    path = tmp_path / "worker0.xplane.pb"
    path.write_bytes(_mirrored_space(host_markers=True, grouped=grouped).SerializeToString())
    result = breakdown(load_run(path))
    assert [(s.step, s.step_ms) for s in result.steps] == [(0, pytest.approx(0.9)), (1, pytest.approx(0.7))]
    assert any("host's step ranges (mean 0.800 ms)" in n and "(mean 0.655 ms over 2 steps)" in n
               for n in result.notes), result.notes
    # XProf numbers the steps by group_id where the file has them, else by their step_num.
    assert sorted(_xprof_step_ms(path, tmp_path).values()) == pytest.approx([0.63, 0.68])


def test_real_mirrored_cpu_steps_are_xprof_s(tmp_path):
    """A real MirroredStrategy fit on two logical CPUs with tf.keras-2 step markers: XProf gives
    steps 1-5 (it leaves out the first and last of more than 5), each as long as gapscope's."""
    path = MIRRORED.parent / "mirrored_cpu" / "vm.xplane.pb"
    ours = {s.step: s.step_ms for s in breakdown(load_run(path)).steps}
    xprof = _xprof_step_ms(path, tmp_path)
    assert sorted(ours) == list(range(7)) and sorted(xprof) == [1, 2, 3, 4, 5]
    assert {step: ours[step] for step in xprof} == pytest.approx(xprof, rel=1e-6)
    assert ours[0] == pytest.approx(7.793235) and ours[6] == pytest.approx(2.973362)
