"""What `gapscope list` shows: workloads with parameter counts per framework, frameworks and
their variants, as plain data."""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from dataclasses import asdict

from gapscope.workloads.registry import FRAMEWORKS, WORKLOADS, missing_extra
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
    """Trainable parameters of every workload as each framework builds it. Keras on torch and
    on JAX are counted in processes of their own: Keras fixes its backend at import. `progress` hears each
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
    # keras-jax only where its extra is installed: elsewhere it has no count to give.
    others = {"keras-torch": "torch", **({} if missing_extra("keras-jax") else {"keras-jax": "jax"})}
    progress(f"counting parameters: every workload in {' and '.join(others)} (processes of their own)")
    found = _other_backend_counts(list(others.values()))
    for framework, backend in others.items():
        for name, count in found[backend].items():
            counts[name][framework] = count
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


def _other_backend_counts(backends: list[str]) -> dict[str, dict[str, int]]:
    """Per Keras backend (torch, jax), every workload's parameters, each backend in a process of
    its own (Keras fixes its backend at import), the processes side by side."""
    code = ("from gapscope.profilers import strict_json; from gapscope.workloads.registry import WORKLOADS; "
            "from gapscope.workloads.models.params import keras_parameters; "
            "print(strict_json.dumps({n: keras_parameters(s.builders().build_keras(s)) "
            "for n, s in WORKLOADS.items()}))")
    started = {backend: subprocess.Popen([sys.executable, "-c", code], text=True,
                                         env={**os.environ, "KERAS_BACKEND": backend},
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for backend in backends}
    found = {}
    for backend, process in started.items():
        out, err = process.communicate()
        if process.returncode:
            raise subprocess.CalledProcessError(process.returncode, process.args, out, err)
        found[backend] = json.loads(out.strip().splitlines()[-1])
    return found
