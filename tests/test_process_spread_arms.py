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
