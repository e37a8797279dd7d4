"""Variants worth trying on the slower run of a pair, each derived from the figure that triggered it."""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from gapscope.analysis.measures.page_faults import VARIANT as MALLOC_KEEP, costly, estimated_cost_ms

# Thresholds: a phase that is a fifth of the step is worth a variant that targets it; below
# that the variant's own cost and the noise of one run usually hide what it saves.
_DATA_LOAD_SHARE = 0.15
_OTHER_SHARE = 0.25
# Many short kernels (ops on the CPU) mean per-op dispatch dominates: what compilers fuse away.
_SMALL_KERNEL_US = 20.0
_MANY_KERNELS = 30.0
# A step mostly in forward and backward, slower there than the other run: a compiler's fused,
# tuned kernels are the next thing to try; on a GPU, lower precision too.
_COMPUTE_SHARE = 0.5
_SPE = re.compile(r"^spe(\d+)$")
_PIPELINES = frozenset({"transforms", "tensor-dataset", "preload", "tfdata", "numpy"})
KERAS_PATHS = ("keras", "keras-torch")


class Rule(enum.StrEnum):
    """Why a variant is suggested."""

    DATA_LOAD = "data loading"
    DISPATCH = "per-step overhead"
    SMALL_KERNELS = "many small kernels"
    STEPS_PER_CALL = "one step per call"
    RECOMPILES = "recompiles"
    COMPUTE = "compute-bound"
    FP32_GPU = "fp32 compute on a GPU"
    PAGE_FAULTS = "fresh pages every step"
    FUSED_APART = "fused in the other run, apart here"


@dataclass
class SuggestionCheck:
    """The suggested configuration measured against the current one (interleaved repeats)."""

    ratio: float                       # suggested / current step time
    ratio_ci95: tuple[float, float] | None
    within_noise: bool
    folder: str                        # the A/B folder the runs are in

    @property
    def helped(self) -> bool:
        return not self.within_noise and self.ratio < 1.0


@dataclass
class Suggestion:
    """A hypothesis: `current` runs faster as `suggested`, because of `figures`."""

    rule: Rule
    run_label: str                     # the run it applies to (the slower of the pair)
    current: str                       # WORKLOAD:FRAMEWORK[:VARIANT]
    suggested: str
    figures: dict[str, float] = field(default_factory=dict)
    check: SuggestionCheck | None = None
    # A run of the suggested configuration among those compared: {"run": its label, "ratio": its
    # step over the step of `run_label`}. Then the figure is there to read, not a run to try.
    already: dict | None = None

    def to_json_dict(self) -> dict:
        return {"rule": str(self.rule), "run": self.run_label, "current": self.current,
                "suggested": self.suggested, "figures": self.figures,
                "check": None if self.check is None else self.check.__dict__,
                "already_measured": self.already}


def same_config(a: str | None, b: str | None) -> bool:
    """WORKLOAD:FRAMEWORK[:VARIANT] texts naming one configuration (variants in any order)."""
    def key(text):
        workload, framework, *variant = text.split(":")
        return workload, framework, frozenset(v for v in ",".join(variant).split(",")
                                              if v not in ("", "default"))
    return a is not None and b is not None and key(a) == key(b)


def suggest(run, phase_ms: dict[str, float], gaps: dict[str, float],
            step_ms: float, faults_per_step: float | None = None,
            fused_apart: dict[str, float] | None = None) -> list[Suggestion]:
    """Suggestions for `run` (a RunExplanation, the slower of its pair) whose step and phases
    take `step_ms` and `phase_ms`. `gaps`: how much slower than the other run each phase is
    (ms; only phases whose gap is not noise). `faults_per_step`: the page faults its steps
    took (over its repeats); by default its own breakdown's. `fused_apart`: where the other run
    fuses ops this one runs apart, in a phase this one is slower in (fused_per_step,
    apart_per_step, extra_ms: the time of this run's separate bias and activation ops)."""
    b = run.breakdown
    if not (b.workload and b.framework) or step_ms <= 0:
        return []  # a foreign trace: no configuration to change
    variants = [v for v in (b.variant or "default").split(",") if v != "default"]
    found: list[Suggestion] = []

    def add(rule: Rule, new: list[str] | None, figures: dict[str, float]) -> None:
        suggested = _config(b, new) if new is not None else None
        if suggested is None or any(s.suggested == suggested for s in found):
            return
        found.append(Suggestion(rule, b.name, _config(b, variants), suggested,
                                {k: round(v, 3) for k, v in figures.items()}))

    data_share = phase_ms["data_load"] / step_ms
    if data_share >= _DATA_LOAD_SHARE and gaps.get("data_load", 0.0) > 0:
        add(Rule.DATA_LOAD, _faster_input(b.framework, variants),
            {"data_load_ms": phase_ms["data_load"], "data_load_share": data_share})
    other_share = phase_ms["other"] / step_ms
    if other_share >= _OTHER_SHARE and gaps.get("other", 0.0) > 0:
        figures = {"other_ms": phase_ms["other"], "other_share": other_share}
        add(Rule.DISPATCH, _compiled(b.framework, variants), figures)
        if b.framework in KERAS_PATHS and not any(_SPE.match(v) for v in variants):
            add(Rule.STEPS_PER_CALL, variants + ["spe8"], figures)
    kernels = run.kernels
    if (kernels.mean_us is not None and kernels.mean_us < _SMALL_KERNEL_US
            and kernels.per_step >= _MANY_KERNELS
            and any(gaps.get(p, 0.0) > 0 for p in ("forward", "backward", "optimizer"))):
        add(Rule.SMALL_KERNELS, _compiled(b.framework, variants),
            {"kernels_per_step": kernels.per_step, "mean_kernel_us": kernels.mean_us})
    if run.compile.compile_in_window_ms > 0 and any(v.startswith("compile") for v in variants):
        add(Rule.RECOMPILES, [v for v in variants if not v.startswith("cache")] + ["cache64"],
            {"compile_in_window_ms": run.compile.compile_in_window_ms})
    if fused_apart:
        # A compiler fuses what the other run's framework fused without one: the test of it.
        add(Rule.FUSED_APART, _compiled(b.framework, variants), fused_apart)
    compute = (phase_ms["forward"] + phase_ms["backward"]) / step_ms
    if compute >= _COMPUTE_SHARE and gaps.get("forward", 0.0) + gaps.get("backward", 0.0) > 0:
        add(Rule.COMPUTE, _compiled(b.framework, variants), {"compute_share": compute})
        if run.attribution.device_kind != "cpu":
            add(Rule.FP32_GPU, _lower_precision(b.framework, variants), {"compute_share": compute})
    faults = b.minor_faults_per_step if faults_per_step is None else faults_per_step
    if costly(faults, step_ms) and MALLOC_KEEP not in variants:
        add(Rule.PAGE_FAULTS, variants + [MALLOC_KEEP],
            {"minor_faults_per_step": faults, "estimated_ms": estimated_cost_ms(faults),
             "estimated_share": estimated_cost_ms(faults) / step_ms})
    return found


def measured(folder) -> SuggestionCheck:
    """The check of a suggestion from the A/B folder that ran its current configuration first
    and the suggested one second: the paired ratio of their unprofiled step times."""
    from gapscope.analysis.results.breakdown import breakdown
    from gapscope.analysis.model.run import load_measurement
    from gapscope.analysis.measures.stats import contains_one, paired_ratio
    current, suggested = ([breakdown(r).to_json_dict()["step_ms"]["mean"] for r in runs]
                          for runs in load_measurement(folder))
    ratio, interval = paired_ratio(current, suggested)
    # One repeat has no interval: nothing can be told apart from noise with it.
    noise = interval is None or contains_one(interval)
    return SuggestionCheck(round(ratio, 4), interval and (round(interval[0], 4), round(interval[1], 4)),
                           noise, str(folder))


def _config(b, variants: list[str]) -> str:
    return ":".join([b.workload, b.framework] + ([",".join(variants)] if variants else []))


def config_of(b) -> str | None:
    """WORKLOAD:FRAMEWORK[:VARIANT] of a breakdown's run; None for a foreign trace and for a
    user's own loop (gapscope cannot run it: a command naming it would fail)."""
    if not (b.workload and b.framework) or _USER_VARIANT in (b.variant or "").split(","):
        return None
    return _config(b, [v for v in (b.variant or "default").split(",") if v != "default"])


# The variant gapscope.capture and capture_keras record (gapscope/user_run.py: USER_VARIANT).
_USER_VARIANT = "user"


def _faster_input(framework: str, variants: list[str]) -> list[str] | None:
    """The pipeline that does least per step, in place of the run's: tensors prepared once
    (torch: on the device, shuffled by index; it cut the seed MLP's data_load from 1.248 to
    0.092 ms); tf.data with prefetch for Keras on TF."""
    best = {"torch": "preload", "keras": "tfdata", "tf": "tfdata",
            "keras-jax": None}.get(framework, "tensor-dataset")  # keras-jax: NumPy only here
    if best is None or best in variants:
        return None
    return [v for v in variants if v not in _PIPELINES and not v.startswith("nw")] + [best]


def _compiled(framework: str, variants: list[str]) -> list[str] | None:
    """The compiler that fuses ops and removes per-op dispatch, where the run has none yet."""
    if framework == "torch":
        if any(v.startswith("compile") or v == "cudagraphs" for v in variants):
            return None
        return [v for v in variants if v != "eager"] + ["compile"]
    if framework == "keras-jax":
        return None  # its step is one XLA program already
    if framework in KERAS_PATHS:
        return None if any(v.startswith("jit") for v in variants) else variants + ["jit"]
    if "tf-xla" in variants:
        return None
    # The raw TF loop's modes replace each other: eager -> tf.function -> XLA.
    better = "tf-function" if "tf-eager" in variants else "tf-xla"
    return [v for v in variants if not v.startswith("tf-")] + [better]


def _lower_precision(framework: str, variants: list[str]) -> list[str] | None:
    if framework == "tf" or any(v.startswith("amp") or v == "mixed-float16" for v in variants):
        return None
    return variants + ["amp-bf16" if framework == "torch" else "mixed-float16"]
