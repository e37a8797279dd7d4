"""benchmarks.gpu_check on a CPU: the skip message, the dry run, bad input, and its checks over a
real CPU run, a one-rank gloo job and the hand-made GPU trace (every figure read off the fixture)."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gapscope.analysis.measures.kernels import find_work
from gapscope.analysis.measures.reliability import busy_reason
from gapscope.analysis.measures.resources import resource_stats
from gapscope.analysis.model.run import load_run
from benchmarks import gpu_check, gpu_check_plan as P, gpu_check_report, gpu_checks as C
from gapscope.profilers.errors import UnsupportedVariantError
from gapscope.workloads.settings import RunSettings

ROOT = Path(__file__).resolve().parent.parent


def _command(*args, env=None):
    return subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def test_without_cuda_it_says_so_and_exits_4_unless_told_that_is_fine(tmp_path):
    done = _command("--out", str(tmp_path / "out"))
    assert done.returncode == 4, done.stderr   # a CI runner that lost its GPU is not green
    assert done.stdout == "no CUDA device: nothing to check\n"
    assert not (tmp_path / "out").exists()  # nothing written, nothing run
    allowed = _command("--out", str(tmp_path / "out"), "--no-gpu-ok")
    assert allowed.returncode == 0 and allowed.stdout == done.stdout


def test_dry_run_lists_every_cuda_path_and_imports_no_framework():
    # The dry run must work anywhere: it imports neither torch nor TensorFlow.
    code = ("import sys; from benchmarks import gpu_check; sys.stdout.write(gpu_check.dry_run(3, 480)); "
            "print(sorted(m for m in ('torch', 'tensorflow', 'keras') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[-1] == "[]"
    ids = {line.split()[0] for line in lines[1:-4]}
    for workload in ("mlp", "cnn"):
        assert {f"{workload}-eager", f"{workload}-compile", f"{workload}-reduce-overhead"} <= ids
    # Every GPU-only torch row of seed-4060ti, max-autotune and AMP fp16 among them.
    assert {i for i in ids if i.startswith("seed:")} == {
        "seed:torch-compile-ma-high-tensor-ds", "seed:torch-ro-scaler-transforms-async",
        "seed:torch-amp-scaler-tensor-ds", "seed:torch-ro-high-amp-scaler-tensor-ds",
        "seed:torch-high-amp-tensor-ds", "seed:torch-ro-high-amp-tensor-ds"}
    assert {"mlp-max-autotune", "mlp-amp-bf16", "mlp-pageable", "mlp-nccl-x1", "own-model-capture"} <= ids
    # A compiled seed row's kernels are held against the eager run with its AMP settings.
    eager_of = {r.id: r.eager_of for r in P.seed_rows()}
    assert eager_of == {"seed:torch-compile-ma-high-tensor-ds": "cnn-eager",
                        "seed:torch-ro-scaler-transforms-async": "seed:torch-amp-scaler-tensor-ds",
                        "seed:torch-ro-high-amp-scaler-tensor-ds": "seed:torch-amp-scaler-tensor-ds",
                        "seed:torch-ro-high-amp-tensor-ds": "seed:torch-high-amp-tensor-ds",
                        "seed:torch-amp-scaler-tensor-ds": None, "seed:torch-high-amp-tensor-ds": None}
    assert len(ids) == 17
    assert "eager (--nproc 1)" in done.stdout
    assert lines[-3].startswith("17 runs, about ") and lines[-3].endswith("budget 480 s")
    assert lines[-2].startswith("keras, keras-torch and tf paths: skipped")


def test_dry_run_command_and_bad_input():
    done = _command("--dry-run", "--jobs", "4")
    assert done.returncode == 0 and "on 4 lanes" in done.stdout
    for bad in (["--jobs", "0"], ["--budget-s", "soon"], ["--nonsense"]):
        done = _command(*bad)
        assert done.returncode == 2
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_plan_runs_every_settings_combination_this_gapscope_accepts():
    # Each planned run resolves on a GPU machine (refused only for needing one here).
    for planned in P.plan():
        settings = P.settings_of(planned)
        settings.with_variant(cuda_available=True)
        assert (settings.steps, settings.warmup_steps, settings.trace_steps) == (30, 5, 10)


def test_pageable_variant_is_refused_where_it_means_nothing():
    with pytest.raises(UnsupportedVariantError, match="needs a CUDA GPU"):
        RunSettings("mlp", "torch", variant="pageable").with_variant(cuda_available=False)
    with pytest.raises(UnsupportedVariantError, match="on the device already"):
        RunSettings("mlp", "torch", variant="pageable,preload").with_variant(cuda_available=True)
    resolved = RunSettings("mlp", "torch", variant="pageable").with_variant(cuda_available=True)
    assert resolved.pageable is True


def _without_tensorflow(folder: Path) -> str:
    """A PYTHONPATH under which no process can import TensorFlow or Keras, as on the GPU device:
    its sitecustomize blocks them in every Python started with it (the launchers pass it on)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(
        "import sys\nsys.modules['tensorflow'] = None\nsys.modules['keras'] = None\n")
    return os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """One real mlp run on this CPU, with gapscope's own launcher and the check's settings,
    its process unable to import TensorFlow."""
    from gapscope.workloads.launch import launch
    planned = P.Planned("mlp-eager", "mlp", "eager", "test")
    settings = dataclasses.replace(P.settings_of(planned), device="cpu")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", _without_tensorflow(tmp_path_factory.mktemp("block")))
        outcome = launch(settings, tmp_path_factory.mktemp("runs"))
    assert outcome.status == "complete", outcome.error
    return outcome.run_dir, planned


def _by_name(checks):
    return {c.name: c for c in checks}


def test_checks_over_a_real_cpu_run(cpu_run):
    run_dir, planned = cpu_run
    checks, kernels = P.evaluate(run_dir, planned, cuda=False)
    found = _by_name(checks)
    assert found["phases add up"].status == C.PASS
    assert found["phases add up"].detail.startswith("25 steady steps within their step")
    agree = found["host-timer step times agree with host"]
    assert agree.detail.startswith("10 traced steps")
    # Two clocks agree on a quiet machine; under load a preempted thread can land in one only,
    # and then the check must say "not judged", never "fail" (both branches by hand below).
    busy = busy_reason(load_run(run_dir).manifest)
    assert agree.status == C.PASS or (busy and agree.status == C.NOT_JUDGED and busy in agree.detail), \
        (agree, busy)
    assert found["phase ranges in trace"].status == C.PASS
    # A CPU run has neither NVML figures nor device copies: those checks must fail, and say why.
    assert found["NVML sampled"].status == C.FAIL and "no GPU" in found["NVML sampled"].detail
    assert found["H2D/D2H attributed"].status == C.FAIL
    assert "CPU-only" in found["H2D/D2H attributed"].detail
    xprof = found["xplane opens in XProf"]
    assert xprof.status == C.PASS, xprof.detail
    assert (run_dir / "plugins" / "profile" / "gapscope").is_dir()
    assert kernels.per_step > 10  # aten ops of an MLP step, forward, backward and RMSprop
    # The layer and memory checks a GPU day will run, on this CPU run: they pass here (the
    # memory one on the run's own device), as gapscope's figures measured apart agree.
    assert found["layers add up"].status == C.PASS, found["layers add up"].detail
    assert found["layers add up"].detail.startswith("3 layers; forward ")
    assert found["memory per phase"].status == C.PASS, found["memory per phase"].detail
    assert found["memory per phase"].detail.startswith("cpu: step peak ")


def test_layer_and_memory_checks_fail_where_the_figures_do_not_hold():
    layers = {"layers": [{"name": "dense1", "forward_ms": 1.0, "backward_ms": 0.0}],
              "outside_ms": {"forward": 0.5, "backward": 0.2}}
    traced = {"phases": {"forward": {"ms": 2.0}, "backward": {"ms": 0.2}}}
    check = C.layers_add_up(layers, traced, ["dense1", "logits", "loss"])
    assert check.status == C.FAIL
    assert check.detail.startswith("dense1 has no backward; logits has no forward; logits has no "
                                   "backward; forward: layers and outside 1.500 ms, traced phase 2.000 ms")
    memory = {"device": "cpu", "peak_allocated_mb": 2.0, "peak_reserved_mb": 1.0,
              "phases": {"forward": {"high_water_mb": 3.0}, "backward": {"high_water_mb": 1.0}}}
    check = C.memory_recorded({"memory": memory}, cuda=True)
    assert check.status == C.FAIL and check.detail.startswith(
        "figures of device 'cpu'; reserved 1.0 MB below the allocated peak 2.0 MB; high-water above "
        "the step peak in forward")
    assert C.memory_recorded({"memory": None}, cuda=True).status == C.FAIL


def test_timer_check_fails_when_the_timers_disagree(cpu_run):
    run_dir, _ = cpu_run
    run = load_run(run_dir)
    steps = [(run.timeline.step_number(i), s.dur_us / 1000.0) for i, s in enumerate(run.timeline.steps)]
    slow = [(n, ms * 1.2) for n, ms in steps]  # a host clock 20 % slower than the timers
    check = C.timers_agree(run.rows, slow, "CUDA-event")
    assert check.status == C.FAIL and "10 traced steps" in check.detail
    assert C.timers_agree(run.rows, [(10_000, 1.0)], "CUDA-event").status == C.FAIL


def test_timers_disagreeing_on_a_busy_machine_are_not_judged():
    rows = [{"step": 0, "step_ms": 1.00}, {"step": 1, "step_ms": 1.10}]
    busy = "busy machine (other processes used 96 % of the cores)"
    slow = [(0, 1.20), (1, 1.30)]  # 1.05 vs 1.25 ms: beyond the 10 %
    check = C.timers_agree(rows, slow, "host-timer", busy)
    assert check.status == C.NOT_JUDGED
    assert check.detail.endswith("not judged: " + busy)
    assert "difference -0.200 ms" in check.detail
    # Agreeing clocks pass whatever the load; disagreeing ones on a quiet machine fail.
    assert C.timers_agree(rows, [(0, 1.04), (1, 1.06)], "host-timer", busy).status == C.PASS
    assert C.timers_agree(rows, slow, "host-timer", None).status == C.FAIL


def test_busy_reason_names_the_load():
    assert busy_reason({"machine_load": {"others_cpu_pct": 3.0, "steal_pct": 0.0}}) is None
    assert busy_reason({}) is None
    assert busy_reason({"machine_load": {"others_cpu_pct": 96.4, "cores": 2}}) == \
        "busy machine (other processes used 96 % of the cores)"
    assert busy_reason({"machine_load": {"others_cpu_pct": 1.0, "steal_pct": 12.0}}) == \
        "busy machine (other guests took 12 % of the CPU time (steal))"


def test_timers_agree_on_literal_steps():
    rows = [{"step": 0, "step_ms": 1.00}, {"step": 1, "step_ms": 1.10}]
    assert C.timers_agree(rows, [(0, 1.04), (1, 1.06)], "CUDA-event").status == C.PASS  # equal means
    assert C.timers_agree(rows, [(0, 1.20), (1, 1.30)], "CUDA-event").status == C.FAIL  # 1.05 vs 1.25
    # Small steps: 0.05 ms absolute is allowed where 10 % is less.
    assert C.timers_agree([{"step": 3, "step_ms": 0.10}], [(3, 0.14)], "x").status == C.PASS


def test_phases_add_up_catches_a_phase_larger_than_its_step():
    rows = [{"step": 5, "step_ms": 1.0, "data_load_ms": 0.2, "forward_ms": 0.5, "backward_ms": 0.4,
             "optimizer_ms": 0.1}]
    good = {"step_ms": {"mean": 1.0}, "phases": {"data_load": {"ms": 0.2}, "forward": {"ms": 0.5},
                                                 "backward": {"ms": 0.2}, "optimizer": {"ms": 0.1},
                                                 "other": {"ms": 0.0}}}
    check = C.phases_add_up(rows, 5, good)
    assert check.status == C.FAIL and "1 of 1 steps" in check.detail and "1.200 > 1.000" in check.detail
    rows[0]["backward_ms"] = 0.2
    assert C.phases_add_up(rows, 5, good).status == C.PASS
    good["phases"]["other"]["ms"] = 0.1
    assert "sum to 1.100000 ms" in C.phases_add_up(rows, 5, good).detail


@pytest.fixture
def gpu_work(fixtures_dir):
    """The hand-made GPU trace: one pageable H2D copy in step 1's data_load, one D2H in step 2's
    optimizer, seven kernels (two Triton fused, one with no launch)."""
    run = load_run(fixtures_dir / "async_gpu_two_steps.pt.trace.json")
    return find_work(run.trace, run.timeline, run.hlo)


def test_transfer_check_on_the_hand_made_gpu_trace(gpu_work):
    check = C.transfers_in_data_load(gpu_work, "pageable")
    assert check.status == C.PASS
    assert check.detail == "H2D 0.5/step (pageable) all in data_load; D2H 0.5/step in optimizer"
    wrong = C.transfers_in_data_load(gpu_work, "pinned")
    assert wrong.status == C.FAIL and "H2D host memory pageable, expected pinned" in wrong.detail
    # The same copy launched from forward is no longer the data's.
    moved = dataclasses.replace(gpu_work, items=[dataclasses.replace(w, phase="forward")
                                                 if w.kind == "memcpy" else w for w in gpu_work.items])
    assert "1 of 1 H2D copies in forward" in C.transfers_in_data_load(moved, None).detail


def test_fusion_check_on_the_hand_made_gpu_trace(gpu_work):
    compiled = C.FusionFigures.of(gpu_work)
    # Two steps: forward+backward hold 3 and 2 kernels, one Triton kernel in each step's forward;
    # the orphan kernel is in no phase but not Triton. Each Triton kernel holds one op (relu):
    # generated, no fusion, so the fused share is 0.
    assert compiled == C.FusionFigures(per_step=3.5, fused_share=0.0, model_per_step=2.5,
                                       model_fused_per_step=1.0, stray_fused_per_step=0.0,
                                       top_triton=compiled.top_triton)
    assert compiled.top_triton.startswith("triton_poi_fused_relu_")
    assert C.triton_fusion(compiled, None).status == C.SKIP
    eager = dataclasses.replace(compiled, per_step=3.0, model_per_step=4.0, model_fused_per_step=0.0)
    fewer = C.triton_fusion(compiled, eager)
    assert fewer.status == C.PASS, fewer.detail
    assert fewer.detail.startswith("forward and backward 1 Triton + 1.5 other kernels/step against "
                                   "eager's 4; all phases 3.5 against 3; fused share 0 %")
    # More kernels in all than eager is a figure, not a failure (Inductor's split GEMM epilogues on
    # an H200); as many non-Triton kernels left in the model as eager launches is.
    same = C.triton_fusion(compiled, dataclasses.replace(eager, model_per_step=1.5))
    assert same.status == C.FAIL and "not fewer than eager's 1.5: Inductor replaced none" in same.detail
    unfused = dataclasses.replace(compiled, model_fused_per_step=0.0)
    assert C.triton_fusion(unfused, eager).detail.startswith("no Triton kernel in forward or backward")
    stray = dataclasses.replace(compiled, stray_fused_per_step=0.5)
    assert "0.5 Triton kernels/step in no phase" in C.triton_fusion(stray, eager).detail


def test_nvml_check_on_sampled_and_missing_figures():
    rows = [{"cpu_percent": 50.0, "gpu_util_percent": u, "gpu_mem_mib": 900.0, "gpu_power_w": 120.0}
            for u in (40.0, 60.0)]
    check = C.nvml_sampled(resource_stats(rows))
    assert check.status == C.PASS
    assert check.detail == "2 samples: utilisation 50.0 % mean, memory 900 MiB max, power 120.0 W mean"
    cpu_only = [{"cpu_percent": 50.0, "gpu_util_percent": None, "gpu_mem_mib": None, "gpu_power_w": None}]
    assert C.nvml_sampled(resource_stats(cpu_only)).status == C.FAIL
    assert "0 samples" in C.nvml_sampled(resource_stats(None)).detail


def test_ncu_output_is_read_for_a_profiled_kernel():
    profiled = ('==PROF== Connected to process 4242 (/usr/bin/python3.12)\n'
                '==PROF== Profiling "elementwise_kernel" - 0: 0%....50%....100% - 1 pass\n')
    check = C.ncu_nvtx("forward", profiled, 0)
    assert check.status == C.PASS and check.name == "NVTX gapscope/forward (ncu)"
    assert "elementwise_kernel" in check.detail
    none = C.ncu_nvtx("data_load", "==WARNING== No kernels were profiled.\n", 0)
    assert none.status == C.FAIL and none.detail == "==WARNING== No kernels were profiled."
    assert C.ncu_nvtx("forward", None, None).status == C.SKIP
    command = P.ncu_command("backward", Path("/tmp/x"), "python3")
    assert command[command.index("--nvtx-include") + 1] == "regex:gapscope@gapscope.backward/"


def test_one_rank_job_is_checked_on_its_rank(tmp_path, monkeypatch):
    """--nproc 1 through torchrun (no TensorFlow in any of its processes): gloo here, NCCL on a
    GPU; the rank's run gets every check."""
    from gapscope.workloads.distributed_launch import launch_job
    planned = P.Planned("mlp-x1", "mlp", "eager", "test", nproc=1)
    settings = dataclasses.replace(P.settings_of(planned), device="cpu")
    monkeypatch.setenv("PYTHONPATH", _without_tensorflow(tmp_path / "block"))
    outcome = launch_job(settings, tmp_path / "out")
    assert outcome.status == "complete", outcome.error
    found = _by_name(P.evaluate(outcome.run_dir, planned, cuda=False)[0])
    assert found["process group"].status == C.PASS
    assert found["process group"].detail.startswith("backend gloo, world size 1")
    assert found["phases add up"].status == C.PASS
    assert found["phase ranges in trace"].status == C.PASS
    nccl = P._backend(load_run(outcome.run_dir / "rank0").manifest, "nccl")
    assert nccl.status == C.FAIL


def test_report_puts_failures_first(tmp_path):
    report = {"device": "H100", "versions": {"torch": "2.11.0"}, "budget_s": 480, "wall_s": 12.0,
              "nvtx_method": "m", "other_paths": "o",
              "runs": [{"id": "mlp-eager", "variant": "eager", "status": "complete", "checks": [
                  C.Check("completed", C.PASS, "ok").to_json_dict(),
                  C.Check("NVML sampled", C.FAIL, "0 samples | none").to_json_dict()]},
                  {"id": "cnn-compile", "variant": "compile", "status": "skipped",
                   "error": "time budget spent before it started", "checks": []},
                  {"id": "cnn-eager", "variant": "eager", "status": "failed", "error": "boom",
                   "log_tail": ["Traceback", "RuntimeError: CUDA error: boom"],
                   "checks": [C.Check("completed", C.FAIL, "status failed: boom").to_json_dict()]}],
              "probes": [{"id": "ncu-forward", "checks": [C.Check("NVTX", C.SKIP, "skipped: ncu").to_json_dict()]}]}
    json_path, md_path = gpu_check_report.write_reports(report, tmp_path)
    assert json.loads(json_path.read_text())["runs"][0]["checks"][1]["status"] == "fail"
    text = md_path.read_text()
    assert "1 checks passed, 2 failed, 0 not judged (busy machine), 1 skipped" in text
    assert "`cnn-eager` run.log, last lines:\n\n```\nTraceback\nRuntimeError: CUDA error: boom\n```" in text
    failures = text.split("## What failed, and why")[1].split("## Every check")[0]
    assert "**mlp-eager** NVML sampled: 0 samples \\| none" in failures
    assert "**cnn-compile** not run: time budget spent before it started" in failures


def test_check_paths_run_without_tensorflow(cpu_run):
    """The device has no TensorFlow: the check's imports, its analysis and a torch run must not
    need it (framework imports are lazy)."""
    run_dir, _ = cpu_run
    code = f"""
import sys
sys.modules['tensorflow'] = None; sys.modules['keras'] = None  # any import of them now fails
from pathlib import Path
from benchmarks import gpu_check, gpu_check_plan as P
from gapscope.workloads.runners.execute import execute
from gapscope.workloads.settings import RunSettings
checks, _ = P.evaluate(Path({str(run_dir)!r}), P.Planned('mlp-eager', 'mlp', 'eager', 'x'), cuda=False)
fresh = Path({str(run_dir.parent / 'no-tf')!r}); fresh.mkdir()
code = execute(fresh, RunSettings('mlp', 'torch', steps=4, warmup_steps=1, trace_steps=2, device='cpu'))
print(code, len(checks))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["0", "8"]  # the run completed; eight checks made (layers, memory)



def test_xplane_schema_without_tensorflow_is_tensorflows(fixtures_dir, tmp_path):
    """The device has no TensorFlow: gapscope's own copy of the XSpace schema must be the same
    schema, and a file written with it must read back with TensorFlow's."""
    from gapscope.analysis.readers import xplane_proto
    from gapscope.analysis.renderers.traces import xspace
    own = xplane_proto._own_schema()
    theirs = xplane_proto.xplane_pb2()
    assert own.XSpace.DESCRIPTOR.file.serialized_pb == theirs.XSpace.DESCRIPTOR.file.serialized_pb
    code = f"""
import sys
sys.modules['tensorflow'] = None
from gapscope.analysis.renderers.traces import xspace
from gapscope.analysis.model.run import load_run
run = load_run({str(fixtures_dir / 'async_gpu_two_steps.pt.trace.json')!r})
open({str(tmp_path / 'h.xplane.pb')!r}, 'wb').write(xspace.render(run.trace, run.timeline, 'h'))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    space = theirs.XSpace()
    space.ParseFromString((tmp_path / "h.xplane.pb").read_bytes())
    run = load_run(fixtures_dir / "async_gpu_two_steps.pt.trace.json")
    assert space.SerializeToString() == xspace.render(run.trace, run.timeline, "h")


def test_own_model_flops_check():
    """The capture(model=) run's check: every layer but the embedding has counted FLOPs both
    ways, and some layer a forward GFLOP/s from its kernels (literal figures)."""
    def layer(name, module, forward, backward):
        return {"name": name, "dims": {"module": module, "forward_flop": forward, "backward_flop": backward}}
    layers = [layer("embed", "Embedding", 0, 0), layer("head", "Linear", 409_600, 819_200)]
    kernels = {"layers": [{"name": "head", "forward": {"gflops": 12.5}}]}
    good = C.own_model_flops(layers, kernels)
    assert good.status == C.PASS and good.detail == "1 layers counted; forward GFLOP/s by kernels: head 12.5"
    bad = C.own_model_flops(layers + [layer("rnn", "LSTM", 0, 5)], None)
    assert bad.status == C.FAIL
    assert bad.detail.startswith("rnn has no forward FLOPs; no layer has a forward GFLOP/s from its kernels")


def test_a_run_the_machine_refuses_says_why(tmp_path):
    """On this CPU the check's own settings (device cuda) cannot run: the entry says so."""
    session = gpu_check.Session(tmp_path, 60, cuda=False)
    entry = session.run(P.Planned("mlp-eager", "mlp", "eager", "test"))
    assert entry["status"] == "failed"
    # Refused before any run directory is made (issue 23), in the launcher's one line.
    assert "--device cuda: this machine has no CUDA GPU" in entry["error"]
    assert entry["checks"][0]["name"] == "completed" and entry["checks"][0]["status"] == C.FAIL
    assert "log_tail" not in entry and "run_dir" not in entry  # nothing ran, nothing was left


def test_budget_skips_runs_not_started_and_stops_the_one_in_flight(tmp_path):
    skipped = gpu_check.Session(tmp_path, 1, cuda=False, device="cpu")
    skipped.deadline -= 5
    entry = skipped.run(P.Planned("mlp-eager", "mlp", "eager", "test"))
    assert entry["status"] == "skipped" and entry["error"] == "time budget spent before it started"
    # A CNN run of 30 steps takes far longer than 3 s here: the watchdog stops it at the deadline.
    session = gpu_check.Session(tmp_path / "stopped", 3, cuda=False, device="cpu")
    import threading
    threading.Thread(target=session.watchdog, daemon=True).start()
    entry = session.run(P.Planned("cnn-eager", "cnn", "eager", "test"))
    session.done.set()
    assert entry["status"] == "failed" and entry["error"] == "interrupted", entry
    assert entry["wall_s"] < 30


def test_check_all_end_to_end_on_cpu(tmp_path):
    """Two runs through the whole command's path: lanes, the checks, the kernel comparison
    (an eager run posing as compiled has no fused kernel: it must fail), the NVTX probes
    (no ncu here: skipped) and both report files."""
    runs = [P.Planned("mlp-eager", "mlp", "eager", "eager"),
            P.Planned("mlp-posing", "mlp", "eager", "posing as compiled", eager_of="mlp-eager")]
    report = gpu_check.check_all(tmp_path, jobs=2, budget_s=300, cuda=False, runs=runs, device="cpu")
    entries = {e["id"]: e for e in report["runs"]}
    assert {e["status"] for e in entries.values()} == {"complete"}
    fusion = {c["name"]: c for c in entries["mlp-posing"]["checks"]}["Triton fused kernels"]
    # No Inductor kernel in an eager run: the check fails and says so, with both counts.
    assert fusion["status"] == C.FAIL
    assert fusion["detail"].startswith("no Triton kernel in forward or backward: forward and backward 0 Triton")
    assert entries["mlp-eager"]["kernels_per_step"] > 10
    assert [p["checks"][0]["status"] for p in report["probes"]] == [C.SKIP] * 4
    json_path, md_path = gpu_check_report.write_reports(report, tmp_path)
    saved = json.loads(json_path.read_text())
    assert saved["runs"][0]["checks"][0] == {"name": "completed", "status": "pass",
                                            "detail": "manifest status complete"}
    text = md_path.read_text()
    assert "**mlp-posing** Triton fused kernels" in text and "**mlp-eager** NVML sampled" in text


def test_the_ncu_probe_command_runs_without_tensorflow(tmp_path):
    """The probe's own command line, less ncu and on the CPU, with TensorFlow unimportable."""
    command = P.ncu_command("forward", tmp_path, sys.executable)
    command = command[command.index(sys.executable):]
    command[command.index("cuda")] = "cpu"
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": _without_tensorflow(tmp_path / "block")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "data_load" in done.stdout and (tmp_path / "ncu-forward").is_dir()


def test_the_tensorflow_block_blocks(tmp_path):
    """Else the tests above that run without TensorFlow would prove nothing."""
    env = {**os.environ, "PYTHONPATH": _without_tensorflow(tmp_path / "block")}
    for module in ("tensorflow", "keras"):
        done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                              text=True, timeout=60, env=env)
        assert done.returncode == 1 and f"import of {module} halted; None in sys.modules" in done.stderr
    assert subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True,
                          timeout=120).returncode == 0  # it is installed here


def test_the_watchdog_stops_runs_and_spares_the_launcher(tmp_path):
    """A job's manifest carries the launcher's pid (this process): only the run is stopped."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        for name, pid in (("job", os.getpid()), ("job/rank0", child.pid)):
            (tmp_path / name).mkdir(parents=True)
            (tmp_path / name / "manifest.json").write_text(json.dumps({"status": "running", "pid": pid}))
        session = gpu_check.Session(tmp_path, 1, cuda=False)
        session.deadline -= 5
        import threading
        watchdog = threading.Thread(target=session.watchdog, daemon=True)
        watchdog.start()
        assert child.wait(timeout=30) == -15  # SIGTERM
        session.done.set()
        watchdog.join(timeout=10)
        assert not watchdog.is_alive()
    finally:
        child.kill()


@pytest.mark.parametrize("name", ["eager", "compile"])
def test_kernels_by_layer_check_passes_on_the_h200_runs(tmp_path, name):
    """The GPU day's kernels-by-layer check, on the two real H200 traces as run folders."""
    import h200_runs
    from gapscope.analysis.results.layers import layer_breakdown
    run = load_run(h200_runs.run_folder(tmp_path, name))
    work = find_work(run.trace, run.timeline)
    check = C.kernels_by_layer(layer_breakdown(run).kernels, work.kernels(), len(run.timeline.steps),
                               ["dense1", "logits", "loss"])
    assert check.status == C.PASS, check.detail
    assert check.detail.startswith("placed by ")


def test_kernels_by_layer_check_fails_where_a_layer_or_a_kernel_is_missing():
    from gapscope.analysis.measures.kernels import WorkItem
    group = {"kernels": 0, "ms": 0.0}
    table = {"layers": [{"name": "dense1", "forward": {"kernels": 1, "ms": 0.01}, "backward": group}],
             "mixed": {p: {**group, "fits": {}} for p in ("forward", "backward")},
             "phase_ms": {"forward": 0.01, "backward": 0.0}, "placed_by": {"order": 2}}
    kernels = [WorkItem("k", 0.0, [(0.0, 40.0)], 0, "forward", False)]  # 40 µs in 2 steps: 0.02 ms
    check = C.kernels_by_layer(table, kernels, 2, ["dense1", "logits", "loss"])
    assert check.status == C.FAIL
    assert check.detail.startswith("logits has no kernel; forward: the table holds 0.0100 ms of "
                                   "0.0200 ms of kernels")
    assert C.kernels_by_layer(None, kernels, 2, ["dense1"]).status == C.FAIL
