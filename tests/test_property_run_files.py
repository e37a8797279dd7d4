"""Property tests over run and state files: whatever steps.csv, manifest.json, ab.json, matrix.json
or sweep.json hold, gapscope answers with figures that are all finite or a one-line input error,
never a traceback."""
from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.model.run import expand_runs, load_measurement, load_run
from gapscope.analysis.results.sweep_results import sweep_result
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.run_dir import STEP_COLUMNS

ODD_CELLS = ["", "nan", "inf", "-inf", "-3", "0", "1e308", "1e300", "-0", "9" * 50, "abc",
             "1_000", " 5", "0x10", "1e-320", "NaN", "١٢"]
cells = st.one_of(st.sampled_from(ODD_CELLS), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                  st.integers(-10, 10**6).map(str))
good_row = st.builds(lambda step, ms: [str(step), "0", "0", "0", f"{ms:.6f}", "1", "1", "1", "1", "2"],
                     st.integers(0, 40), st.floats(4.0, 1e4))
row = st.one_of(good_row, st.lists(cells, min_size=0, max_size=len(STEP_COLUMNS) + 2),
                good_row.flatmap(lambda r: st.tuples(st.integers(0, len(r) - 1), cells).map(
                    lambda edit: [c if i != edit[0] else edit[1] for i, c in enumerate(r)])))
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))


def _all_finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_all_finite(v) for v in value)
    return True


def _manifest(**fields) -> str:
    return json.dumps({"run_id": "r", "status": "complete", "workload": "mlp", "framework": "torch",
                       "warmup_steps": 2, **fields})


@SETTINGS
@given(st.lists(row, min_size=0, max_size=30), st.booleans())
def test_any_steps_csv_gives_finite_figures_or_one_input_error(rows, with_manifest):
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        if with_manifest:
            (run / "manifest.json").write_text(_manifest())
        (run / "steps.csv").write_text(",".join(STEP_COLUMNS) + "\n"
                                       + "".join(",".join(r) + "\n" for r in rows))
        try:
            result = breakdown(load_run(run))
        except GapscopeInputError as exc:
            assert "\n" not in str(exc)
            return
        document = result.to_json_dict()
        assert _all_finite(document), document
        assert document["step_ms"]["mean"] > 0 and all(
            s["step_ms"] > 0 for s in document["per_step"])
        assert all(p["ms"] >= 0 for p in document["phases"].values()), document["phases"]


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
              st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=6), inner, max_size=4)),
    max_leaves=20)
raw_texts = st.one_of(
    st.sampled_from(["NaN", "[1e400]", "[" * 5000 + "]" * 5000, '{"a": -Infinity}', "{", "",
                     "9" * 6000, '{"rows": {"a": {"run_dir": ["x", null, 3]}}}']),
    json_values.map(json.dumps))


def _fields(keys):
    return st.dictionaries(st.sampled_from(keys), json_values, max_size=len(keys))


@SETTINGS
@given(raw_texts, _fields(["warmup_steps", "framework", "trace_window", "steps_run", "settings",
                           "steps_per_epoch", "status", "final_loss", "pid"]))
def test_any_manifest_is_read_or_refused_in_one_line(text, fields):
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        for content in (text, _manifest(**fields)):
            (run / "manifest.json").write_text(content)
            (run / "steps.csv").write_text(",".join(STEP_COLUMNS) + "\n" + "".join(
                f"{i},0,{int(i < 2)},0,10,1,1,1,1,2\n" for i in range(8)))
            try:
                document = breakdown(load_run(run)).to_json_dict()
            except GapscopeInputError as exc:
                assert "\n" not in str(exc)
                continue
            assert _all_finite(document)


@SETTINGS
@given(st.sampled_from(["matrix.json", "ab.json", "sweep.json"]), raw_texts,
       _fields(["rows", "configs", "runs", "status", "repeats", "points", "axis", "workload"]))
# Found by this test on a loaded machine: a config indexing a list of runs (IndexError).
@example("ab.json", "NaN", {"configs": [False], "runs": []})
@example("ab.json", "{}", {"configs": ["a"], "runs": {"a": "not a list"}})
def test_any_state_file_is_read_or_refused_in_one_line(name, text, fields):
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        for content in (text, json.dumps(fields)):
            (folder / name).write_text(content)
            try:
                if name == "matrix.json":
                    expand_runs([folder])
                elif name == "ab.json":
                    load_measurement(folder)
                else:
                    document = sweep_result(folder).to_json_dict()
                    assert _all_finite(document)
            except GapscopeInputError as exc:
                assert "\n" not in str(exc)
