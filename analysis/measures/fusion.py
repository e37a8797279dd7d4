"""Which fused ops ran in each phase (how many, what they fused, their share of the phase's op time), and which ops another run ran apart instead."""
from __future__ import annotations

from collections import defaultdict

from gapscope.analysis.events.kernel_names import short_kernel_name
from gapscope.analysis.events.hlo_metadata import MIXED, UNATTRIBUTED
from gapscope.analysis.measures.fusion_table import apart_part, one_op_kernel, part
from gapscope.profilers.phases import PHASES

# Names listed per fusion kind and per part run apart: enough to recognise, short to read.
_EXAMPLES = 3


def by_phase(kernels, steps: int) -> dict[str, dict]:
    """{phase: {fused_per_step, fused_ms_per_step, share_of_time, fusions, apart}} of the
    work items (kernels.WorkItem) of `steps` steps. `fusions`: one row per kind of fused op
    (what it fused, who fused it, per step, ms per step); `apart`: the unfused ops that do a
    part a fused op could take (conv, dense, bias, ReLU, ...), one row per part, so that a run
    that fuses can be set against one that does not."""
    steps = max(steps, 1)
    phases = defaultdict(list)
    for k in kernels:
        phases[k.phase].append(k)
    found = {}
    for phase in [p for p in PHASES + (MIXED, UNATTRIBUTED) if p in phases]:
        items = phases[phase]
        total_us = sum(k.busy_us for k in items)
        fused = [k for k in items if k.fusion is not None]
        found[phase] = {
            "fused_per_step": round(len(fused) / steps, 3),
            "fused_ms_per_step": round(sum(k.busy_us for k in fused) / steps / 1000.0, 6),
            "share_of_time": round(sum(k.busy_us for k in fused) / total_us, 4) if total_us else None,
            "fusions": _rows(fused, steps, lambda k: (k.fusion.fuses, k.fusion.kind.by, k.fusion.kind.source),
                             ("fuses", "by", "source")),
            "apart": _rows([k for k in items if k.fusion is None and apart_part(k.name)], steps,
                           lambda k: (apart_part(k.name),), ("part",)),
            # Generated kernels of one op each: a compiler's, but no fusion (fusion_table).
            "one_op_generated_per_step": round(sum(one_op_kernel(k.name) for k in items) / steps, 3),
        }
    return found


def _rows(items, steps: int, key, fields: tuple[str, ...]) -> list[dict]:
    groups = defaultdict(list)
    for k in items:
        groups[key(k)].append(k)
    rows = []
    for values, group in groups.items():
        names = sorted({k.name for k in group})
        rows.append({**dict(zip(fields, values)), "per_step": round(len(group) / steps, 3),
                     "ms_per_step": round(sum(k.busy_us for k in group) / steps / 1000.0, 6),
                     "names": [_short(n) for n in names[:_EXAMPLES]],
                     "kinds_of_name": len(names)})
    rows.sort(key=lambda r: (-r["ms_per_step"], str(r.get("fuses") or r.get("part"))))
    return rows


def _short(name: str) -> str:
    """A TF op's type and layer (conv2d_1/Relu:_MklNativeFusedConv2D), a kernel's name demangled
    and shortened (kernel_names.short_kernel_name: 80 characters at most)."""
    if ":" in name and "/" in name.split(":")[0] and "::" not in name:
        scope, op_type = name.rsplit(":", 1)
        return "/".join(scope.split("/")[-2:]) + ":" + op_type
    return short_kernel_name(name)


def fused_apart(fast: dict, slow: dict, phase: str) -> tuple[dict, dict, float] | None:
    """Where the faster run's phase ran fused ops and the slower run's ran ops of the same parts
    apart: (the faster's facts: its fusions; the slower's: its ops of those parts; the time of
    the slower's ops that are not a fusion's anchor). That time (the bias adds and activations a
    fused op does inside its conv or dense) is what the fusion saves, the figure held against
    the phase's delta: the anchors themselves run in both. `fast`, `slow`: by_phase of each
    run. None where the faster phase fused nothing or the slower runs none of it apart."""
    f, s = fast.get(phase), slow.get(phase)
    if not f or not s or not f["fusions"]:
        return None
    parts = {part(p) for row in f["fusions"] for p in row["fuses"].split("+")}
    anchors = {part(row["fuses"].split("+")[0]) for row in f["fusions"]}  # conv of conv+bias+ReLU
    apart = [row for row in s["apart"] if row["part"] in parts]
    if not apart:
        return None
    extra = sum(row["ms_per_step"] for row in apart if row["part"] not in anchors)
    fast_facts = {"fusions": f["fusions"], "fused_per_step": f["fused_per_step"],
                  "fused_ms_per_step": f["fused_ms_per_step"], "share_of_time": f["share_of_time"]}
    slow_facts = {"apart": apart, "apart_per_step": round(sum(r["per_step"] for r in apart), 3),
                  "extra_parts": sorted({r["part"] for r in apart if r["part"] not in anchors}),
                  "extra_ms_per_step": round(extra, 6)}
    return fast_facts, slow_facts, round(extra, 6)


def summary(found: dict) -> dict:
    """by_phase without the apart rows and names: {phase: {fused_per_step, share_of_time,
    fusions: {what it fused: per step}}} for the phases that ran fused ops."""
    def kinds(rows):
        counts = defaultdict(float)
        for row in rows:
            counts[row["fuses"]] += row["per_step"]
        return dict(counts)
    return {phase: {"fused_per_step": d["fused_per_step"], "share_of_time": d["share_of_time"],
                    "fusions": kinds(d["fusions"])}
            for phase, d in found.items() if d["fusions"]}
