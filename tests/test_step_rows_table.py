"""steps.csv read a column at a time gives exactly what the row-by-row check gives, on clean files
and on files with every kind of bad cell; and a long file's breakdown stays linear in its rows."""
from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gapscope.analysis.measures.reliability import level_shift
from gapscope.analysis.measures.stats import MAX_UNITS, Resampler, rng
from gapscope.analysis.readers import step_rows
from gapscope.profilers.errors import TraceFormatError

HEADER = ["step", "epoch", "warmup", "traced", "step_ms", "data_load_ms", "forward_ms",
          "backward_ms", "optimizer_ms", "loss", "minor_faults", "rss_mb"]
# Cells as gapscope writes them, and the ones a damaged or foreign file holds.
GOOD = {"step_ms": ["5.25", "12.000001", "7"], "data_load_ms": ["0.5", "", "1"],
        "forward_ms": ["1.25", "0.000001"], "backward_ms": ["2.5", ""], "optimizer_ms": ["0.75", "0"],
        "loss": ["2.339262", "0.5", "nan", "inf"], "minor_faults": ["383", "5", ""],
        "rss_mb": ["339.878000", "340"], "epoch": ["0", "1"], "warmup": ["0", "1"], "traced": ["0", "1", ""]}
BAD = ["", "nan", "-1", "1e3", "1E2", " 5", "5 ", "x", "2", "1.0", "-0", "inf", "9" * 41, "1e99", "0",
       "+3", "007", "1_000", "١٢"]


def _reference(header, cells):
    text = "\n".join(",".join(row) for row in [header, *cells]) + "\n"
    return step_rows.checked_rows("steps.csv", csv.DictReader(io.StringIO(text, newline="")))


def _comparable(result):
    """A result with NaN cells spelled out: NaN equals nothing, itself included."""
    if isinstance(result, str):
        return result
    rows, dropped = result
    return [{k: "nan" if v != v else (type(v), v) for k, v in row.items()} for row in rows], dropped


def _both(header, cells):
    results = []
    for read in (lambda: _reference(header, cells),
                 lambda: step_rows.checked_table("steps.csv", header, [list(r) for r in cells])):
        try:
            results.append(_comparable(read()))
        except TraceFormatError as error:
            results.append(str(error))
    return results


@st.composite
def tables(draw):
    n = draw(st.integers(1, 12))
    rows = []
    for i in range(n):
        row = [str(draw(st.sampled_from([i, i, i, 0, i + 1])))]
        for key in HEADER[1:]:
            cells = GOOD[key] + (BAD if draw(st.integers(0, 9)) == 0 else [])
            row.append(draw(st.sampled_from(cells)))
        if draw(st.integers(0, 30)) == 0:
            row = row[:draw(st.integers(1, len(row)))] if draw(st.booleans()) else row + ["1"]
        rows.append(row)
    return rows


@settings(max_examples=200, deadline=None)
@given(tables())
def test_the_column_reader_equals_the_row_reader(cells):
    by_rows, by_columns = _both(HEADER, cells)
    assert by_columns == by_rows  # types included: 5 and 5.0 print differently


def test_a_clean_file_takes_the_column_path_and_a_damaged_one_the_row_path():
    clean = [[str(i), "0", "0", "0", "5.5", "1", "1.5", "2", "0.5", "2.3", "10", "300.5"] for i in range(5)]
    rows, dropped = step_rows.checked_table("steps.csv", HEADER, clean)
    assert step_rows._clean_rows(HEADER, clean) == rows and not dropped
    assert rows[0] == {"step": 0, "epoch": 0, "warmup": 0, "traced": 0, "step_ms": 5.5,
                       "data_load_ms": 1, "forward_ms": 1.5, "backward_ms": 2, "optimizer_ms": 0.5,
                       "loss": 2.3, "minor_faults": 10, "rss_mb": 300.5}
    damaged = clean + [["5", "0", "0", "0", "5", "4", "4", "0", "0", "1", "1", "1"]]  # phases over
    assert step_rows._clean_rows(HEADER, damaged) is None
    rows, dropped = step_rows.checked_table("steps.csv", HEADER, damaged)
    assert len(rows) == 5 and dropped == {step_rows.PHASE_OVER_STEP: 1}


def test_the_change_point_is_found_in_linear_time_where_the_level_moves():
    times = [10.0] * 40_000 + [20.0] * 60_000
    assert level_shift(times) == (40_000, 10.0, 20.0)


def test_long_runs_are_resampled_in_blocks_whose_means_hold_every_step():
    values = [float(i % 7) for i in range(10 * MAX_UNITS + 3)]
    resampler = Resampler(len(values), rng())
    assert len(resampler.starts) == MAX_UNITS
    means = resampler.means(values)
    # Row 0 is the sample itself: every block once, every step once.
    assert means[0] == pytest.approx(sum(values) / len(values), rel=1e-12)
    assert resampler.indices.shape == (2000, MAX_UNITS)
    short = list(range(10))
    assert Resampler(10, rng()).means(short)[0] == 4.5


@st.composite
def clean_tables(draw):
    """Rows of every cell gapscope writes, none of them bad."""
    rows = draw(st.lists(st.tuples(*(st.sampled_from(GOOD[key]) for key in HEADER[5:])), min_size=1, max_size=8))
    step_ms = draw(st.sampled_from(["50.5", "60", "1e2"]))
    return [[str(i), "0", "0", "0", step_ms, *row] for i, row in enumerate(rows)]


@settings(max_examples=100, deadline=None)
@given(clean_tables())
def test_clean_files_of_every_cell_gapscope_writes_take_the_column_path(cells):
    assert step_rows._clean_rows(HEADER, cells) is not None
    by_rows, by_columns = _both(HEADER, cells)
    assert by_columns == by_rows


def test_step_rows_columns_follow_their_rows_changes():
    """StepRows keeps each column it made (a breakdown asks for some ten of them over 100k
    rows): a step flagged as compiling since, a row appended, or a subset taken before either
    still gives what its dicts say; plain lists give the same."""
    rows = step_rows.StepRows({"step": n, "step_ms": float(n), "traced": n == 4} for n in range(6))
    first = step_rows.steady(rows, 2)
    assert [r["step"] for r in first] == [2, 3, 4, 5]
    assert first.column("step_ms").tolist() == [2.0, 3.0, 4.0, 5.0]
    assert step_rows.flagged(first, "traced").tolist() == [False, False, True, False]
    step_rows.mark_compiling(rows, [3])
    assert [r["step"] for r in step_rows.steady(rows, 2)] == [2, 4, 5]
    assert [r["step"] for r in step_rows.compiling(rows)] == [3]
    rows.append({"step": 6, "step_ms": 6.0})
    assert step_rows.column(rows, "step_ms").tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert [r["step"] for r in step_rows.steady(rows, 5)] == [5, 6]
    assert first.column("traced").tolist() == [0.0, 0.0, 1.0, 0.0]  # taken before the append
    plain = [dict(r) for r in rows]
    assert [r["step"] for r in step_rows.steady(plain, 0)] == [0, 1, 2, 4, 5, 6]
    assert np.isnan(step_rows.column(plain, "traced")[-1]) and step_rows.warm_up(plain, 2) == plain[:2]
    with pytest.raises(ValueError):  # shared by every figure: none may write to it
        rows.column("step_ms")[0] = 1.0


@settings(max_examples=200, deadline=None)
@given(st.one_of(tables(), clean_tables()), st.sampled_from(["\n", "\r\n"]),
       st.sampled_from(["", "blank", "quoted", "cut"]))
def test_a_whole_file_split_at_its_commas_equals_the_csv_reader(cells, line_end, damage):
    lines = [",".join(row) for row in [HEADER, *cells]]
    if damage == "blank":
        lines.insert(1, "")
    elif damage == "quoted":
        lines[-1] = lines[-1].replace(",", ',"', 1) + '"'
    text = line_end.join(lines) + ("" if damage == "cut" else line_end)
    found = step_rows.plain_table(text)
    if damage or any(len(row) != len(HEADER) for row in cells):
        assert found is None  # left to csv, which reads quotes, blank and partial lines
        return
    try:
        reference = _reference(HEADER, cells)
    except TraceFormatError:  # a file mostly of bad rows
        assert found is None
        return
    if found is None:
        assert reference[1]  # only a file with a bad row takes csv's row-by-row path
    else:
        assert _comparable((found, reference[1])) == _comparable(reference) and not reference[1]
