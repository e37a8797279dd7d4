"""A busy machine and steps in two states are said in every output, never reported as fact."""
import json

import pytest

from gapscope.analysis.measures.reliability import level_shift, reliability_warnings, two_levels
from gapscope.profilers.machine_load import load_between


def test_quiet_steps_around_one_level_raise_nothing():
    steps = [10.0, 10.4, 9.8, 10.9, 9.7, 10.2, 11.1, 10.0, 9.9, 10.5] * 3
    assert two_levels(steps) is None and level_shift(steps) is None
    assert reliability_warnings({"machine_load": {"others_cpu_pct": 2.0, "steal_pct": 0.0}}, steps) == []


def test_steps_split_between_two_levels_are_found():
    # The newcomer's MLP: most steps near 0.9 ms, a third at ~104 ms (threads fighting for cores).
    steps = [0.9, 0.88, 104.0, 0.91, 0.87, 103.5, 0.9, 104.2, 0.89, 0.9, 104.1, 0.92] * 2
    (n_low, low), (n_high, high) = two_levels(steps)
    assert (n_low, n_high) == (16, 8)
    assert low == pytest.approx(0.9, abs=0.01) and high == pytest.approx(104.05, abs=0.1)


def test_a_step_change_mid_run_is_found_with_where_it_happened():
    steps = [10.0, 10.3, 9.9, 10.1, 10.2, 9.8, 10.0, 10.1] + [14.0, 14.2, 13.9, 14.1, 14.3, 14.0, 13.8, 14.2]
    at, before, after = level_shift(steps)
    assert at == 8 and before == pytest.approx(10.05) and after == pytest.approx(14.05)
    (warning,) = [w for w in reliability_warnings({}, steps) if "shifted" in w]
    assert "from 10.050 to 14.050 ms at the 9th steady step" in warning


def test_a_slow_drift_is_no_step_change():
    steps = [10.0 + 0.2 * i for i in range(30)]   # 10 -> 15.8 ms, smoothly
    assert level_shift(steps) is None and two_levels(steps) is None


def test_others_cpu_over_the_threshold_is_a_busy_machine():
    (warning,) = reliability_warnings({"machine_load": {"others_cpu_pct": 48.0, "steal_pct": 0.0,
                                                        "cores": 2}}, [10.0] * 20)
    assert warning.startswith("busy machine: other processes used 48 % of the 2 cores")
    # Corrupt or foreign figures are not read as load.
    assert reliability_warnings({"machine_load": {"others_cpu_pct": "lots"}}, [10.0] * 20) == []
    assert reliability_warnings({"machine_load": [1, 2]}, [10.0] * 20) == []


def test_load_between_two_snapshots_by_hand():
    # 10 s on 2 cores = 20 CPU-s: 5 idle, 1 stolen, 14 busy of which the run used 9: others 5.
    before = {"t": 0.0, "total_s": 100.0, "idle_s": 50.0, "steal_s": 2.0, "own_s": 1.0,
              "pressure_us": 1_000_000, "loadavg_1m": 0.5}
    after = {"t": 10.0, "total_s": 120.0, "idle_s": 55.0, "steal_s": 3.0, "own_s": 10.0,
             "pressure_us": 3_000_000, "loadavg_1m": 2.5}
    load = load_between(before, after)
    assert load["others_cpu_pct"] == 25.0 and load["steal_pct"] == 5.0
    assert load["cpu_pressure_pct"] == 20.0 and load["loadavg_1m"] == [0.5, 2.5]


def _spin(seconds):
    import time
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.fixture
def busy_machine():
    """Two processes that keep both cores busy, as the newcomer's machine was."""
    import multiprocessing
    import os
    context = multiprocessing.get_context("spawn")
    spinners = [context.Process(target=_spin, args=(120,), daemon=True)
                for _ in range(os.cpu_count() or 2)]
    for p in spinners:
        p.start()
    yield
    for p in spinners:
        p.terminate()
        p.join()


def test_a_run_beside_busy_processes_is_marked_in_json_table_and_compare(busy_machine, tmp_path):
    from click.testing import CliRunner

    from gapscope.cli import cli
    runner = CliRunner()
    args = ["--steps", "16", "--warmup", "2", "--trace-steps", "4", "--out", str(tmp_path), "--quiet"]
    for framework in ("torch", "torch"):
        assert runner.invoke(cli, ["run", "linreg", "--framework", framework, *args]).exit_code == 0
    first, second = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    manifest = json.loads((first / "manifest.json").read_text())
    assert manifest["machine_load"]["others_cpu_pct"] > 10
    doc = json.loads(runner.invoke(cli, ["breakdown", str(first), "--format", "json"]).stdout)
    assert doc["reliable"] is False
    assert doc["reliability_warnings"][0].startswith("busy machine: other processes used")
    table = runner.invoke(cli, ["breakdown", str(first)]).stdout
    assert "warning: busy machine" in table
    compared = runner.invoke(cli, ["compare", str(first), str(second)])
    assert compared.exit_code == 3, compared.output
    assert compared.stdout.startswith("INCONCLUSIVE: ")
    assert "try " not in compared.stdout   # no suggestion from runs on a busy machine


def test_a_dataloader_alternating_ready_and_waiting_batches_is_no_machine_state():
    steps = [0.85, 1.55, 0.9, 1.5, 0.84, 1.6, 1.52, 0.88] * 3   # 1.8x apart, interleaved
    assert two_levels(steps) is None and level_shift(steps) is None


def test_one_state_change_seen_two_ways_is_one_warning():
    # Slow first, fast after: two levels and a shift, both of the same change of state.
    steps = [125.0, 130.0, 128.0, 126.0, 127.0] + [12.0, 11.9, 12.1, 12.0, 11.8]
    assert two_levels(steps) and level_shift(steps)
    (warning,) = reliability_warnings({}, steps)
    assert warning.startswith("steady steps fall into two levels (5 near 12.000 ms, 5 near 127.000 ms)"
                              " and shifted from 127.000 to 12.000 ms at the 6th steady step")
    assert warning.endswith(": the machine changed state during the run")
