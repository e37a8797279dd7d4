"""Seed 000's motivating case, an LSTM forecaster (window of a series in, next value out), in torch and Keras.
Layers are named by `layers(spec)`: lstm, output, loss."""
from __future__ import annotations

from dataclasses import replace

from gapscope.workloads.layer_specs import LayerSpec, dense_layers, loss_layer


def layers(spec) -> list[LayerSpec]:
    steps, features = spec.input_shape
    units = spec.hidden[0]
    recurrent = LayerSpec("lstm", "lstm", {"steps": steps, "inputs": features, "units": units},
                          input_grad=False)
    head = dense_layers(replace(spec, hidden=()), units, True)
    return [recurrent, *head, loss_layer(spec)]


def build_torch(spec):
    import torch
    from torch import nn

    class Forecaster(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(spec.input_shape[-1], spec.hidden[0], batch_first=True)
            _single_bias(self.lstm)
            self.output = nn.Linear(spec.hidden[0], spec.outputs)

        def forward(self, x):
            sequence, _ = self.lstm(x)
            return self.output(sequence[:, -1])

    def _single_bias(lstm):
        # torch's LSTM adds two bias vectors (b_ih + b_hh) where Keras' has one; the sum is all
        # that matters, so b_hh becomes a zero buffer: the same function, the same parameter
        # count, and still the fused cuDNN / oneDNN kernel (a hand-written cell would not be).
        for name in [n for n in lstm._flat_weights_names if n.startswith("bias_hh")]:
            zeros = torch.zeros_like(getattr(lstm, name))
            delattr(lstm, name)
            lstm.register_buffer(name, zeros)
        lstm._init_flat_weights()

    return Forecaster()


def build_keras(spec):
    import keras
    # Keras' defaults (tanh, sigmoid gates, a bias, no recurrent dropout) keep the cuDNN path.
    return keras.Sequential([keras.Input(spec.input_shape),
                             keras.layers.LSTM(spec.hidden[0], name="lstm"),
                             keras.layers.Dense(spec.outputs, name="output")], name=spec.name)
