"""Which phase an event name stands for: gapscope's own marks first, then the ranges users'
own code writes, then the frameworks' own markers."""
from __future__ import annotations

import enum
import functools
import re

from gapscope.profilers.phases import MARKED_PHASES, TF_SCOPE_PREFIX, TORCH_PREFIX


class PhaseOrigin(enum.StrEnum):
    """How a phase was found in a trace, best first."""

    MARKED = "gapscope marks"
    ANNOTATED = "annotated"  # the trace's own record_function ranges: common names or --phase
    FRAMEWORK = "framework markers"
    INFERRED = "inferred"
    MISSING = "not identified"
    NOT_APPLICABLE = "not applicable"  # e.g. backward and optimizer in an inference run

# torch.profiler's with_modules range around each module's call (a python_function event).
MODULE_RANGE_PREFIX = "nn.Module: "
# An autograd node's op in backward ("…: AddmmBackward0"): its sequence number is its forward op's.
BACKWARD_NODE = "autograd::engine::evaluate_function: "

_TORCH_MARKERS = (
    ("enumerate(DataLoader)#", "data_load"),
    # The distributed wrappers' record_function around the model's forward (the loss after it
    # is outside: timeline adds it as it infers forward).
    ("DistributedDataParallel.forward", "forward"),
    ("FullyShardedDataParallel.forward", "forward"),
    ("Optimizer.step#", "optimizer"),
    ("Optimizer.zero_grad#", "optimizer"),
    (BACKWARD_NODE.rstrip(), "backward"),
)
# Keras name scopes of its optimizers (snake_case of the class names), for XPlane files
# of models that gapscope did not mark.
_KERAS_OPTIMIZER_SCOPES = frozenset({
    "sgd", "adam", "adam_w", "adamax", "nadam", "adagrad", "adadelta", "adafactor",
    "ftrl", "lion", "lamb", "loss_scale_optimizer", "muon", "rm_sprop"})
_GAPSCOPE_SCOPES = {TF_SCOPE_PREFIX + p: p for p in MARKED_PHASES}
# JAX's HLO metadata op_name is its name stack, which wraps each scope in the transformation
# that made the op: `jit(train_step)/transpose(jvp(conv1))/conv_general_dilated` is a gradient
# op (transpose of the linearised forward), `jit(train_step)/jvp(conv1)/…` the forward.
JAX_PROGRAMS = ("jit(", "pmap(")
# The phase of a JAX op whose names carry no transformation comes from its place in the program
# (hlo_metadata): the reader names its range `<op_name> (placed in optimizer)` (no colon: a
# name with one reads as a TF op, and an optimizer one as an optimizer step).
_BY_PLACE = " (placed in "
# torch <= 1.9 named a backward op after its autograd node alone (CudnnConvolutionBackward,
# AddmmBackward, NllLossBackward0), without today's evaluate_function prefix; today's traces
# hold the same names nested inside that prefix's range, so matching them changes nothing there.
_TORCH_BACKWARD_NODE = re.compile(r"(?:torch::autograd::AccumulateGrad|[A-Z][A-Za-z0-9]*Backward\d*)$")

# Names users give their own record_function ranges, compared without '#', blanks or case
# ("## forward ##", "Forward"): the plain names, TorchRec's pipeline ranges (next_batch,
# copy_batch_to_gpu, wait_for_batch, zero_grad). TorchScript names a scripted module's call
# `forward` too, which is that forward.
_ANNOTATED_NAMES = {
    **dict.fromkeys(("data_load", "dataload", "data_loading", "dataloader", "data_loader",
                     "load_data", "next_batch", "copy_batch_to_gpu", "wait_for_batch"), "data_load"),
    **dict.fromkeys(("forward", "model_forward", "forward_pass"), "forward"),
    **dict.fromkeys(("backward", "model_backward", "backward_pass"), "backward"),
    **dict.fromkeys(("optimizer", "optimizer_step", "zero_grad", "optimizer_zero_grad"), "optimizer"),
}
# PyTorch Lightning's profiler actions, "[Strategy]SingleDeviceStrategy.training_step",
# "[LightningModule]Model.optimizer_step", "[_TrainingEpochLoop].train_dataloader_next"; its
# PyTorchProfiler writes them as record_function ranges prefixed "[pl][profile]". Its
# optimizer_step runs the closure (training_step and backward) inside: those instants go to
# forward and backward first (timeline.PRIORITY), the rest of it is the optimizer's.
_LIGHTNING_ACTION = re.compile(r"(?:\[pl\]\[profile\])?\[(?:Strategy|LightningModule|_TrainingEpochLoop)\]"
                               r"[\w.]*\.(\w+)")
_LIGHTNING_HOOKS = {"training_step": "forward", "backward": "backward",
                    "optimizer_step": "optimizer", "optimizer_zero_grad": "optimizer",
                    "train_dataloader_next": "data_load", "batch_to_device": "data_load",
                    "transfer_batch_to_device": "data_load"}


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
def annotation_phase(name: str) -> str | None:
    """Phase of a range a user's own code (or Lightning, TorchRec) names after it."""
    phase = _ANNOTATED_NAMES.get(name.strip("# ").lower())
    if phase:
        return phase
    action = _LIGHTNING_ACTION.fullmatch(name)
    return _LIGHTNING_HOOKS.get(action.group(1)) if action else None


def placed_name(op_name: str, phase: str) -> str:
    """An op name with the phase its place in the program gave it, as jax_phase reads it back."""
    return f"{op_name}{_BY_PLACE}{phase})"


@functools.lru_cache(maxsize=1 << 16)
def jax_phase(op_name: str) -> str | None:
    """Phase of a JAX op by its HLO metadata name: backward under `transpose(…)`, forward under
    `jvp(…)`, the optimizer under a Keras optimizer's scope; the phase its place gave where the
    name says so (placed_name); None where it says none of these."""
    _, placed, phase = op_name.rpartition(_BY_PLACE)
    if placed and phase[:-1] in MARKED_PHASES:
        return phase[:-1]
    scopes = op_name.split("/")
    if any(s.startswith("transpose(") for s in scopes):
        return "backward"
    if any(s.startswith("jvp(") for s in scopes):
        return "forward"
    if _KERAS_OPTIMIZER_SCOPES.intersection(scopes):
        return "optimizer"
    return None


@functools.lru_cache(maxsize=1 << 16)
def framework_phase(name: str) -> str | None:
    """Phase of a marker the framework emits by itself, in traces nobody marked."""
    if name.startswith(JAX_PROGRAMS) or _BY_PLACE in name:
        return jax_phase(name.rstrip(":"))
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
