"""Where a job that can be captured on demand says so, and the proof `capture --pid` asks of it
before it sends a signal: a per-user private folder holding one entry per job and its request."""
from __future__ import annotations

import os
import secrets
import signal
import stat
import tempfile
from pathlib import Path

from gapscope.profilers import state_json, strict_json
from gapscope.profilers.errors import GapscopeInputError

TRIGGER = signal.SIGUSR2  # SIGUSR1 is often the job's own (checkpoint-now in several launchers)
RUNTIME_ENV = "GAPSCOPE_RUNTIME_DIR"
MAX_ENTRY_BYTES = 64 << 10
# The most steps one window traces: torch.profiler holds every event of its window in memory
# until the window ends (10 million asked steps with profile_memory grew a job past 2 GB).
MAX_WINDOW_STEPS = 500

# Why a signal is safe to send. SIGUSR2's default action ends a process, so `capture --pid`
# signals only a process that proved it is the job that registered:
#  1. the folder is private: a directory (not a symlink) owned by this user, mode 0700, so no
#     other user can plant or alter an entry or a request (a folder someone else made first in
#     /tmp is refused, never used);
#  2. the entry is a regular 0600 file of this user with one link, naming the pid, its start
#     time and the descriptor the job keeps it open on;
#  3. /proc/PID/fd/<that descriptor> is that very file (same device and inode): only the process
#     that created the entry holds it, and create_time alone is public in /proc;
#  4. /proc/PID/status's SigCgt has SIGUSR2's bit: the process catches it, so even a mistake
#     cannot end it;
#  5. the signal goes through a pidfd opened before the checks: a pid reused in between is not
#     signalled.
# The entry also holds a random token; the request carries it and the job acts on a request only
# when it matches (a request left by an earlier process of the same pid is ignored). The request
# lives in the private folder too, so an entry cannot choose where it is written.


def runtime_dir() -> Path:
    """`$GAPSCOPE_RUNTIME_DIR`, else `$XDG_RUNTIME_DIR/gapscope`, else a per-user temp folder."""
    chosen = os.environ.get(RUNTIME_ENV)
    if chosen:
        return Path(chosen)
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg:
        return Path(xdg) / "gapscope"
    return Path(tempfile.gettempdir()) / f"gapscope-{os.getuid()}"


def entry_path(pid: int) -> Path:
    return runtime_dir() / f"{pid}.json"


def request_path(pid: int) -> Path:
    """The request for process `pid`'s next window, while one is asked for."""
    return runtime_dir() / f"{pid}.request.json"


def unsafe_folder(folder: Path) -> str | None:
    """Why `folder` is no private folder of this user (a symlink, someone else's, open to
    others), or None when it is one. A missing folder is FileNotFoundError."""
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode):
        return "a symlink"
    if not stat.S_ISDIR(info.st_mode):
        return "not a folder"
    if info.st_uid != os.getuid():
        return f"owned by uid {info.st_uid}, not by this user ({os.getuid()})"
    if stat.S_IMODE(info.st_mode) & 0o077:
        return f"mode {stat.S_IMODE(info.st_mode):o}, open to other users (want 700)"
    return None


class Registration:
    """The job's entry, held open for the job's life (the proof of point 3), and its token."""

    def __init__(self, path: Path, fd: int, token: str):
        self.path, self._fd, self.token = path, fd, token

    def close(self) -> None:
        self.path.unlink(missing_ok=True)
        request_path(os.getpid()).unlink(missing_ok=True)
        os.close(self._fd)


def register(run_dir: Path, unavailable: str | None = None) -> Registration | str:
    """Says that this process can be asked for a window, and where its run is (or, with
    `unavailable`, why it cannot be); returns why not when the folder is not private: the job
    then runs without on-demand capture."""
    import psutil
    folder = runtime_dir()
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot make {folder} ({exc.strerror or exc})"
    problem = unsafe_folder(folder)
    if problem:
        return f"{folder} is {problem}"
    pid, token = os.getpid(), secrets.token_hex(16)
    path, tmp = entry_path(pid), folder / f".{pid}.json.tmp"
    request_path(pid).unlink(missing_ok=True)  # an earlier process of this pid's
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        os.write(fd, strict_json.dumps({
            "pid": pid, "create_time": psutil.Process().create_time(), "fd": fd, "token": token,
            "run_dir": str(Path(run_dir).resolve()), "signal": TRIGGER.name,
            "unavailable": unavailable}).encode())
        os.replace(tmp, path)  # the descriptor follows the file: it stays the entry's
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return Registration(path, fd, token)


def proven_entry(pid: int) -> dict:
    """Process `pid`'s registration once it has proven itself (see the notes above); a one-line
    GapscopeInputError saying what is missing otherwise."""
    import psutil
    folder = runtime_dir()
    none = (f"process {pid} runs no gapscope capture that can be asked for a window (none "
            f"registered in {folder}): it must run gapscope.capture (torch), GapscopeCallback "
            "(Lightning) or capture_trainer (Hugging Face)")
    try:
        problem = unsafe_folder(folder)
    except FileNotFoundError:
        raise GapscopeInputError(none) from None
    if problem:
        raise GapscopeInputError(f"{folder} is {problem}: not trusted, no signal sent")
    path = entry_path(pid)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise GapscopeInputError(none) from None
    except OSError as exc:
        raise GapscopeInputError(f"{path}: not trusted ({exc.strerror or exc}), no signal sent") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid()
                or stat.S_IMODE(info.st_mode) & 0o077 or info.st_nlink != 1):
            raise GapscopeInputError(f"{path}: not a private file of this user, not trusted, no signal sent")
        data = handle.read(MAX_ENTRY_BYTES + 1)
    try:
        entry = state_json.loads(data, path)
        held = int(entry["fd"])
        created = float(entry["create_time"])
        token, run_dir = str(entry["token"]), Path(entry["run_dir"])
        same_pid = int(entry["pid"]) == pid
        unavailable = entry.get("unavailable")
    except (ValueError, KeyError, TypeError):  # StateFileError is a ValueError
        raise GapscopeInputError(none) from None
    try:
        started = psutil.Process(pid).create_time()
    except psutil.Error:
        raise GapscopeInputError(none) from None
    if not same_pid or abs(created - started) > 1.0 or not token:
        raise GapscopeInputError(none)  # left by an earlier process of the same number
    if unavailable and _holds(pid, held, info):
        raise GapscopeInputError(f"process {pid} runs a gapscope capture that cannot be asked for a "
                                 f"window: {str(unavailable)[:200]}")
    if not _holds(pid, held, info):
        raise GapscopeInputError(f"process {pid} does not hold its registration {path} open: "
                                 "it is not the gapscope job that registered, no signal sent")
    if not catches(pid, TRIGGER):
        raise GapscopeInputError(f"process {pid} does not catch {TRIGGER.name}, which would end it: "
                                 "not a gapscope job listening for a capture, no signal sent")
    try:
        run_info = os.lstat(run_dir)
    except OSError:
        run_info = None
    if run_info is None or not stat.S_ISDIR(run_info.st_mode) or run_info.st_uid != os.getuid():
        raise GapscopeInputError(f"process {pid}'s run directory {run_dir} is not a folder of this "
                                 "user, no signal sent")
    entry["run_dir"] = run_dir
    return entry


def _holds(pid: int, fd: int, info: os.stat_result) -> bool:
    """Whether process `pid` has the file `info` open as descriptor `fd`."""
    try:
        held = os.stat(f"/proc/{pid}/fd/{fd}")
    except (OSError, ValueError):
        return False
    return (held.st_dev, held.st_ino) == (info.st_dev, info.st_ino)


def catches(pid: int, signum: int) -> bool:
    """Whether /proc/PID/status says `pid` has a handler for `signum` (SigCgt: a hex mask, bit
    signum-1). False where it cannot be read (no /proc: no proof)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (int(signum) - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


class Trigger:
    """TRIGGER for `pid`, through a pidfd opened before the proof is checked where the system has
    one (Linux 5.3), so that a pid reused after the check is never the one signalled."""

    def __init__(self, pid: int):
        self.pid, self._pidfd = pid, None
        if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
            try:
                self._pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                raise GapscopeInputError(f"no process {pid}") from None
            except OSError:  # an older kernel: os.kill, the race then being microseconds wide
                self._pidfd = None

    def __enter__(self) -> "Trigger":
        return self

    def __exit__(self, *exc) -> None:
        if self._pidfd is not None:
            os.close(self._pidfd)

    def send(self) -> None:
        try:
            if self._pidfd is None:
                os.kill(self.pid, TRIGGER)
            else:
                signal.pidfd_send_signal(self._pidfd, TRIGGER)
        except ProcessLookupError:
            raise GapscopeInputError(f"process {self.pid} ended before it was asked") from None


def read_request(pid: int, token: str) -> dict | None:
    """The job's side: the request waiting for it, when it carries its token; None otherwise."""
    import hmac
    try:
        request = state_json.load(request_path(pid), MAX_ENTRY_BYTES)
    except (OSError, ValueError):
        return None
    if not isinstance(request, dict) or not hmac.compare_digest(str(request.get("token", "")), token):
        return None
    return request
