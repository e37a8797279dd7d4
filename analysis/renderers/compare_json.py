"""A comparison as JSON: both breakdowns, the gap per phase and the evidence as structured fields."""
from __future__ import annotations

import json

from analysis.compare import Comparison


def render(comparison: Comparison) -> str:
    return json.dumps(comparison.to_json_dict(), indent=2) + "\n"
