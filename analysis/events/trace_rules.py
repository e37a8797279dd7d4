"""What a user tells gapscope about the names in their own trace: --phase NAME=PATTERN and --step-marker NAME."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.phases import MARKED_PHASES


@dataclass(frozen=True)
class TraceRules:
    """Frozen and small: it travels to the worker processes that read a job's ranks."""

    phases: tuple[tuple[str, str], ...] = ()  # (phase, pattern), in the order given
    step_marker: str | None = None
    # Which of with_modules' nested `nn.Module: …` ranges are layers: those at this depth (0 the
    # model itself); None: module_depth's default.
    layer_depth: int | None = None

    def user_phase(self, name: str) -> str | None:
        """The phase of the first --phase pattern that matches the whole name, else None."""
        for phase, pattern in self.phases:
            if name_pattern(pattern).fullmatch(name):
                return phase
        return None

    def is_step_marker(self, name: str) -> bool:
        return self.step_marker is not None and bool(name_pattern(self.step_marker).fullmatch(name))


def unused_patterns(rules: TraceRules, names) -> list[str]:
    """A note per --phase pattern that changed nothing: it matched no name of the trace, or an
    earlier pattern took every name it matched (the first that matches wins)."""
    notes = []
    for i, (phase, pattern) in enumerate(rules.phases):
        matched = [n for n in names if name_pattern(pattern).fullmatch(n)]
        if not matched:
            notes.append(f"--phase {phase}={pattern!r} matched no name in the trace")
            continue
        taken = {pat for _, pat in rules.phases[:i]
                 if any(name_pattern(pat).fullmatch(n) for n in matched)}
        if all(any(name_pattern(pat).fullmatch(n) for _, pat in rules.phases[:i]) for n in matched):
            notes.append(f"--phase {phase}={pattern!r} changed nothing: every name it matched was "
                         f"taken by an earlier --phase ({', '.join(repr(t) for t in sorted(taken))})")
    return notes


@functools.lru_cache(maxsize=256)
def name_pattern(pattern: str) -> re.Pattern:
    """A glob where only `*` (any text) and `?` (one character) are special: range names hold
    brackets ('[LightningModule]Model.training_step'), which a full glob or a regex would read
    as a character class."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
                      re.DOTALL)


def parse_phase(text: str) -> tuple[str, str]:
    """'forward=## fwd ##' -> ('forward', '## fwd ##'); a mistake is one line naming it."""
    phase, equals, pattern = text.partition("=")
    phase = phase.strip()
    if not equals or not pattern:
        raise GapscopeInputError(f"--phase {text!r}: give NAME=PATTERN, e.g. --phase 'forward=## fwd ##'")
    if phase not in MARKED_PHASES:
        raise GapscopeInputError(f"--phase {text!r}: NAME is one of {', '.join(MARKED_PHASES)}, "
                                 f"not {phase!r}")
    return phase, pattern


def check_step_marker(marker: str | None) -> str | None:
    if marker is not None and not marker.strip():
        raise GapscopeInputError("--step-marker: give the name of the range or op that marks one step")
    return marker
