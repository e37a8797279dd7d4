"""Run and state files are validated as traces are: a steps.csv row that is no measurement is
dropped and counted, a file mostly of them refused; a manifest or state file that is deep,
non-finite or out of range is one line and exit 2; one bad run never blanks the plugin."""
from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner
from tensorboard.plugins import base_plugin
from werkzeug.test import Client

from gapscope.analysis.tensorboard.plugin.plugin import GapscopePlugin
from gapscope.cli import cli
from gapscope.profilers.phases import MARKED_PHASES
from gapscope.profilers.run_dir import STEP_COLUMNS
from gapscope.profilers.state_json import MAX_DEPTH, StateFileError, loads

WARMUP, STEPS = 2, 12
# Steady steps: 10 ms, phases 1, 2, 3, 1 ms, so other is 3 ms; warm-up steps 50 ms.
PHASE_MS = dict(zip(MARKED_PHASES, (1.0, 2.0, 3.0, 1.0)))


def _rows() -> list[dict]:
    return [{"step": i, "epoch": 0, "warmup": int(i < WARMUP), "traced": 0,
             "step_ms": 50.0 if i < WARMUP else 10.0,
             **{f"{p}_ms": ms for p, ms in PHASE_MS.items()}, "loss": 2.0} for i in range(STEPS)]


def make_run(folder: Path, rows: list[dict] | None = None, manifest: dict | None = None,
             with_manifest: bool = True) -> Path:
    folder.mkdir(parents=True)
    if with_manifest:
        (folder / "manifest.json").write_text(json.dumps({
            "run_id": folder.name, "status": "complete", "workload": "mlp", "framework": "torch",
            "variant": "default", "warmup_steps": WARMUP, "steps_run": STEPS, **(manifest or {})}))
    rows = _rows() if rows is None else rows
    columns = list(STEP_COLUMNS) if not rows else list(rows[0])
    with open(folder / "steps.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return folder


def _breakdown(path: Path) -> tuple[int, dict | None, str]:
    result = CliRunner().invoke(cli, ["breakdown", str(path), "--format", "json"])
    document = json.loads(result.stdout) if result.exit_code == 0 else None
    return result.exit_code, document, result.stderr


def _finite(document) -> bool:
    if isinstance(document, float):
        return math.isfinite(document)
    if isinstance(document, dict):
        return all(_finite(v) for v in document.values())
    if isinstance(document, list):
        return all(_finite(v) for v in document)
    return True


def _one_line(code: int, stderr: str, fragment: str) -> None:
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("gapscope: error:"), stderr
    assert fragment in lines[0], lines[0]


def test_a_clean_run_is_the_reference(tmp_path):
    code, doc, _ = _breakdown(make_run(tmp_path / "run"))
    assert code == 0 and doc["step_ms"]["mean"] == 10.0
    assert doc["phases"]["other"]["ms"] == pytest.approx(3.0) and doc["compile_ms"] == 80.0
    assert not any("steps.csv" in n for n in doc["notes"])


@pytest.mark.parametrize("edit,why", [
    ({"step_ms": "1e300"}, "1 time over a day"),
    ({"step_ms": "inf"}, "1 non-finite time"),
    ({"step_ms": "nan"}, "1 non-finite time"),
    ({"step_ms": "-3"}, "1 negative time"),
    ({"step_ms": "0"}, "1 zero-length step"),
    ({"forward_ms": "-100"}, "1 negative time"),
    ({"forward_ms": "50"}, "1 phases over the step"),
    ({"step_ms": ""}, "1 no step_ms"),
    ({"step_ms": "ten"}, "1 cell not a number"),
    ({"step_ms": "9" * 5000}, "1 cell not a number"),
    ({"step": "9" * 5000}, "1 unreadable step number"),
    ({"step": "-4"}, "1 unreadable step number"),
    ({"traced": "7"}, "1 warmup/traced not 0 or 1"),
])
def test_a_bad_row_is_dropped_with_a_note_and_the_figures_stay_true(tmp_path, edit, why):
    rows = _rows()
    rows[6].update(edit)
    code, doc, err = _breakdown(make_run(tmp_path / "run", rows))
    assert code == 0, err
    assert doc["step_ms"]["mean"] == 10.0 and doc["phases"]["other"]["ms"] == pytest.approx(3.0)
    assert doc["phases"]["forward"]["ms"] == 2.0 and _finite(doc)
    assert f"steps.csv: 1 invalid row(s) dropped ({why})" in doc["notes"]


def test_a_duplicated_row_is_counted_once(tmp_path):
    rows = _rows()
    rows.insert(7, dict(rows[6], step_ms=30.0))  # the same step number again, another time
    code, doc, _ = _breakdown(make_run(tmp_path / "run", rows))
    assert code == 0 and doc["step_ms"]["mean"] == 10.0 and len(doc["per_step"]) == STEPS - WARMUP
    assert "steps.csv: 1 invalid row(s) dropped (1 duplicate step)" in doc["notes"]


def test_a_dropped_warm_up_row_does_not_move_a_warm_up_step_into_the_steady_state(tmp_path):
    rows = _rows()
    rows[0]["step_ms"] = "nan"
    code, doc, _ = _breakdown(make_run(tmp_path / "run", rows))
    assert code == 0 and doc["step_ms"]["mean"] == 10.0 and doc["compile_ms"] == 40.0


def test_short_and_long_rows_are_dropped(tmp_path):
    folder = make_run(tmp_path / "run")
    lines = (folder / "steps.csv").read_text().splitlines()
    lines[5] = ",".join(lines[5].split(",")[:4])        # a short row
    lines[6] = lines[6] + ",1,2"                         # cells past the header
    (folder / "steps.csv").write_text("\n".join(lines) + "\n")
    code, doc, _ = _breakdown(folder)
    assert code == 0 and doc["step_ms"]["mean"] == 10.0
    assert "steps.csv: 2 invalid row(s) dropped (1 short row, 1 more cells than columns)" in doc["notes"]


@pytest.mark.parametrize("damage,fragment", [
    ("all_1e308", "12 of 12 rows are invalid (12 time over a day): refusing steps.csv"),
    ("all_short", "12 of 12 rows are invalid (12 short row)"),
    ("50mb_line", "corrupt steps.csv (field larger than field limit"),
    ("no_step_column", "not a gapscope steps.csv"),
])
def test_a_steps_csv_mostly_invalid_is_one_line_and_exit_2(tmp_path, damage, fragment):
    rows = _rows()
    if damage == "all_1e308":
        rows = [dict(r, step_ms="1e308") for r in rows]
    folder = make_run(tmp_path / "run", rows)
    path = folder / "steps.csv"
    if damage == "all_short":
        lines = path.read_text().splitlines()
        path.write_text("\n".join([lines[0]] + [",".join(l.split(",")[:3]) for l in lines[1:]]) + "\n")
    elif damage == "50mb_line":
        with open(path, "a") as handle:
            handle.write("1" * (50 << 20) + "\n")
    elif damage == "no_step_column":
        path.write_text(path.read_text().replace("step,", "stap,", 1))
    code, _, err = _breakdown(folder)
    _one_line(code, err, fragment)


def test_a_run_without_manifest_takes_its_warm_up_from_steps_csv(tmp_path):
    code, doc, _ = _breakdown(make_run(tmp_path / "run", with_manifest=False))
    assert code == 0 and doc["step_ms"]["mean"] == 10.0 and doc["compile_ms"] == 80.0


def test_a_run_without_manifest_or_warmup_column_says_the_warm_up_is_unknown(tmp_path):
    rows = [{k: v for k, v in r.items() if k != "warmup"} for r in _rows()]
    code, doc, _ = _breakdown(make_run(tmp_path / "run", rows, with_manifest=False))
    assert code == 0 and doc["step_ms"]["mean"] == pytest.approx((2 * 50 + 10 * 10) / 12)
    assert any("the warm-up is unknown" in n for n in doc["notes"])


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("field,value,fragment", [
    ("warmup_steps", -5, "field 'warmup_steps' should be 0 to"),
    ("framework", "jax", "unknown framework \"jax\""),
    ("trace_window", [9, 1], "field 'trace_window' should be [first, last] steps"),
    ("trace_window", [0, 1e40], "field 'trace_window' should be [first, last] steps"),
    ("settings", json.loads(_nested(40)), "nested deeper than"),
])
def test_manifest_values_no_run_writes_are_refused(tmp_path, field, value, fragment):
    folder = make_run(tmp_path / "run", manifest={field: value})
    code, _, err = _breakdown(folder)
    _one_line(code, err, fragment)


@pytest.mark.parametrize("name", ["manifest.json", "ab.json", "matrix.json", "sweep.json"])
def test_deeply_nested_state_files_are_one_line(tmp_path, name):
    folder = make_run(tmp_path / "run")
    (folder / name).write_text('{"rows": ' + _nested(100_000) + "}")
    args = ["sweep", str(folder)] if name == "sweep.json" else ["breakdown", str(folder)]
    if name == "ab.json":
        args = ["compare", str(folder)]
    result = CliRunner().invoke(cli, args)
    _one_line(result.exit_code, result.stderr, "")
    assert "nested deeper than" in result.stderr or "corrupt" in result.stderr


def _sweep_state(folder: Path, **overrides) -> Path:
    folder.mkdir()
    (folder / "sweep.json").write_text(json.dumps({
        "workload": "mlp", "configs": ["torch", "keras"], "axis": "batch_size", "repeats": 2,
        "status": "complete", "points": [{"value": 16, "ab": "ab-16"}], **overrides}))
    return folder


@pytest.mark.parametrize("text,fragment", [
    ('"repeats": NaN', "NaN is not a number JSON allows"),
    ('"repeats": "two"', "repeats should be a whole number"),
    ('"repeats": 1e40', "repeats should be a whole number"),
    ('"repeats": 2', "a point's value should be a number from"),
])
def test_sweep_state_values_out_of_range_are_one_line(tmp_path, text, fragment):
    folder = _sweep_state(tmp_path / "sweep")
    state = (folder / "sweep.json").read_text().replace('"repeats": 2', text)
    if fragment.startswith("a point"):
        state = state.replace('"value": 16', '"value": 1e40')
    (folder / "sweep.json").write_text(state)
    result = CliRunner().invoke(cli, ["sweep", str(folder)])
    _one_line(result.exit_code, result.stderr, fragment)


def test_the_loader_refuses_what_no_gapscope_file_holds():
    assert loads('{"a": [1, 2.5, "x"]}') == {"a": [1, 2.5, "x"]}
    assert loads(_nested(MAX_DEPTH)) is not None
    for bad in (_nested(MAX_DEPTH + 1), _nested(100_000), '{"a": Infinity}', '[1e400]',
                "[" + "9" * 5000 + "]", '[-NaN]', "\xff"):
        with pytest.raises(StateFileError):
            loads(bad)


def test_one_bad_run_never_blanks_the_plugin(tmp_path):
    make_run(tmp_path / "good")
    deep = make_run(tmp_path / "deep")
    (deep / "manifest.json").write_text(_nested(100_000))
    make_run(tmp_path / "huge", [dict(r, step_ms="1e308") for r in _rows()])
    digits = _rows()
    digits[5]["step"] = "9" * 5000
    make_run(tmp_path / "digits", digits)
    edited = _rows()
    edited[7]["step_ms"] = "1e300"
    make_run(tmp_path / "edited", edited)
    plugin = GapscopePlugin(base_plugin.TBContext(logdir=str(tmp_path)))

    def get(route, **query):
        response = Client(plugin.get_plugin_apps()[route]).get("/", query_string=query)
        return response.status_code, json.loads(response.get_data())

    code, runs = get("/runs")
    assert code == 200
    runs = {r["name"]: r for r in runs["runs"]}
    assert runs["good"]["problem"] is None and runs["good"]["breakdown"]["step_ms"]["mean"] == 10.0
    assert "nested deeper than" in runs["deep"]["problem"]
    assert "refusing steps.csv" in runs["huge"]["problem"]
    # The tab serves the reader's numbers: the edited row is dropped there too, and said.
    assert runs["edited"]["breakdown"]["step_ms"]["mean"] == 10.0
    assert "steps.csv: 1 invalid row(s) dropped (1 time over a day)" in runs["edited"]["breakdown"]["notes"]
    code, steps = get("/steps", run="digits")
    assert code == 200 and [s["step"] for s in steps["steps"]] == [i for i in range(STEPS) if i != 5]
    assert [s["kind"] for s in steps["steps"][:3]] == ["warm-up", "warm-up", "unprofiled"]


def test_every_reader_of_gapscopes_own_files_goes_through_the_one_loader():
    # The class, not the cases: a json.loads of a file read elsewhere would bring back deep
    # nesting, NaN and 5,000-digit numbers (tracebacks, non-finite figures).
    root = Path(__file__).resolve().parents[1]
    offenders = []
    for folder in ("analysis", "profilers", "workloads", "gapscope"):
        for path in (root / folder).rglob("*.py"):
            text = path.read_text()
            if path.name != "state_json.py" and "json.load" in text and (
                    "read_text()" in text or "read_bytes(" in text or "open(" in text):
                for line in text.splitlines():
                    if "json.load" in line and ("read_" in line or "open(" in line):
                        offenders.append(f"{path.relative_to(root)}: {line.strip()}")
    assert offenders == []


@pytest.mark.parametrize("repeats", [1e40, 1, "2", True])
def test_an_ab_state_with_repeats_it_cannot_have_is_one_line(ab_folder, tmp_path, repeats):
    import shutil
    folder = tmp_path / "ab"
    shutil.copytree(ab_folder, folder)
    state = json.loads((folder / "ab.json").read_text())
    (folder / "ab.json").write_text(json.dumps({**state, "repeats": repeats}))   # 2 runs a side
    result = CliRunner().invoke(cli, ["compare", str(folder)])
    _one_line(result.exit_code, result.stderr, "corrupt A/B state (repeats must be a whole number from 2")
