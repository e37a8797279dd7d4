"""Analytic FLOPs of one layer's forward and backward for one batch, from its shapes (the
manifest's `layers`, written from workloads.layer_specs).

The rules (docs/reference.md, "Layers"):
- a multiply-add is 2 FLOPs; an elementwise operation (bias add, ReLU, a comparison, exp) is 1
  FLOP per element it writes;
- conv and dense backward compute the input's gradient and the weights' gradient, each as many
  multiply-adds as the forward: 2x the forward's GEMM, 1x for the first layer (no gradient
  flows to the model's input); plus the bias gradient and the activation's gradient, one
  FLOP per output element each;
- an LSTM step's gates are x·W + h·U + b (4 gates); forward per step and sample
  2·4u(in+u) + 4u (bias) + 9u (3 sigmoids, 2 tanh, 3 products, 1 sum); backward
  2× the GEMM (the input's part 1× for a first layer), the 9u elementwise again and 4u for
  the bias' gradient;
- 2x2 max pooling: 3 comparisons per output forward, one write per input element backward;
- cross-entropy from logits: 4 FLOPs per logit (max, subtract, exp, sum) + 2 per sample
  (log, pick) forward, 2 per logit backward (softmax minus one-hot, scale); MSE 3 per output
  forward (subtract, square, sum), 2 backward;
- flatten moves no data: 0;
- batch norm in training, per element: forward 8 (mean 1, variance 3, normalise 2, scale and
  shift 2), backward 8 (the two sums 3, the input's gradient 4, the scale's 1); ReLU 1 per
  element each way; dropout 2 forward (draw's compare, scale) and 1 backward (the mask).

A user's own model's layers (kind `module`, gapscope.model_layers) carry FLOPs counted by torch's
FlopCounterMode on one step of the run instead: per step, whatever the manifest's batch size."""
from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass

from gapscope.analysis.events.trace import Trace
from gapscope.analysis.readers.torch_records import FLOPS_KEY


@dataclass(frozen=True)
class LayerFlops:
    forward: int
    backward: int
    gemm_forward: int  # the multiply-add part of forward alone, what torch's profiler counts


def spec_flops(layer: dict | None, batch) -> LayerFlops | None:
    """A manifest layer's FLOPs per step: counted ones as they are, else by the rules where the
    batch size is known; None without either."""
    if not layer:
        return None
    if layer.get("kind") == "module":
        dims = layer.get("dims") or {}
        forward, backward = dims.get("forward_flop"), dims.get("backward_flop")
        if not isinstance(forward, int) or not isinstance(backward, int):
            return None
        return LayerFlops(forward, backward, forward)  # the counter counts GEMM-like ops only
    return layer_flops(layer, batch) if isinstance(batch, int) and has_rule(layer) else None


def has_rule(layer: dict) -> bool:
    """Whether a rule counts the layer (a user's Keras model lists its other layers by class)."""
    return layer.get("kind") in _COUNTS


def layer_flops(layer: dict, batch: int) -> LayerFlops:
    kind, dims = layer["kind"], layer.get("dims", {})
    count = _COUNTS.get(kind)
    if count is None:
        raise ValueError(f"no FLOP rule for a {kind!r} layer")
    return count(dims, batch, layer.get("activation") is not None, layer.get("input_grad", True))


def _conv2d(d: dict, batch: int, activated: bool, input_grad: bool) -> LayerFlops:
    out_h, out_w = d["height"] - d["kernel"] + 1, d["width"] - d["kernel"] + 1
    outputs = batch * out_h * out_w * d["out_channels"]
    gemm = 2 * outputs * d["kernel"] ** 2 * d["in_channels"]
    return _weighted(gemm, outputs, activated, input_grad)


def _dense(d: dict, batch: int, activated: bool, input_grad: bool) -> LayerFlops:
    outputs = batch * d["units"]
    return _weighted(2 * outputs * d["inputs"], outputs, activated, input_grad)


def _weighted(gemm: int, outputs: int, activated: bool, input_grad: bool) -> LayerFlops:
    elementwise = outputs * (1 + activated)  # bias, then the activation
    return LayerFlops(gemm + elementwise, gemm * (2 if input_grad else 1) + elementwise, gemm)


def _lstm(d: dict, batch: int, activated: bool, input_grad: bool) -> LayerFlops:
    units, inputs, cells = d["units"], d["inputs"], batch * d["steps"]
    input_gemm, recurrent_gemm = 2 * 4 * units * inputs * cells, 2 * 4 * units * units * cells
    elementwise = (4 + 9) * units * cells
    backward = (input_gemm * (2 if input_grad else 1) + 2 * recurrent_gemm
                + 9 * units * cells + 4 * units * cells)  # the gates' and the bias' gradients
    return LayerFlops(input_gemm + recurrent_gemm + elementwise, backward,
                      input_gemm + recurrent_gemm)


def _maxpool2d(d: dict, batch: int, activated: bool, input_grad: bool) -> LayerFlops:
    size = d["size"]
    inputs = batch * d["height"] * d["width"] * d["channels"]
    outputs = batch * (d["height"] // size) * (d["width"] // size) * d["channels"]
    return LayerFlops((size * size - 1) * outputs, inputs, 0)


def _flatten(d: dict, batch: int, activated: bool, input_grad: bool) -> LayerFlops:
    return LayerFlops(0, 0, 0)


def _loss(d: dict, batch: int, activated: bool, input_grad: bool) -> LayerFlops:
    values = batch * d["outputs"]
    if d["loss"] == "cross_entropy":
        return LayerFlops(4 * values + 2 * batch, 2 * values, 0)
    return LayerFlops(3 * values, 2 * values, 0)


def _elementwise(forward: int, backward: int):
    def count(d: dict, batch: int, activated: bool, input_grad: bool) -> LayerFlops:
        values = batch * d["features"]
        return LayerFlops(forward * values, backward * values, 0)
    return count


_COUNTS = {"conv2d": _conv2d, "dense": _dense, "lstm": _lstm, "maxpool2d": _maxpool2d,
           "flatten": _flatten, "loss": _loss, "batchnorm": _elementwise(8, 8),
           "relu": _elementwise(1, 1), "dropout": _elementwise(2, 1)}


def layer_params(layer: dict) -> int:
    """Weights and biases of a layer from its shapes: conv k·k·in·out + out, dense in·units + units,
    LSTM 4·units·(in + units) + 4·units (one bias per gate, as Keras; torch keeps two, 4·units
    more), batch norm 2 per feature (scale and shift; the running statistics are no parameters),
    none for pooling, flatten, ReLU, dropout and the loss. A layer no rule knows has the count
    it kept: a user's torch module (gapscope.model_layers) or Keras layer (`params`), else 0."""
    kind, d = layer["kind"], layer.get("dims", {})
    if kind == "module":  # counted on the module itself (gapscope.model_layers)
        return d.get("params") if isinstance(d.get("params"), int) else 0
    if kind not in _COUNTS:
        return int(layer.get("params") or 0)
    if kind == "conv2d":
        return d["kernel"] ** 2 * d["in_channels"] * d["out_channels"] + d["out_channels"]
    if kind == "dense":
        return d["inputs"] * d["units"] + d["units"]
    if kind == "lstm":
        return 4 * d["units"] * (d["inputs"] + d["units"]) + 4 * d["units"]
    if kind == "batchnorm":
        return 2 * d["features"]
    return 0


def traced_layer_flops(trace: Trace, spans: list[tuple[float, float, str, str, int]], steps: int) -> dict[str, LayerFlops]:
    """Each layer's FLOPs per step from the matrix products that ran in its time (layer_spans:
    forward inside its range, backward inside the autograd nodes linked to it), their FLOPs
    from the trace's Input Dims (record_shapes, readers.torch_records); {} where the trace has none.
    Only matrix products count (what torch's FLOP counter counts for Linear and attention layers)."""
    found = trace.metadata.get(FLOPS_KEY)
    if not spans or steps < 1 or found is None:
        return {}
    starts = [s[0] for s in spans]
    totals: dict[str, dict[str, int]] = defaultdict(lambda: {"forward": 0, "backward": 0})
    for start_us, flops in zip(found[0].tolist(), found[1].tolist()):
        i = bisect.bisect_right(starts, start_us) - 1
        if i >= 0 and start_us < spans[i][1]:
            totals[spans[i][2]][spans[i][3]] += flops
    return {name: LayerFlops(t["forward"] // steps, t["backward"] // steps, t["forward"] // steps)
            for name, t in totals.items()}
