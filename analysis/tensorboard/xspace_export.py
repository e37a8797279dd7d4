"""Writes a torch run's trace as an XSpace where TensorBoard's profile plugin lists it, so XProf's
Trace Viewer shows torch runs as it shows Keras runs, gapscope's phases above the ops."""
from __future__ import annotations

import re
import socket
from pathlib import Path

from analysis.readers.run_dir import exported_xspace_dir
from analysis.renderers.traces import xspace
from analysis.model.run import Run
from profilers.run_dir import write_atomic


def write_torch_xspace(run: Run) -> Path | None:
    """`<run>/plugins/profile/gapscope/<host>.xplane.pb`, replaced if there; None for a run with
    no torch trace (a TF run's profiler wrote its XSpace itself)."""
    if run.trace_file is None or run.trace_file not in run.located.torch_traces:
        return None
    # The plugin reads the host from the file name: the part before ".xplane.pb".
    host = re.sub(r"[^\w.-]", "_", str(run.manifest.get("host") or socket.gethostname()))
    folder = exported_xspace_dir(run.path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{host}.xplane.pb"
    write_atomic(path, xspace.render(run.trace, run.timeline, host))
    return path
