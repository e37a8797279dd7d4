"""The two-level interval over repeats: known answers on synthetic processes-and-steps data."""
import math

import numpy as np
import pytest

from gapscope.analysis.measures.stats import repeat_ratio, welch_difference


def _experiment(rng, ratio, repeats, steps, between_sd, within_sd):
    """One A/B measurement: per side, `repeats` processes whose speed is off by a log-normal
    factor (between_sd), each timing `steps` steps with log-normal noise (within_sd)."""
    sides = []
    for level in (100.0, 100.0 * ratio):
        means, within = [], []
        for _ in range(repeats):
            process = level * math.exp(rng.normal(0, between_sd))
            times = process * np.exp(rng.normal(0, within_sd, steps))
            means.append(float(times.mean()))
            within.append(float(times.var(ddof=1) / steps))
        sides.append((means, within))
    (a, wa), (b, wb) = sides
    return repeat_ratio(a, b, wa, wb)


@pytest.mark.parametrize("between_sd,within_sd", [(0.04, 0.10), (0.0, 0.10), (0.10, 0.02)])
def test_the_interval_holds_the_true_ratio_95_times_in_100(between_sd, within_sd):
    # 1,000 simulated measurements of a true ratio of 1.3, three processes a side: the
    # interval must cover it about 95 % of the time, neither far less (too narrow: the old
    # paired t from two pairs' agreement) nor nearly always (uselessly wide).
    rng = np.random.default_rng(7)
    hits = sum(lo <= 1.3 <= hi for lo, hi in
               (_experiment(rng, 1.3, 3, 40, between_sd, within_sd).ci95 for _ in range(1000)))
    assert 930 <= hits <= 990


def test_three_repeats_that_agree_within_3_percent_give_a_tight_interval():
    # A's processes within 3 % of each other, B's too, but paired differently: the ratio is
    # known to a few %, not [0.97, 1.82].
    result = repeat_ratio([100.0, 103.0, 101.0], [152.0, 148.0, 151.0])
    low, high = result.ci95
    assert result.ratio == pytest.approx(1.4836, abs=1e-4)  # geometric means 150.33 / 101.33
    assert high / result.ratio - 1 < 0.05 and 1 - low / result.ratio < 0.05
    assert result.pair_ratios == pytest.approx([1.52, 148 / 103, 151 / 101])


def test_processes_that_agree_exactly_still_carry_the_noise_of_their_steps():
    # Three identical process means a side, but each mean has a variance of 4 ms^2 (A) and
    # 9 ms^2 (B) from its own steps: 4e-4 on the log scale both. By hand: standard error
    # sqrt(2 * 4e-4 / 3) = 0.01633; both sides rest on their steps (30 dof each), Welch dof
    # 60, t 2.000, half-width 0.03266 on logs.
    result = repeat_ratio([100.0] * 3, [150.0] * 3, [4.0] * 3, [9.0] * 3)
    assert result.ratio == pytest.approx(1.5)
    assert result.dof == pytest.approx(60.0)
    assert result.ci95 == pytest.approx((1.5 * math.exp(-0.03266), 1.5 * math.exp(0.03266)), rel=1e-4)
    # Repeats for a 2 % half-width if the spread stays so: 8 (dof 210, t 1.980 * sqrt(8e-4 / 8)
    # = 0.01980 <= log 1.02 = 0.019803), and 7 fall short (0.02117).
    assert result.repeats_to_reach(0.02, have=3) == 8


def test_welch_difference_by_hand():
    # Means 12 and 21, variances of the means 4/3 and 1/3, Welch dof 2.94 -> t(2) 4.303.
    low, high = welch_difference([10.0, 12.0, 14.0], [20.0, 21.0, 22.0])
    half = 4.303 * math.sqrt(5 / 3)
    assert (low, high) == pytest.approx((9 - half, 9 + half))


def test_welch_difference_never_claims_less_than_the_steps_within_the_processes():
    # Three processes a side that agree to 1 us, each mean noisy by a variance of 0.25 ms^2 from
    # its own steps: each side's variance is that floor, 30 degrees of freedom each, Welch 60
    # -> t 2.000; the half-width is 2 * sqrt(0.25/3 + 0.25/3) = 0.816 ms, not microseconds.
    base, other = [10.0, 10.001, 10.002], [12.0, 12.001, 12.002]
    low, high = welch_difference(base, other, [0.25] * 3, [0.25] * 3)
    half = 2.000 * math.sqrt(0.25 / 3 + 0.25 / 3)
    assert (low, high) == pytest.approx((2.0 - half, 2.0 + half))
    narrow = welch_difference(base, other)
    assert narrow[1] - narrow[0] < 0.02
    # A spread between processes larger than the floor is taken as it is.
    assert welch_difference([10.0, 12.0, 14.0], [20.0, 21.0, 22.0], [1e-6] * 3, [1e-6] * 3) == \
        pytest.approx(welch_difference([10.0, 12.0, 14.0], [20.0, 21.0, 22.0]))


def test_one_repeat_a_side_gives_no_interval():
    result = repeat_ratio([100.0], [120.0])
    assert result.ratio == pytest.approx(1.2) and result.ci95 is None
    assert result.repeats_to_reach(0.03, have=1) is None


def test_a_gap_within_noise_says_how_many_repeats_would_decide_it():
    # Pair ratios 1.42, 1.75, 1.22 (the newcomer's): within noise at three repeats; the
    # repeats that would tell a gap this size from noise, if the spread stays as measured.
    result = repeat_ratio([100.0, 100.0, 100.0], [142.0, 175.0, 122.0])
    low, high = result.ci95
    assert low < 1.0 < high
    needed = result.repeats_to_decide(have=3)
    assert needed is not None and needed > 3
    # At that many repeats the interval's half-width is below the gap.
    # By hand: all the spread is B's (var of its logs 0.0328, Welch dof 2 = n - 1), so 4
    # repeats: t(3) 3.182 * sqrt(0.0328 / 4) = 0.288 < log 1.452 = 0.373 (3: t(2) gives 0.450).
    assert needed == 4


@pytest.mark.parametrize("repeats,decided", [(3, False), (5, True)])
def test_the_default_repeats_tell_a_20_percent_gap_at_this_machines_process_spread(repeats, decided):
    """compare --measure's default (workloads.ab.DEFAULT_REPEATS) against the spread measured
    between gapscope's torch CNN processes here (CV 11.3 %): 3 repeats a side cannot tell a
    20 % gap from noise, 5 can. By hand: t(4) 2.776 * 0.113 * sqrt(2/3) = 0.256 > log 1.2 =
    0.182; t(8) 2.306 * 0.113 * sqrt(2/5) = 0.165 < 0.182."""
    from gapscope.workloads.ab import DEFAULT_REPEATS
    offsets = np.linspace(-1.0, 1.0, repeats)
    logs = 0.113 * offsets / np.std(offsets, ddof=1)  # sample sd exactly 0.113
    base = [100.0 * math.exp(x) for x in logs]
    result = repeat_ratio(base, [1.2 * b for b in base[::-1]])
    low, high = result.ci95
    assert result.ratio == pytest.approx(1.2)
    assert (low > 1.0) is decided
    assert DEFAULT_REPEATS == 5


def test_three_agreeing_pairs_within_noise_say_how_often_chance_does_that():
    """'Within noise' beside '3/3 pairs agree' read as a contradiction: the line says that
    three pairs agree by chance one time in four (both signs)."""
    from gapscope.analysis.renderers.evidence_text import pairs_line
    from gapscope.analysis.results.compare import PairComparison, PhaseGap
    result = repeat_ratio([100.0, 100.0, 100.0], [142.0, 175.0, 122.0])
    pair = PairComparison("a", "b", "A", "B", 100.0, 146.3, 46.3, [PhaseGap("forward", 1, 1, 0, 1, 0)],
                          [], False, ratio=result.ratio, ratio_ci95=result.ci95, repeats=3,
                          repeat_ratio=result)
    pair.gap_ci95 = (-10.0, 100.0)   # as the repeats' interval: it holds no change
    assert pair.within_noise
    assert pairs_line(pair) == ("pair ratios 1.42, 1.75, 1.22 (3/3 pairs agree: slower), as 3 coin "
                                "flips would 1 time in 4; about 4 repeats a side would tell a gap "
                                "this size from noise")


def _repeat_breakdowns(means: list[float], steps: int = 20, spread: float = 0.01) -> list:
    """One Breakdown per process: `steps` unprofiled step times around `means[i]`, +-spread."""
    from gapscope.analysis.results.records import Breakdown, PhaseFigure, PhaseSource
    from gapscope.profilers.phases import PHASES
    offsets = np.linspace(-1.0, 1.0, steps)
    return [Breakdown(PhaseSource.TIMERS, [], [m * (1 + spread * x) for x in offsets],
                      {p: PhaseFigure(m / 5, PhaseSource.TIMERS) for p in PHASES}, unprofiled=True)
            for m in means]


def test_the_gap_interval_carries_the_baselines_spread_too():
    """The busy mlp:torch vs mlp:keras A/B of issue 45: pair gaps -1091.5, -225.2, -287.8 ms
    (torch's three processes 1100, 235, 300 ms a step; keras' 8.5, 9.8, 12.2). The old interval
    mapped the ratio's into ms at torch's mean, [-552.5, -390.7]. By hand, Welch on the ms means:
    gap -534.833; var 232075 (torch) and 3.5233 (keras) over 3 each: se 278.13, dof 2.00 ->
    t(2) 4.303, half 1196.8: [-1731.6, +661.9]."""
    from gapscope.analysis.renderers.compare_columns import gap_text
    from gapscope.analysis.results.compare import PairComparison, PhaseGap, _repeat_intervals
    a, b = [1100.0, 235.0, 300.0], [8.5, 9.8, 12.2]
    assert [y - x for x, y in zip(a, b)] == pytest.approx([-1091.5, -225.2, -287.8])
    pair = PairComparison("a", "b", "mlp:torch", "mlp:keras", 545.0, 10.1667, -534.833,
                          [PhaseGap("forward", 1, 1, 0, 1, 0)], [], False, repeats=3)
    _repeat_intervals(pair, _repeat_breakdowns(a), _repeat_breakdowns(b))
    half = 4.303 * math.sqrt(232075 / 3 + 3.52333 / 3)
    hand = (-534.8333 - half, -534.8333 + half)
    low, high = pair.gap_ci95
    width = hand[1] - hand[0]
    assert low <= hand[0] + 1e-3 and high >= hand[1] - 1e-3   # hand figures to 1 us
    assert hand[0] - low <= 0.05 * width and high - hand[1] <= 0.05 * width
    assert pair.within_noise
    assert gap_text(pair) == "-534.833 ±1196.819 ~"


def test_a_gap_whose_ratio_holds_no_change_is_within_noise_in_ms_too():
    """Two models (ms and logs) may disagree at the edge: the pair is within noise where
    either holds no change, and its gap is marked so."""
    from gapscope.analysis.renderers.compare_columns import gap_text
    from gapscope.analysis.results.compare import PairComparison, PhaseGap
    pair = PairComparison("a", "b", "A", "B", 100.0, 130.0, 30.0, [PhaseGap("forward", 1, 1, 0, 1, 0)],
                          [], False, ratio=1.3, ratio_ci95=(0.9, 1.8), gap_ci95=(2.0, 58.0))
    assert pair.within_noise and gap_text(pair).endswith(" ~")


def test_the_kernel_evidence_says_the_time_the_cause_and_the_json_say():
    """Issue 45: the CNN's cause line said 'time in them 2680.002 vs 1106.275 ms' (the phase's
    traced time) where the JSON's cause said 1888.4 (its kernels' time). By hand: 12 and 9 ops
    a step of 100 and 50 us: 1.2 and 0.45 ms in them, whatever else the phase took."""
    from gapscope.analysis.renderers.evidence_text import sentence
    from gapscope.analysis.results.compare import PairComparison, PhaseGap
    from gapscope.analysis.results.evidence.builders import Evidence, EvidenceKind
    facts = [{"kernels_per_step": n, "kernel_source": "cpu ops", "mean_kernel_us": us,
              "kernel_ms": n * us / 1000, "device_ms": device, "host_ms": 0.0}
             for n, us, device in ((12.0, 100.0, 2.680), (9.0, 50.0, 1.106))]
    e = Evidence(EvidenceKind.KERNELS, "backward", *facts, delta_ms=-1.0, share_of_gap=1.0)
    pair = PairComparison("a", "b", "A", "B", 5.0, 4.0, -1.0, [PhaseGap("backward", 3, 2, -1, 0.67, 1.0)],
                          [e], False)
    assert "time in them 1.200 vs 0.450 ms" in sentence(e, pair)
