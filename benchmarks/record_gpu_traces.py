"""Records on a CUDA device the real torch.profiler traces that the serving and no-kernel fixtures
of tests/fixtures/gpu_shapes/ are, the way other projects' traces were made:

- `graph-replay`: inference by CUDA graph replay (a serving engine's decode): the host queues a
  graph of ~100 kernels in one cudaGraphLaunch and its window ends while they still run;
- `host-only`: a training step on the GPU traced with ProfilerActivity.CPU alone (the trace
  names the GPU in deviceProperties and holds no kernel);
- `range-profiler` (not among the fixtures): the same step under CUPTI's range profiler; on the
  H100 with torch 2.11 it recorded the kernels as well, so it is no trace without kernels.

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


def graph_replay(torch, out: Path) -> Path:
    model = _mlp(torch, 4096, 48).eval().half()
    static = torch.randn(256, 4096, device="cuda", dtype=torch.half)
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
        path = out / "graph-replay.pt.trace.json"
        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
            for _ in range(3):  # steps (ProfilerStep#N) to cut the window at with cut_trace
                with torch.profiler.record_function("decode_step"):
                    static.copy_(torch.randn_like(static))
                    graph.replay()  # no synchronize: the step's host side ends before its kernels
                prof.step()
        prof.export_chrome_trace(str(path))
    return path


def _train_step(torch, model, optimizer):
    inputs = torch.randn(512, 1024, device="cuda")
    loss = model(inputs).float().pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()


def host_only(torch, out: Path) -> Path:
    model = _mlp(torch, 1024, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(3):
        _train_step(torch, model, optimizer)
    torch.cuda.synchronize()
    path = out / "host-only.pt.trace.json"
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            _train_step(torch, model, optimizer)
            prof.step()
    prof.export_chrome_trace(str(path))
    return path


def range_profiler(torch, out: Path) -> Path:
    model = _mlp(torch, 1024, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    _train_step(torch, model, optimizer)
    torch.cuda.synchronize()
    path = out / "range-profiler.pt.trace.json"
    config = torch._C._profiler._ExperimentalConfig(
        profiler_metrics=["kineto__cuda_core_flops", "sm__inst_executed.sum"],
        profiler_measure_per_kernel=False)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA],
                                experimental_config=config) as prof:
        for _ in range(3):
            _train_step(torch, model, optimizer)
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))
    return path


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
    for record in (graph_replay, host_only):
        try:
            path = record(torch, args.out)
            print(f"{record.__name__}: {path} ({path.stat().st_size:,} bytes)")
        except Exception as exc:  # one trace that cannot be made does not stop the others
            print(f"{record.__name__}: failed: {type(exc).__name__}: {str(exc)[:300]}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
