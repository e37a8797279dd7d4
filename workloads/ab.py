"""A/B measurement: two or more configurations of one workload run interleaved (A B A B ...),
each repeat a fresh process, into one folder whose ab.json lists the runs by configuration.

Drift between processes on a shared machine (often ±20 % here) is larger than the noise
within one run: interleaving lets repeat i of every configuration see the same machine."""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

from gapscope.profilers import environment, state_json, strict_json
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.nvml import gpu_count
from gapscope.profilers.run_dir import AB_STATE, create_run_dir, effective_status, utc_now, write_atomic
from gapscope.profilers.run_lifecycle import INTERRUPTED
from gapscope.workloads.launch import RunInterrupted, RunOutcome, launch
from gapscope.analysis.model.run import MAX_AB_REPEATS
from gapscope.workloads.registry import check_framework, get_workload
from gapscope.workloads.settings import RunSettings

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
    settings = _resolved(configs, base)
    folder = create_run_dir(out_dir, "ab", configs[0].workload)
    state = {"configs": [c.label for c in configs], "repeats": repeats,
             "settings": {k: v for k, v in asdict(base).items()
                          if k not in ("workload", "framework", "variant")},
             "runs": {c.label: [] for c in configs}, "status": "running"}
    return _rounds(folder, state, configs, settings, on_run, after_round)


def resume(folder: str | Path,
           on_run: Callable[[int, Config, RunOutcome | None], None] = lambda r, c, o: None,
           after_round: Callable[[dict[str, list[Path]], int], str | None] | None = None) -> Path:
    """Goes on with an A/B measurement that stopped (Ctrl-C, a failed run, a lost machine):
    its complete runs stay, and the rounds continue where they ended, in their order, with the
    settings the folder was started with."""
    folder = Path(folder)
    state = _state(folder)
    if state.get("status") == "complete":
        raise GapscopeInputError(f"{folder}: this A/B measurement is complete; compare it with "
                                 f"`gapscope compare {folder}`")
    status, _ = effective_status({"status": "running", "pid": state.get("pid"),
                                  "host": state.get("host"), "started_at": state.get("started_at")})
    if state.get("status") == "running" and status == "running":
        raise GapscopeInputError(f"{folder} is in use: process {state.get('pid')} on "
                                 f"{state.get('host')} is measuring into it")
    configs = [Config.parse(label) for label in state["configs"]]
    try:
        base = RunSettings(workload="", framework="", **state["settings"])
    except TypeError:
        raise GapscopeInputError(f"{folder / AB_STATE}: corrupt A/B state (settings)") from None
    for label, names in state["runs"].items():
        missing = [name for name in names if not (folder / name).is_dir()]
        if missing:
            raise GapscopeInputError(f"{folder}: run {missing[0]} of {label} is listed but gone")
    state.pop("error", None)
    state.update(status="running")
    return _rounds(folder, state, configs, _resolved(configs, base), on_run, after_round)


def planned_repeats(folder: str | Path) -> int:
    """The repeats an A/B folder was started with (or stopped at)."""
    return _state(Path(folder))["repeats"]


def _resolved(configs: list[Config], base: RunSettings) -> list[RunSettings]:
    """Each configuration's settings, its variant resolved (or refused) before anything runs."""
    cuda = gpu_count() > 0
    settings = [replace(base, workload=c.workload, framework=c.framework, variant=c.variant)
                for c in configs]
    for s in settings:
        s.with_variant(cuda_available=cuda)
    return settings


def _rounds(folder: Path, state: dict, configs: list[Config], settings: list[RunSettings],
            on_run, after_round) -> Path:
    """The rounds not yet run: a configuration that has its run of a round (before a resume)
    is passed over in that round. The state is saved after every run."""
    state.update(pid=os.getpid(), host=environment.host(), started_at=utc_now())
    _save(folder, state)
    for repeat in range(state["repeats"]):
        in_order = list(zip(configs, settings))
        for config, run_settings in (in_order if repeat % 2 == 0 else in_order[::-1]):
            if len(state["runs"][config.label]) > repeat:
                continue
            on_run(repeat, config, None)
            try:
                outcome = launch(run_settings, folder)
            except RunInterrupted as stop:  # the folder says why it stopped, then the command does
                state.update(status="failed", error=f"{config.label} repeat {repeat + 1}: {INTERRUPTED}")
                _save(folder, state)
                stop.ab_folder = folder  # so that the command can say how to resume
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


def _state(folder: Path) -> dict:
    """ab.json, its shape checked (a hand-edited or truncated one is refused in one line)."""
    path = folder / AB_STATE
    if not path.is_file():
        raise GapscopeInputError(f"{folder}: no A/B measurement here (no {AB_STATE})")
    try:
        state = state_json.load(path)
        configs, runs, repeats = state["configs"], state["runs"], state["repeats"]
        if not (isinstance(configs, list) and len(configs) >= 1 and isinstance(runs, dict)
                and all(isinstance(c, str) and isinstance(runs.get(c), list) for c in configs)
                and all(isinstance(n, str) for c in configs for n in runs[c])
                and isinstance(state.get("settings"), dict)
                and isinstance(repeats, int) and not isinstance(repeats, bool)
                and max(len(runs[c]) for c in configs) <= repeats <= MAX_AB_REPEATS):
            raise ValueError
    except (OSError, ValueError, KeyError, TypeError):
        raise GapscopeInputError(f"{path}: corrupt A/B state") from None
    return state


class RunFailed(Exception):
    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def _save(folder: Path, state: dict) -> None:
    write_atomic(folder / AB_STATE, strict_json.dumps(state, indent=2) + "\n")
