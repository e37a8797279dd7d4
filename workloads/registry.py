"""The workloads gapscope knows, by name, and the framework paths that can run them."""
from __future__ import annotations

from profilers.errors import GapscopeInputError
from workloads.spec import WorkloadSpec

FRAMEWORKS = ("torch", "keras")

WORKLOADS = {
    spec.name: spec for spec in (
        WorkloadSpec(
            name="mlp",
            description="seed 000 example 1: 100 -> 128 ReLU -> 10, RMSprop 1e-4, cross-entropy",
            model_module="workloads.models.mlp",
            input_shape=(100,),
            num_classes=10,
            hidden=(128,),
        ),
    )
}


def get_workload(name: str) -> WorkloadSpec:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise GapscopeInputError(
            f"unknown workload {name!r}; known: {', '.join(sorted(WORKLOADS))}") from None


def check_framework(framework: str) -> str:
    if framework not in FRAMEWORKS:
        raise GapscopeInputError(
            f"unknown framework {framework!r}; known: {', '.join(FRAMEWORKS)}")
    return framework
