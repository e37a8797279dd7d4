"""One name and one shape description per layer of a workload, shared by the torch and the Keras
builders (module attribute names, Keras `name=`) and by the analytic FLOP counts."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

LAYER_KINDS = ("conv2d", "maxpool2d", "flatten", "dense", "lstm", "batchnorm", "relu", "dropout",
               "loss")


@dataclass(frozen=True)
class LayerSpec:
    """One layer as both frameworks build it. An activation one framework fuses into a layer
    (Keras' `activation="relu"`) is part of that layer in both: `activation` says so."""

    name: str
    kind: str
    dims: dict = field(default_factory=dict)  # per kind, see analysis.measures.layer_flops
    activation: str | None = None
    # False for the first layer with weights: no gradient flows to the model's input, so its
    # backward computes the weights' gradient only (both frameworks skip the input's).
    input_grad: bool = True

    def __post_init__(self):
        if self.kind not in LAYER_KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is not one of {LAYER_KINDS}")

    def to_dict(self) -> dict:
        return asdict(self)


def loss_layer(spec) -> LayerSpec:
    """The loss, named `loss` in every framework (Keras' compile_loss scope, torch's loss module)."""
    return LayerSpec("loss", "loss", {"loss": spec.loss, "outputs": spec.outputs})


def dense_layers(spec, inputs: int, first_has_input_grad: bool) -> list[LayerSpec]:
    """The hidden dense layers (`dense1`, …, ReLU fused) and the last one: `logits` for a
    classifier, `output` for a regressor."""
    found = []
    for index, width in enumerate(spec.hidden, start=1):
        found.append(LayerSpec(f"dense{index}", "dense", {"inputs": inputs, "units": width},
                               "relu", first_has_input_grad or index > 1))
        inputs = width
    last = "logits" if spec.task == "classification" else "output"
    found.append(LayerSpec(last, "dense", {"inputs": inputs, "units": spec.outputs},
                           input_grad=first_has_input_grad or bool(spec.hidden)))
    return found
