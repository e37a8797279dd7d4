"""Shared fixtures: hand-made trace files, and real torch and Keras runs made once per session."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Small real runs: enough steady steps for stable figures, short enough for a 2-core CI.
SMALL_RUN = dict(steps=24, warmup_steps=3, trace_steps=8)


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


def _launch(framework: str, out_dir: Path, **overrides):
    from gapscope.workloads.launch import launch
    from gapscope.workloads.settings import RunSettings
    outcome = launch(RunSettings("mlp", framework, **{**SMALL_RUN, **overrides}), out_dir)
    assert outcome.status == "complete", (outcome.error, (outcome.run_dir / "run.log").read_text())
    return outcome.run_dir


@pytest.fixture(scope="session")
def torch_run(runs_dir) -> Path:
    return _launch("torch", runs_dir)


@pytest.fixture(scope="session")
def keras_run(runs_dir) -> Path:
    return _launch("keras", runs_dir)


def tf_profile(run_dir: Path) -> Path:
    """The TF profiler's own XSpace of a Keras/TF run: not gapscope's `gapscope` session beside
    it, which holds the same profile with the phase lines added for XProf."""
    from gapscope.analysis.readers.run_dir import find_files
    (path,) = find_files(run_dir).xplanes  # the reader's own finder leaves gapscope's session out
    return path


def compare_exit_code(*run_dirs: Path) -> int:
    """What `compare` of real runs must exit with: 3 (inconclusive) where a run ran beside other
    work (the suite under load), else 0. The load is the machine's, not the feature's."""
    import json

    from gapscope.analysis.measures.reliability import busy_machine
    busy = any(busy_machine(json.loads((Path(d) / "manifest.json").read_text())) for d in run_dirs)
    return 3 if busy else 0


@pytest.fixture(scope="session")
def ab_folder(tmp_path_factory) -> Path:
    """A small finished A/B measurement: linreg in torch against its preloaded data, 2 repeats."""
    from click.testing import CliRunner

    from gapscope.cli import cli
    out = tmp_path_factory.mktemp("ab")
    result = CliRunner().invoke(cli, ["compare", "--measure", "linreg:torch", "linreg:torch:preload",
                                      "--repeats", "2", "--steps", "10", "--warmup", "2",
                                      "--trace-steps", "2", "--out", str(out), "-q"])
    assert result.exit_code in (0, 3), result.output   # 3: measured beside other work
    (folder,) = out.glob("ab-*")
    return folder
