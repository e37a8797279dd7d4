"""Checks every torch CUDA path of gapscope in one command on a GPU machine; one JSON and one Markdown report.

    python -m benchmarks.gpu_check --out DIR [--report-dir DIR] [--jobs 3] [--budget-s 480] [--dry-run]

Without a CUDA device it says so and exits 4 (0 with --no-gpu-ok). See benchmarks/README.md (GPU day one)."""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import gpu_check_plan as P
from benchmarks import gpu_checks as C
from gapscope.profilers.phases import MARKED_PHASES

NO_CUDA = "no CUDA device: nothing to check"
# Not 0: a CI job whose runner lost its GPU must not pass green with nothing checked.
EXIT_NO_DEVICE = 4
# The device allows 10 minutes a command: the runs get this much, analysis and report the rest.
DEFAULT_BUDGET_S = 480


class _Args(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as gapscope's own commands do
        print(f"gpu_check: error: {message}", file=sys.stderr)
        sys.exit(2)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= 10_000:
        raise argparse.ArgumentTypeError(f"{value} is not from 1 to 10000")
    return value


def parse_args(argv):
    parser = _Args(prog="python -m benchmarks.gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu-check", help="folder for the runs (and the report)")
    parser.add_argument("--report-dir", default=None, help="folder for the two report files (default --out)")
    parser.add_argument("--jobs", type=_positive, default=3, help="runs at a time on the one GPU")
    parser.add_argument("--budget-s", type=_positive, default=DEFAULT_BUDGET_S,
                        help="seconds for all runs; runs still going then are stopped, the rest skipped")
    parser.add_argument("--dry-run", action="store_true", help="list what would run, run nothing")
    parser.add_argument("--only", default=None, metavar="ID,ID",
                        help="run only these runs of the plan (ids as --dry-run lists them)")
    parser.add_argument("--no-gpu-ok", action="store_true",
                        help=f"exit 0, not {EXIT_NO_DEVICE}, where no CUDA device is found")
    return parser.parse_args(argv)


def cuda_available() -> bool:
    import torch
    return torch.cuda.is_available()


def dry_run(jobs: int, budget_s: int) -> str:
    runs = sorted(P.plan(), key=lambda r: -r.cost_s)
    lines = [f"{'id':<42} {'variant':<58} est s  covers"]
    for r in runs:
        kind = f"{r.variant} (--nproc 1)" if r.nproc else r.variant
        lines.append(f"{r.id:<42} {kind:<58} {r.cost_s:>5}  {r.covers}")
    ncu = "ncu found" if C.ncu_available() else "ncu not on PATH: skipped"
    lines.append(f"NVTX probes: one ncu run per phase ({', '.join(MARKED_PHASES)}); {ncu}")
    lines.append(f"{len(runs)} runs, about {sum(r.cost_s for r in runs) // jobs} s on {jobs} lanes "
                 f"(estimates, not measurements); budget {budget_s} s")
    lines.append(_other_paths())
    return "\n".join(lines) + "\n"


def _other_paths() -> str:
    missing = [m for m in ("tensorflow", "keras") if importlib.util.find_spec(m) is None]
    why = f"{' and '.join(missing)} not installed here" if missing else "this command checks torch only"
    return f"keras, keras-torch and tf paths: skipped ({why})"


class Session:
    """The runs in flight and the deadline that stops them."""

    def __init__(self, out: Path, budget_s: int, cuda: bool, device: str = "cuda"):
        self.out, self.cuda, self.device = out, cuda, device  # device: "cpu" only in tests
        self.deadline = time.monotonic() + budget_s
        self.done = threading.Event()

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def watchdog(self) -> None:
        """From the deadline on, each run still going gets SIGTERM (it records `failed:
        interrupted`); again every 2 s, for a run whose manifest was not there yet."""
        if self.done.wait(max(self.left_s(), 0)):
            return
        stopped = {os.getpid()}  # a job's own manifest names the launcher: this process
        while not self.done.is_set():
            for manifest in self.out.rglob("manifest.json"):
                try:
                    data = json.loads(manifest.read_text())
                    pid = int(data.get("pid") or 0)
                    if data.get("status") == "running" and pid and pid not in stopped:
                        os.kill(pid, signal.SIGTERM)
                        stopped.add(pid)
                except (OSError, ValueError):
                    pass  # gone meanwhile, or a manifest half written: the next round sees it
            self.done.wait(2.0)

    def run(self, planned: P.Planned) -> dict:
        entry = {"id": planned.id, "workload": planned.workload, "variant": planned.variant,
                 "nproc": planned.nproc or None, "covers": planned.covers}
        if self.left_s() <= 0:
            return {**entry, "status": "skipped", "error": "time budget spent before it started",
                    "checks": [], "kernels": None}
        from gapscope.workloads.distributed_launch import launch_job
        from gapscope.workloads.launch import launch
        started = time.monotonic()
        try:
            if planned.capture:
                outcome = self._capture()
            else:
                settings = dataclasses.replace(P.settings_of(planned), device=self.device)
                outcome = (launch_job if planned.nproc else launch)(settings, self.out / "runs")
        except Exception as exc:  # noqa: BLE001 - a refused run is a finding, not the end
            return {**entry, "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                    "checks": [C.completed("failed", str(exc)).to_json_dict()], "kernels": None}
        entry.update(run_dir=str(outcome.run_dir), status=outcome.status, error=outcome.error,
                     wall_s=round(time.monotonic() - started, 1))
        checks, kernels = [C.completed(outcome.status, outcome.error)], None
        if outcome.status != "complete":  # the run folders stay on the device: keep the evidence
            entry["log_tail"] = _tail(Path(outcome.run_dir) / "run.log")
        if outcome.status == "complete":
            try:
                found, kernels = P.evaluate(outcome.run_dir, planned, self.cuda)
                checks += found
            except Exception as exc:  # noqa: BLE001 - say which analysis broke, keep the others
                checks.append(C.Check("analysis", C.FAIL, f"{type(exc).__name__}: {exc}"))
        entry["checks"] = [c.to_json_dict() for c in checks]
        entry["kernels"] = kernels
        return entry

    def _capture(self):
        """The own model's loop in a process of its own (benchmarks.own_model), as a user runs it:
        its run directory and how its manifest says it ended."""
        out = self.out / "captures"
        done = subprocess.run(P.capture_command(out, self.device, sys.executable), capture_output=True,
                              text=True, errors="replace", timeout=max(self.left_s(), 1),
                              env={**os.environ, "PYTHONPATH": _pythonpath()})
        run_dir = Path(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 and done.stdout.strip() \
            else next(iter(sorted(out.glob("own-model-*"))), None)
        if run_dir is None:
            raise RuntimeError(f"benchmarks.own_model exited {done.returncode}: {done.stderr.strip()[-300:]}")
        manifest = json.loads((run_dir / "manifest.json").read_text())
        error = manifest.get("error")
        error = error.get("message") if isinstance(error, dict) else error
        return _Captured(run_dir, manifest.get("status"), error)

    def probe(self, phase: str) -> dict:
        if C.ncu_available() is None:
            check = C.ncu_nvtx(phase, None, None)
        elif self.left_s() <= 0:
            check = C.Check(f"NVTX gapscope/{phase} (ncu)", C.SKIP, "time budget spent before it started")
        else:
            try:
                done = subprocess.run(P.ncu_command(phase, self.out, sys.executable), capture_output=True,
                                      text=True, errors="replace", timeout=max(self.left_s(), 1),
                                      env={**os.environ, "PYTHONPATH": _pythonpath()})
                check = C.ncu_nvtx(phase, done.stdout + done.stderr, done.returncode)
            except subprocess.TimeoutExpired:
                check = C.Check(f"NVTX gapscope/{phase} (ncu)", C.FAIL, "ncu ran past the time budget")
        return {"id": f"ncu-{phase}", "checks": [check.to_json_dict()]}


@dataclasses.dataclass
class _Captured:
    """A capture's end, as a launched run's outcome reads."""
    run_dir: Path
    status: str | None
    error: str | None


def _tail(path: Path, lines: int = 25) -> list[str]:
    try:
        return path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return []


def _pythonpath() -> str:
    root = str(Path(__file__).resolve().parent.parent)
    return os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))


def fusion_checks(entries: list[dict], planned: dict[str, P.Planned]) -> None:
    """Each compiled run's kernels against its workload's eager run, once all have ended."""
    by_id = {e["id"]: e for e in entries}
    for entry in entries:
        of = planned[entry["id"]].eager_of if entry["id"] in planned else None
        if of is None or entry.get("kernels") is None:
            continue
        eager = by_id.get(of, {}).get("kernels")
        entry["checks"].append(C.triton_fusion(entry["kernels"], eager).to_json_dict())


def check_all(out: Path, jobs: int, budget_s: int, cuda: bool = True, runs=None,
              device: str = "cuda") -> dict:
    """Runs `runs` (default the whole plan) `jobs` at a time and checks each; the result is
    the report's content."""
    session = Session(out, budget_s, cuda, device)
    planned = sorted(runs or P.plan(), key=lambda r: -r.cost_s)  # longest first: lanes end together
    started = time.time()
    threading.Thread(target=session.watchdog, name="gpu-check-deadline", daemon=True).start()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        runs = [pool.submit(session.run, p) for p in planned]
        probes = [pool.submit(session.probe, phase) for phase in MARKED_PHASES]
        entries = [run.result() for run in runs]
    session.done.set()
    fusion_checks(entries, {p.id: p for p in planned})
    for entry in entries:
        kernels = entry.pop("kernels", None)
        entry["kernels_per_step"] = None if kernels is None else round(kernels.per_step, 3)
    return {"device": _device(), "versions": _versions(), "budget_s": budget_s,
            "wall_s": round(time.time() - started, 1), "runs": entries,
            "probes": [p.result() for p in probes], "other_paths": _other_paths(),
            "nvtx_method": "record_function ranges in the torch.profiler trace (same names and call as "
                           "the nvtx package's ranges); the NVTX ranges themselves through ncu --nvtx "
                           "--nvtx-include, one phase a run, where ncu is on PATH"}


def _device() -> str | None:
    import torch
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def _versions() -> dict:
    import platform

    import torch
    return {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "triton": _version("triton"), "xprof": _version("xprof")}


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.dry_run:
        sys.stdout.write(dry_run(args.jobs, args.budget_s))
        return 0
    if not cuda_available():
        print(NO_CUDA)
        return 0 if args.no_gpu_ok else EXIT_NO_DEVICE
    from benchmarks.gpu_check_report import write_reports
    from gapscope.profilers.errors import GapscopeInputError
    from gapscope.profilers.run_dir import ensure_out_dir
    try:
        out = ensure_out_dir(args.out)
        report_dir = ensure_out_dir(args.report_dir or args.out)
    except GapscopeInputError as exc:
        print(f"gpu_check: error: {exc}", file=sys.stderr)
        return 2
    runs = None
    if args.only:
        by_id = {r.id: r for r in P.plan()}
        unknown = [i for i in args.only.split(",") if i not in by_id]
        if unknown:
            print(f"gpu_check: error: --only: no run {', '.join(unknown)} in the plan (see --dry-run)",
                  file=sys.stderr)
            return 2
        runs = [by_id[i] for i in args.only.split(",")]
    report = check_all(Path(out), args.jobs, args.budget_s, runs=runs)
    paths = write_reports(report, Path(report_dir))
    failed = sum(c["status"] == C.FAIL for e in report["runs"] + report["probes"] for c in e["checks"])
    print("\n".join(str(p) for p in paths))
    print(f"{failed} check(s) failed" if failed else "every check passed or was skipped with its reason")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
