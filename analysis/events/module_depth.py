"""Which of a trace's with_modules ranges (`nn.Module: Block_0`) are its layers: the modules at one
depth of their nesting, so a module and the modules inside it are never two rows of one table."""
from __future__ import annotations

from collections import defaultdict

# What the default depth is, in the layers' notes.
DEFAULT_DEPTH = "the outermost modules' children, past wrappers that hold one module"


def module_depths(ranges: dict[str, list[tuple[float, float, str]]]) -> dict[str, list[tuple[int, bool]]]:
    """Per track, each range's (depth, whether a range nests inside it), in the track's order
    (by start, the longer of two that start together first): depth 0 is an outermost module (the model), 1 its children. Ranges on one
    thread nest (a module's call holds its children's calls)."""
    found = {}
    for track, spans in ranges.items():
        marks: list[list] = []
        open_: list[int] = []  # indices of the ranges that hold the current instant
        for i, (start, end, _) in enumerate(spans):
            while open_ and spans[open_[-1]][1] <= start:
                open_.pop()
            if open_:
                marks[open_[-1]][1] = True
            marks.append([len(open_), False])
            open_.append(i)
        found[track] = [(depth, parent) for depth, parent in marks]
    return found


def default_depth(ranges: dict, depths: dict) -> int:
    """The outermost modules' children (depth 1); deeper while that level is one module only
    (DistributedDataParallel_0 > Net_0, or Net_0 > Sequential_0) and it has children."""
    names: dict[int, set[str]] = defaultdict(set)
    for track, spans in ranges.items():
        for (_, _, name), (depth, _) in zip(spans, depths[track]):
            names[depth].add(name)
    depth = 1
    while len(names.get(depth, ())) == 1 and names.get(depth + 1):
        depth += 1
    return depth


def at_depth(ranges: dict[str, list[tuple[float, float, str]]],
             depth: int | None) -> tuple[dict[str, list[tuple[float, float, str]]], int]:
    """The ranges that are layers at `depth` (None: default_depth): the modules at that depth and
    the shallower ones with no module inside (a model's final LayerNorm beside its blocks, a loss
    module beside the model), per track in start order; and the depth used."""
    ranges = {track: sorted(spans, key=lambda s: (s[0], -s[1])) for track, spans in ranges.items()}
    depths = module_depths(ranges)
    if depth is None:
        depth = default_depth(ranges, depths)
    kept = {}
    for track, spans in ranges.items():
        chosen = [span for span, (d, parent) in zip(spans, depths[track])
                  if d == depth or (d < depth and not parent)]
        if chosen:
            kept[track] = chosen
    return kept, depth
