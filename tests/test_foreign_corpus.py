"""The foreign-trace corpus: every folder under tests/fixtures/foreign/ with an expected.json
beside its trace is analysed by the CLI and must give the figures that file names.

expected.json (a fixture joins the corpus by having one):
  {"about": "how the trace was made, one line",
   "path": "a file in the folder to give instead of the folder (optional)",
   "pending": "why a check cannot pass yet (optional: the fixture is an expected failure, strict,
               so the line must go once it passes)",
   "checks": [{"command": ["breakdown", "{fixture}", "--format", "json"],
               "exit_code": 0,                       (optional, default 0)
               "stderr": ["text the warnings hold"],  (optional)
               "expect": {"steps": 2, "phases.backward.ms": 0.28, "runs.0.kernels.per_step": 2}}]}
"{fixture}" is the folder (or "path"); each key of "expect" is a dotted path into the command's
JSON output (a number is a list index), a number compared within 1 %, anything else exactly."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.cli import cli

CORPUS = Path(__file__).parent / "fixtures" / "foreign"
FIXTURES = sorted(p.parent for p in CORPUS.glob("*/expected.json"))


def _param(folder: Path):
    spec = json.loads((folder / "expected.json").read_text())
    marks = [pytest.mark.xfail(reason=spec["pending"], strict=True)] if spec.get("pending") else []
    return pytest.param(folder, spec, id=folder.name, marks=marks)


def _at(document, path: str):
    for key in path.split("."):
        document = document[int(key)] if isinstance(document, list) else document[key]
    return document


@pytest.mark.parametrize("folder,spec", [_param(f) for f in FIXTURES])
def test_fixture_gives_its_expected_figures(folder, spec):
    target = str(folder / spec["path"]) if spec.get("path") else str(folder)
    for check in spec["checks"]:
        args = [target if arg == "{fixture}" else arg for arg in check["command"]]
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == check.get("exit_code", 0), (args, result.output)
        for text in check.get("stderr", []):
            assert text in result.stderr, (args, result.stderr)
        if not check.get("expect"):
            continue
        out = json.loads(result.stdout)
        for path, want in check["expect"].items():
            got = _at(out, path)
            if isinstance(want, (int, float)) and not isinstance(want, bool):
                assert got == pytest.approx(want, rel=0.01, abs=1e-9), (args, path)
            else:
                assert got == want, (args, path)


def test_the_corpus_holds_each_schema():
    """One trace per Kineto schema gapscope reads, a ROCm one and a device-only one at least."""
    assert {"torch19", "torch112", "torch2", "rocm", "gpuonly"} <= {f.name for f in FIXTURES}


def test_a_wrong_expectation_fails(tmp_path):
    """The check can fail: the torch-2 fixture with one figure changed does not pass."""
    spec = json.loads((CORPUS / "torch2" / "expected.json").read_text())
    spec["checks"][0]["expect"]["steps"] = 3
    with pytest.raises(AssertionError):
        test_fixture_gives_its_expected_figures(CORPUS / "torch2", spec)
