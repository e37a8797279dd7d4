"""What a run's variant recorded about how it ran (the TorchScript path it took), as breakdown notes."""
from __future__ import annotations

_PATHS = {"script": "torch.jit.script", "trace": "torch.jit.trace on the first batch"}


def variant_notes(manifest: dict) -> list[str]:
    """A manifest is read from disk: a field of the wrong type is left unsaid, never trusted."""
    taken = manifest.get("torchscript")
    if not isinstance(taken, str) or taken not in _PATHS:
        return []
    note = f"TorchScript: {_PATHS[taken]}"
    ms = manifest.get("torchscript_ms")
    if isinstance(ms, (int, float)) and not isinstance(ms, bool):
        note += f" ({ms:.0f} ms, inside compile)"
    error = manifest.get("torchscript_script_error")
    if taken == "trace" and isinstance(error, str) and error.strip():
        note += f"; torch.jit.script failed: {error.strip().splitlines()[0][:200]}"
    return [note]
