"""A comparison as JSON: both breakdowns, the gap per phase and the evidence as structured fields."""
from __future__ import annotations

from analysis.compare import Comparison
from profilers import strict_json


def render(comparison: Comparison) -> str:
    return strict_json.dumps(comparison.to_json_dict(), indent=2) + "\n"
