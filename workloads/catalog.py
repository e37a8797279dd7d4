"""What `gapscope list` shows: workloads, framework paths and variants, as plain data."""
from __future__ import annotations

from dataclasses import asdict

from workloads.registry import FRAMEWORKS, WORKLOADS

# Only the baseline exists so far: eager PyTorch, and Keras' tf.function without XLA.
VARIANTS = ("default",)


def catalog() -> dict:
    return {
        "workloads": [{k: v for k, v in asdict(spec).items() if k != "model_module"}
                      for spec in WORKLOADS.values()],
        "frameworks": list(FRAMEWORKS),
        "variants": list(VARIANTS),
    }
