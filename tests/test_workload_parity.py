"""Every workload has the same parameter count in torch and Keras (TF and torch backends) and the right output shape."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gapscope.workloads.registry import WORKLOADS

# The blog's CNN "had around 563,000 parameters"; the issue allows 2 %.
BLOG_CNN_PARAMETERS = 563_000
ROOT = Path(__file__).resolve().parent.parent

# Run with KERAS_BACKEND=torch: builds every Keras model, counts it and runs one batch.
_KERAS_TORCH_PROBE = """
import json
import keras
from gapscope.workloads.data import load_dataset
from gapscope.workloads.models.params import keras_parameters
from gapscope.workloads.registry import WORKLOADS
assert keras.backend.backend() == "torch", keras.backend.backend()
found = {}
for spec in WORKLOADS.values():
    x, _ = load_dataset(spec, samples=spec.batch_size)
    model = spec.builders().build_keras(spec)
    found[spec.name] = [keras_parameters(model), list(model(x).shape)]
print(json.dumps(found))
"""


@pytest.fixture(scope="module", autouse=True)
def data_cache(tmp_path_factory):
    # Tests never write the user's ~/.cache; the keras-torch subprocess reads the same files.
    folder = tmp_path_factory.mktemp("data-cache")
    previous = os.environ.get("GAPSCOPE_CACHE")
    os.environ["GAPSCOPE_CACHE"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("GAPSCOPE_CACHE")
    else:
        os.environ["GAPSCOPE_CACHE"] = previous


@pytest.fixture(scope="module")
def keras_tf():
    if "keras" not in sys.modules:  # the backend is fixed at import; choose it before that
        os.environ["KERAS_BACKEND"] = "tensorflow"
    import keras
    if keras.backend.backend() != "tensorflow":
        pytest.skip(f"keras already imported with the {keras.backend.backend()} backend")
    return keras


def _batch(spec):
    from gapscope.workloads.data import load_dataset
    return load_dataset(spec, samples=spec.batch_size)[0]


def _torch_model(spec):
    import torch
    torch.manual_seed(spec.seed)
    return spec.builders().build_torch(spec)


@pytest.fixture(scope="module")
def torch_results():
    """Parameter count and output shape of every torch model, built once for all the tests."""
    import torch
    from gapscope.workloads.data import to_torch_layout
    from gapscope.workloads.models.params import torch_parameters
    results = {}
    for spec in WORKLOADS.values():
        model = _torch_model(spec).eval()
        with torch.no_grad():
            out = model(torch.from_numpy(to_torch_layout(_batch(spec))))
        results[spec.name] = [torch_parameters(model), list(out.shape)]
    return results


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_torch_and_keras_tf_agree(name, keras_tf, torch_results):
    from gapscope.workloads.models.params import keras_parameters
    spec = WORKLOADS[name]
    model = spec.builders().build_keras(spec)
    out = model(_batch(spec))
    assert keras_parameters(model) == torch_results[name][0] > 0
    assert list(out.shape) == torch_results[name][1] == [spec.batch_size, spec.outputs]


def test_keras_on_the_torch_backend_agrees(torch_results, data_cache):
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONPATH": str(ROOT),
           "GAPSCOPE_CACHE": str(data_cache), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([sys.executable, "-c", _KERAS_TORCH_PROBE], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == torch_results


def test_cnn_is_the_blogs_size(torch_results):
    parameters = torch_results["cnn"][0]
    assert abs(parameters - BLOG_CNN_PARAMETERS) <= 0.02 * BLOG_CNN_PARAMETERS, parameters


def test_torch_lstm_keeps_one_bias_and_its_fused_kernel():
    import torch
    spec = WORKLOADS["lstm"]
    model = _torch_model(spec)
    names = {name for name, _ in model.named_parameters()}
    assert "lstm.bias_ih_l0" in names and "lstm.bias_hh_l0" not in names
    assert not model.lstm.bias_hh_l0.any()
    # Gradients still reach the one bias through the fused LSTM op.
    out = model(torch.from_numpy(_batch(spec)))
    out.sum().backward()
    assert model.lstm.bias_ih_l0.grad is not None


def test_dynamic_model_takes_both_branches():
    """Batch means straddle the 0.5 threshold, so profiling sees both branches."""
    import numpy as np
    from gapscope.workloads.data import load_dataset
    from gapscope.workloads.models.dynamic import THRESHOLD
    spec = WORKLOADS["dynamic"]
    x, _ = load_dataset(spec)
    means = [x[i:i + spec.batch_size].mean() for i in range(0, len(x), spec.batch_size)]
    above = np.mean(np.array(means) > THRESHOLD)
    assert 0.2 < above < 0.8, above


@pytest.mark.parametrize("name", ["cnn", "mlp", "lstm"])
def test_layers_have_one_name_in_both_frameworks(name, keras_tf):
    """The spec's layer names are the torch model's module names and the Keras layers' names,
    and a layer's parameters are the same count in both (the ReLU fused into it adds none)."""
    import math
    spec = WORKLOADS[name]
    names = [layer.name for layer in spec.layers()]
    assert names[-1] == "loss"
    torch_model = _torch_model(spec)
    keras_model = spec.builders().build_keras(spec)
    torch_counts = {child: sum(p.numel() for p in module.parameters())
                    for child, module in torch_model.named_children()}
    keras_counts = {layer.name: sum(math.prod(w.shape) for w in layer.trainable_weights)
                    for layer in keras_model.layers}
    assert list(keras_counts) == names[:-1]
    assert torch_counts == keras_counts
