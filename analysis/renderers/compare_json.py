"""A comparison as JSON: both breakdowns, the gap per phase and the evidence as structured fields."""
from __future__ import annotations

from gapscope.analysis.results.amortisation import compile_behind_line
from gapscope.analysis.results.compare import Comparison
from gapscope.analysis.renderers import evidence_text
from gapscope.profilers import strict_json


def render(comparison: Comparison) -> str:
    return strict_json.dumps(document(comparison), indent=2) + "\n"


def document(comparison: Comparison) -> dict:
    """The JSON contract: each finding's facts, and beside them the line the other formats
    print (the TensorBoard plugin shows that line)."""
    doc = comparison.to_json_dict()
    for pair, pair_doc in zip(comparison.pairs, doc["comparisons"]):
        pair_doc["interval_method"] = evidence_text.interval_method(pair)
        for evidence, evidence_doc in zip(pair.evidence, pair_doc["evidence"]):
            evidence_doc["text"] = evidence_text.sentence(evidence, pair)
        for suggestion, suggestion_doc in zip(pair.suggestions, pair_doc["suggestions"]):
            suggestion_doc["text"] = evidence_text.suggestion(suggestion)
        if pair.cause is not None:
            pair_doc["cause"]["text"] = evidence_text.cause(pair.cause)
        if pair.fusion_behind_gap is not None:
            pair_doc["fusion_behind_gap"]["text"] = evidence_text.fusion_cause(
                pair.fusion_behind_gap, pair.a_label, pair.b_label)
        if pair.compile_behind is not None:
            pair_doc["compile_behind"]["text"] = compile_behind_line(pair.compile_behind)
        if pair.faults_behind_gap is not None:
            pair_doc["faults_behind_gap"]["text"] = evidence_text.faults_cause(pair.faults_behind_gap)
    return doc
