"""Writes a run's trace as an XSpace where TensorBoard's profile plugin lists it, with gapscope's
phases above the ops in XProf's Trace Viewer: a torch run's trace converted, a TF run's own
profile with the phase lines added."""
from __future__ import annotations

import re
import socket
from pathlib import Path

from gapscope.analysis.readers import safe_files
from gapscope.analysis.readers.run_dir import exported_xspace_dir
from gapscope.analysis.renderers.traces import xspace
from gapscope.analysis.model.run import Run
from gapscope.analysis.results.layers import run_layer_spans
from gapscope.profilers.run_dir import write_atomic


def write_xspace(run: Run) -> Path | None:
    """`<run>/plugins/profile/gapscope/<host>.xplane.pb`, replaced if there; None for a run with
    no trace, or a TF profile without steps (there is no phase line to add)."""
    if run.trace_file is None:
        return None
    if run.trace_file in run.located.torch_traces:
        # The plugin reads the host from the file name: the part before ".xplane.pb".
        host = re.sub(r"[^\w.-]", "_", str(run.manifest.get("host") or socket.gethostname()))
        data = xspace.render(run.trace, run.timeline, host, run_layer_spans(run))
    elif run.timeline.steps:
        # A session of its own beside TF's: the profiler's file stays as it wrote it.
        host = run.trace_file.name[:-len(".xplane.pb")]
        data = xspace.with_phase_lines(safe_files.read_bytes(run.trace_file), run.timeline,
                                       run.trace.metadata["base_time_ns"])
    else:
        return None
    folder = exported_xspace_dir(run.path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{host}.xplane.pb"
    write_atomic(path, data)
    return path
