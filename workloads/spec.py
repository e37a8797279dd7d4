"""What a workload is, independent of any framework: model, data, loss and optimizer settings."""
from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkloadSpec:
    name: str
    description: str
    model_module: str          # module with build_torch(spec) and build_keras(spec)
    input_shape: tuple[int, ...]
    num_classes: int
    hidden: tuple[int, ...] = ()
    batch_size: int = 256
    learning_rate: float = 1e-4
    optimizer: str = "rmsprop"
    loss: str = "cross_entropy"
    seed: int = 0

    def builders(self):
        return importlib.import_module(self.model_module)
