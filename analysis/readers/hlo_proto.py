"""Reads the serialized HloProto that XLA stores in a profile, with a minimal protobuf wire decoder.

TF ships hlo_pb2 only inside the tensorflow package, whose import costs seconds and gigabytes;
the five fields needed here are decoded directly from the wire format instead."""
from __future__ import annotations

from gapscope.profilers.errors import TraceFormatError
from gapscope.analysis.events.hlo_metadata import HloModules, entry_ops

# Field numbers from xla/service/hlo.proto and xla/xla_data.proto.
_PROTO_MODULE = 1                                     # HloProto.hlo_module
_MODULE_NAME, _MODULE_COMPUTATIONS, _MODULE_ENTRY_ID = 1, 3, 6
_COMP_NAME, _COMP_INSTRUCTIONS, _COMP_ID = 1, 2, 5
_INSTR_NAME, _INSTR_OPCODE, _INSTR_METADATA, _INSTR_CALLED = 1, 2, 7, 38
_METADATA_OP_TYPE, _METADATA_OP_NAME = 1, 2


def read_hlo_protos(protos: dict[str, bytes]) -> HloModules:
    modules = {}
    for key, data in protos.items():
        try:
            name, ops = _module(data)
        except (IndexError, ValueError, UnicodeDecodeError) as exc:
            raise TraceFormatError(f"HLO proto of module {key!r} is corrupt ({exc})") from None
        modules[name or key] = ops
    return HloModules(modules, "profile")


def _module(data: bytes):
    module = _fields(_first(_fields(data), _PROTO_MODULE, b""))
    name = _first(module, _MODULE_NAME, b"").decode()
    entry_id = _first(module, _MODULE_ENTRY_ID, 0)
    by_name, entry = {}, None
    ids = {}
    for raw in module.get(_MODULE_COMPUTATIONS, []):
        computation = _fields(raw)
        comp_name = _first(computation, _COMP_NAME, b"").decode()
        ids[_first(computation, _COMP_ID, 0)] = comp_name
        by_name[comp_name] = [_instruction(raw_i) for raw_i in computation.get(_COMP_INSTRUCTIONS, [])]
        entry = comp_name  # XLA writes the entry computation last
    entry = ids.get(entry_id, entry)
    resolved = {comp: [(n, op, op_name, op_type, tuple(ids.get(i, "") for i in called))
                       for n, op, op_name, op_type, called in instructions]
                for comp, instructions in by_name.items()}
    return name, entry_ops(resolved, entry)


def _instruction(raw: bytes):
    fields = _fields(raw)
    metadata = _fields(_first(fields, _INSTR_METADATA, b""))
    called = []
    for value in fields.get(_INSTR_CALLED, []):
        # proto3 packs repeated int64 into one length-delimited field; older writers do not.
        called.extend(_packed_varints(value) if isinstance(value, bytes) else [value])
    return (_first(fields, _INSTR_NAME, b"").decode(), _first(fields, _INSTR_OPCODE, b"").decode(),
            _first(metadata, _METADATA_OP_NAME, b"").decode(),
            _first(metadata, _METADATA_OP_TYPE, b"").decode(), called)


def _first(fields: dict, number: int, default):
    values = fields.get(number)
    return values[0] if values else default


def _fields(data: bytes) -> dict[int, list]:
    """Top-level fields of one message: varints as ints, length-delimited as bytes."""
    out: dict[int, list] = {}
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        out.setdefault(number, []).append(value)
    if pos != end:
        raise ValueError("truncated message")
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _packed_varints(data: bytes) -> list[int]:
    values, pos = [], 0
    while pos < len(data):
        value, pos = _varint(data, pos)
        values.append(value)
    return values
