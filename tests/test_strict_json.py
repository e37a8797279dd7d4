"""Every JSON document gapscope writes parses with a strict parser: no NaN, no Infinity."""
import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.cli import cli
from gapscope.profilers import strict_json
from gapscope.profilers.run_dir import Manifest

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).parent / "fuzz"


def strict_loads(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity, as JSON.parse, jq or serde do."""
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


def test_non_finite_numbers_become_null_at_any_depth():
    doc = {"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": (math.nan, 2)}
    assert strict_loads(strict_json.dumps(doc)) == {"a": None, "b": [1.0, None, {"c": None}],
                                                    "d": [None, 2]}


def test_manifest_with_a_nan_loss_is_strict_json(tmp_path):
    Manifest.start(tmp_path, {"run_id": "r", "final_loss": math.nan, "steps": [math.inf]})
    assert strict_loads((tmp_path / "manifest.json").read_text())["final_loss"] is None


# json.dumps that make no document: a manifest's bad value quoted in an error message.
_NOT_DOCUMENTS = {"analysis/readers/run_dir.py"}


def test_nothing_writes_json_around_the_strict_encoder():
    # The class of fault, not one example: a json.dumps anywhere else could write NaN again.
    offenders = []
    for folder in ("analysis", "profilers", "workloads", "gapscope"):
        for path in (ROOT / folder).rglob("*.py"):
            name = str(path.relative_to(ROOT))
            if (path.name != "strict_json.py" and name not in _NOT_DOCUMENTS
                    and re.search(r"\bjson\.dumps?\(", path.read_text())):
                offenders.append(name)
    if re.search(r"\bjson\.dumps?\(", (ROOT / "cli.py").read_text()):
        offenders.append("cli.py")
    assert offenders == []


@pytest.mark.parametrize("name", ["dur_1e300.pt.trace.json", "negative_dur.pt.trace.json",
                                  "missing_ts_and_dur.pt.trace.json", "duplicate_steps.pt.trace.json",
                                  "zero_length_step.pt.trace.json", "overlapping_steps.pt.trace.json"])
def test_breakdown_json_of_garbage_is_strict_and_says_what_was_dropped(name):
    result = CliRunner().invoke(cli, ["breakdown", str(CORPUS / name), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = strict_loads(result.stdout)
    assert doc["step_ms"]["mean"] > 0
    assert any("dropped" in note or "flagged" in note for note in doc["notes"]), doc["notes"]
