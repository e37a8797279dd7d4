"""What `gapscope list` shows: workloads with parameter counts per framework, frameworks and
their variants, as plain data."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import asdict

from gapscope.workloads.registry import FRAMEWORKS, WORKLOADS
from gapscope.workloads.variants import PATTERN_HELP, VARIANTS, names_for


def catalog(count_parameters: bool = True, progress=lambda message: None) -> dict:
    counts = parameter_counts(progress) if count_parameters else {}
    return {
        "workloads": [{**{k: v for k, v in asdict(spec).items() if k != "model_module"},
                       "parameters": counts.get(spec.name, {})} for spec in WORKLOADS.values()],
        "frameworks": list(FRAMEWORKS),
        "variants": {framework: names_for(framework) for framework in FRAMEWORKS},
        "variant_help": {**{v.name: v.description for v in VARIANTS.values()}, **PATTERN_HELP},
    }


def parameter_counts(progress=lambda message: None) -> dict[str, dict[str, int]]:
    """Trainable parameters of every workload as each framework builds it. Keras on torch
    is counted in its own process: Keras fixes its backend at import. `progress` hears each
    step (seconds in all: the frameworks' imports and every model built)."""
    from gapscope.workloads.models.params import keras_parameters, torch_parameters
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    progress("counting parameters: importing Keras and TensorFlow")
    with _native_stderr_silenced():
        import keras  # noqa: F401  (TensorFlow with it)
    counts = {}
    for i, spec in enumerate(WORKLOADS.values(), start=1):
        progress(f"counting parameters: {spec.name} ({i}/{len(WORKLOADS)}, torch and keras)")
        builders = spec.builders()
        keras_count = keras_parameters(builders.build_keras(spec))
        counts[spec.name] = {"torch": torch_parameters(builders.build_torch(spec)),
                             "keras": keras_count, "tf": keras_count}
    progress("counting parameters: every workload in keras-torch (its own process)")
    for name, count in _keras_torch_counts().items():
        counts[name]["keras-torch"] = count
    return counts


@contextlib.contextmanager
def _native_stderr_silenced():
    """TensorFlow's C++ writes INFO lines at import ('oneDNN custom operations are on') through
    absl before its log level applies, straight to fd 2: a JSON listing is no place for them.
    Python's own errors still raise."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _keras_torch_counts() -> dict[str, int]:
    code = ("from gapscope.profilers import strict_json; from gapscope.workloads.registry import WORKLOADS; "
            "from gapscope.workloads.models.params import keras_parameters; "
            "print(strict_json.dumps({n: keras_parameters(s.builders().build_keras(s)) "
            "for n, s in WORKLOADS.items()}))")
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])
