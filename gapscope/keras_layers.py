"""The layers of a user's Keras model as a run's manifest lists them (workloads.layer_specs' form):
its top-level layers by their own names, with the shapes a FLOP rule needs where one applies."""
from __future__ import annotations

# Activations the FLOP rules count (layer_flops: one per element, as ReLU); others (GELU,
# softmax) cost more than that, so a layer with one gets no FLOPs rather than too few.
_COUNTED_ACTIVATIONS = {"linear": None, "relu": "relu"}
# Keras losses the rules know: cross-entropy computed from logits, mean squared error.
_CROSS_ENTROPY = ("SparseCategoricalCrossentropy", "CategoricalCrossentropy")
LOSS = "loss"  # the name analysis gives Keras' compile_loss scope (layer_times)


def keras_layers(model) -> list[dict]:
    """Each top-level layer of a built model (nested layers inside their top-level one, as the
    TF scopes `…/<model>/<layer>/…` and the torch backend's module hooks place them), then the
    loss: {"name", "kind", "dims", "activation", "input_grad", "params"}; "kind" is a
    layer_flops kind where the layer's shapes fit its rule, else the Keras class name."""
    import keras
    found, weighted = [], False
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        spec = _spec(layer)
        params = int(layer.count_params()) if layer.built else None
        # No gradient flows to the model's input: the first layer with weights computes its
        # weights' gradient only (layer_flops' input_grad).
        spec.update(name=layer.name, params=params, input_grad=weighted)
        weighted = weighted or bool(params)
        found.append(spec)
    found.append({"name": LOSS, **_loss(model, found), "params": 0})
    return found


def _input_shape(layer) -> tuple | None:
    """The shape the layer was built for (batch first, None), from Keras' own build record."""
    config = layer.get_build_config() if layer.built else None
    shape = (config or {}).get("input_shape")
    if isinstance(shape, (list, tuple)) and all(d is None or isinstance(d, int) for d in shape):
        return tuple(shape)
    return None


def _spec(layer) -> dict:
    """The rule's kind and dims for the layers layer_flops counts, in the shapes its rules assume
    (dense on (batch, features), 2-D convolution valid and stride 1, square 2x2 pooling); else
    the class name alone."""
    import keras
    L = keras.layers
    shape = _input_shape(layer)
    other = {"kind": type(layer).__name__, "dims": {}, "activation": None}
    if shape is None or any(d is None for d in shape[1:]):
        return other
    activation = getattr(getattr(layer, "activation", None), "__name__", "linear")
    if isinstance(layer, (L.Dense, L.Conv2D)) and activation not in _COUNTED_ACTIVATIONS:
        return other
    act = _COUNTED_ACTIVATIONS.get(activation)
    if isinstance(layer, L.Dense) and len(shape) == 2:
        return {"kind": "dense", "dims": {"inputs": shape[1], "units": layer.units}, "activation": act}
    if (isinstance(layer, L.Conv2D) and len(shape) == 4 and layer.data_format == "channels_last"
            and layer.padding == "valid" and tuple(layer.strides) == (1, 1)
            and tuple(layer.dilation_rate) == (1, 1) and layer.groups == 1
            and layer.kernel_size[0] == layer.kernel_size[1]):
        return {"kind": "conv2d", "dims": {"kernel": layer.kernel_size[0], "in_channels": shape[3],
                                           "out_channels": layer.filters, "height": shape[1],
                                           "width": shape[2]}, "activation": act}
    if (isinstance(layer, L.MaxPooling2D) and len(shape) == 4 and tuple(layer.pool_size) == (2, 2)
            and tuple(layer.strides) == (2, 2) and layer.padding == "valid"
            and layer.data_format == "channels_last"):
        return {"kind": "maxpool2d", "dims": {"size": 2, "height": shape[1], "width": shape[2],
                                              "channels": shape[3]}, "activation": None}
    if isinstance(layer, L.Flatten):
        return {"kind": "flatten", "dims": {}, "activation": None}
    if isinstance(layer, L.LSTM) and len(shape) == 3 and activation == "tanh":
        return {"kind": "lstm", "dims": {"inputs": shape[2], "units": layer.units, "steps": shape[1]},
                "activation": None}
    elementwise = {L.BatchNormalization: "batchnorm", L.ReLU: "relu", L.Dropout: "dropout"}
    kind = next((k for cls, k in elementwise.items() if isinstance(layer, cls)), None)
    if kind and len(shape) == 2:
        return {"kind": kind, "dims": {"features": shape[1]}, "activation": None}
    return other


def _loss(model, layers: list[dict]) -> dict:
    """The loss's rule where Keras' compiled loss is one the rules know and the last layer says
    how many outputs it scores; else its class name."""
    loss = getattr(model, "loss", None)
    name = loss if isinstance(loss, str) else type(loss).__name__
    last = layers[-1] if layers else {}
    outputs = last.get("dims", {}).get("units") if last.get("kind") == "dense" else None
    if outputs and name in _CROSS_ENTROPY and getattr(loss, "from_logits", False):
        return {"kind": "loss", "dims": {"loss": "cross_entropy", "outputs": outputs}, "activation": None}
    if outputs and name in ("mse", "mean_squared_error", "MeanSquaredError"):
        return {"kind": "loss", "dims": {"loss": "mse", "outputs": outputs}, "activation": None}
    return {"kind": name, "dims": {}, "activation": None}
