"""What benchmarks.gpu_check runs on a GPU, and the checks it makes of each finished run."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from benchmarks import gpu_checks as C
from gapscope.profilers.phases import MARKED_PHASES

# Short runs: enough steady steps after warm-up and the trace window to compare timers with.
STEPS, WARMUP, TRACE_STEPS = 30, 5, 10
SEED_MATRIX = "seed-4060ti"
# Variant parts that change which kernels an eager step launches (autocast casts, the scaler's checks).
_KERNEL_PARTS = frozenset({"amp-fp16", "amp-bf16", "scaler"})
# Rough seconds per run on one H100 host, start-up and compile included: only for ordering the
# runs (longest first) and for the dry run's estimate; never a measurement.
COST_S = {"eager": 15, "amp": 15, "pageable": 15, "nccl": 35, "compile": 45,
          "reduce-overhead": 60, "max-autotune": 150}


@dataclass(frozen=True)
class Planned:
    id: str
    workload: str
    variant: str
    covers: str
    nproc: int = 0               # 0: an ordinary run; 1: a one-rank torchrun job (NCCL on a GPU)
    eager_of: str | None = None  # the eager run its kernel count is held against (compile variants)
    memory: str | None = "pinned"  # host memory of its H2D copies (DataLoader pin_memory on a GPU)
    capture: bool = False        # a user's loop through gapscope.capture (benchmarks.own_model), not `run`

    @property
    def cost_s(self) -> int:
        for key in ("max-autotune", "reduce-overhead", "compile", "pageable", "amp"):
            if key in self.variant:
                return COST_S[key]
        return COST_S["nccl"] if self.nproc else COST_S["eager"]


def plan() -> list[Planned]:
    """The torch CUDA paths: both workloads eager and under each torch.compile mode and AMP,
    pinned and pageable batches, the GPU-only torch rows of seed-4060ti, and a one-rank NCCL job."""
    runs = []
    for w in ("mlp", "cnn"):
        runs.append(Planned(f"{w}-eager", w, "eager", "eager; pinned DataLoader batches, non_blocking copies"))
        runs.append(Planned(f"{w}-compile", w, "compile", "torch.compile default (Inductor, Triton)",
                            eager_of=f"{w}-eager"))
        runs.append(Planned(f"{w}-reduce-overhead", w, "compile-reduce-overhead",
                            "torch.compile reduce-overhead (CUDA graphs)", eager_of=f"{w}-eager"))
    runs.append(Planned("mlp-max-autotune", "mlp", "compile-max-autotune", "torch.compile max-autotune",
                        eager_of="mlp-eager"))
    runs.append(Planned("mlp-amp-bf16", "mlp", "amp-bf16", "AMP bfloat16 autocast"))
    runs.append(Planned("mlp-pageable", "mlp", "pageable", "pageable batches, non_blocking copies",
                        memory="pageable"))
    runs += seed_rows()
    runs.append(Planned("mlp-nccl-x1", "mlp", "eager", "--nproc 1: one DDP rank under torchrun, NCCL",
                        nproc=1))
    runs.append(Planned("own-model-capture", "own-model", "eager",
                        "gapscope.capture(model=...): an own model's layers, FLOPs and kernels by layer",
                        memory="pageable", capture=True))
    return runs


def seed_rows() -> list[Planned]:
    """seed-4060ti's torch rows that need a GPU (cnn max-autotune and AMP among them)."""
    from gapscope.workloads.matrix import load_matrix
    rows = []
    for row in load_matrix(SEED_MATRIX).rows:
        if row.framework != "torch" or row.needs != "cuda":
            continue
        rows.append(Planned(f"seed:{row.id}", row.workload, row.variant, f"{SEED_MATRIX}: {row.config}",
                            memory=None if "preload" in row.variant else "pinned"))
    return [dataclasses.replace(r, eager_of=_eager_of(r, rows)) if "compile" in r.variant else r
            for r in rows]


def _precision(variant: str) -> frozenset:
    return frozenset(part for part in variant.split(",") if part in _KERNEL_PARTS)


def _eager_of(compiled: Planned, seeds: list[Planned]) -> str | None:
    """The eager run that launches the kernels a compiled seed row would without Inductor: same
    workload and AMP settings (autocast adds a cast kernel per op), else none to compare with."""
    for seed in seeds:
        if ("compile" not in seed.variant and seed.workload == compiled.workload
                and _precision(seed.variant) == _precision(compiled.variant)):
            return seed.id
    return f"{compiled.workload}-eager" if not _precision(compiled.variant) else None


def settings_of(planned: Planned):
    from gapscope.workloads.settings import RunSettings
    return RunSettings(workload=planned.workload, framework="torch", variant=planned.variant,
                       steps=STEPS, warmup_steps=WARMUP, trace_steps=TRACE_STEPS, device="cuda",
                       nproc=max(planned.nproc, 1))


def analysed_dir(run_dir: Path, planned: Planned) -> Path:
    """A job's checks read its one rank's run directory."""
    if planned.nproc:
        from gapscope.profilers.job_dir import rank_dir
        return rank_dir(run_dir, 0)
    return run_dir


def evaluate(run_dir: Path, planned: Planned, cuda: bool):
    """(checks, gpu_checks.FusionFigures or None) of one complete run, each check from gapscope's
    analyzers."""
    from gapscope.analysis.results.breakdown import breakdown
    from gapscope.analysis.measures.kernels import find_work
    from gapscope.analysis.measures.reliability import busy_reason
    from gapscope.analysis.measures.resources import resource_stats
    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.tensorboard.xspace_export import write_xspace
    run = load_run(analysed_dir(run_dir, planned))
    checks = []
    if planned.nproc:
        checks.append(_backend(run.manifest, "nccl" if cuda else "gloo"))
    result = breakdown(run).to_json_dict()
    checks.append(C.phases_add_up(run.rows or [], run.warmup_steps, result))
    if run.settings.get("compile_mode") or run.settings.get("compile_backend"):
        checks.append(C.compile_recorded(result))
    if run.trace is None:
        return checks + [C.Check("trace", C.FAIL, "the run wrote no torch trace")], None
    timeline = run.timeline
    trace_steps = [(timeline.step_number(i), s.dur_us / 1000.0) for i, s in enumerate(timeline.steps)]
    checks.append(C.timers_agree(run.rows or [], trace_steps, "CUDA-event" if cuda else "host-timer",
                                 busy_reason(run.manifest)))
    names = {e.name for e in run.trace.events if e.name.startswith("gapscope/")}
    inference = bool(run.settings.get("inference"))
    checks.append(C.phase_ranges(names, MARKED_PHASES[:2] if inference else MARKED_PHASES))
    if not planned.capture:  # a capture samples no NVML: the user's process is not gapscope's
        checks.append(C.nvml_sampled(resource_stats(run.resources)))
    work = find_work(run.trace, timeline, run.hlo)
    work.steps = len(timeline.steps)
    checks.append(C.transfers_in_data_load(work, planned.memory))
    if cuda and planned.variant == "eager" and not planned.nproc:
        checks.append(C.framework_fusion(work, planned.workload))
    if planned.variant == "eager" and not planned.nproc and not inference and run.manifest.get("layers"):
        from gapscope.analysis.results.layers import layer_breakdown
        checks.append(C.layers_add_up(layer_breakdown(run).to_json_dict(), breakdown(run, "trace").to_json_dict(),
                                      [layer["name"] for layer in run.manifest["layers"]]))
    if cuda and not planned.nproc and not inference and run.manifest.get("layers"):
        from gapscope.analysis.measures.layer_flops import layer_params
        from gapscope.analysis.results.layers import layer_breakdown
        # Layers with weights: a flatten is a view and launches no kernel of its own.
        checks.append(C.kernels_by_layer(layer_breakdown(run).kernels, work.kernels(), work.steps,
                                         [layer["name"] for layer in run.manifest["layers"]
                                          if layer_params(layer) > 0]))
    if planned.capture and cuda:
        from gapscope.analysis.results.layers import layer_breakdown
        checks.append(C.own_model_flops(run.manifest["layers"], layer_breakdown(run).kernels))
    if not planned.nproc:
        checks.append(C.memory_recorded(result, cuda))
    checks.append(C.xprof_opens(write_xspace(run)))
    return checks, C.FusionFigures.of(work)


def _backend(manifest: dict, expected: str) -> C.Check:
    backend = manifest.get("backend")
    status = C.PASS if backend == expected and manifest.get("world_size") == 1 else C.FAIL
    return C.Check("process group", status, f"backend {backend}, world size {manifest.get('world_size')} "
                   f"(expected {expected}, 1)")


def capture_command(out_dir: Path, device: str, python: str) -> list[str]:
    """The own model's loop under gapscope.capture(model=...), as long as the other runs."""
    return [python, "-m", "benchmarks.own_model", "--out", str(out_dir), "--device", device,
            "--steps", str(STEPS), "--trace-steps", str(STEPS - TRACE_STEPS), str(STEPS)]


def ncu_command(phase: str, out_dir: Path, python: str) -> list[str]:
    """Nsight Compute profiles the first kernel launched inside the phase's NVTX range of a
    short preload run (preload: data_load launches kernels too, its indexing on the device).
    regex, since the range name itself holds the '/' that separates nested ranges in ncu's syntax."""
    return ["ncu", "--target-processes", "all", "--nvtx", "--nvtx-include",
            f"regex:gapscope@gapscope.{phase}/", "--launch-count", "1", "--section", "LaunchStats",
            python, "-m", "gapscope.cli", "run", "mlp", "--framework", "torch", "--variant", "preload",
            "--steps", "12", "--warmup", "2", "--no-trace", "--device", "cuda", "-q",
            "--out", str(out_dir / f"ncu-{phase}")]
