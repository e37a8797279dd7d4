"""Real GPU traces of serving shapes (tests/fixtures/gpu_shapes): kernels that run long after the
host's side of their step are placed by the launch that queued them, a graph's by its one launch."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from gapscope.analysis.events.timeline import TraceRules, phase_timeline
from gapscope.analysis.measures.kernels import DEVICE_KERNELS, find_work
from gapscope.analysis.readers.torch_trace import read_torch_trace

FIXTURES = Path(__file__).parent / "fixtures" / "gpu_shapes"


def test_a_graph_replays_kernels_go_to_the_step_of_its_one_launch_however_late_they_run():
    trace = read_torch_trace(FIXTURES / "graph-replay.pt.trace.json.gz")
    timeline = phase_timeline(trace, TraceRules(phases=(), step_marker="decode_step"))
    work = find_work(trace, timeline)
    assert work.source == DEVICE_KERNELS and len(timeline.steps) == 3
    launches = [e for e in trace.events if e.name == "cudaGraphLaunch"]
    assert len(launches) == 3
    for step, launch in enumerate(launches):
        replayed = [i for i in work.items if i.launch is launch]
        # 48 layers, each a GEMM and a GELU: 96 kernels, all in the step that launched them.
        assert len(replayed) == 96 and {i.step for i in replayed} == {step}
    ends = [s.end_us for s in timeline.steps]
    late = Counter(i.step for i in work.items if i.busy[0][1] > ends[i.step])
    assert sum(late.values()) >= 3 * 90  # run after their step's host side has ended
