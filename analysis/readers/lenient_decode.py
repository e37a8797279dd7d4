"""Decodes what a strict typed decode refused: each wrongly typed field is coerced or dropped, and counted."""
from __future__ import annotations

import typing
from collections import Counter

import msgspec

# Only used after a strict decode failed, so this path may be slow: it builds every value.
_ANY = msgspec.json.Decoder()
NOT_AN_OBJECT = "event not a JSON object"


def decode_events(data, event_type: type, dropped_fields: Counter, dropped_events: Counter) -> list:
    """A traceEvents array as `event_type` structs, leniently; DecodeError only where the bytes
    are not JSON or not an array (what cannot be read)."""
    values = _ANY.decode(data)
    if not isinstance(values, list):
        raise msgspec.ValidationError("traceEvents is not an array")
    return events_from(values, event_type, dropped_fields, dropped_events)


def events_from(values: list, event_type: type, dropped_fields: Counter, dropped_events: Counter) -> list:
    events = []
    for value in values:
        if isinstance(value, dict):
            events.append(to_struct(value, event_type, dropped_fields))
        else:
            dropped_events[NOT_AN_OBJECT] += 1
    return events


def decode_trace(data, trace_type: type, dropped_fields: Counter):
    """A whole trace object as `trace_type` (whose traceEvents is left raw, for the events'
    own decode), leniently; its traceEvents must be an array."""
    value = _ANY.decode(data)
    if not isinstance(value, dict) or not isinstance(value.get("traceEvents"), list):
        raise msgspec.ValidationError("no traceEvents array")
    return to_struct(value, trace_type, dropped_fields)


def to_struct(value: dict, struct_type: type, dropped: Counter, prefix: str = ""):
    """`value` as `struct_type`: numeric strings and the like coerced (msgspec's lax mode), a field
    that still does not fit left at its default and counted in `dropped` by its JSON path."""
    try:
        return msgspec.convert(value, struct_type, strict=False)
    except msgspec.ValidationError:
        pass
    kwargs = {}
    for field in msgspec.structs.fields(struct_type):
        if field.encode_name not in value:
            continue
        item = value[field.encode_name]
        nested = _struct_in(field.type)
        if nested is not None and isinstance(item, dict):
            kwargs[field.name] = to_struct(item, nested, dropped, f"{prefix}{field.encode_name}.")
        elif field.type is msgspec.Raw:
            kwargs[field.name] = msgspec.Raw(msgspec.json.encode(item))
        else:
            try:
                kwargs[field.name] = msgspec.convert(item, field.type, strict=False)
            except msgspec.ValidationError:
                dropped[prefix + field.encode_name] += 1
    return struct_type(**kwargs)


def _struct_in(annotation) -> type | None:
    """The Struct type inside `X | None` or `list[X]`, if any."""
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return annotation
    for arg in typing.get_args(annotation):
        found = _struct_in(arg)
        if found is not None:
            return found
    return None
