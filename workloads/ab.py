"""A/B measurement: two or more configurations of one workload run interleaved (A B A B ...),
each repeat a fresh process, into one folder whose ab.json lists the runs by configuration.

Drift between processes on a shared machine (often ±20 % here) is larger than the noise
within one run: interleaving lets repeat i of every configuration see the same machine."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from profilers import strict_json
from profilers.errors import GapscopeInputError
from profilers.nvml import gpu_count
from profilers.run_dir import AB_STATE, create_run_dir, write_atomic
from profilers.run_lifecycle import INTERRUPTED
from workloads.launch import RunInterrupted, RunOutcome, launch
from workloads.registry import check_framework, get_workload
from workloads.settings import RunSettings

# Repeats a side that `compare --measure` runs unless told: enough to tell a 20 % gap from noise
# on this 2-core machine. gapscope's torch CNN processes spread 11.3 % (CV, issue 17); with that
# spread 3 repeats a side give a 95 % interval of about ±29 % on the ratio, 5 give ±18 %
# (tests/test_repeat_intervals.py holds both).
DEFAULT_REPEATS = 5

@dataclass(frozen=True)
class Config:
    """One configuration: WORKLOAD:FRAMEWORK[:VARIANT]."""

    workload: str
    framework: str
    variant: str = "default"

    @classmethod
    def parse(cls, text: str) -> "Config":
        parts = text.split(":")
        if len(parts) not in (2, 3) or not all(parts):
            raise GapscopeInputError(
                f"{text!r}: a configuration is WORKLOAD:FRAMEWORK[:VARIANT], e.g. cnn:torch:compile")
        config = cls(*parts)
        get_workload(config.workload)
        check_framework(config.framework)
        return config

    @property
    def label(self) -> str:
        return ":".join(p for p in (self.workload, self.framework, self.variant) if p != "default")


def measure(configs: list[Config], repeats: int, base: RunSettings, out_dir: str | Path,
            on_run: Callable[[int, Config, RunOutcome | None], None] = lambda r, c, o: None,
            after_round: Callable[[dict[str, list[Path]], int], str | None] | None = None,
            least: int = 2) -> Path:
    """Runs every configuration up to `repeats` times, interleaved; returns the A/B folder.

    `base` carries the run-length settings; each configuration adds workload, framework and
    variant. Every variant is resolved (or refused) before anything runs. Rounds alternate
    their order (A B, B A, ...), so that whatever the first run of a round meets (a cooler
    cache, a quieter neighbour) falls on every configuration alike. `after_round(runs, rounds)`
    is asked after each round, with each configuration's run directories so far: a reason to
    stop (kept in ab.json as `stopped`), or None to go on. `least`: configurations needed (1
    for the repeats of one configuration, as `gapscope check` takes them)."""
    if len(configs) < least:
        raise GapscopeInputError("an A/B measurement needs at least two configurations")
    if len({c.workload for c in configs}) > 1:
        raise GapscopeInputError("an A/B measurement compares configurations of one workload")
    if len(set(configs)) < len(configs):
        raise GapscopeInputError("the same configuration is named twice")
    cuda = gpu_count() > 0
    settings = [replace(base, workload=c.workload, framework=c.framework, variant=c.variant)
                for c in configs]
    for s in settings:
        s.with_variant(cuda_available=cuda)
    folder = create_run_dir(out_dir, "ab", configs[0].workload)
    state = {"configs": [c.label for c in configs], "repeats": repeats,
             "settings": {k: v for k, v in asdict(base).items()
                          if k not in ("workload", "framework", "variant")},
             "runs": {c.label: [] for c in configs}, "status": "running"}
    _save(folder, state)
    for repeat in range(repeats):
        in_order = list(zip(configs, settings))
        for config, run_settings in (in_order if repeat % 2 == 0 else in_order[::-1]):
            on_run(repeat, config, None)
            try:
                outcome = launch(run_settings, folder)
            except RunInterrupted:  # the folder says why it stopped, then the command does
                state.update(status="failed", error=f"{config.label} repeat {repeat + 1}: {INTERRUPTED}")
                _save(folder, state)
                raise
            on_run(repeat, config, outcome)
            if outcome.status != "complete":
                state.update(status="failed",
                             error=f"{config.label} repeat {repeat + 1}: {outcome.error}")
                _save(folder, state)
                raise RunFailed(state["error"], outcome.exit_code)
            # Names only: the folder can move, and nothing outside it is ever followed.
            state["runs"][config.label].append(outcome.run_dir.name)
            _save(folder, state)
        if after_round is not None:
            reason = after_round({c.label: [folder / n for n in state["runs"][c.label]]
                                  for c in configs}, repeat + 1)
            if reason:
                state.update(stopped=reason, repeats=repeat + 1)
                break
    state["status"] = "complete"
    _save(folder, state)
    return folder


class RunFailed(Exception):
    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def _save(folder: Path, state: dict) -> None:
    write_atomic(folder / AB_STATE, strict_json.dumps(state, indent=2) + "\n")
