"""`gapscope trace`: Chrome trace-event JSON read back as a trace viewer reads it; its phase
tracks cover each traced step exactly and match the breakdown's traced phases."""
from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from click.testing import CliRunner

from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.renderers.traces.trace_events import (GAPSCOPE_PID, LAYER_CATEGORY, PHASE_CATEGORY,
                                                   STEP_CATEGORY)
from gapscope.analysis.model.run import load_run
from gapscope.cli import cli
from gapscope.profilers.phases import PHASES


def export(path, out) -> dict:
    result = CliRunner().invoke(cli, ["trace", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(out)
    data = out.read_bytes()
    return json.loads(gzip.decompress(data) if out.name.endswith(".gz") else data)


@pytest.mark.parametrize("which,out_name", [("torch_run", "t.json"), ("keras_run", "k.json.gz"),
                                            ("fixture", "f.json")])
def test_phase_tracks_add_up_to_the_steps_and_the_breakdowns_traced_phases(
        request, fixtures_dir, tmp_path, which, out_name):
    path = fixtures_dir / "marked_two_steps.pt.trace.json" if which == "fixture" \
        else request.getfixturevalue(which)
    document = export(path, tmp_path / out_name)
    run = load_run(path)
    events = document["traceEvents"]
    # What chrome://tracing and Perfetto need of every event.
    for e in events:
        assert e["ph"] in ("X", "M", "C") and isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "C":  # a counter (the allocator's level): a time and numbers
            assert isinstance(e["ts"], (int, float)) and all(
                isinstance(v, (int, float)) for v in e["args"].values())
        if e["ph"] == "X":
            assert isinstance(e["tid"], int) and e["dur"] >= 0 and isinstance(e["ts"], (int, float))
    threads = {e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == GAPSCOPE_PID}
    # The gapscope runs name their layers (a track of them); the hand-made trace has none.
    layered = which != "fixture"
    assert threads == {"steps", *PHASES} | ({"layers"} if layered else set())

    steps = {e["args"]["step"]: e for e in events if e.get("cat") == STEP_CATEGORY}
    per_step = defaultdict(lambda: dict.fromkeys(PHASES, 0.0))
    for e in events:
        if e.get("cat") == PHASE_CATEGORY:
            step = steps[e["args"]["step"]]
            assert step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1e-2
            per_step[e["args"]["step"]][e["name"]] += e["dur"]
    for number, step in steps.items():
        # Microseconds on the trace clock: far from zero, so float sums differ in the last ns.
        assert sum(per_step[number].values()) == pytest.approx(step["dur"], abs=1e-2)

    traced = breakdown(run, "trace").steps  # the traced steps as recorded
    assert sorted(steps) == [s.step for s in traced]
    for s in traced:
        for phase in PHASES:
            assert per_step[s.step][phase] / 1000.0 == pytest.approx(s.phase_ms[phase], abs=1e-5), \
                (s.step, phase)
    # Every original event is there, on a process of its own.
    originals = [e for e in events if e["ph"] == "X" and e["pid"] != GAPSCOPE_PID]
    assert len(originals) == len(run.trace.events)
    if layered:
        _layer_track_is_the_layers_table(events, steps, run)


def _layer_track_is_the_layers_table(events: list, steps: dict, run) -> None:
    """Each layer's spans lie inside their step and its phase; per step they add up to what the
    layers table gives that layer in that phase (its mean over the traced steps)."""
    from gapscope.analysis.results.layers import layer_breakdown
    table = layer_breakdown(run)
    spans = [e for e in events if e.get("cat") == LAYER_CATEGORY]
    assert {e["name"] for e in spans} == {r.name for r in table.rows} == {"dense1", "logits", "loss"}
    phases = [e for e in events if e.get("cat") == PHASE_CATEGORY]
    summed = defaultdict(float)
    for e in spans:
        step = steps[e["args"]["step"]]
        assert step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1e-2
        assert any(p["name"] == e["args"]["phase"] and p["ts"] - 1e-2 <= e["ts"]
                   and e["ts"] + e["dur"] <= p["ts"] + p["dur"] + 1e-2 for p in phases)
        summed[e["name"], e["args"]["phase"]] += e["dur"]
    for r in table.rows:
        for phase in ("forward", "backward"):
            assert summed[r.name, phase] / 1000.0 / len(steps) == pytest.approx(r.ms(phase), abs=1e-5)


def test_a_run_without_a_trace_is_refused_in_one_line(tmp_path, torch_run):
    import shutil
    copy = tmp_path / "timers-only"
    shutil.copytree(torch_run, copy, ignore=shutil.ignore_patterns("*.pt.trace.json*"))
    result = CliRunner().invoke(cli, ["trace", str(copy), "--out", str(tmp_path / "x.json")])
    assert result.exit_code == 2 and "holds no trace file" in result.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("out", ["/dev/gapscope-issue47.json.gz", "/proc/gapscope/x.json", "/sys/../dev/y.json"])
def test_an_out_in_the_systems_own_folders_is_refused_in_one_line(fixtures_dir, out):
    """Issue 47 item 9: `trace --out /dev/full.json.gz` wrote a trace into /dev (as root)."""
    import os
    result = CliRunner().invoke(cli, ["trace", str(fixtures_dir / "marked_two_steps.pt.trace.json"),
                                      "--out", out])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "the system's own folder: name a folder of yours" in result.stderr
    assert not os.path.lexists(os.path.normpath(out))
