"""The five phases of a training step and the marker names that stand for them in every trace."""
from __future__ import annotations

# Marked phases, in the order they happen in a step. `other` is never marked: it is
# what remains of the step once the four marked phases are taken out.
MARKED_PHASES = ("data_load", "forward", "backward", "optimizer")
PHASES = MARKED_PHASES + ("other",)

# record_function / NVTX ranges use a slash so torch-tb-profiler groups them; TF name
# scopes cannot contain '/', so the TF side uses an underscore.
TORCH_PREFIX = "gapscope/"
TF_SCOPE_PREFIX = "gapscope_"
# A layer's range in a torch trace (workloads.runners.layer_ranges): gapscope_layer/conv1.
LAYER_RANGE_PREFIX = "gapscope_layer/"
# The loss's name scope in gapscope's raw TF loop (Keras' own train_step says compile_loss).
LOSS_SCOPE = "gapscope_loss"


def torch_range_name(phase: str) -> str:
    return TORCH_PREFIX + phase


def tf_scope_name(phase: str) -> str:
    return TF_SCOPE_PREFIX + phase


def tf_eager_event_name(phase: str) -> str:
    """Name of the TraceMe event around an eagerly executed TF phase: eager ops carry no name
    scope, and named like a TF op in the phase's scope it reads as that phase wherever TF op
    names are read."""
    return f"{tf_scope_name(phase)}:Phase"


def check_phase(phase: str) -> str:
    if phase not in MARKED_PHASES:
        raise ValueError(f"unknown phase {phase!r}; expected one of {', '.join(MARKED_PHASES)}")
    return phase
