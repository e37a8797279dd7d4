"""benchmarks.process_spread's arms: what each knob changes in the process it starts."""
from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.process_spread import Arm


def _in_child(arm: Arm, code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], env=arm.env(), capture_output=True,
                          text=True, timeout=60).stdout.strip()


def test_gc_off_disables_the_collector_from_the_start():
    assert _in_child(Arm.parse("child:gc-off"), "import gc; print(gc.isenabled())") == "False"
    assert _in_child(Arm.parse("child"), "import gc; print(gc.isenabled())") == "True"


def test_knobs_set_their_environment():
    env = Arm.parse("plain:malloc-kept:omp1").env()
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(32 << 20) and env["OMP_NUM_THREADS"] == "1"
    assert "MALLOC_MMAP_THRESHOLD_" not in Arm.parse("plain").env()


@pytest.mark.parametrize("text", ["loop", "child:gc", "run:no-trace:fast"])
def test_an_unknown_kind_or_knob_is_refused(text):
    with pytest.raises(ValueError, match="a kind"):
        Arm.parse(text)


def _plain_loop(*args):
    from benchmarks.gap_truth import ROOT, child_env
    return subprocess.run([sys.executable, "-m", "benchmarks.plain_loops", *args], cwd=ROOT,
                          env=child_env(), capture_output=True, text=True, timeout=300)


def test_the_plain_loop_refuses_a_flag_its_framework_would_ignore():
    done = _plain_loop("mlp", "keras", "--cached")
    assert done.returncode == 2 and "--cached does not apply to the keras loop" in done.stderr
    done = _plain_loop("mlp", "torch", "--gapscope-step")
    assert done.returncode == 2 and "--gapscope-step does not apply to the torch loop" in done.stderr


def test_the_plain_keras_loop_with_gapscope_s_step_instrumentation():
    import json
    done = _plain_loop("mlp", "keras", "--steps", "8", "--warmup", "2", "--gapscope-step")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # Every step timed by gapscope's StepTimer, each with the loss of its own update.
    assert len(result["times_ms"]) == 8 and all(t > 0 for t in result["times_ms"])
    assert all(loss is not None and loss > 0 for loss in result["losses"])
    assert result["parameters"] == 100 * 128 + 128 + 128 * 10 + 10
