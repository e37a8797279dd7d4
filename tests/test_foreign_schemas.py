"""Torch traces as older torch and other tools write them: Kineto's first schema (torch 1.8-1.10),
backward ops named without evaluate_function, and trace files named *.json or *.json.gz."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from analysis.events.phase_rules import framework_phase
from analysis.events.trace import KERNEL, MEMCPY
from analysis.model.locate import ForeignRanks, ForeignTrace, locate
from analysis.readers.run_dir import find_files
from analysis.readers.torch_trace import read_torch_trace
from analysis.results.distributed_breakdown import breakdown_of
from cli import cli
from profilers.errors import GapscopeInputError

# Hand-made in torch 1.9's schema: categories Operator, Runtime, Kernel, Memcpy and Trace;
# ProfilerStep#5 at 1000-2000 us and #6 at 2000-3000 us, each: the DataLoader range (200 us,
# then 300 us), forward ops to the loss (240 us), zero_grad (20 us) inside them, the backward
# ops NllLossBackward, CudnnConvolutionBackward and torch::autograd::AccumulateGrad (280 us),
# Optimizer.step (100 us, then 80 us); one H2D copy and two kernels per step.
TORCH19 = Path(__file__).parent / "fixtures" / "foreign" / "torch19"
TORCH19_TRACE = TORCH19 / "worker0.1623000000000.json"


@pytest.fixture
def runner():
    return CliRunner()


def test_torch19_schema_reads_steps_devices_and_phases():
    trace = read_torch_trace(TORCH19_TRACE)
    kinds = [e.kind for e in trace.events]
    assert kinds.count(KERNEL) == 4 and kinds.count(MEMCPY) == 2
    assert sorted(e.nbytes for e in trace.events if e.kind == MEMCPY) == [4096, 4096]

    result = breakdown_of(TORCH19)
    result.self_check()
    assert [s.step for s in result.steps] == [5, 6]
    assert [s.step_ms for s in result.steps] == pytest.approx([1.0, 1.0])
    # data_load is the DataLoader ranges, step by step, and the batch's H2D copy after each
    # (aten::to, 40 us: issue 19, the batch's H2D goes to data_load).
    assert [s.phase_ms["data_load"] for s in result.steps] == pytest.approx([0.240, 0.340], rel=0.01)
    # forward: aten::conv2d .. aten::nll_loss less zero_grad's range; optimizer: zero_grad + step.
    assert [s.phase_ms for s in result.steps] == [
        pytest.approx({"data_load": 0.240, "forward": 0.200, "backward": 0.280,
                       "optimizer": 0.120, "other": 0.160}),
        pytest.approx({"data_load": 0.340, "forward": 0.200, "backward": 0.280,
                       "optimizer": 0.100, "other": 0.080})]
    assert result.phase_sources == {"data_load": "framework markers", "forward": "inferred",
                                    "backward": "framework markers", "optimizer": "framework markers"}
    assert result.unidentified_phases == []


@pytest.mark.parametrize("name", ["CudnnConvolutionBackward", "AddmmBackward", "NllLossBackward",
                                  "NllLossBackward0", "torch::autograd::AccumulateGrad",
                                  "autograd::engine::evaluate_function: AddmmBackward0"])
def test_old_and_new_backward_names_are_backward(name):
    assert framework_phase(name) == "backward"


@pytest.mark.parametrize("name", ["aten::addmm", "Backward", "aten::convolution_backward",
                                  "MyBackwardHook", "gradients/dense/MatMulBackward:MatMul"])
def test_names_that_only_look_like_backward_are_not(name):
    assert framework_phase(name) is None


def _trace_folder(tmp_path: Path, *names: str) -> Path:
    """A folder holding the torch-1.9 trace under each name (gzip where it ends in .gz), and
    JSON files that are no torch trace: a config, and a Chrome trace of another tool."""
    folder = tmp_path / "profile"
    (folder / "logs").mkdir(parents=True)
    for name in names:
        data = TORCH19_TRACE.read_bytes()
        (folder / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    (folder / "config.json").write_text(json.dumps({"lr": 0.1, "traceEvents": "no"}))
    (folder / "logs" / "host.trace.json.gz").write_bytes(
        gzip.compress(b'{"displayTimeUnit": "ns", "traceEvents": []}'))
    return folder


@pytest.mark.parametrize("name", ["worker0.1629000000000.json", "worker0.1629000000000.json.gz"])
def test_folder_trace_found_by_content(tmp_path, name):
    folder = _trace_folder(tmp_path, name)
    assert find_files(folder).torch_traces == [folder / name]
    result = breakdown_of(folder)
    assert len(result.steps) == 2 and result.phase_means()["data_load"] == pytest.approx(0.290)


def test_two_sessions_in_a_folder_are_named_not_chosen(tmp_path, runner):
    folder = _trace_folder(tmp_path, "worker0.1629000000000.json", "worker0.1629000009999.json.gz")
    place = locate(folder)
    assert isinstance(place, ForeignTrace)
    with pytest.raises(GapscopeInputError) as refused:
        place.readable()
    message = str(refused.value)
    assert "2 torch traces" in message and "worker0.1629000000000.json" in message
    assert "worker0.1629000009999.json.gz" in message and "give one trace file's path" in message

    result = runner.invoke(cli, ["breakdown", str(folder)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("gapscope: error:") and "2 torch traces" in lines[0]
    # The file path named chooses one.
    chosen = runner.invoke(cli, ["breakdown", str(folder / "worker0.1629000009999.json.gz"),
                                 "--format", "json"])
    assert chosen.exit_code == 0, chosen.output
    assert json.loads(chosen.stdout)["steps"] == 2


def test_ranks_found_by_content_are_a_job_not_two_sessions(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    text = TORCH19_TRACE.read_text()
    for rank in (0, 1):
        info = json.dumps({"backend": "nccl", "rank": rank, "world_size": 2})
        (folder / f"worker{rank}.1629000000000.json").write_text(
            text.replace('"traceEvents"', f'"distributedInfo": {info},\n"traceEvents"', 1))
    place = locate(folder)
    assert isinstance(place, ForeignRanks)
    assert [(rank, world) for rank, (_, world) in place.traces] == [(0, 2), (1, 2)]


def test_cli_breakdown_of_a_torch19_folder(runner):
    result = runner.invoke(cli, ["breakdown", str(TORCH19), "--format", "json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["steps"] == 2 and out["step_ms"]["mean"] == pytest.approx(1.0)
    assert out["phases"]["data_load"]["ms"] == pytest.approx(0.290, rel=0.01)
    assert out["phases"]["backward"]["ms"] == pytest.approx(0.280)
