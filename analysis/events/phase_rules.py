"""Which phase an event name stands for: gapscope's own marks first, then the frameworks' own."""
from __future__ import annotations

import enum
import functools
import re

from profilers.phases import MARKED_PHASES, TF_SCOPE_PREFIX, TORCH_PREFIX


class PhaseOrigin(enum.StrEnum):
    """How a phase was found in a trace, best first."""

    MARKED = "gapscope marks"
    FRAMEWORK = "framework markers"
    INFERRED = "inferred"
    MISSING = "not identified"
    NOT_APPLICABLE = "not applicable"  # e.g. backward and optimizer in an inference run

_TORCH_MARKERS = (
    ("enumerate(DataLoader)#", "data_load"),
    ("Optimizer.step#", "optimizer"),
    ("Optimizer.zero_grad#", "optimizer"),
    ("autograd::engine::evaluate_function:", "backward"),
)
# Keras name scopes of its optimizers (snake_case of the class names), for XPlane files
# of models that gapscope did not mark.
_KERAS_OPTIMIZER_SCOPES = frozenset({
    "sgd", "adam", "adam_w", "adamax", "nadam", "adagrad", "adadelta", "adafactor",
    "ftrl", "lion", "lamb", "loss_scale_optimizer", "muon", "rm_sprop"})
_GAPSCOPE_SCOPES = {TF_SCOPE_PREFIX + p: p for p in MARKED_PHASES}
# torch <= 1.9 named a backward op after its autograd node alone (CudnnConvolutionBackward,
# AddmmBackward, NllLossBackward0), without today's evaluate_function prefix; today's traces
# hold the same names nested inside that prefix's range, so matching them changes nothing there.
_TORCH_BACKWARD_NODE = re.compile(r"(?:torch::autograd::AccumulateGrad|[A-Z][A-Za-z0-9]*Backward\d*)$")


# Traces repeat a few thousand names over 100k+ events: classify each name once.
@functools.lru_cache(maxsize=1 << 16)
def gapscope_phase(name: str) -> str | None:
    """Phase of a gapscope mark: a `gapscope/<phase>` range or an op inside a `gapscope_<phase>` scope."""
    if name.startswith(TORCH_PREFIX):
        phase = name[len(TORCH_PREFIX):]
        return phase if phase in MARKED_PHASES else None
    if TF_SCOPE_PREFIX not in name:
        return None
    scopes = name.partition(":")[0].split("/")
    # TF names gradient ops after the forward op they differentiate: "gradient_tape/gapscope_forward/..."
    if "gradient_tape" in scopes:
        return "backward"
    for scope in scopes:
        phase = _GAPSCOPE_SCOPES.get(scope)
        if phase:
            return phase
    return None


@functools.lru_cache(maxsize=1 << 16)
def framework_phase(name: str) -> str | None:
    """Phase of a marker the framework emits by itself, in traces nobody marked."""
    for prefix, phase in _TORCH_MARKERS:
        if name.startswith(prefix):
            return phase
    if _TORCH_BACKWARD_NODE.match(name):
        return "backward"
    if name.startswith("IteratorGetNext"):
        return "data_load"
    if ":" in name:  # TF op
        scopes = name.partition(":")[0].split("/")
        if "gradient_tape" in scopes:
            return "backward"
        if _KERAS_OPTIMIZER_SCOPES.intersection(scopes):
            return "optimizer"
    return None
