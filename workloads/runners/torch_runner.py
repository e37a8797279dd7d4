"""The standard PyTorch training loop (DataLoader, forward, loss, zero_grad, backward, step),
marked by phase, with the execution variants of workloads.variants applied."""
from __future__ import annotations

import os

from contextlib import nullcontext
from pathlib import Path

from gapscope.workloads.runners.dynamo_records import DynamoRecorder
from gapscope.profilers.environment import torch_device_name
from gapscope.profilers.marks import PhaseMarks
from gapscope.profilers.run_dir import mark_rows
from gapscope.profilers.timers import CudaEventClock, HostClock, StepTimer, resident_mb
from gapscope.profilers.torch_session import torch_profiler
from gapscope.profilers.trace_window import TraceWindow
from gapscope.workloads.datasets import dataset_for
from gapscope.workloads.models.params import torch_parameters
from gapscope.workloads.devices import torch_device
from gapscope.workloads.settings import RunSettings
from gapscope.workloads.spec import WorkloadSpec
from gapscope.workloads.shards import rank_shard
from gapscope.workloads.runners.torch_pipelines import make_batches
from gapscope.workloads.runners.layer_ranges import LayerRanges
from gapscope.workloads.runners.torchscript import LazyTorchScript


def run_torch(spec: WorkloadSpec, settings: RunSettings, run_dir: Path) -> tuple[list[dict], dict]:
    import torch

    after_import = resident_mb()  # the framework's footprint, before the model and data
    torch.manual_seed(spec.seed)
    _apply_global_settings(settings)
    device = torch_device(settings.device)
    pipeline = settings.pipeline or "tensor-dataset"
    group = _process_group()
    if group is None:
        x, y = dataset_for(spec, settings, raw=pipeline == "transforms")
    else:
        x, y = rank_shard(spec, settings, *group, raw=pipeline == "transforms")
    batches = make_batches(pipeline, x, y, batch_size=spec.batch_size,
                           num_workers=settings.num_workers, drop_last=settings.drop_last,
                           device=device, seed=spec.seed, pageable=settings.pageable)
    steps = settings.epochs * len(batches) if settings.epochs else settings.steps
    model = spec.builders().build_torch(spec).to(device)
    script = LazyTorchScript(model) if settings.torchscript else None
    # DDP all-reduces the gradients from backward's hooks; the optimizer steps the model itself.
    trained = model if group is None else _ddp(model, device)
    forward = script if script is not None else _compiled(trained, settings)
    loss_fn = _loss(spec)
    optimizer = _optimizer(spec, model)
    autocast = (torch.autocast(device.type, dtype=getattr(torch, settings.amp_dtype))
                if settings.amp_dtype else nullcontext())
    scaler = torch.amp.GradScaler(device.type) if settings.grad_scaler else None
    cuda = device.type == "cuda"
    marks = PhaseMarks(StepTimer(CudaEventClock() if cuda else HostClock()))
    window = TraceWindow.at_end(settings.warmup_steps, settings.trace_steps, steps)
    profiler = torch_profiler(run_dir, window, cuda) if settings.trace else None
    layer_ranges = _layer_ranges(spec, model, loss_fn) if profiler and forward is trained else None
    step_epochs = []

    if settings.inference:
        model.eval()
    # What Dynamo compiled, broke and recompiled, step by step, into compile.json.
    recorder = DynamoRecorder(run_dir) if forward is not trained and script is None else None
    with recorder or nullcontext(), profiler or nullcontext(), \
            (torch.inference_mode() if settings.inference else nullcontext()):
        epoch, epoch_batches = 0, iter(batches)
        for step in range(steps):
            if layer_ranges is not None and step == window.first:
                layer_ranges.attach()
            marks.begin_step()
            with marks.phase("data_load"):
                batch = next(epoch_batches, None)
                if batch is None:  # epoch boundary: the new iterator's start-up is data loading too
                    epoch, epoch_batches = epoch + 1, iter(batches)
                    batch = next(epoch_batches)
                inputs = batch[0].to(device, non_blocking=True)
                targets = batch[1].to(device, non_blocking=True)
            if settings.inference:
                with marks.phase("forward"), autocast:
                    loss = loss_fn(forward(inputs), targets)
            else:
                loss = _train_step(marks, forward, loss_fn, optimizer, scaler, autocast,
                                   inputs, targets)
            marks.end_step(loss)
            if recorder is not None:
                recorder.end_step(step)
            step_epochs.append(epoch)
            if layer_ranges is not None and step == window.last:
                layer_ranges.detach()
            if profiler is not None:
                profiler.step()

    rows = marks.timer.rows()
    for row, epoch in zip(rows, step_epochs):
        row["epoch"] = epoch
    # The profiler's own warm-up step, just before the window, also ran under it.
    mark_rows(rows, settings.warmup_steps,
              range(window.first - 1, window.last + 1) if profiler else None)
    return rows, {"device": torch_device_name(device), "parameters": torch_parameters(model),
                  "rss_after_import_mb": after_import,
                  "steps_per_epoch": len(batches), "steps_run": steps,
                  "trace_window": [window.first, window.last] if profiler else None,
                  **(script.facts if script is not None else {}),
                  **({"ddp": _ddp_facts(trained)} if group is not None else {})}


def _layer_ranges(spec: WorkloadSpec, model, loss_fn) -> LayerRanges | None:
    """Ranges around the spec's named layers, for eager torch only: a compiled or scripted
    forward would trace the hooks into its graph."""
    layers = spec.layers()
    if layers is None:
        return None
    modules = {layer.name: getattr(model, layer.name) for layer in layers if layer.kind != "loss"}
    return LayerRanges({**modules, "loss": loss_fn})


def _process_group() -> tuple[int, int] | None:
    """(rank, world size) when this process is a rank of a distributed run (execute_rank)."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.get_rank(), dist.get_world_size()


def _ddp(model, device):
    import torch
    from torch.nn.parallel import DistributedDataParallel
    # execute_rank made this rank's GPU the current one: "cuda" is it.
    ids = [torch.cuda.current_device()] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids)


# DDP's own figures worth keeping: the bytes each step all-reduces, in which buckets (the
# trace has no sizes: shapes are not recorded), and its sampled comm / overlap times (ns).
_DDP_FACTS = ("bucket_sizes", "rebuilt_bucket_sizes", "total_parameter_size_bytes",
              "bucket_cap_bytes", "num_buckets_reduced", "avg_backward_comm_time",
              "avg_backward_compute_comm_overlap_time", "avg_backward_compute_time")


def _ddp_facts(ddp) -> dict | None:
    """DDP's logging data (a private torch API: absent or changed, nothing is recorded)."""
    import re
    try:
        data = ddp._get_ddp_logging_data()
        facts = {}
        for key in _DDP_FACTS:
            value = data.get(key)
            if isinstance(value, str):  # bucket sizes come as "2102824, 320"
                value = [int(v) for v in re.findall(r"\d+", value)]
            if value is not None:
                facts[key] = value
        return facts
    except Exception:  # noqa: BLE001 - only a figure is lost, never the run
        return None


def _train_step(marks, forward, loss_fn, optimizer, scaler, autocast, inputs, targets):
    with marks.phase("optimizer"):
        optimizer.zero_grad(set_to_none=True)
    with marks.phase("forward"), autocast:
        loss = loss_fn(forward(inputs), targets)
    with marks.phase("backward"):
        (scaler.scale(loss) if scaler else loss).backward()
    with marks.phase("optimizer"):
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
    return loss


def _apply_global_settings(settings: RunSettings) -> None:
    import torch
    if settings.matmul_precision:
        torch.set_float32_matmul_precision(settings.matmul_precision)
    if settings.dynamo_cache_limit is not None:
        import torch._dynamo
        torch._dynamo.config.cache_size_limit = settings.dynamo_cache_limit


def _compiled(model, settings: RunSettings):
    """torch.compile of the model only, as the blog did; compilation happens on the first call,
    so it lands in the warm-up steps and is reported as compile time."""
    import torch
    if settings.compile_backend:
        return torch.compile(model, backend=settings.compile_backend)
    if settings.compile_mode:
        _itemise_cpu_kernels()
        return torch.compile(model, mode=settings.compile_mode)
    return model


def _itemise_cpu_kernels() -> None:
    """Inductor's CPU kernels each as an op of the trace (a RecordFunction around each, which
    costs a flag test while no profiler listens), so that a compiled graph's kernels can be
    placed in layers; a user's TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=0 keeps it off."""
    if os.environ.get("TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE") == "0":
        return
    import torch._inductor.config as inductor_config
    inductor_config.cpp.enable_kernel_profile = True


def _loss(spec: WorkloadSpec):
    import torch
    return torch.nn.MSELoss() if spec.loss == "mse" else torch.nn.CrossEntropyLoss()


def _optimizer(spec: WorkloadSpec, model):
    import torch
    optimizers = {"rmsprop": torch.optim.RMSprop, "sgd": torch.optim.SGD}
    return optimizers[spec.optimizer](model.parameters(), lr=spec.learning_rate)

