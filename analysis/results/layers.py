"""Per-layer results: each layer's forward and backward time per traced step, its analytic FLOPs
and GFLOP/s, the time outside any layer; and two runs' layers lined up by name."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from gapscope.analysis.events.phase_rules import PhaseOrigin
from gapscope.analysis.measures.device_peaks import peak_gflops
from gapscope.analysis.measures.hardware import hardware
from gapscope.analysis.measures.kernel_layers import kernel_layers
from gapscope.analysis.measures.kernels import Work
from gapscope.analysis.measures.layer_flops import has_rule, layer_params, spec_flops, traced_layer_flops
from gapscope.analysis.measures.reliability import busy_machine, busy_reason
from gapscope.analysis.measures.layer_times import LAYER_PHASES, layer_fused, layer_spans, layer_times
from gapscope.analysis.measures.optimizer_layers import optimizer_layers
from gapscope.analysis.model.run import Run

# A layer is named as the cause of a phase's delta where it carries at least this share of it.
LAYER_CAUSE_SHARE = 0.40
_DIGITS = 6
# What the times are: the traced steps as recorded (the profiler's cost inside; the breakdown's
# phases are compensated, so a layer's ms is compared with its own phase in this table).
SOURCE = "trace, raw"
NO_LAYERS = ("carries no layers: no layer ranges (gapscope_layer/<name> or with_modules' "
             "'nn.Module: …') and no Keras layer scopes in its op names")

COMPILED = ("no layers: gapscope marks layers in eager torch only (in a compiled or scripted "
            "forward its hooks would be traced into the graph), and a compiled CPU graph's "
            "kernels were not recorded one by one (TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1)")


@dataclass
class LayerRow:
    name: str
    forward_ms: float
    backward_ms: float
    forward_gflop: float | None = None   # per step (one batch); None where no rule counts it
    backward_gflop: float | None = None
    # What its fused ops fused, by phase ({"forward": ["dense+bias+ReLU"]}); {} where none.
    fused: dict[str, list[str]] = field(default_factory=dict)
    params: int | None = None   # weights and biases, from the spec's shapes; None without one

    def ms(self, phase: str) -> float:
        return getattr(self, f"{phase}_ms")

    def gflop(self, phase: str) -> float | None:
        return getattr(self, f"{phase}_gflop")

    def fused_text(self) -> str:
        """"fwd dense+bias+ReLU; bwd conv filter gradient+bias gradient"; "" where none."""
        return "; ".join(f"{phase[:3].replace('bac', 'bwd').replace('for', 'fwd')} {', '.join(kinds)}"
                         for phase, kinds in self.fused.items() if kinds)

    def gflops(self, phase: str) -> float | None:
        """Achieved GFLOP/s in a phase; None without a count or without time."""
        flop, ms = self.gflop(phase), self.ms(phase)
        return None if flop is None or ms <= 0 else flop / (ms / 1000.0)


@dataclass
class LayerBreakdown:
    """Layers x phases of one run; rows plus outside add up to each phase by construction."""

    run_id: str | None
    label: str
    rows: list[LayerRow]
    phase_ms: dict[str, float]       # forward, backward per traced step
    steps: int                       # traced steps averaged
    batch: int | None = None
    source: str = SOURCE
    notes: list[str] = field(default_factory=list)
    peak: dict | None = None   # the CPU's measured GEMM peak: gflops and method (the manifest's)
    # GPU traces: each layer's device kernels and their busy time (kernel_layers' JSON form,
    # with GFLOP/s and the device's peak share); None where the trace has no kernels.
    kernels: dict | None = None
    # torch: each layer's share of Optimizer.step (OptimizerLayers' JSON form); None where the
    # trace does not show it per parameter (a note says why).
    optimizer: dict | None = None
    # Phases whose time per layer the trace cannot give (an inference trace's backward): shown
    # as "-" and null, never as a measured 0.
    unmeasured: list[str] = field(default_factory=list)

    def shown(self, phase: str, value):
        """`value` of a phase, or None where the phase is unmeasured."""
        return None if phase in self.unmeasured else value

    @property
    def peak_gflops(self) -> float | None:
        """The measured peak a share is taken of; None on a busy run, whose layers ran under a
        load the peak was not measured under (a torch.mm under the same load: 9.5 GFLOP/s
        against a quiet 108.3)."""
        value = (self.peak or {}).get("gflops")
        if (self.peak or {}).get("busy"):
            return None
        return value if isinstance(value, (int, float)) and value > 0 else None

    def peak_share(self, gflops: float | None) -> float | None:
        return None if gflops is None or self.peak_gflops is None else gflops / self.peak_gflops

    def outside_ms(self, phase: str) -> float:
        outside = round(self.phase_ms[phase] - sum(r.ms(phase) for r in self.rows), _DIGITS)
        # Rows and phase are each rounded to 1 ns: a few ns either way is none at all.
        return 0.0 if abs(outside) <= 10 ** -(_DIGITS - 2) else outside

    def row(self, name: str) -> LayerRow | None:
        return next((r for r in self.rows if r.name == name), None)

    def phase_gflops(self, phase: str) -> float | None:
        flops = [r.gflop(phase) for r in self.rows]
        if not self.rows or any(f is None for f in flops) or self.phase_ms[phase] <= 0:
            return None
        return sum(flops) / (self.phase_ms[phase] / 1000.0)

    def to_json_dict(self) -> dict:
        shown = self.shown
        return {"run_id": self.run_id, "label": self.label, "source": self.source,
                "steps": self.steps, "batch": self.batch,
                "phase_ms": {p: shown(p, round(v, _DIGITS)) for p, v in self.phase_ms.items()},
                "outside_ms": {p: shown(p, self.outside_ms(p)) for p in self.phase_ms},
                "phase_gflops": {p: _round(self.phase_gflops(p)) for p in self.phase_ms},
                "peak": self.peak,
                "phase_peak_share": {p: _round(self.peak_share(self.phase_gflops(p)))
                                     for p in self.phase_ms},
                "layers": [{**{k: _round(v) for k, v in asdict(r).items()},
                            **{f"{p}_ms": shown(p, r.ms(p)) for p in LAYER_PHASES},
                            "forward_gflops": _round(r.gflops("forward")),
                            "backward_gflops": _round(r.gflops("backward")),
                            "forward_peak_share": _round(self.peak_share(r.gflops("forward"))),
                            "backward_peak_share": _round(self.peak_share(r.gflops("backward")))}
                           for r in self.rows],
                "unmeasured": self.unmeasured,
                "notes": self.notes, "kernels": self.kernels, "optimizer": self.optimizer}

    @classmethod
    def from_json_dict(cls, d: dict) -> "LayerBreakdown":
        # An unmeasured phase is null in the JSON: 0.0 again here, which `unmeasured` keeps from view.
        rows = [LayerRow(r["name"], r["forward_ms"] or 0.0, r["backward_ms"] or 0.0, r.get("forward_gflop"),
                         r.get("backward_gflop"), dict(r.get("fused") or {}), r.get("params"))
                for r in d["layers"]]
        return cls(d.get("run_id"), d["label"], rows, {p: ms or 0.0 for p, ms in d["phase_ms"].items()},
                   d["steps"], d.get("batch"), d.get("source", SOURCE), list(d.get("notes", [])),
                   d.get("peak"), d.get("kernels"), d.get("optimizer"), list(d.get("unmeasured", [])))


def _round(value):
    return round(value, _DIGITS) if isinstance(value, float) else value


def _per_update(found, updates: int):
    """Per-call means made per-update means: the traced calls ran `updates` updates in all."""
    scale = found.steps / updates
    found.layers = {name: {p: ms * scale for p, ms in times.items()}
                    for name, times in found.layers.items()}
    found.phase_ms = {p: ms * scale for p, ms in found.phase_ms.items()}
    found.steps = updates
    return found


def _compiled_torch(manifest: dict) -> bool:
    settings = manifest.get("settings") if isinstance(manifest.get("settings"), dict) else {}
    return manifest.get("framework") == "torch" and any(
        settings.get(key) for key in ("compile_mode", "compile_backend", "torchscript"))


def layer_breakdown(run: Run, label: str | None = None, updates: int | None = None,
                    work: Work | None = None) -> LayerBreakdown:
    """The run's layers; no rows (and a note saying why) where its trace names none.
    `updates`: the optimizer updates the traced steps ran (the breakdown's count), where one
    traced call runs several (Keras steps_per_execution): the figures are then per update.
    `work`: the trace's find_work, where the caller has it (the kernel table reuses it)."""
    label = label or run.label
    specs = run.manifest.get("layers") if isinstance(run.manifest.get("layers"), list) else None
    batch = (run.manifest.get("workload_spec") or {}).get("batch_size")
    if run.trace is None:
        return LayerBreakdown(run.run_id, label, [], dict.fromkeys(LAYER_PHASES, 0.0), 0, batch,
                              notes=["no trace: layers come from a traced run"])
    names = [s["name"] for s in specs] if specs else None
    # A user's model's layers: what its capture said of them (gapscope.model_layers).
    recorded = [n for n in run.manifest.get("layer_notes") or () if isinstance(n, str)]
    kernels = _kernel_layers(run, specs, batch, work)
    depth = run.rules.layer_depth
    found = layer_times(run.trace, run.timeline, names, run.hlo, depth)
    optimizer = optimizer_layers(run.trace, run.timeline, specs)
    # An inference trace has no optimizer: nothing to say about splitting it.
    optimizer_note = [optimizer] if (isinstance(optimizer, str) and run.trace.source_format == "torch"
                                     and run.timeline.origins.get("optimizer") != PhaseOrigin.NOT_APPLICABLE) else []
    optimizer = None if isinstance(optimizer, str) else optimizer.to_json_dict()
    if found is None:
        why = (COMPILED if _compiled_torch(run.manifest) else
               "; ".join(recorded) if recorded else f"{run.trace_file.name} {NO_LAYERS}")
        if kernels:
            why = "no layer ranges: the kernels below are placed by the ops that ran them"
        return LayerBreakdown(run.run_id, label, [], dict.fromkeys(LAYER_PHASES, 0.0), 0, batch,
                              notes=[why] + (optimizer_note if kernels else []), kernels=kernels,
                              optimizer=optimizer)
    settings = run.manifest.get("settings") if isinstance(run.manifest.get("settings"), dict) else {}
    per_call = settings.get("steps_per_execution") or 1
    if per_call > 1 and updates and updates != found.steps:
        found = _per_update(found, updates)
    by_name = {s["name"]: s for s in specs or ()}
    fused = layer_fused(run.trace, names, depth)
    rows, notes = [], list(found.notes) + recorded + optimizer_note
    # A foreign torch trace has no layer specs: its matrix products' Input Dims give FLOPs.
    traced = (traced_layer_flops(run.trace, layer_spans(run.trace, run.timeline, names, run.hlo, depth),
                                 len(run.timeline.steps))
              if not specs and run.trace.source_format == "torch" else {})
    for name, times in found.layers.items():
        spec = by_name.get(name)
        flops = spec_flops(spec, batch) or traced.get(name)
        rows.append(LayerRow(name, round(times["forward"], _DIGITS), round(times["backward"], _DIGITS),
                             flops and round(flops.forward / 1e9, _DIGITS),
                             flops and round(flops.backward / 1e9, _DIGITS), fused.get(name, {}),
                             layer_params(spec) if spec else None))
    # Layers whose FLOPs neither a counter kept (a user's torch module) nor a rule gives.
    uncounted = [r.name for r in rows if r.name in by_name and spec_flops(by_name[r.name], batch) is None]
    if not specs and traced:
        notes.append("layer names from the trace; FLOPs of the matrix products (addmm, mm, bmm) "
                     "that ran in each layer's time, from their Input Dims (record_shapes): other "
                     "ops count none")
    elif not specs:
        notes.append("layer names from the trace; no layer shapes (record_shapes), so no FLOPs")
    elif not isinstance(batch, int) and any(has_rule(by_name[n]) for n in uncounted):
        notes.append("no batch size in the run, so no FLOPs (gapscope.capture_keras(..., batch_size=N) "
                     "gives it where TensorFlow traced the step for any batch size)")
    elif uncounted:
        # A user's model (capture_keras) lists the layers no rule counts by their class.
        named = ", ".join(f"{n} ({by_name[n]['kind']})" for n in uncounted)
        notes.append(f"no FLOP rule for {named}: no GFLOP there (docs/reference.md, Layers)")
    if run.manifest.get("framework") in ("keras", "tf"):
        notes.append("optimizer per layer: TF's update ops run per variable without the layer's "
                     "name (rm_sprop/Mul_27), so the optimizer is not split by layer")
    elif run.manifest.get("framework") == "keras-jax":
        notes.append("optimizer per layer: JAX's update ops carry the optimizer's scope without the "
                     "layer's name (jit(train_step)/rm_sprop/add), so the optimizer is not split by layer")
    phase_ms = {p: round(ms, _DIGITS) for p, ms in found.phase_ms.items()}
    # An inference trace has no backward to split: its layers' backward is unmeasured, not 0.
    unmeasured = [p for p in LAYER_PHASES if run.timeline.origins.get(p) == PhaseOrigin.NOT_APPLICABLE]
    return LayerBreakdown(run.run_id, label, rows, phase_ms, found.steps, batch, notes=notes,
                          peak=_measured_peak(run.manifest), kernels=kernels, optimizer=optimizer,
                          unmeasured=unmeasured)


def _measured_peak(manifest: dict) -> dict | None:
    """The CPU's measured GEMM peak the run keeps (gemm_peak): gflops and method."""
    peak = manifest.get("gemm_peak") if isinstance(manifest.get("gemm_peak"), dict) else None
    if not peak:
        return None
    theory = peak.get("theoretical") if isinstance(peak.get("theoretical"), dict) else None
    return {"gflops": peak.get("gflops"), "method": peak.get("method"),
            **({"theoretical": {"gflops": theory.get("gflops"), "method": theory.get("method")}}
               if theory else {}),
            # A busy run's layers are set against no peak (LayerBreakdown.peak_gflops).
            **({"busy": busy_reason(manifest)} if busy_machine(manifest) else {})}


def _kernel_layers(run: Run, specs: list[dict] | None, batch, work: Work | None) -> dict | None:
    """Each layer's kernels by phase (a GPU's, or on the CPU a scripted or compiled model's ops)
    with their GFLOP/s and share of the peak; no GFLOP/s for a layer's phase where a mixed
    kernel may be part of it (its time is then only known from below). None where
    kernel_layers has no table."""
    found = kernel_layers(run.trace, run.timeline, specs, work, run.rules.layer_depth)
    if found is None:
        return None
    table = found.to_json_dict()
    by_name = {s["name"]: s for s in specs or ()}
    if table["source"] == "device kernels":
        peak = peak_gflops(hardware(run.manifest, run.trace).device)
    else:  # CPU ops: the CPU's measured GEMM peak, where the run has one
        peak = _measured_peak(run.manifest)
        peak = (peak if peak and not peak.get("busy") and isinstance(peak["gflops"], (int, float))
                and peak["gflops"] > 0 else None)
    for row in table["layers"]:
        spec = by_name.get(row["name"])
        flops = spec_flops(spec, batch)
        for phase in LAYER_PHASES:
            cell, flop = row[phase], getattr(flops, phase, None)
            maybe_more = any(row["name"] in fits for fits in table["mixed"][phase]["fits"].values())
            gflops = (flop / 1e9 / (cell["ms"] / 1000.0)
                      if flop and cell["ms"] > 0 and not maybe_more else None)
            cell["gflop"] = _round(flop / 1e9) if flop else None
            cell["gflops"] = _round(gflops)
            cell["peak_share"] = _round(gflops / peak["gflops"]) if gflops and peak else None
    table["peak"] = peak
    if any(table["mixed"][p]["kernels"] for p in LAYER_PHASES):
        table["notes"].append("a mixed kernel's ops fit several layers (Inductor fused them, or the "
                              "trace cannot tell whose they are): its time is in no layer, and no "
                              "GFLOP/s is given for a layer it may belong to")
    return table


def run_layer_spans(run: Run) -> list[tuple[float, float, str, str, int]]:
    """The run's layer spans in its traced steps (the spec's layers, where the manifest names
    them), as the layers table counts them; [] where the trace names none."""
    if run.trace is None:
        return []
    specs = run.manifest.get("layers") if isinstance(run.manifest.get("layers"), list) else None
    return layer_spans(run.trace, run.timeline, [s["name"] for s in specs] if specs else None, run.hlo,
                       run.rules.layer_depth)


@dataclass
class LayerCause:
    """The layer that carries most of a phase's delta between two runs."""

    phase: str
    phase_delta_ms: float    # the breakdown's delta (what the verdict names)
    traced_delta_ms: float   # the same phase's delta in the traced steps, the layers' own basis
    layer: str
    a_ms: float
    b_ms: float
    a_gflops: float | None
    b_gflops: float | None

    @property
    def delta_ms(self) -> float:
        return round(self.b_ms - self.a_ms, _DIGITS)

    @property
    def share(self) -> float:
        """Of the phase's traced delta: layer times and that delta come from the same steps."""
        return round(self.delta_ms / self.traced_delta_ms, 4)

    def to_json_dict(self) -> dict:
        return {"name": self.layer, "phase": self.phase, "a_ms": self.a_ms, "b_ms": self.b_ms,
                "delta_ms": self.delta_ms, "traced_phase_delta_ms": round(self.traced_delta_ms, _DIGITS),
                "share_of_phase_delta": self.share,
                "a_gflops": _round(self.a_gflops), "b_gflops": _round(self.b_gflops)}


BY_NAME, BY_ORDER = "name", "order and parameter counts"
NO_LINEUP = ("no layers to line up (neither the same names nor, in the same order, the same "
             "parameter counts)")


def layer_pairs(a: LayerBreakdown | None,
                b: LayerBreakdown | None) -> tuple[list[tuple[LayerRow, LayerRow]], str | None]:
    """The two runs' layers lined up, and how: by name where they share names (the spec gives
    gapscope's runs one naming), in the first run's order; else, where both have as many
    layers with parameter counts that agree one by one in order, by order (a model named
    differently); else none (None)."""
    if not a or not b:
        return [], None
    theirs = {r.name: r for r in b.rows}
    by_name = [(r, theirs[r.name]) for r in a.rows if r.name in theirs]
    if by_name:
        return by_name, BY_NAME
    weighted = [r for r in a.rows if r.params], [r for r in b.rows if r.params]
    if (len(a.rows) == len(b.rows) and weighted[0] and len(weighted[0]) == len(weighted[1])
            and all(ra.params == rb.params for ra, rb in zip(a.rows, b.rows))):
        return list(zip(a.rows, b.rows)), BY_ORDER
    return [], None


def pair_name(ra: LayerRow, rb: LayerRow) -> str:
    """One name for a lined-up pair: both where they differ ("dense1 = fc1")."""
    return ra.name if ra.name == rb.name else f"{ra.name} = {rb.name}"


def matched_layers(a: LayerBreakdown | None, b: LayerBreakdown | None) -> list[str]:
    """The lined-up layers' names (layer_pairs), in the first run's order."""
    return [pair_name(ra, rb) for ra, rb in layer_pairs(a, b)[0]]


def layer_cause(a: LayerBreakdown | None, b: LayerBreakdown | None, phase: str,
                phase_delta_ms: float) -> LayerCause | None:
    """The matched layer whose time moved most in the phase's direction, where it carries at
    least LAYER_CAUSE_SHARE of the phase's delta in the traced steps (the breakdown's delta is
    compensated for the profiler's cost; the layers' times are traced, so both sides of the
    share come from the traced steps). None where the traced delta points the other way."""
    pairs, _ = layer_pairs(a, b)
    if phase not in LAYER_PHASES or not phase_delta_ms or not pairs:
        return None
    traced = b.phase_ms[phase] - a.phase_ms[phase]
    if traced * phase_delta_ms <= 0:
        return None
    best = None
    for ra, rb in pairs:
        delta = rb.ms(phase) - ra.ms(phase)
        if delta * traced > 0 and (best is None or abs(delta) > abs(best[0])):
            best = (delta, ra, rb)
    if best is None or abs(best[0]) < LAYER_CAUSE_SHARE * abs(traced):
        return None
    _, ra, rb = best
    return LayerCause(phase, phase_delta_ms, traced, pair_name(ra, rb), ra.ms(phase), rb.ms(phase),
                      ra.gflops(phase), rb.gflops(phase))
