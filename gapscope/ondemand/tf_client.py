"""`gapscope capture grpc://host:port[,...]`: TensorFlow's own on-demand capture, through the
profiler server a TF job started (tf.profiler.experimental.server.start) and its client."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.run_dir import ensure_out_dir

_ADDRESS = re.compile(r"(?:grpc://)?([A-Za-z0-9.\-\[\]:]+):(\d{1,5})")
MAX_DURATION_S = 600.0


def addresses(target: str) -> list[str]:
    """`grpc://host:port`, or several comma-separated (one per worker), as host:port."""
    found = []
    for part in target.split(","):
        match = _ADDRESS.fullmatch(part.strip())
        if not match or not 0 < int(match.group(2)) < 65536:
            raise GapscopeInputError(f"{part.strip() or target!r}: not a profiler server address "
                                     "(grpc://host:port, several separated by commas)")
        found.append(f"{match.group(1)}:{match.group(2)}")
    return found


def trace_servers(target: str, duration_s: float, out: str | Path) -> Path:
    """Traces the servers for `duration_s` into `out/tf-capture-<time>/plugins/profile/...`, the
    layout the readers and XProf read; returns that folder."""
    servers = addresses(target)
    if not 0 < duration_s <= MAX_DURATION_S:
        raise GapscopeInputError(f"--duration {duration_s:g} s: give more than 0 and at most "
                                 f"{MAX_DURATION_S:g} s")
    folder = ensure_out_dir(out) / f"tf-capture-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    folder.mkdir()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    try:
        tf.profiler.experimental.client.trace(",".join(f"grpc://{s}" for s in servers), str(folder),
                                              int(duration_s * 1000), num_tracing_attempts=1)
    except (tf.errors.OpError, RuntimeError) as exc:
        # An address nobody serves: RuntimeError('UNAVAILABLE: No trace event was collected ...')
        if not any(folder.rglob("*")):
            folder.rmdir()
        first_line = (str(getattr(exc, "message", None) or exc).splitlines() or [""])[0]
        raise GapscopeInputError(f"{','.join(servers)}: no trace from a TensorFlow profiler server "
                                 f"({first_line[:160]})") from None
    return folder
