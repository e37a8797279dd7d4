"""What a workload is, independent of any framework: model, data, loss and optimizer settings."""
from __future__ import annotations

import importlib
from dataclasses import dataclass, replace

TASKS = ("classification", "regression")
LOSSES = ("cross_entropy", "mse")
OPTIMIZERS = ("rmsprop", "sgd")
DATA_SOURCES = ("gaussian_teacher", "mnist", "linear_noise", "sine_sequences", "mean_switch")


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    description: str
    model_module: str          # module with build_torch(spec) and build_keras(spec)
    input_shape: tuple[int, ...]  # one sample as the data holds it; images channels-last (H, W, C)
    num_classes: int           # classifier outputs; 0 for regression (one value out)
    hidden: tuple[int, ...] = ()
    batch_size: int = 256
    learning_rate: float = 1e-4
    optimizer: str = "rmsprop"
    loss: str = "cross_entropy"
    seed: int = 0
    task: str = "classification"
    data: str = "gaussian_teacher"  # which generator in workloads.data (or a real MNIST file)
    samples: int = 10_000      # one epoch of synthetic data

    def __post_init__(self):
        # Specs are written by hand in the registry: a typo should fail at import, not mid-run.
        for field, value, allowed in (("task", self.task, TASKS), ("loss", self.loss, LOSSES),
                                      ("optimizer", self.optimizer, OPTIMIZERS),
                                      ("data", self.data, DATA_SOURCES)):
            if value not in allowed:
                raise ValueError(f"{self.name}: {field} {value!r} is not one of {allowed}")
        if (self.task == "regression") != (self.num_classes == 0):
            raise ValueError(f"{self.name}: regression has num_classes 0, classification > 0")

    @property
    def outputs(self) -> int:
        """Width of the model's output: logits per class, or the one regressed value."""
        return self.num_classes if self.task == "classification" else 1

    def sized(self, batch_size: int | None = None, width: float | None = None) -> "WorkloadSpec":
        """This workload with another batch size, or every hidden layer's width (MLP units, the
        CNN's dense layer, LSTM units; not conv channels) times `width`, at least 1: for sweeps
        over batch and model size."""
        changes = {}
        if batch_size is not None:
            changes["batch_size"] = batch_size
        if width is not None:
            changes["hidden"] = tuple(max(1, round(h * width)) for h in self.hidden)
        return replace(self, **changes) if changes else self

    def builders(self):
        return importlib.import_module(self.model_module)

    def layers(self) -> list | None:
        """Each layer's one name and shapes (workloads.layer_specs), or None for a workload
        whose model module names no layers."""
        make = getattr(self.builders(), "layers", None)
        return None if make is None else make(self)
