"""Records on a CUDA device a real torch.profiler trace of a shape other projects bring:

- `graph-replay` (tests/fixtures/gpu_shapes/): inference by CUDA graph replay (a serving
  engine's decode): the host queues a graph of ~100 kernels in one cudaGraphLaunch and its step
  ends while they still run;
- `graph-replay-batch1024`: the same with 4x the batch (its device time per replay ~4x, its host
  side alike): the other side of a compare whose gap is the device's;
- `cpu-activity-only`: the same replay traced with ProfilerActivity.CPU alone (cuda_runtime
  calls, no kernel): what tests/fixtures/gpu_shapes/cpu-activity-only.pt.trace.json.gz stands for;

    python -m benchmarks.record_gpu_traces --out DIR
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _mlp(torch, width: int, depth: int):
    layers = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).cuda()


def graph_replay(torch, out: Path, batch: int = 256, name: str = "graph-replay", cuda: bool = True) -> Path:
    model = _mlp(torch, 4096, 48).eval().half()
    static = torch.randn(batch, 4096).to("cuda", torch.half)
    with torch.inference_mode():
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(3):
                model(static)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(static)
        torch.cuda.synchronize()
        path = out / f"{name}.pt.trace.json"
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
            for _ in range(3):  # steps (ProfilerStep#N) to cut the window at with cut_trace
                with torch.profiler.record_function("decode_step"):
                    static.copy_(torch.randn_like(static))
                    graph.replay()  # no synchronize: the step's host side ends before its kernels
                prof.step()
        prof.export_chrome_trace(str(path))
    return path


def graph_replay_batch1024(torch, out: Path) -> Path:
    return graph_replay(torch, out, batch=1024, name="graph-replay-batch1024")


def cpu_activity_only(torch, out: Path) -> Path:
    return graph_replay(torch, out, name="cpu-activity-only", cuda=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to record", file=sys.stderr)
        return 4
    args.out.mkdir(parents=True, exist_ok=True)
    status = 0
    for record in (graph_replay, graph_replay_batch1024, cpu_activity_only):
        try:
            path = record(torch, args.out)
            print(f"{record.__name__}: {path} ({path.stat().st_size:,} bytes)")
        except Exception as exc:  # one trace that cannot be made does not stop the others
            print(f"{record.__name__}: failed: {type(exc).__name__}: {str(exc)[:300]}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
