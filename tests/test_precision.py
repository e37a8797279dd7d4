"""compare --measure --precision: the stopping rule on known figures, and a real measurement that says why it stopped."""
import json
import math

import pytest
from click.testing import CliRunner

from gapscope.analysis.results.precision import Progress, half_width, stop_reason
from gapscope.analysis.measures.stats import RepeatRatio
from gapscope.cli import cli
from conftest import compare_exit_code


def _progress(width_pct: float, rounds: int, elapsed_s: float) -> Progress:
    half = math.log1p(width_pct / 100)
    ratio = RepeatRatio(1.5, (1.5 * math.exp(-half), 1.5 * math.exp(half)), [1.5] * rounds,
                        2.0 * rounds - 2, half / 2.0)
    return Progress({"cnn:torch": ratio}, rounds, elapsed_s)


def test_half_width_is_relative_and_symmetric_on_logs():
    assert half_width(_progress(3.0, 3, 0).ratios["cnn:torch"]) == pytest.approx(0.03)


@pytest.mark.parametrize("width,rounds,elapsed,expected", [
    (1.0, 2, 60, None),                                   # tight, but two processes a side only
    (2.5, 3, 90, "precision reached: ±2.5 % ≤ ±3 % after 3 repeats"),
    (4.0, 5, 500, None),                                  # 100 s a round: the 6th ends at 600 s
    (4.0, 5, 510, "time budget spent (8.5 min of 10.0 min)"),
    (4.0, 50, 100, "stopped at the most repeats asked for (50)"),
    (9.0, 2, 170, None),      # past a 3-minute budget, but fewer than 3 rounds: one more
    (9.0, 3, 170, "time budget spent (2.8 min of 3.0 min)"),
])
def test_stop_reason(width, rounds, elapsed, expected):
    budget = 180 if width == 9.0 else 600
    reason = stop_reason(_progress(width, rounds, elapsed), target=0.03, budget_s=budget, max_rounds=50)
    if expected is None:
        assert reason is None
    else:
        assert reason.startswith(expected)


def test_a_target_not_reached_says_what_was_and_how_many_repeats_would_reach_it():
    reason = stop_reason(_progress(4.0, 5, 510), target=0.03, budget_s=600, max_rounds=50)
    assert "reached ±4.0 %, target ±3 %" in reason
    assert "repeats a side would narrow it to ±3 %" in reason


def test_a_wide_interval_reads_as_a_factor_not_a_million_percent():
    assert _progress(4.0, 3, 0).line(0.03).endswith("±4.0 % (target ±3 %)")
    assert "±12874x (far from the target)" in _progress(1287388.5, 3, 0).line(0.03)


def test_a_measurement_that_cannot_reach_its_precision_stops_at_its_repeats_and_says_so(tmp_path):
    result = CliRunner().invoke(cli, [
        "compare", "--measure", "linreg:torch", "linreg:torch:preload", "--precision", "0.01%",
        "--repeats", "3", "--steps", "14", "--warmup", "2", "--trace-steps", "4",
        "--out", str(tmp_path), "--format", "json"])
    (folder,) = tmp_path.glob("ab-linreg-*")
    assert result.exit_code == compare_exit_code(*(m.parent for m in folder.glob("*/manifest.json"))), \
        result.output
    (pair,) = json.loads(result.stdout)["comparisons"]
    assert pair["repeats"] == 3 and len(pair["pair_ratios"]) == 3
    doc = json.loads(result.stdout)
    (warning,) = [w for w in doc["warnings"] if "not reached" in w]
    assert warning.startswith("precision ±0.01 % not reached: stopped at the most repeats asked for (3)")
    # Progress went to stderr, round by round, with the interval so far.
    assert "round 3: linreg:torch:preload" in result.stderr
    state = json.loads((folder / "ab.json").read_text())
    assert state["stopped"].startswith("stopped at the most repeats") and state["repeats"] == 3
    # Rounds alternate their order: A B, B A, A B.
    started = sorted((json.loads((folder / n / "manifest.json").read_text())["started_at"], c)
                     for c, names in state["runs"].items() for n in names)
    a, b = "linreg:torch", "linreg:torch:preload"
    assert [c for _, c in started] == [a, b, b, a, a, b]
