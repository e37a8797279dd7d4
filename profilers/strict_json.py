"""JSON as gapscope writes it: strict, so a number that is not finite becomes null, never NaN."""
from __future__ import annotations

import json
import math


def dumps(value, **kwargs) -> str:
    """json.dumps for every file and stdout document gapscope writes. NaN and Infinity are not
    JSON: strict parsers (browsers' JSON.parse, jq, Go, Rust) reject the whole document, and
    a figure that is not finite is no figure, so it is written as null."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)


def finite(value):
    """`value` with every float that is not finite (in dicts, lists, tuples) replaced by None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value
