"""The `torchscript` variant's compiler: torch.jit.script, else torch.jit.trace on the first batch."""
from __future__ import annotations

import time
import warnings

from gapscope.profilers.errors import UnsupportedVariantError


class LazyTorchScript:
    """Calls the model through TorchScript, compiled at its first call as torch.compile
    compiles: the scripting or tracing then lands in the first warm-up step, and the profiling
    executor's optimisation of the next calls in the ones after it, so that both are reported
    as compile time, outside the steady steps. Tracing needs an example batch, too."""

    def __init__(self, model):
        self.model = model
        self.compiled = None
        self.facts: dict = {}   # for the manifest: which path it took, how long, why

    def __call__(self, inputs):
        if self.compiled is None:
            self.compiled, self.facts = torchscript(self.model, inputs)
        return self.compiled(inputs)


def torchscript(model, example) -> tuple[object, dict]:
    """(compiled module, facts). Scripting keeps the model's Python control flow; where it
    cannot compile the model, tracing records the ops one example ran, which is refused when
    the tracer warns that the recording would not hold for other inputs."""
    import torch
    started = time.perf_counter()
    try:
        compiled, facts = torch.jit.script(model), {"torchscript": "script"}
    except Exception as exc:  # scripting raises many types (NotSupportedError, RuntimeError, ...)
        error = f"{type(exc).__name__}: {first_line(exc)}"
        compiled = _traced(model, example, error)
        facts = {"torchscript": "trace", "torchscript_script_error": error}
    facts["torchscript_ms"] = round((time.perf_counter() - started) * 1000.0, 3)
    if not isinstance(compiled, torch.jit.ScriptModule):
        # PYTORCH_JIT=0 makes script and trace hand the model back as it is: it would run eager.
        raise UnsupportedVariantError("torchscript: TorchScript is disabled in this process "
                                      "(PYTORCH_JIT=0); the model would run eager")
    return compiled, facts


def _traced(model, example, script_error: str):
    import torch
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        traced = torch.jit.trace(model, example)
    tracer = [w for w in caught if issubclass(w.category, torch.jit.TracerWarning)]
    for other in (w for w in caught if w not in tracer):  # not ours to swallow
        warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
    if tracer:
        # A Python branch on a tensor's value (seed 001's `if x.mean() > 0.5`), a
        # nondeterministic op: the trace would replay one example's path on every batch.
        raise UnsupportedVariantError(
            f"torchscript: torch.jit.script failed ({script_error}) and torch.jit.trace would be "
            f"wrong for other inputs: {first_line(tracer[0].message)}")
    return traced


def first_line(message) -> str:
    lines = [line.strip() for line in str(message).splitlines() if line.strip()]
    return (lines[0] if lines else type(message).__name__)[:300]
