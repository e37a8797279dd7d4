"""breakdown (table, JSON, Markdown, CSV), compare, report and the TensorBoard plugin's routes on
the committed fixture traces, byte for byte as recorded in tests/fixtures/golden/ before the
analysis was cut into layers (tests/golden_outputs.py writes them; the temp folder reads <root>)."""
from __future__ import annotations

from pathlib import Path

import pytest

import golden_outputs

GOLDEN = Path(__file__).parent / "fixtures" / "golden"


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden") / "in"
    root.mkdir()
    return golden_outputs.outputs(root, golden_outputs.lay_out(root))


def test_every_golden_output_is_still_made(outputs):
    assert sorted(outputs) == sorted(p.name for p in GOLDEN.iterdir())


@pytest.mark.parametrize("name", sorted(p.name for p in GOLDEN.iterdir()))
def test_output_is_byte_identical_to_its_golden(outputs, name):
    assert outputs[name] == (GOLDEN / name).read_text(), name
