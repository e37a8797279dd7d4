"""Reads XLA's text dumps (`*after_optimizations.txt` from --xla_dump_to --xla_dump_hlo_as_text)."""
from __future__ import annotations

import re
from pathlib import Path

from gapscope.profilers.errors import TraceFormatError
from gapscope.analysis.readers import safe_files
from gapscope.analysis.events.hlo_metadata import HloModules, entry_ops

DUMP_GLOB = "*after_optimizations.txt"
_MODULE = re.compile(r"^HloModule (\S+?),?\s")
# "%name (params) -> type {" or "ENTRY %name (params) -> type {"
_COMPUTATION = re.compile(r"^(ENTRY )?%?([\w.\-]+) .*\{\s*$")
# "  [ROOT ]%name = type opcode(operands), attr=..., metadata={op_type=... op_name="..."}"
_INSTRUCTION = re.compile(r"^\s+(?:ROOT )?%?([\w.\-]+) = .*?\s([\w\-]+)\(")
_OP_NAME = re.compile(r'\bop_name="([^"]*)"')
_OP_TYPE = re.compile(r'\bop_type="([^"]*)"')
_CALLED = re.compile(r"\b(?:calls|to_apply|body|condition)=%?([\w.\-]+)")


def read_hlo_dump_dir(directory: str | Path) -> HloModules:
    """All modules of a dump folder; `*-buffer-assignment`/`-memory-usage` files are skipped."""
    modules = {}
    for path in sorted(Path(directory).glob(DUMP_GLOB)):
        if not safe_files.is_readable_regular_file(path):
            continue  # a FIFO or device named like a dump is not one
        name, ops = read_hlo_text(path)
        modules[name] = ops
    return HloModules(modules, "dump")


def read_hlo_text(path: str | Path):
    path = Path(path)
    try:
        lines = safe_files.read_bytes(path).decode().splitlines()
    except UnicodeDecodeError as exc:
        raise TraceFormatError(f"{path}: cannot read HLO dump ({exc})") from None
    module = next((m.group(1) for line in lines[:5] if (m := _MODULE.match(line))), None)
    if module is None:
        raise TraceFormatError(f"{path}: not an HLO text dump (no HloModule line)")
    computations: dict[str, list] = {}
    current, entry = None, None
    for line in lines:
        if current is None:
            if (m := _COMPUTATION.match(line)):
                current = m.group(2)
                computations[current] = []
                if m.group(1):
                    entry = current
            continue
        if line.startswith("}"):
            current = None
        elif (m := _INSTRUCTION.match(line)):
            op_name, op_type = _OP_NAME.search(line), _OP_TYPE.search(line)
            computations[current].append((m.group(1), m.group(2), op_name.group(1) if op_name else "",
                                          op_type.group(1) if op_type else "",
                                          tuple(_CALLED.findall(line))))
    if entry is None:
        raise TraceFormatError(f"{path}: HLO dump has no ENTRY computation")
    return module, entry_ops(computations, entry)
