"""The checks of benchmarks.gpu_check, each over one finished run (or job) through gapscope's own analyzers."""
from __future__ import annotations

import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from gapscope.profilers.phases import MARKED_PHASES, torch_range_name

PASS, FAIL, SKIP = "pass", "fail", "skip"
# A figure that other processes' load can distort, read on a busy machine: neither broken nor fine.
NOT_JUDGED = "not judged"
STATUSES = (PASS, FAIL, NOT_JUDGED, SKIP)
# Timers and trace read the same steps; beyond this they measure different things.
AGREE_REL, AGREE_ABS_MS = 0.10, 0.05
# Rounding of the written figures (1e-6 ms) and float sums leave less than this.
SUM_TOL_MS = 1e-3


@dataclass
class Check:
    name: str
    status: str   # pass | fail | skip
    detail: str   # the figures behind the verdict, or why it failed or was skipped

    def to_json_dict(self) -> dict:
        return asdict(self)


def completed(status: str, error: str | None) -> Check:
    if status == "complete":
        return Check("completed", PASS, "manifest status complete")
    return Check("completed", FAIL, f"status {status}: {error or 'no error recorded'}")


def phases_add_up(rows: list[dict], warmup: int, breakdown_json: dict) -> Check:
    """Every steady step's four timed phases fit inside its step (other >= 0), and the
    breakdown's five phases add up to its step mean."""
    steady = [r for r in rows if int(r["step"]) >= warmup]
    over = [r for r in steady
            if sum(r.get(f"{p}_ms") or 0.0 for p in MARKED_PHASES) > r["step_ms"] + SUM_TOL_MS]
    mean = breakdown_json["step_ms"]["mean"]
    phases = {p: v["ms"] for p, v in breakdown_json["phases"].items()}
    total = sum(phases.values())
    negative = {p: v for p, v in phases.items() if v < -SUM_TOL_MS}
    problems = []
    if over:
        r = over[0]
        problems.append(f"{len(over)} of {len(steady)} steps' timed phases exceed the step "
                        f"(step {r['step']}: {sum(r.get(f'{p}_ms') or 0.0 for p in MARKED_PHASES):.3f} "
                        f"> {r['step_ms']:.3f} ms)")
    if abs(total - mean) > SUM_TOL_MS:
        problems.append(f"five phases sum to {total:.6f} ms, step mean {mean:.6f} ms")
    if negative:
        problems.append("negative phases: " + ", ".join(f"{p} {v:.3f} ms" for p, v in negative.items()))
    if not steady:
        problems.append("no steady steps")
    if problems:
        return Check("phases add up", FAIL, "; ".join(problems))
    return Check("phases add up", PASS, f"{len(steady)} steady steps within their step; five phases "
                 f"sum to {total:.4f} ms = step mean {mean:.4f} ms")


def timers_agree(rows: list[dict], trace_steps: list[tuple[int, float]], clock: str,
                 busy: str | None = None) -> Check:
    """The step timers (CUDA events on a GPU) against the host clock of the trace's step events
    over the same steps: means within max(10 %, 0.05 ms). Per step they may differ on a GPU,
    where the host runs ahead of the device; over the window they cannot.

    `busy` names the load when other processes took the cores during the run. A preempted
    thread between a timer's reading and the profiler's step boundary puts the wait into one
    clock only (seen here: two spinning neighbours on 2 cores broke the 10 %), so a disagreement
    on a busy machine says nothing about the timers: it is not judged, never failed."""
    name = f"{clock} step times agree with host"
    by_step = {int(r["step"]): r["step_ms"] for r in rows}
    pairs = [(by_step[n], ms) for n, ms in trace_steps if n in by_step]
    if not pairs:
        return Check(name, FAIL, "no traced step has a timer row (step numbers do not match)")
    timers = sum(t for t, _ in pairs) / len(pairs)
    host = sum(h for _, h in pairs) / len(pairs)
    allowed = max(AGREE_REL * host, AGREE_ABS_MS)
    detail = (f"{len(pairs)} traced steps: {clock} {timers:.3f} ms, host trace {host:.3f} ms "
              f"(difference {timers - host:+.3f} ms, allowed ±{allowed:.3f})")
    if abs(timers - host) <= allowed:
        return Check(name, PASS, detail)
    if busy:
        return Check(name, NOT_JUDGED, f"{detail}; not judged: {busy}")
    return Check(name, FAIL, detail)


def phase_ranges(trace_names: set[str], phases=MARKED_PHASES) -> Check:
    """The record_function range of each phase (opened by the same PhaseMarks call as its NVTX
    range, under the same name) in the torch.profiler trace."""
    missing = [p for p in phases if torch_range_name(p) not in trace_names]
    if missing:
        return Check("phase ranges in trace", FAIL, "torch.profiler recorded no range for "
                     + ", ".join(torch_range_name(p) for p in missing))
    return Check("phase ranges in trace", PASS, "torch.profiler user annotations "
                 + ", ".join(torch_range_name(p) for p in phases))


def nvml_sampled(stats) -> Check:
    """`stats`: analysis.measures.resources.ResourceStats of the run's resources.csv."""
    figures = {"utilisation %": stats.gpu_util_percent_mean, "memory MiB": stats.gpu_mem_mib_max,
               "power W": stats.gpu_power_w_mean}
    missing = [k for k, v in figures.items() if v is None]
    if stats.samples == 0 or missing:
        return Check("NVML sampled", FAIL, f"{stats.samples} samples; no GPU "
                     + (", ".join(missing) or "figures") + f" ({stats.note or 'no NVML'})")
    if not (stats.gpu_mem_mib_max > 0 and stats.gpu_power_w_mean > 0):
        return Check("NVML sampled", FAIL, f"memory {stats.gpu_mem_mib_max} MiB, power "
                     f"{stats.gpu_power_w_mean} W: a GPU in use reads above 0")
    return Check("NVML sampled", PASS, f"{stats.samples} samples: utilisation "
                 f"{stats.gpu_util_percent_mean:.1f} % mean, memory {stats.gpu_mem_mib_max:.0f} MiB "
                 f"max, power {stats.gpu_power_w_mean:.1f} W mean")


def transfers_in_data_load(work, expect_memory: str | None) -> Check:
    """Every host-to-device copy of the traced steps is attributed (through its launching call)
    to data_load, in the host memory the pipeline promises; device-to-host copies are listed
    with the phase that launched them (the loop's own are the GradScaler's inf check)."""
    from gapscope.analysis.measures.kernels import DEVICE_KERNELS
    from gapscope.analysis.events.trace import MEMCPY
    from gapscope.analysis.measures.transfers import direction, host_memory
    name = "H2D/D2H attributed"
    if work.source != DEVICE_KERNELS:
        return Check(name, FAIL, "no device events in the trace: CPU-only run or no CUPTI")
    copies = [w for w in work.transfers() if w.kind == MEMCPY]
    h2d = [c for c in copies if direction(c.name) == "H2D"]
    d2h = [c for c in copies if direction(c.name) == "D2H"]
    if not h2d:
        return Check(name, FAIL, "no host-to-device copy in the traced steps: the batch copy was not seen")
    astray = sorted({c.phase for c in h2d if c.phase != "data_load"})
    memory = sorted({host_memory(c.name) for c in h2d})
    problems = []
    if astray:
        problems.append(f"{sum(c.phase != 'data_load' for c in h2d)} of {len(h2d)} H2D copies in "
                        + ", ".join(astray))
    if expect_memory and memory != [expect_memory]:
        problems.append(f"H2D host memory {', '.join(memory)}, expected {expect_memory}")
    d2h_phases = sorted({c.phase for c in d2h})
    unplaced = [c for c in d2h if c.phase not in MARKED_PHASES + ("other",)]
    if unplaced:
        problems.append(f"{len(unplaced)} D2H copies with no launching call ({unplaced[0].phase})")
    if problems:
        return Check(name, FAIL, "; ".join(problems))
    steps = max(work.steps, 1)
    d2h_text = f"D2H {len(d2h) / steps:g}/step in {', '.join(d2h_phases)}" if d2h else "no D2H"
    return Check(name, PASS, f"H2D {len(h2d) / steps:g}/step ({', '.join(memory)}) all in "
                 f"data_load; {d2h_text}")


# torch.compile compiles the model's forward and backward; the optimizer step stays eager.
_COMPILED_PHASES = ("forward", "backward")


@dataclass(frozen=True)
class FusionFigures:
    """A run's kernels per step, and those of forward and backward (where a compiled model's
    graph runs) split into Inductor's Triton kernels and the rest."""

    per_step: float
    fused_share: float | None
    model_per_step: float        # forward + backward
    model_fused_per_step: float  # of them, Triton kernels
    stray_fused_per_step: float  # Triton kernels in no phase: attribution lost them
    top_triton: str | None       # the Triton kernel with the most busy time

    @classmethod
    def of(cls, work) -> "FusionFigures":
        """`work`: analysis.measures.kernels.Work of the traced steps."""
        from gapscope.analysis.measures.fusion_table import COMPILER, one_op_kernel
        kernels = work.kernels()
        steps = max(work.steps, 1)
        model = [k for k in kernels if k.phase in _COMPILED_PHASES]

        # Inductor's kernels only: eager's cuBLASLt epilogues are fused too, by no compiler.
        def fused_by_compiler(k):
            return k.fusion is not None and k.fusion.kind.by == COMPILER

        # Its kernels of one op (triton_poi_fused_relu_0) are generated too, though no fusion.
        def compiled(k):
            return fused_by_compiler(k) or one_op_kernel(k.name)
        fused = [k for k in kernels if compiled(k)]
        busy = {}
        for k in fused:
            busy[k.name] = busy.get(k.name, 0.0) + k.busy_us
        return cls(per_step=len(kernels) / steps,
                   fused_share=sum(map(fused_by_compiler, kernels)) / len(kernels) if kernels else None,
                   model_per_step=len(model) / steps,
                   model_fused_per_step=sum(compiled(k) for k in model) / steps,
                   stray_fused_per_step=sum(k.phase not in MARKED_PHASES for k in fused) / steps,
                   top_triton=max(busy, key=lambda n: (busy[n], n)) if busy else None)


def triton_fusion(compiled: FusionFigures, eager: FusionFigures | None) -> Check:
    """A torch.compile run against the same workload eager: Inductor's Triton kernels must show
    in forward and backward and take the place of some of eager's kernels there. The total may
    still grow (on an H200 Inductor split the MLP's cuBLAS-fused bias and ReLU into an mm and a
    Triton kernel, and bias gradients into two-pass reductions), so it is a figure, not a test."""
    name = "Triton fused kernels"
    if eager is None:
        return Check(name, SKIP, "no eager run of the workload to compare with")
    others = compiled.model_per_step - compiled.model_fused_per_step
    problems = []
    if not compiled.model_fused_per_step:
        problems.append("no Triton kernel in forward or backward")
    elif others >= eager.model_per_step:
        problems.append(f"{others:g} non-Triton kernels/step left in forward and backward, not fewer "
                        f"than eager's {eager.model_per_step:g}: Inductor replaced none")
    if compiled.stray_fused_per_step:
        problems.append(f"{compiled.stray_fused_per_step:g} Triton kernels/step in no phase")
    detail = (f"forward and backward {compiled.model_fused_per_step:g} Triton + {others:g} other "
              f"kernels/step against eager's {eager.model_per_step:g}; all phases "
              f"{compiled.per_step:g} against {eager.per_step:g}; fused share "
              f"{(compiled.fused_share or 0) * 100:.0f} %; top Triton kernel {compiled.top_triton or 'none'}")
    return Check(name, FAIL if problems else PASS, "; ".join(problems) + (": " if problems else "") + detail)


# Eager workloads whose forward must hold a cuBLASLt epilogue kernel on CUDA: the mlp's
# aten::addmm (seen on an H200: one cublasLt::epilogue::impl::globalKernel per step).
EPILOGUE_WORKLOADS = frozenset({"mlp"})


def framework_fusion(work, workload: str) -> Check:
    """An eager run's fused kernels that no compiler made (analysis.measures.fusion_table):
    cuBLASLt epilogues and cuDNN fused convolutions, each counted as fused and placed in a
    phase. The mlp must show its epilogue in forward; elsewhere the counts are figures (the
    eager cnn adds its convolutions' bias in cuDNN's own kernels, fused or not by its choice)."""
    from gapscope.analysis.measures.fusion_table import FRAMEWORK
    name = "framework fused kernels"
    found = [k for k in work.kernels() if k.fusion is not None and k.fusion.kind.by == FRAMEWORK]
    steps = max(work.steps, 1)
    by_source = {}
    for k in found:
        key = (k.fusion.kind.source.split(" (")[0], k.phase)
        by_source[key] = by_source.get(key, 0) + 1
    figures = ", ".join(f"{source} {n / steps:g}/step in {phase}"
                        for (source, phase), n in sorted(by_source.items())) or "none"
    problems = []
    stray = [k for k in found if k.phase not in MARKED_PHASES]
    if stray:
        problems.append(f"{len(stray) / steps:g} fused kernels/step in no phase ({stray[0].phase})")
    epilogues = [k for k in found if k.phase == "forward" and "cuBLASLt" in k.fusion.kind.source]
    if workload in EPILOGUE_WORKLOADS and not epilogues:
        problems.append(f"no cuBLASLt epilogue kernel counted as fused in {workload}'s forward")
    detail = f"{figures}; {len(found) / steps:g} of {len(work.kernels()) / steps:g} kernels/step fused"
    return Check(name, FAIL if problems else PASS, "; ".join(problems + [detail]))


def compile_recorded(breakdown_json: dict) -> Check:
    """A torch.compile run (on CUDA: Triton kernels) kept Dynamo's records: compile time by stage
    that, with the unattributed rest, is the measured warm-up excess; the graphs; and the
    graph-break and recompile lists (empty lists are a record too)."""
    name = "compile stages and breaks"
    why = breakdown_json.get("compile")
    if not why:
        return Check(name, FAIL, "no compile record (compile.json missing or unread)")
    stages = why.get("stages") or {}
    problems = [f"{s} {stages.get(s)} ms" for s in ("dynamo", "aot_autograd") if not (stages.get(s) or 0) > 0]
    if not why.get("graphs"):
        problems.append("no compiled graph recorded")
    if not all(isinstance(why.get(k), list) for k in ("graph_breaks", "recompiles")):
        problems.append("graph_breaks/recompiles lists missing")
    measured, rest = why.get("measured_ms"), why.get("unattributed_ms")
    if measured is not None and rest is not None and abs(sum(stages.values()) + rest - measured) > SUM_TOL_MS:
        problems.append(f"stages + unattributed {sum(stages.values()) + rest:.3f} ms != measured {measured:.3f} ms")
    share = f"; stages {sum(stages.values()) / measured:.0%} of the measured compile" if measured else ""
    detail = f"{why.get('line')}{share}; not seen: {' | '.join(why.get('unseen') or []) or 'nothing'}"
    return Check(name, FAIL if problems else PASS, "; ".join(problems) + (": " if problems else "") + detail)


def xprof_opens(xplane: Path | None) -> Check:
    name = "xplane opens in XProf"
    if xplane is None:
        return Check(name, FAIL, "no .xplane.pb was written (the run has no torch trace)")
    try:
        from xprof.convert.raw_to_tool_data import xspace_to_tool_data
    except ImportError as exc:
        missing = getattr(exc, "name", None) or "xprof"
        return Check(name, SKIP, "skipped: xprof not installed" if missing.startswith("xprof")
                     else f"skipped: xprof's converter cannot be imported ({missing} missing)")
    try:
        data, _ = xspace_to_tool_data([str(xplane)], "trace_viewer", {})
    except Exception as exc:  # noqa: BLE001 - the converter's failure is the finding
        return Check(name, FAIL, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
    text = data.decode() if isinstance(data, bytes) else str(data or "")
    if "gapscope/" not in text:
        return Check(name, FAIL, f"trace_viewer returned {len(text)} characters without the phase line")
    return Check(name, PASS, f"trace_viewer: {len(text):,} characters with the gapscope phase line "
                 f"({xplane.name})")


def ncu_nvtx(phase: str, output: str | None, returncode: int | None) -> Check:
    """Reads what `ncu --nvtx --nvtx-include <the phase's range>` printed: a profiled kernel
    proves the NVTX range was pushed around device work."""
    name = f"NVTX {torch_range_name(phase)} (ncu)"
    if output is None:
        return Check(name, SKIP, "skipped: ncu not on PATH")
    kernels = re.findall(r'==PROF== Profiling "([^"]+)"', output)
    if kernels:
        return Check(name, PASS, f"ncu profiled {kernels[0]} inside the range")
    errors = [line for line in output.splitlines() if "==ERROR==" in line or "==WARNING==" in line]
    return Check(name, FAIL, (errors[0].strip() if errors else f"ncu exited {returncode}, no kernel "
                              "profiled in the range"))


def ncu_available() -> str | None:
    return shutil.which("ncu")


def layers_add_up(layers_json: dict, traced_json: dict, names: list[str]) -> Check:
    """An eager torch run's layers (the runner's layer ranges, backward by sequence number): each
    named layer has forward and backward time, and layers plus the time outside them are the
    phase as the trace breakdown has it (within 5 %), computed apart from the layer table."""
    name = "layers add up"
    found = {r["name"]: r for r in layers_json.get("layers", [])}
    if not found:
        return Check(name, FAIL, "; ".join(layers_json.get("notes") or ["no layer in the trace"]))
    problems = [f"{n} has no {p}" for n in names if n != "loss" for p in ("forward", "backward")
                if not (found.get(n, {}).get(f"{p}_ms") or 0) > 0]
    sums = []
    for phase in ("forward", "backward"):
        inside = sum(r[f"{phase}_ms"] for r in found.values()) + layers_json["outside_ms"][phase]
        traced = traced_json["phases"][phase]["ms"]
        sums.append(f"{phase} {inside:.3f} of {traced:.3f} ms")
        if traced <= 0 or abs(inside - traced) > 0.05 * traced:
            problems.append(f"{phase}: layers and outside {inside:.3f} ms, traced phase {traced:.3f} ms")
    detail = f"{len(found)} layers; " + ", ".join(sums)
    return Check(name, FAIL if problems else PASS, "; ".join(problems) + (": " if problems else "") + detail)


def kernels_by_layer(kernels_json: dict | None, work_kernels: list, steps: int, names: list[str]) -> Check:
    """The device kernels of forward and backward, placed by the op that launched them: each
    layer with weights has a kernel or is among a mixed kernel's layers, and the table's groups
    hold every kernel of the two phases (their busy time, summed apart from the table)."""
    name = "kernels by layer"
    if not kernels_json:
        return Check(name, FAIL, "no kernel table for a GPU run with layers")
    rows = {r["name"]: r for r in kernels_json["layers"]}
    mixed = {n for p in ("forward", "backward") for fits in kernels_json["mixed"][p]["fits"].values()
             for n in fits}
    problems = [f"{n} has no kernel" for n in names if n != "loss" and n not in mixed
                and not any(rows.get(n, {}).get(p, {}).get("kernels") for p in ("forward", "backward"))]
    sums = []
    for phase in ("forward", "backward"):
        apart = sum(w.busy_us for w in work_kernels if w.phase == phase) / 1000.0 / max(steps, 1)
        table = kernels_json["phase_ms"][phase]
        sums.append(f"{phase} {table:.4f} of {apart:.4f} ms")
        if abs(table - apart) > 1e-3 * max(apart, 1e-6):
            problems.append(f"{phase}: the table holds {table:.4f} ms of {apart:.4f} ms of kernels")
    placed = ", ".join(f"{how} {n}" for how, n in kernels_json["placed_by"].items())
    detail = f"placed by {placed}; " + ", ".join(sums)
    return Check(name, FAIL if problems else PASS, "; ".join(problems) + (": " if problems else "") + detail)


def own_model_flops(layers: list[dict], kernels_json: dict | None) -> Check:
    """A user's model through capture(model=...): FlopCounterMode counted forward and backward
    FLOPs for each layer that runs a GEMM (the LSTM by gapscope's rule), and its kernels give
    GFLOP/s per layer."""
    name = "own-model FLOPs"
    gemm = [layer for layer in layers if layer["dims"].get("module") not in ("Embedding",)]
    problems = [f"{layer['name']} has no {p} FLOPs" for layer in gemm for p in ("forward", "backward")
                if not (layer["dims"].get(f"{p}_flop") or 0) > 0]
    rows = {r["name"]: r for r in (kernels_json or {}).get("layers", [])}
    rates = [f"{n} {rows[n]['forward']['gflops']:.1f}" for n in (layer["name"] for layer in gemm)
             if rows.get(n, {}).get("forward", {}).get("gflops")]
    if not rates:
        problems.append("no layer has a forward GFLOP/s from its kernels")
    detail = f"{len(gemm)} layers counted; forward GFLOP/s by kernels: {', '.join(rates) or 'none'}"
    return Check(name, FAIL if problems else PASS, "; ".join(problems) + (": " if problems else "") + detail)


def memory_recorded(breakdown_json: dict, cuda: bool) -> Check:
    """The traced window's allocator events (profile_memory) became memory figures on the run's
    device: a step peak, reserved at least as much where the allocator says it (CUDA's caching
    allocator), and no phase's high-water mark above the step's peak."""
    name = "memory per phase"
    memory = breakdown_json.get("memory")
    if not memory or memory.get("peak_allocated_mb") is None:
        return Check(name, FAIL, "no allocator events in the trace (profile_memory off?)")
    problems = []
    device = memory.get("device") or ""
    if cuda != device.startswith("cuda"):
        problems.append(f"figures of device {device!r}")
    peak, reserved = memory["peak_allocated_mb"], memory.get("peak_reserved_mb")
    if not peak > 0:
        problems.append(f"step peak {peak} MB")
    if reserved is not None and reserved < peak:
        problems.append(f"reserved {reserved} MB below the allocated peak {peak} MB")
    over = [p for p, f in (memory.get("phases") or {}).items() if (f["high_water_mb"] or 0) > peak + 1e-6]
    if over:
        problems.append(f"high-water above the step peak in {', '.join(over)}")
    detail = (f"{device}: step peak {peak:.3f} MB" + (f", reserved {reserved:.3f} MB" if reserved is not None else "")
              + f", end of forward {memory.get('end_of_forward_mb')} MB")
    return Check(name, FAIL if problems else PASS, "; ".join(problems) + (": " if problems else "") + detail)
