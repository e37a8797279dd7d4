"""The standard PyTorch training loop (DataLoader, forward, loss, zero_grad, backward, step), marked by phase."""
from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from profilers.marks import PhaseMarks
from profilers.timers import CudaEventClock, HostClock, StepTimer
from profilers.torch_session import torch_profiler
from profilers.trace_window import TraceWindow
from workloads.data import synthetic_classification
from workloads.devices import torch_device
from workloads.settings import RunSettings
from workloads.spec import WorkloadSpec


def run_torch(spec: WorkloadSpec, settings: RunSettings, run_dir: Path) -> tuple[list[dict], dict]:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(spec.seed)
    device = torch_device(settings.device)
    cuda = device.type == "cuda"
    x, y = synthetic_classification(spec.batch_size * settings.steps, spec.input_shape,
                                    spec.num_classes, spec.seed)
    loader = DataLoader(TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                        batch_size=spec.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(spec.seed), pin_memory=cuda)
    model = spec.builders().build_torch(spec).to(device)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=spec.learning_rate)
    loss_fn = torch.nn.CrossEntropyLoss()
    marks = PhaseMarks(StepTimer(CudaEventClock() if cuda else HostClock()))
    window = TraceWindow.after_warmup(settings.warmup_steps, settings.trace_steps, settings.steps)
    profiler = torch_profiler(run_dir, window, cuda) if settings.trace else None

    with profiler or nullcontext():
        batches = iter(loader)
        for _ in range(settings.steps):
            marks.begin_step()
            with marks.phase("data_load"):
                inputs, targets = next(batches)
                inputs = inputs.to(device, non_blocking=True)
                targets = targets.to(device, non_blocking=True)
            with marks.phase("optimizer"):
                optimizer.zero_grad(set_to_none=True)
            with marks.phase("forward"):
                loss = loss_fn(model(inputs), targets)
            with marks.phase("backward"):
                loss.backward()
            with marks.phase("optimizer"):
                optimizer.step()
            marks.end_step(loss)
            if profiler is not None:
                profiler.step()

    rows = marks.timer.rows()
    traced = set(range(window.first - 1, window.last + 1)) if profiler else set()
    for row in rows:
        row["warmup"] = row["step"] < settings.warmup_steps
        row["traced"] = row["step"] in traced
    parameters = sum(p.numel() for p in model.parameters())
    return rows, {"device": _device_name(device), "parameters": parameters,
                  "trace_window": [window.first, window.last] if profiler else None}


def _device_name(device) -> str:
    import torch
    from profilers.environment import cpu_name
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
