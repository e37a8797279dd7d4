"""Real GPU traces of serving shapes (tests/fixtures/gpu_shapes): kernels that run long after the
host's side of their step are placed by the launch that queued them, a graph's by its one launch."""
from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.events.timeline import TraceRules, phase_timeline
from gapscope.analysis.measures.kernels import DEVICE_KERNELS, find_work
from gapscope.analysis.readers.torch_trace import read_torch_trace
from gapscope.cli import cli

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


# One decode step cut from graph-replay by benchmarks.cut_trace (--marker decode_step): its host
# side ends at 0.292 ms, and every device event it queued runs after that; two decode steps cut
# the same way queue twice the work. README beside them.
ONE, TWO = (FIXTURES / f"serving-{n}.pt.trace.json.gz" for n in ("one-decode", "two-decodes"))


def test_device_work_after_the_host_window_is_said_in_the_breakdown_with_the_launch_that_queued_it():
    """By hand from the file: 96 kernels of correlation 124 (the cudaGraphLaunch), one kernel
    (cudaLaunchKernel) and one copy (cudaMemcpyAsync) run from 1.381 ms on, all after the host's
    last event; one stream, so their 1021.977 µs of durations are the time after it."""
    result = CliRunner().invoke(cli, ["breakdown", str(ONE)])
    assert result.exit_code == 0, result.output
    assert ("98 device event(s) run past the last host event: 1.022 ms of device time after it "
            "(96 of them queued by one cudaGraphLaunch); counted to the launch that queued them") \
        in " ".join(result.output.split())
    two = CliRunner().invoke(cli, ["breakdown", str(TWO), "--format", "json"])
    notes = json.loads(two.stdout)["notes"]
    assert any(n.startswith("196 device event(s) run past the last host event: 2.045 ms of device "
                            "time after it (192 of them queued by 2 cudaGraphLaunch calls)") for n in notes)


def test_a_compare_of_two_serving_traces_names_the_device_time_not_the_hosts():
    """Host windows 0.292 and 0.821 ms (gap +0.529 ms, all host); the device ran 1.022 and
    2.045 ms after them on the work each queued: +1.023 ms, more than the gap, so the verdict
    names the device's work, not `other` (where the graph launch sits)."""
    result = CliRunner().invoke(cli, ["compare", str(ONE), str(TWO), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    pair = doc["comparisons"][0]
    assert pair["gap_ms"] == pytest.approx(0.529, abs=1e-3)
    after = pair["device_after_host"]
    assert after["a_ms"] == pytest.approx(1.022, abs=1e-3) and after["b_ms"] == pytest.approx(2.045, abs=1e-3)
    assert after["delta_ms"] == pytest.approx(1.023, abs=1e-3) and after["leads"] is True
    assert any("the device runs 1.022 ms per step after the host's side" in w for w in doc["warnings"])
    text = " ".join(CliRunner().invoke(cli, ["compare", str(ONE), str(TWO)]).output.split())
    verdict = text[text.index(" is 2.81x slower than "):text.index(" top phases:")]
    assert ("the device's work after the host's window moved more: +1.023 ms per step (1.022 vs "
            "2.045 ms)") in verdict and "% of it in" not in verdict
    # The whole replay waits for its kernels in the profiler's closing sync: nothing after it.
    whole = CliRunner().invoke(cli, ["compare", str(FIXTURES / "graph-replay.pt.trace.json.gz"), str(ONE),
                                     "--format", "json"])
    warned = [w for w in json.loads(whole.stdout)["warnings"] if "after the host's side" in w]
    assert len(warned) == 1 and warned[0].startswith("serving-one-decode")


# graph-replay with its device side taken out (kernels, copies, GPU ranges, flows, the CUPTI
# buffer and the GPU's process): what ProfilerActivity.CPU alone records of the same run.
CPU_ONLY = FIXTURES / "cpu-activity-only.pt.trace.json.gz"


def test_a_gpu_run_traced_without_its_device_says_so_and_gives_host_figures_only():
    """By hand: 19 cuda_runtime events, 9 of them queue work (3 cudaLaunchKernel, 3
    cudaMemcpyAsync, 3 cudaGraphLaunch); the window is the profiler's 7.702 ms span. Its six
    host ops (randn_like, normal_, copy_ ...) are no kernels."""
    result = CliRunner().invoke(cli, ["breakdown", str(CPU_ONLY), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["step_ms"]["mean"] == pytest.approx(7.702, abs=1e-3)
    assert ("no device activity was traced: 19 runtime calls, 9 of them queuing device work, but no "
            "kernel, copy or set event") in " ".join(doc["notes"])
    compared = CliRunner().invoke(cli, ["compare", str(CPU_ONLY), str(FIXTURES / "graph-replay.pt.trace.json.gz"),
                                        "--format", "json"])
    run = json.loads(compared.stdout)["runs"][0]
    assert run["kernels"]["source"] == "no device activity traced" and run["kernels"]["per_step"] == 0
    assert run["attribution"]["device_kind"] == "none" and run["attribution"]["device_busy_ms"] == 0
    assert "CPU run" not in " ".join(run["attribution"]["notes"])
    assert any(w.startswith("cpu-activity-only.pt.trace.json.gz: no device activity was traced")
               for w in json.loads(compared.stdout)["warnings"])
    verbose = CliRunner().invoke(cli, ["compare", str(CPU_ONLY), str(FIXTURES / "graph-replay.pt.trace.json.gz"),
                                       "--verbose"], terminal_width=200).output
    kernels_row = next(line for line in verbose.splitlines() if "kernels (count)" in line)
    assert kernels_row.split("│")[2].strip() == "n/a"


def test_a_range_profilers_trace_is_no_cpu_run_either(tmp_path):
    """The same host side with CUPTI range-profiler ranges in place of its runtime calls, on the
    GPU's own process (where an unknown category would read as kernels): no kernel, no CPU run."""
    with gzip.open(CPU_ONLY, "rt") as handle:
        doc = json.load(handle)
    events = [e for e in doc["traceEvents"] if e.get("cat") != "cuda_runtime"]
    events.append({"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}})
    start = min(e["ts"] for e in events if e.get("ph") == "X")
    events += [{"ph": "X", "cat": "cuda_profiler_range", "name": f"__profile_range_{i}", "pid": 0, "tid": 0,
                "ts": start + 1000 * i, "dur": 500} for i in range(3)]
    (tmp_path / "ranges.pt.trace.json").write_text(json.dumps({**doc, "traceEvents": events}))
    trace = read_torch_trace(tmp_path / "ranges.pt.trace.json")
    assert not [e for e in trace.events if e.kind == "kernel"]
    result = CliRunner().invoke(cli, ["breakdown", str(tmp_path / "ranges.pt.trace.json"), "--format", "json"])
    assert ("no device activity was traced: cuda_profiler_range ranges (a range profiler's counters), "
            "but no kernel") in " ".join(json.loads(result.stdout)["notes"])
