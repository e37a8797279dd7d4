"""The workloads gapscope knows, by name, and the framework paths that can run them."""
from __future__ import annotations

import importlib.util

from gapscope.profilers.errors import GapscopeInputError
from gapscope.workloads.spec import WorkloadSpec

FRAMEWORKS = ("torch", "keras", "keras-torch", "keras-jax", "tf")

WORKLOADS = {
    spec.name: spec for spec in (
        WorkloadSpec(
            name="linreg",
            description="seeds 001/003: 1 -> 1 linear regression on y = 2x + 1 + noise, SGD 0.01, MSE",
            model_module="gapscope.workloads.models.linreg",
            input_shape=(1,),
            num_classes=0,
            task="regression",
            loss="mse",
            optimizer="sgd",
            learning_rate=0.01,
            # Keras' fit default batch, as the seeds' model.fit calls use; 100,000 as in seed 003.
            batch_size=32,
            data="linear_noise",
            samples=100_000,
        ),
        WorkloadSpec(
            name="mlp",
            description="seed 000 example 1: 100 -> 128 ReLU -> 10, RMSprop 1e-4, cross-entropy",
            model_module="gapscope.workloads.models.mlp",
            input_shape=(100,),
            num_classes=10,
            hidden=(128,),
        ),
        WorkloadSpec(
            name="mlp_bn_dropout",
            description="seed 000 example 2: 100 -> 256 BN ReLU Dropout(0.5) -> 128 BN ReLU "
                        "Dropout(0.5) -> 10, RMSprop 1e-3, cross-entropy",
            model_module="gapscope.workloads.models.mlp_bn_dropout",
            input_shape=(100,),
            num_classes=10,
            hidden=(256, 128),
            # The seed's learning rate: at 1e-4 the dropout noise hides the fall over 50 steps.
            learning_rate=1e-3,
        ),
        WorkloadSpec(
            name="cnn",
            description="seed 002: the blog's MNIST CNN, Conv 32-32-pool-32-64 (3x3) -> Dense 128 "
                        "-> 10, 563,018 parameters, BS 256, RMSprop 1e-4, cross-entropy",
            model_module="gapscope.workloads.models.cnn",
            input_shape=(28, 28, 1),
            num_classes=10,
            hidden=(128,),
            data="mnist",
            samples=60_000,
        ),
        WorkloadSpec(
            name="lstm",
            description="seed 000's motivating case: LSTM(64) forecaster, 32 steps of a noisy sine "
                        "-> next value, RMSprop 1e-3, MSE",
            model_module="gapscope.workloads.models.lstm",
            input_shape=(32, 1),
            num_classes=0,
            hidden=(64,),
            task="regression",
            loss="mse",
            learning_rate=1e-3,
            data="sine_sequences",
            samples=20_000,
        ),
        WorkloadSpec(
            name="dynamic",
            description="seed 001 example 3: Linear(10, 10) if mean(x) > 0.5 else ReLU, then "
                        "-> 1; data-dependent control flow, SGD 0.01, MSE",
            model_module="gapscope.workloads.models.dynamic",
            input_shape=(10,),
            num_classes=0,
            task="regression",
            loss="mse",
            optimizer="sgd",
            learning_rate=0.01,
            data="mean_switch",
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
    missing = missing_extra(framework)
    if missing:
        raise GapscopeInputError(missing)
    return framework


def missing_extra(framework: str) -> str | None:
    """Why a framework path cannot run here, in one line, where its optional extra is absent:
    JAX is not in the base set-up (and must be a CPU build on a CPU machine)."""
    if framework == "keras-jax" and importlib.util.find_spec("jax") is None:
        return ("--framework keras-jax needs JAX, which is not installed: pip install -e '.[jax]' "
                "(a CPU jax/jaxlib)")
    return None
