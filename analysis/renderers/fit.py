"""Fits terminal output to a width: a table too wide is cut into blocks of whole column units, the key
columns repeated in each block; text lines wrap with a hanging indent."""
from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

# Columns of the terminal the tables are fitted to. The CLI sets None for --wide: every table in
# one piece, side by side, and no line wrapped (for wide terminals and for pasting into files).
DEFAULT_WIDTH = 80
WIDTH: int | None = DEFAULT_WIDTH
_UNBOUNDED = 10_000
# rich's default box: one border per column plus the closing one, one space of padding each side.
_PER_COLUMN = 3


@dataclass
class Grid:
    """A table as text cells: `keys` leading columns, then units of columns that stay together
    (one run's ms, % and source), `units` giving each unit's number of columns."""

    title: str | None
    head: list[str]
    rows: list[list[str]]
    units: list[int]
    keys: int = 1
    left: frozenset[int] = frozenset({0})   # columns aligned left; the others are figures
    ends: frozenset[int] = frozenset()      # rows followed by a rule

    def columns(self, picked: list[int]) -> "Grid":
        index = {old: new for new, old in enumerate(picked)}
        return Grid(self.title, [self.head[i] for i in picked], [[r[i] for i in picked] for r in self.rows],
                    [], len(picked), frozenset(index[i] for i in self.left if i in index), self.ends)


def blocks(grid: Grid, width: int | None) -> list[Grid]:
    """The grid whole when it fits `width` (or width is None), else cut between units, each
    block as many units as fit beside the keys; a unit too wide alone is left to rich to wrap."""
    widths = [_PER_COLUMN + max(cell_len(line) for cell in [h, *(r[i] for r in grid.rows)]
                                for line in cell.split("\n"))
              for i, h in enumerate(grid.head)]
    spans, start = [], grid.keys
    for size in grid.units:
        spans.append(list(range(start, start + size)))
        start += size
    if width is None or 1 + sum(widths) <= width:
        return [grid]
    keys = list(range(grid.keys))
    base = 1 + sum(widths[i] for i in keys)
    cut: list[list[int]] = [[]]
    for span in spans:
        used = base + sum(widths[i] for i in cut[-1])
        if cut[-1] and used + sum(widths[i] for i in span) > width:
            cut.append([])
        cut[-1] += span
    return [grid.columns(keys + picked) for picked in cut]


class Page:
    """Terminal text at WIDTH: fitted tables and wrapped lines, in the order they are added."""

    def __init__(self):
        self.width = WIDTH
        self._console = Console(file=io.StringIO(), width=self.width or _UNBOUNDED, record=True,
                                highlight=False)

    def table(self, grid: Grid) -> None:
        for part in blocks(grid, self.width):
            table = Table(title=part.title)
            for i, name in enumerate(part.head):
                table.add_column(name, justify="left" if i in part.left else "right")
            for i, row in enumerate(part.rows):
                table.add_row(*row, end_section=i in part.ends)
            self._console.print(table)

    def line(self, text: str, hang: int = 2) -> None:
        """One line, wrapped under its own indent plus `hang`: evidence bullets stay readable."""
        indent = text[:len(text) - len(text.lstrip())] + " " * hang
        lines = (textwrap.wrap(text, self.width, subsequent_indent=indent, break_on_hyphens=False)
                 if self.width else [text])
        for part in lines or [""]:
            self._console.print(part, soft_wrap=True, markup=False, highlight=False)

    def text(self) -> str:
        return self._console.export_text()
