"""A torch trace as an XSpace for XProf's Trace Viewer: the phase line above the ops, read back by
gapscope's XPlane reader and by XProf's own converter; written beside every torch run without
changing what the run's breakdown reads."""
from __future__ import annotations

import json
import shutil
from collections import Counter

import pytest

from gapscope.analysis.readers import xplane_proto
from gapscope.workloads.runners.after_run import write_after_run
from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.readers.run_dir import EXPORTED_XSPACE_DIR, find_files
from gapscope.analysis.readers.xplane import read_xplane
from gapscope.analysis.renderers.traces import xspace
from gapscope.analysis.model.run import load_run
from gapscope.analysis.events.event import KERNEL, MEMCPY
from gapscope.analysis.tensorboard.xspace_export import write_xspace
from gapscope.profilers.phases import PHASES
from xspace_builder import PlaneBuilder, new_space

PS = 1_000_000  # picoseconds per microsecond


def parse(path):
    space = xplane_proto.xplane_pb2().XSpace()
    space.ParseFromString(path.read_bytes())
    return space


def named(plane, line) -> list[str]:
    return [plane.event_metadata[e.metadata_id].name for e in line.events]


def lines_of(plane) -> dict:
    """The lines in the order XProf draws them: by id cut to 32 bits (TF's are hashed, negative)."""
    return {line.name: line for line in sorted(plane.lines, key=lambda line: line.id & 0xFFFFFFFF)}


def render_to(tmp_path, trace_path):
    run = load_run(trace_path)
    path = tmp_path / "host.xplane.pb"
    path.write_bytes(xspace.render(run.trace, run.timeline, "host"))
    return run, path


def test_a_hand_made_gpu_trace_by_the_microsecond(fixtures_dir, tmp_path):
    """Two steps of 100 µs at 1000 and 1100 µs with their marks, seven kernels and two copies
    on stream 7: every figure below is read off the fixture."""
    _, path = render_to(tmp_path, fixtures_dir / "async_gpu_two_steps.pt.trace.json")
    space = parse(path)
    assert list(space.hostnames) == ["host"]
    host, gpu = space.planes
    assert (host.name, gpu.name, gpu.id) == ("/host:CPU", "/device:GPU:0", 0)
    lines = lines_of(host)
    # gapscope's lines first (XProf draws lines in id order), then the trace's one thread.
    assert list(lines) == ["Steps", "gapscope phases", "thread 1 (process 1)"]
    steps, phases = lines["Steps"], lines["gapscope phases"]
    # Times count from the trace's first microsecond (1000).
    assert [(n, e.offset_ps, e.duration_ps) for n, e in zip(named(host, steps), steps.events)] == [
        ("step 1", 0, 100 * PS), ("step 2", 100 * PS, 100 * PS)]
    expected = [("data_load", 0, 20), ("forward", 20, 20), ("backward", 40, 30),
                ("optimizer", 70, 20), ("other", 90, 10),
                ("data_load", 100, 10), ("forward", 110, 40), ("backward", 150, 30),
                ("optimizer", 180, 15), ("other", 195, 5)]
    assert [(n, e.offset_ps, e.duration_ps) for n, e in zip(named(host, phases), phases.events)] == [
        (n, start * PS, dur * PS) for n, start, dur in expected]
    step_stat = next(k for k, m in host.stat_metadata.items() if m.name == "step")
    assert [s.int64_value for e in phases.events for s in e.stats if s.metadata_id == step_stat] \
        == [1] * 5 + [2] * 5
    assert len(lines["thread 1 (process 1)"].events) == 19  # 10 in step 1, 9 in step 2
    (stream,) = gpu.lines
    assert stream.name == "Stream #7" and len(stream.events) == 9
    assert named(gpu, stream)[:2] == ["Memcpy HtoD (Pageable -> Device)", "volta_sgemm_128x64_nn"]
    assert stream.events[1].offset_ps == 30 * PS and stream.events[1].duration_ps == 30 * PS


def test_gapscope_s_reader_reads_it_back(fixtures_dir, tmp_path):
    run, path = render_to(tmp_path, fixtures_dir / "async_gpu_two_steps.pt.trace.json")
    back = read_xplane(path)
    kinds = Counter(e.kind for e in back.events)
    assert (kinds[KERNEL], kinds[MEMCPY]) == (7, 2)
    # Every event of the torch trace, plus gapscope's 2 steps and 10 phases.
    assert len(back.events) == len(run.trace.events) + 12
    assert Counter(e.name for e in back.events) == Counter(e.name for e in run.trace.events) + \
        Counter({"step 1": 1, "step 2": 1, "data_load": 2, "forward": 2, "backward": 2,
                 "optimizer": 2, "other": 2})


@pytest.fixture(scope="module")
def exported(torch_run):
    """The file the torch run's end wrote (no call here: the run process wrote it)."""
    files = list(torch_run.rglob("*.xplane.pb"))
    assert [p.parent.relative_to(torch_run).parts for p in files] == [EXPORTED_XSPACE_DIR]
    return files[0]


def test_a_torch_run_ends_with_its_trace_as_an_xspace(torch_run, exported):
    run = load_run(torch_run)
    assert exported.name == f"{run.manifest['host']}.xplane.pb"
    space = parse(exported)
    host = next(p for p in space.planes if p.name == "/host:CPU")
    lines = lines_of(host)
    assert list(lines)[:2] == ["Steps", "gapscope phases"]
    timeline = run.timeline
    steps = [timeline.covering(i) for i in range(len(timeline.steps))]
    # The phase line holds each traced step's covering phases. Each end is rounded to the
    # nanosecond the profiler records, from a float of µs since the epoch whose last bit is about
    # a nanosecond there: each duration may differ from the float one by up to two.
    phases = lines["gapscope phases"]
    assert len(lines["Steps"].events) == len(timeline.steps) == 8
    assert named(host, phases) == [phase for step in steps for _, _, phase in step]
    totals = Counter()
    for name, event in zip(named(host, phases), phases.events):
        totals[name] += event.duration_ps
    for phase in PHASES:
        segments = [end - start for step in steps for start, end, p in step if p == phase]
        assert totals[phase] / PS == pytest.approx(sum(segments), abs=2e-3 * len(segments))
    for step, event in zip(timeline.steps, lines["Steps"].events):
        assert event.duration_ps / PS == pytest.approx(step.dur_us, abs=2e-3)
    # Each thread of the Kineto trace is a line with as many events.
    threads = Counter(f"thread {tid} (process {pid})" for e in run.trace.events
                      for side, pid, tid in [e.track.split("/")] if side == "host")
    assert {name: len(line.events) for name, line in lines.items()
            if name.startswith("thread ")} == dict(threads)
    # Beside them, gapscope's step, phase and layer lines.
    assert sum(len(line.events) for line in host.lines) == len(run.trace.events) + \
        len(timeline.steps) + sum(map(len, steps)) + len(lines["gapscope layers"].events)


def test_the_torch_run_s_breakdown_still_reads_its_kineto_trace(torch_run, exported, tmp_path):
    with_export = tmp_path / "with"
    without = tmp_path / "without"
    shutil.copytree(torch_run, with_export)
    shutil.copytree(torch_run, without, ignore=shutil.ignore_patterns("*.xplane.pb"))
    assert list(with_export.rglob("*.xplane.pb"))
    located = find_files(with_export)
    assert located.xplanes == [] and located.trace_files == located.torch_traces
    documents = [breakdown(load_run(path)).to_json_dict() for path in (with_export, without)]
    assert json.dumps(documents[0], sort_keys=True) == json.dumps(documents[1], sort_keys=True)


def trace_viewer_events(path) -> tuple[list[dict], dict, dict]:
    """XProf's own conversion of the file for its Trace Viewer: the events, the process names
    by pid and the thread names by (pid, tid)."""
    raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data")
    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer", {})
    assert data, "XProf converted nothing"
    events = json.loads(data)["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return events, processes, threads


def test_xprof_draws_the_gpu_stream_of_the_hand_made_trace(fixtures_dir, tmp_path):
    _, path = render_to(tmp_path, fixtures_dir / "async_gpu_two_steps.pt.trace.json")
    events, processes, threads = trace_viewer_events(path)
    (gpu,) = [pid for pid, name in processes.items() if "/device:GPU:0" in name]
    (stream,) = [key for key, name in threads.items() if key[0] == gpu and name == "Stream #7"]
    kernels = [e for e in events if e.get("ph") == "X" and (e["pid"], e["tid"]) == stream]
    assert len(kernels) == 9 and kernels[1]["name"] == "volta_sgemm_128x64_nn"
    assert kernels[1]["dur"] == pytest.approx(30.0)


def test_xprof_s_own_converter_makes_trace_viewer_data_with_the_phase_line(torch_run, exported):
    events, _, threads = trace_viewer_events(exported)
    order = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_sort_index"}
    (phase_thread,) = [key for key, name in threads.items() if name == "gapscope phases"]
    host_threads = [key for key in threads if key[0] == phase_thread[0]]
    # The phase line sorts above every thread of the trace, below the step line only.
    assert sorted(host_threads, key=order.get)[:2] == [
        next(k for k, n in threads.items() if n == "Steps"), phase_thread]
    shown = [e["name"] for e in events if e.get("ph") == "X" and (e["pid"], e["tid"]) == phase_thread]
    run = load_run(torch_run)
    assert len(shown) == sum(len(run.timeline.covering(i)) for i in range(len(run.timeline.steps)))
    assert set(shown) == set(PHASES)


def test_xprof_s_overview_page_measures_every_traced_step_of_the_torch_run(torch_run, exported):
    """The trace's ProfilerStep#N events carry the marks of TF's own step markers (`_r`,
    `step_num`): XProf's converter finds each traced step with its duration, where it said "No
    step marker observed" and drew zeros."""
    raw_to_tool_data = pytest.importorskip("xprof.convert.raw_to_tool_data")
    data, _ = raw_to_tool_data.xspace_to_tool_data([exported], "overview_page", {})
    text = data.decode() if isinstance(data, bytes) else data
    assert "No step marker observed" not in text
    table = next(t for t in json.loads(text) if t.get("cols") and t["cols"][0]["id"] == "stepnum")
    column = [c["id"] for c in table["cols"]].index("stepTimeMs")
    shown = [(row["c"][0]["v"], row["c"][column]["v"]) for row in table["rows"]]
    steps = {f"{s.name} {s.step_num}": s.dur_us / 1000 for s in load_run(torch_run).timeline.steps}
    # XProf may leave out the step at either edge of the trace (it treats it as cut off).
    names = list(steps)
    first = names.index(shown[0][0])
    assert first <= 1 and len(shown) >= len(steps) - 2
    assert [name for name, _ in shown] == names[first:first + len(shown)]
    assert [ms for _, ms in shown] == pytest.approx([steps[name] for name, _ in shown], abs=1e-3)


def test_a_keras_run_ends_with_its_tf_profile_and_the_phase_lines_in_trace_viewer(keras_run):
    """The Keras run's end wrote TF's session again with gapscope's lines, which XProf's own
    converter draws above TF's threads, each traced step's phases in order."""
    run = load_run(keras_run)
    (tf_file,) = find_files(keras_run).xplanes
    (path,) = keras_run.joinpath(*EXPORTED_XSPACE_DIR).glob("*.xplane.pb")
    assert path.name == tf_file.name
    host = next(p for p in parse(path).planes if p.name == "/host:CPU")
    tf_host = next(p for p in parse(tf_file).planes if p.name == "/host:CPU")
    assert list(lines_of(host))[:2] == ["Steps", "gapscope phases"]
    assert len(host.lines) == len(tf_host.lines) + 2
    covering = [phase for i in range(len(run.timeline.steps)) for _, _, phase in run.timeline.covering(i)]
    assert named(host, lines_of(host)["gapscope phases"]) == covering
    events, _, threads = trace_viewer_events(path)
    order = {(e["pid"], e["tid"]): e["args"]["sort_index"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_sort_index"}
    (phase_thread,) = [key for key, name in threads.items() if name == "gapscope phases"]
    host_threads = sorted((key for key in threads if key[0] == phase_thread[0]), key=order.get)
    assert [threads[key] for key in host_threads[:2]] == ["Steps", "gapscope phases"]
    shown = [e["name"] for e in events if e.get("ph") == "X" and (e["pid"], e["tid"]) == phase_thread]
    assert shown == covering


def test_a_view_that_cannot_be_written_is_recorded_and_the_others_are_written(torch_run, tmp_path):
    copy = tmp_path / torch_run.name
    shutil.copytree(torch_run, copy, ignore=shutil.ignore_patterns("*.xplane.pb", "events.out.*"))
    blocked = copy.joinpath(*EXPORTED_XSPACE_DIR)
    shutil.rmtree(blocked)
    blocked.write_text("a file where the session folder goes")
    problem = write_after_run(copy)
    assert problem and "gapscope" in problem
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["trace_viewer_error"] == problem and "summaries_error" not in manifest
    assert list(copy.glob("events.out.tfevents.*"))  # the summaries were still written


def tf_profile(folder, *steps):
    """A TF profiler session by hand: `train N` step markers (TF's own, `_r` and `step_num`) on
    a Python thread whose line starts at 1 ms, one per (start, duration) in µs, and an op."""
    space = new_space()
    host = PlaneBuilder(space, 1, "/host:CPU")
    python = host.line(7, "python", timestamp_ns=1_000_000)
    for number, (start, duration) in enumerate(steps, start=1):
        host.event(python, "train", start, duration, step_num=number, _r=1)
    host.event(host.line(9, "tf_Compute", timestamp_ns=1_000_000), "MatMul:MatMul", 10, 20)
    session = folder / "plugins" / "profile" / "2026_01_01_00_00_00"
    session.mkdir(parents=True)
    (session / "host.xplane.pb").write_bytes(space.SerializeToString())
    return session / "host.xplane.pb"


def test_a_tf_profile_gets_the_phase_lines_in_a_session_of_its_own(tmp_path):
    """Two steps of 100 µs and 50 µs at 0 and 100 µs after the line's 1 ms: gapscope's lines go
    above TF's (lower ids), at the same clock, and TF's file is left as it was."""
    original = tf_profile(tmp_path, (0, 100), (100, 50))
    before = original.read_bytes()
    run = load_run(tmp_path)
    path = write_xspace(run)
    assert path == tmp_path.joinpath(*EXPORTED_XSPACE_DIR, "host.xplane.pb")
    assert original.read_bytes() == before
    (host,) = parse(path).planes
    lines = lines_of(host)
    assert list(lines) == ["Steps", "gapscope phases", "python", "tf_Compute"]
    steps, phases = lines["Steps"], lines["gapscope phases"]
    assert steps.timestamp_ns == phases.timestamp_ns == 1_000_000
    assert [(n, e.offset_ps, e.duration_ps) for n, e in zip(named(host, steps), steps.events)] == [
        ("step 1", 0, 100 * PS), ("step 2", 100 * PS, 50 * PS)]
    # No second step marker beside TF's `train` ones: XProf would count each step twice.
    root = next(k for k, m in host.stat_metadata.items() if m.name == "_r")
    assert not any(s.metadata_id == root for e in steps.events for s in e.stats)
    # The phases cover each step exactly, as the timeline has them.
    covering = [c for i in range(2) for c in run.timeline.covering(i)]
    assert [(n, e.offset_ps, e.offset_ps + e.duration_ps) for n, e in
            zip(named(host, phases), phases.events)] == [
        (phase, round(start * PS), round(end * PS)) for start, end, phase in covering]
    assert phases.events[-1].offset_ps + phases.events[-1].duration_ps == 150 * PS
    # TF's own lines keep every event; the run still reads TF's file, not this one.
    assert [len(lines[n].events) for n in ("python", "tf_Compute")] == [2, 1]
    assert find_files(tmp_path).xplanes == [original]


def test_a_tf_profile_without_steps_is_one_window(tmp_path):
    """No step markers (issue 19): the whole profile, its one op at 10-30 µs, is one step
    window, as the breakdown reads it, and gets the phase lines as any step does."""
    tf_profile(tmp_path)
    path = write_xspace(load_run(tmp_path))
    host = parse(path).planes[0]
    steps = lines_of(host)["Steps"]
    assert [(n, e.duration_ps) for n, e in zip(named(host, steps), steps.events)] == [("step 0", 20 * PS)]


def test_gapscope_trace_writes_one_for_any_trace(fixtures_dir, tmp_path):
    """A foreign torch trace too: `--out` ending in .xplane.pb picks the format."""
    from click.testing import CliRunner

    from gapscope.cli import cli
    out = tmp_path / "plugins" / "profile" / "gapscope" / "me.xplane.pb"
    result = CliRunner().invoke(cli, ["trace", str(fixtures_dir / "marked_two_steps.pt.trace.json"),
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    space = parse(out)
    assert list(space.hostnames) == ["me"]
    host = space.planes[0]
    lines = lines_of(host)
    assert list(lines)[:2] == ["Steps", "gapscope phases"]
    assert named(host, lines["Steps"]) == ["step 1", "step 2"]


def test_a_layered_torch_run_has_a_layers_line_below_the_phases(torch_run, exported):
    """Issue 31: the MLP's layers on a line of their own, each layer's time per phase as the
    layers table counts it; the reader skips the line (layers are derived from the ops again)."""
    from gapscope.analysis.results.layers import layer_breakdown
    run = load_run(torch_run)
    host = next(p for p in parse(exported).planes if p.name == "/host:CPU")
    lines = lines_of(host)
    assert list(lines)[:3] == ["Steps", "gapscope phases", "gapscope layers"]
    assert all(name.startswith("thread ") for name in list(lines)[3:])
    phase_of = {key: meta.name for key, meta in host.stat_metadata.items()}
    summed = Counter()
    layer_line = lines["gapscope layers"]
    for name, event in zip(named(host, layer_line), layer_line.events):
        stats = {phase_of[s.metadata_id]: s for s in event.stats}
        summed[name, stats["phase"].str_value] += event.duration_ps / PS
    table = layer_breakdown(run)
    assert {name for name, _ in summed} == {r.name for r in table.rows} == {"dense1", "logits", "loss"}
    for r in table.rows:
        for phase in ("forward", "backward"):
            # Each end rounded to the nanosecond: a few ns per span at most.
            assert summed[r.name, phase] / 1000.0 / table.steps == pytest.approx(r.ms(phase), abs=1e-4)
    back = read_xplane(exported)
    assert not {"dense1", "logits", "loss"} & {e.name for e in back.events}
