"""Reads a steps.csv that is still growing (a running job appends to it): only the complete
lines added since the last read, checked as steps.csv's rows are."""
from __future__ import annotations

import csv
import os
from pathlib import Path

from gapscope.analysis.readers import safe_files
from gapscope.analysis.readers.step_rows import checked_table
from gapscope.profilers.errors import TraceFormatError


class StepsFollower:
    """`new_rows()` returns the rows appended since its last call. A file replaced by a shorter
    one (the run's end rewrites it whole) is read again from its start: `restarted` says so."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._offset = 0
        self._header: list[str] | None = None
        self._inode = None
        self.restarted = False

    def new_rows(self) -> list[dict]:
        self.restarted = False
        if not os.path.lexists(self.path):
            return []  # not written yet
        # breakdown's checks: a FIFO or a link to /dev/zero is refused (never read, never waited
        # on), and a file over the side-file cap too, so a look costs a bounded read.
        try:
            with safe_files.open_regular(self.path, safe_files.MAX_SIDE_FILE_BYTES) as handle:
                info = os.fstat(handle.fileno())
                if self._inode is not None and (info.st_ino != self._inode or info.st_size < self._offset):
                    self._offset, self._header, self.restarted = 0, None, True
                self._inode = info.st_ino
                handle.seek(self._offset)
                data = handle.read(safe_files.MAX_SIDE_FILE_BYTES - self._offset)
        except OSError as exc:
            raise TraceFormatError(f"{self.path}: cannot read ({exc.strerror or exc})") from None
        complete = data[: data.rfind(b"\n") + 1]  # a line being written is read next time
        if not complete:
            return []
        self._offset += len(complete)
        try:
            lines = complete.decode().splitlines()
        except UnicodeDecodeError as exc:
            raise TraceFormatError(f"{self.path}: corrupt steps.csv ({exc})") from None
        if self._header is None:
            self._header, lines = next(csv.reader([lines[0]])), lines[1:]
            if not {"step", "step_ms"} <= set(self._header):
                raise TraceFormatError(f"{self.path}: not a gapscope steps.csv (no step and step_ms columns)")
        if not lines:
            return []
        return checked_table(self.path, self._header, list(csv.reader(lines)))[0]

