"""A vetted view of a logdir for TensorBoard's third-party plugins: a folder of links to the regular files that pass gapscope's checks, refreshed while the server runs."""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
from pathlib import Path

from gapscope.analysis.readers.safe_files import why_unreadable

# torch-tb-profiler rescans its logdir every 10 s; a file added to the real logdir is served
# within this many seconds, and a file that turned unsafe is withdrawn as fast.
REFRESH_S = 1.0
# Where TensorBoard's --logdir is the shadow, the folder gapscope's own plugin reads instead.
SOURCE_LOGDIR_ENV = "GAPSCOPE_TENSORBOARD_SOURCE"


def _outside(target: str, logdir: Path) -> str | None:
    """Why a file may not reach the plugins: a link out of the logdir (to /etc/passwd, say)
    would hand any file of the machine to third-party code that serves it."""
    if os.path.commonpath([target, str(logdir)]) != str(logdir):
        return "a link to a file outside the logdir"
    return None


class ShadowLogdir:
    """`source` mirrored under a temporary folder: real folders, and for each file a symlink to
    the file's resolved path, made only while that path is a readable regular file. A FIFO or a
    link to /dev/zero added after TensorBoard started never reaches its plugins (torch-tb-
    profiler read one to 12 GB). Symlinked folders are not followed, nor links to files outside
    it: a logdir cannot reach out of itself through the plugins."""

    def __init__(self, source: str | Path, refresh_s: float = REFRESH_S):
        self.source = Path(source).resolve()
        self.refresh_s = refresh_s
        self.path = Path(tempfile.mkdtemp(prefix="gapscope-tensorboard-logdir-"))
        # Shadow path -> the resolved file it links to; only these are ever removed, so a file
        # a plugin writes into its logdir (a cache) is left alone.
        self._links: dict[Path, str] = {}
        self.skipped: dict[Path, str] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "ShadowLogdir":
        self.refresh()
        self._thread = threading.Thread(target=self._run, name="gapscope-shadow-logdir", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        shutil.rmtree(self.path, ignore_errors=True)  # removes the links, never their targets

    def refresh(self) -> None:
        """Brings the shadow in line with the logdir now: links for new safe files, none for
        files gone or no longer safe (replaced by a FIFO, a link to a device)."""
        wanted: dict[Path, str] = {}
        skipped: dict[Path, str] = {}
        for folder, _, files in os.walk(self.source, followlinks=False):
            relative = Path(folder).relative_to(self.source)
            for name in files:
                original = Path(folder, name)
                # Resolved first, then checked: a link swapped in between cannot slip through.
                target = os.path.realpath(original)
                problem = (why_unreadable(original) or why_unreadable(target)
                           or _outside(target, self.source))
                if problem:
                    skipped[relative / name] = problem
                    continue
                wanted[self.path / relative / name] = target
        for link in [p for p in self._links if self._links[p] != wanted.get(p)]:
            self._unlink(link)
        for link, target in wanted.items():
            if link not in self._links:
                self._link(link, target)
        self.skipped = skipped

    def _run(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.refresh()
            except OSError:  # a folder removed while walked: the next pass sees the new state
                continue

    def _link(self, link: Path, target: str) -> None:
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target)
        except OSError:  # a name a plugin already wrote, or a file where a folder was
            return
        self._links[link] = target

    def _unlink(self, link: Path) -> None:
        self._links.pop(link, None)
        try:
            link.unlink()
        except OSError:
            pass
