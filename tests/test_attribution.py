"""Device-side attribution on a hand-made async GPU trace: kernels run after the phase that
launched them ended, and must still count for that phase (correlation ids, not overlap).

The fixture, in µs (host 1000-1200, one device stream):
  step 1 (1000-1100): data_load 1000-1020 launches an H2D copy (1010-1014, 80 kB, pageable);
    forward 1020-1040 launches sgemm (1030-1060) and triton_poi_fused_relu_0 (1060-1070);
    backward 1040-1070 launches sgemm_nt (1070-1090, all after backward ended);
    optimizer 1070-1090 launches multi_tensor_apply (1090-1110, 10 µs after the step ended).
  step 2 (1100-1200): data_load 1100-1110; forward 1110-1150 launches fused_relu_1 (1120-1140);
    backward 1150-1180 launches sgemm_nt (1185-1195); optimizer 1180-1195 launches a D2H copy
    (1196-1198, 4 kB, pinned); orphan_kernel (1150-1152) has no launch in the trace.
"""
import pytest

from gapscope.analysis.results.attribution import attribute
from gapscope.analysis.results.breakdown import breakdown_from_trace
from gapscope.analysis.measures.kernels import DEVICE_KERNELS, find_work, kernel_stats
from gapscope.analysis.readers.torch_trace import read_torch_trace
from gapscope.analysis.events.timeline import phase_timeline
from gapscope.analysis.measures.transfers import transfer_stats

FIXTURE = "async_gpu_two_steps.pt.trace.json"


@pytest.fixture(scope="module")
def analysed(fixtures_dir):
    trace = read_torch_trace(fixtures_dir / FIXTURE)
    timeline = phase_timeline(trace)
    work = find_work(trace, timeline)
    breakdown = breakdown_from_trace(trace)
    return work, attribute(work, timeline, breakdown), breakdown


def test_host_phases_are_the_breakdown(analysed):
    _, result, breakdown = analysed
    breakdown.self_check()
    # step 1: 20/20/30/20 + 10 other; step 2: 10/40/30/15 + 5 other (µs)
    assert result.host_ms == pytest.approx(
        {"data_load": 0.015, "forward": 0.030, "backward": 0.030, "optimizer": 0.0175, "other": 0.0075})


def test_device_time_goes_to_the_launching_phase(analysed):
    _, result, _ = analysed
    assert result.device_kind == "gpu" and result.steps == 2
    # forward: (30 + 10) + 20; backward: 20 + 10; optimizer: 20 (runs past the step) + D2H 2;
    # data_load: H2D 4; the orphan kernel (2) is unattributed. Means over 2 steps.
    assert result.device_ms == pytest.approx(
        {"data_load": 0.002, "forward": 0.030, "backward": 0.015, "optimizer": 0.011,
         "other": 0.0, "unattributed": 0.001})
    # A wall-clock overlap rule would have given backward's sgemm (1070-1090) to optimizer.
    assert result.device_ms["backward"] > 0


def test_device_busy_idle_and_late(analysed):
    _, result, _ = analysed
    # busy: the device work inside each step's window, whoever launched it: step 1 = 4 + 70
    # (1030-1100) = 74; step 2 = 10 (step 1's optimizer kernel) + 20 + 2 + 10 + 2 = 44
    assert result.device_busy_ms == pytest.approx((74 + 44) / 2 / 1000)
    assert result.device_busy_ms + result.device_idle_ms == pytest.approx(0.100)  # the step
    # idle inside the window: step 1 covers 4 + 70 -> 26 idle; step 2 covers 10 (step 1's
    # optimizer kernel) + 20 + 2 + 10 + 2 = 44 -> 56 idle
    assert result.device_idle_ms == pytest.approx((26 + 56) / 2 / 1000)
    assert result.dispatch_ms == result.device_idle_ms
    assert result.late_ms == pytest.approx(10 / 2 / 1000)
    # 8 launch/memcpy calls (the stream sync is not one), 34 µs in them
    assert result.launches_per_step == 4
    assert result.launch_ms == pytest.approx(34 / 2 / 1000)
    assert any("no launching host call" in n for n in result.notes)


def test_kernel_counts_fusion_and_mean(analysed):
    work, _, _ = analysed
    stats = kernel_stats(work)
    assert stats.source == DEVICE_KERNELS
    assert stats.per_step == 3.5                                   # 7 kernels, 2 steps
    assert stats.per_phase == {"data_load": 0.0, "forward": 1.5, "backward": 1.0, "optimizer": 0.5,
                               "other": 0.0, "unattributed": 0.5}
    # The two triton_poi_fused_relu_* kernels hold one op each: generated, no fusion (issue 45).
    assert stats.fused_share == 0.0 and stats.fused_time_share == 0.0
    assert stats.mean_us == pytest.approx(112 / 7)
    # 30 µs each per two steps: sgemm_nn once, sgemm_nt twice (20 + 10); ties go by name
    assert [(t["name"], t["calls_per_step"], t["ms_per_step"]) for t in stats.top[:2]] == [
        ("volta_sgemm_128x64_nn", 0.5, 0.015), ("volta_sgemm_128x64_nt", 1.0, 0.015)]


def test_transfers_by_direction_phase_and_memory(analysed):
    work, _, _ = analysed
    stats = transfer_stats(work)
    assert not stats.cpu_only and stats.note is None
    h2d, d2h = stats.by_direction["H2D"], stats.by_direction["D2H"]
    assert h2d["count_per_step"] == 0.5 and h2d["bytes_per_step"] == 40_000
    assert h2d["gb_per_s"] == pytest.approx(20.0)                  # 80 kB in 4 µs
    assert h2d["host_memory"] == {"pageable": 1}
    assert d2h["gb_per_s"] == pytest.approx(2.0) and d2h["host_memory"] == {"pinned": 1}
    assert set(stats.by_phase) == {"data_load", "optimizer"}


def test_cpu_run_says_it_has_no_transfers(fixtures_dir):
    trace = read_torch_trace(fixtures_dir / "marked_two_steps.pt.trace.json")
    timeline = phase_timeline(trace)
    stats = transfer_stats(find_work(trace, timeline))
    assert stats.cpu_only and stats.note == "no transfers: CPU-only run" and not stats.by_direction
