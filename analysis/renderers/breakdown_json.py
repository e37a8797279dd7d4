"""Breakdowns as JSON: the stable contract of `gapscope breakdown --format json`."""
from __future__ import annotations

from gapscope.analysis.results.records import Breakdown
from gapscope.profilers import strict_json


def render(breakdowns: list[Breakdown], layers: list | None = None) -> str:
    """`layers`: each run's LayerBreakdown (breakdown --layers), as the document's `layers`."""
    documents = [b.to_json_dict() for b in breakdowns]
    for document, found in zip(documents, layers or ()):
        document["layers"] = found.to_json_dict()
    # One run gives one object (the contract); several give a list of them.
    return strict_json.dumps(documents[0] if len(documents) == 1 else documents, indent=2)
