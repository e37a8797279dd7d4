"""gapscope against the oldest torch setup.cfg claims: every torch name its code uses must exist in
that version, read from a snapshot of that version's wheel (benchmarks.torch_api)."""
from __future__ import annotations

import configparser
import importlib
import json
import re
from pathlib import Path

import pytest

from benchmarks.torch_api import bad_keywords, missing, used_calls, used_names

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "tests" / "fixtures" / "torch_api"


def claimed_floor() -> str:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    found = re.search(r"^torch>=([\d.]+)\s*$", config["options"]["install_requires"], re.M)
    assert found, "setup.cfg names no torch>= floor"
    return found.group(1)


def test_the_claimed_floor_is_the_gpu_devices_torch():
    assert claimed_floor() == "2.11"


def test_every_torch_name_gapscope_uses_exists_in_the_claimed_floor():
    path = SNAPSHOTS / f"{claimed_floor()}.json"
    assert path.is_file(), (f"no snapshot of torch {claimed_floor()}: python -m benchmarks.torch_api "
                            f"<a torch {claimed_floor()} wheel> --out {path.relative_to(ROOT)}")
    snapshot = json.loads(path.read_text())
    assert snapshot["version"].startswith(claimed_floor())
    assert missing(used_names(), snapshot) == []
    assert bad_keywords(used_calls(), snapshot) == []


def test_keywords_are_checked_where_the_wheel_tells():
    """Most calls with keywords have a signature in 2.11's Python; those checked must include
    the ones a version difference would hit first."""
    snapshot = json.loads((SNAPSHOTS / f"{claimed_floor()}.json").read_text())
    calls = used_calls()
    known = {n for n in calls if snapshot["signatures"].get(n) not in (None, ["**"])}
    assert {"torch.compile", "torch.profiler.profile", "torch.profiler.schedule",
            "torch.profiler.tensorboard_trace_handler", "torch.utils.data.DataLoader",
            "torch.distributed.init_process_group", "torch.autocast"} <= known
    assert calls["torch.profiler.profile"]["keywords"] == [
        "acc_events", "activities", "on_trace_ready", "profile_memory", "record_shapes", "schedule",
        "with_modules", "with_stack"]


def test_the_used_names_are_real_on_the_installed_torch():
    """The reading of gapscope's code yields names the torch here really has: a name the
    static reading got wrong would make the floor check pass vacuously."""
    used = used_names()
    assert {"torch.cuda.Event", "torch.distributed.init_process_group", "torch.profiler.record_function",
            "torch.amp.GradScaler", "torch.compile", "torch._dynamo.config.cache_size_limit"} <= set(used)
    for name in used:
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable prefix, then attributes
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
                break
            except ImportError:
                continue
        for attribute in parts[cut:]:
            obj = getattr(obj, attribute)


@pytest.mark.parametrize("code, expected", [
    ("import torch\nloss = torch.nn.LinearCrossEntropyLoss()\n", "has no torch.nn.LinearCrossEntropyLoss"),
    ("from torch.distributed import all_gather_single\n", "has no torch.distributed.all_gather_single"),
    ("import torch.optim as optim\noptim.swap_in_optimizer_params_and_state\n",
     "has no torch.optim.swap_in_optimizer_params_and_state"),
])
def test_a_name_newer_than_the_floor_is_caught(tmp_path, code, expected):
    """Names torch 2.13 has and 2.11 lacks, used as gapscope's code would."""
    (tmp_path / "analysis").mkdir()
    (tmp_path / "analysis" / "new.py").write_text(code)
    snapshot = json.loads((SNAPSHOTS / "2.11.json").read_text())
    problems = missing(used_names(tmp_path), snapshot)
    assert len(problems) == 1 and expected in problems[0] and "analysis/new.py:" in problems[0]


@pytest.mark.parametrize("code, expected", [
    ("import torch\ntorch.compile(model, recompile_limit=8)\n", "torch.compile(recompile_limit=)"),
    ("from torch.profiler import tensorboard_trace_handler as h\nh('d', use_python_export=True)\n",
     "torch.profiler.tensorboard_trace_handler(use_python_export=)"),
])
def test_a_keyword_newer_than_the_floor_is_caught(tmp_path, code, expected):
    """Keywords torch 2.13 takes and 2.11 does not."""
    (tmp_path / "profilers").mkdir()
    (tmp_path / "profilers" / "new.py").write_text(code)
    snapshot = json.loads((SNAPSHOTS / "2.11.json").read_text())
    problems = bad_keywords(used_calls(tmp_path), snapshot)
    assert len(problems) == 1 and problems[0].startswith(expected)
    assert problems[0].endswith("torch 2.11.0 takes no such keyword") and "profilers/new.py:2" in problems[0]


def test_names_the_floor_has_pass(tmp_path):
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "ok.py").write_text(
        "import torch\nimport torch.distributed as dist\nfrom torch.profiler import record_function\n"
        "def f():\n    torch.cuda.Event(enable_timing=True).record()\n    dist.init_process_group('nccl')\n")
    snapshot = json.loads((SNAPSHOTS / "2.11.json").read_text())
    used = used_names(tmp_path)
    assert "torch.cuda.Event" in used and "torch.distributed.init_process_group" in used
    assert missing(used, snapshot) == []


def test_a_wheel_is_read_without_importing_it(tmp_path):
    """A hand-made wheel: star imports (absolute and relative, from a package and a module),
    stubs, names bound inside if/try, and torch's names copied from torch._C at run time."""
    import zipfile

    from benchmarks.torch_api import main, wheel_names
    wheel = tmp_path / "torch-9.9.0-py3-none-any.whl"
    files = {
        "torch/__init__.py": "from torch._C import *\nfrom .cuda import Event as _E\nif X:\n"
                             "    def f(): pass\ntry:\n    import numpy as np\nexcept ImportError:\n    g = 1\n",
        "torch/_C/__init__.pyi": "float16: dtype\ndef randn(): ...\n",
        "torch/_C/_VariableFunctions.pyi": "def randperm(): ...\n",
        "torch/cuda/__init__.py": "from .streams import *\n",
        "torch/cuda/streams.py": "class Event:\n    def __init__(self, enable_timing=False): ...\n"
                                 "raise SystemExit('never run')\n",
        "torch-9.9.0.dist-info/METADATA": "Name: torch\nVersion: 9.9.0\n",
    }
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    snapshot = wheel_names(wheel, {"torch", "torch.cuda", "torch.nope"},
                           ["torch.cuda.Event", "torch.randn", "torch.nope.f"])
    assert snapshot["signatures"] == {"torch.cuda.Event": ["enable_timing"], "torch.randn": [],
                                      "torch.nope.f": None}
    assert snapshot["version"] == "9.9.0"
    assert snapshot["modules"] == ["torch", "torch._C", "torch._C._VariableFunctions", "torch.cuda",
                                   "torch.cuda.streams"]
    assert set(snapshot["names"]) == {"torch", "torch.cuda"}
    assert {"float16", "randn", "randperm", "_E", "f", "np", "g"} <= set(snapshot["names"]["torch"])
    assert snapshot["names"]["torch.cuda"] == ["Event"]
    assert missing({"torch.cuda.Event": ["a.py:1"], "torch.cuda.Stream": ["b.py:2"]}, snapshot) == [
        "torch.cuda.Stream (b.py:2): torch 9.9.0 has no torch.cuda.Stream"]
    assert main([str(tmp_path / "missing.whl"), "--out", str(tmp_path / "x.json")]) == 2
