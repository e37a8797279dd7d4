"""A torch trace may hold only so many events for its size on disk: a small gzip of millions of
tiny valid events is refused in one line before it fills memory, and an env var raises the cap."""
from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gapscope.analysis.readers.torch_trace import MAX_EVENTS_ENV, MIN_EVENTS, read_torch_trace
from gapscope.profilers.errors import GapscopeInputError, TraceFormatError

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "marked_two_steps.pt.trace.json"
_EVENT = b'{"ph":"X","name":"a","ts":1,"dur":1,"pid":1,"tid":1}'


def _tiny_events_gzip(path: Path, events: int) -> Path:
    with gzip.open(path, "wb", compresslevel=6) as out:
        out.write(b'{"traceEvents":[')
        block = (_EVENT + b",") * 100_000
        for _ in range(events // 100_000 - 1):
            out.write(block)
        out.write((_EVENT + b",") * 99_999 + _EVENT + b"]}")
    return path


def test_a_gzip_of_tiny_events_is_refused_in_one_line_with_bounded_memory(tmp_path):
    bomb = _tiny_events_gzip(tmp_path / "bomb.pt.trace.json.gz", 3 * MIN_EVENTS)
    assert bomb.stat().st_size < 2 << 20  # 6 M events in under 2 MB
    env = {k: v for k, v in os.environ.items() if k != MAX_EVENTS_ENV}
    code = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:], capture_output=True,"
            " text=True); print(p.returncode); print(p.stderr.strip()); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    out = subprocess.run([sys.executable, "-c", code, sys.executable, str(ROOT / "cli.py"),
                          "breakdown", str(bomb)], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=300).stdout.splitlines()
    rc, stderr, peak_kib = int(out[0]), out[1:-1], int(out[-1])
    assert rc == 2 and len(stderr) == 1, stderr
    assert f"over {MIN_EVENTS:,} events" in stderr[0] and f"set {MAX_EVENTS_ENV}=N" in stderr[0]
    assert peak_kib < 1 << 20, f"{peak_kib >> 10} MiB"  # main took 3 GB on 20 M such events


def test_the_env_var_sets_the_cap(monkeypatch):
    monkeypatch.setenv(MAX_EVENTS_ENV, "3")
    with pytest.raises(TraceFormatError, match=f"over 3 events.*{MAX_EVENTS_ENV}=N"):
        read_torch_trace(FIXTURE)
    monkeypatch.setenv(MAX_EVENTS_ENV, "1000")
    assert len(read_torch_trace(FIXTURE).events) > 3
    for bad in ("many", "-1", "0", "9" * 40):
        monkeypatch.setenv(MAX_EVENTS_ENV, bad)
        with pytest.raises(GapscopeInputError, match=MAX_EVENTS_ENV):
            read_torch_trace(FIXTURE)
