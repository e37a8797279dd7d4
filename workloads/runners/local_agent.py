"""torchrun's part for a framework without one (TensorFlow's MultiWorkerMirroredStrategy): starts
N worker processes on this host, each told its place (RANK, WORLD_SIZE, LOCAL_RANK and a
TF_CONFIG naming every worker's port), prefixes their output lines `[default<r>]:` as torchrun's
--tee does, stops the others when one fails and passes SIGINT/SIGTERM on as SIGTERM.

Usage (by workloads.distributed_launch): python -m workloads.runners.local_agent NPROC -- COMMAND..."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from gapscope.workloads.runners.tf_cluster import worker_envs

# A worker still there this long after being told to stop is killed (torchrun waits as long).
GRACE_S = 30.0


class Agent:
    def __init__(self, nproc: int, command: list[str]):
        self.nproc, self.command = nproc, command
        self.workers: list[subprocess.Popen] = []
        self.signum: int | None = None
        self._lock = threading.Lock()

    def run(self) -> int:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._received)
        readers = []
        for rank, place in enumerate(worker_envs(self.nproc)):
            env = {**os.environ, **place, "LOCAL_WORLD_SIZE": str(self.nproc), "GROUP_RANK": "0"}
            worker = subprocess.Popen(self.command, env=env, stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      errors="replace", start_new_session=True)
            self.workers.append(worker)
            reader = threading.Thread(target=self._relay, args=(rank, worker), daemon=True)
            reader.start()
            readers.append(reader)
        failed = self._watch()
        for reader in readers:
            reader.join(timeout=5.0)
        if failed:
            self._summary(failed)
        if self.signum is not None:
            return 128 + self.signum
        return 1 if failed else 0

    def _watch(self) -> list[int]:
        """Waits for every worker; the first to fail (or a signal) stops the rest."""
        stopping_since = None
        first_failed: list[int] = []
        while any(worker.poll() is None for worker in self.workers):
            for rank, worker in enumerate(self.workers):
                code = worker.poll()
                if code not in (None, 0) and rank not in first_failed and stopping_since is None:
                    first_failed.append(rank)
            if (first_failed or self.signum is not None) and stopping_since is None:
                stopping_since = time.monotonic()
                self._terminate(signal.SIGTERM)
            if stopping_since is not None and time.monotonic() - stopping_since > GRACE_S:
                self._terminate(signal.SIGKILL)
            time.sleep(0.1)
        failed = [rank for rank, w in enumerate(self.workers) if w.returncode != 0]
        return first_failed + [rank for rank in failed if rank not in first_failed]

    def _terminate(self, signum: int) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                try:
                    os.killpg(worker.pid, signum)
                except (ProcessLookupError, PermissionError):
                    pass

    def _received(self, signum, frame) -> None:
        if self.signum is None:
            self.signum = signum
        else:
            self._terminate(signal.SIGKILL)  # asked twice: stop now

    def _relay(self, rank: int, worker: subprocess.Popen) -> None:
        for line in worker.stdout:
            with self._lock:
                sys.stdout.write(f"[default{rank}]:{line}")
                sys.stdout.flush()

    def _summary(self, failed: list[int]) -> None:
        """The failures as torchrun words them (distributed_launch reads the exit codes)."""
        lines = ["Root Cause (first observed failure):"]
        for index, rank in enumerate(failed):
            if index == 1:
                lines.append("Other Failures:")
            worker = self.workers[rank]
            lines += [f"[{index}]:", f"  rank      : {rank} (local_rank: {rank})",
                      f"  exitcode  : {worker.returncode} (pid: {worker.pid})"]
        with self._lock:
            print("\n".join(lines), flush=True)


def main(argv: list[str]) -> int:
    nproc, separator, command = int(argv[0]), argv[1], argv[2:]
    if separator != "--" or not command:
        raise SystemExit("usage: python -m workloads.runners.local_agent NPROC -- COMMAND...")
    return Agent(nproc, command).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
