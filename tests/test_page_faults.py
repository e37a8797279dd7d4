"""Page faults per step: the step timer counts them (one per fresh 4 KiB page, hand-counted),
steps.csv carries and validates them, the breakdown and compare say them, and the malloc-keep
variant makes glibc keep the memory a step frees (a real allocator, in a fresh process)."""
from __future__ import annotations

import copy
import json
import mmap
import subprocess
import sys
from pathlib import Path

import pytest

from gapscope.analysis.measures import page_faults
from gapscope.analysis.readers import step_rows
from gapscope.analysis.results.evidence.builders import EvidenceKind, page_fault_evidence
from gapscope.analysis.results.records import Breakdown, PhaseSource
from gapscope.analysis.renderers import evidence_text
from gapscope.profilers.timers import StepTimer
from gapscope.workloads import variants
from gapscope.workloads.runners.execution_rows import expand_executions

ROOT = Path(__file__).resolve().parents[1]
PAGE = mmap.PAGESIZE
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
# With huge pages "always", one fault maps 2 MiB of an anonymous mapping: 4 KiB counts do not hold.
HUGE_PAGES_ALWAYS = THP.exists() and "[always]" in THP.read_text()
# The interpreter's own allocations between two getrusage calls: a few pages at most.
NOISE = 300


def _touch_fresh_pages(pages: int) -> None:
    region = mmap.mmap(-1, pages * PAGE)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        region.madvise(mmap.MADV_NOHUGEPAGE)  # one fault a 4 KiB page, whatever THP says
    for offset in range(0, pages * PAGE, PAGE):
        region[offset] = 1
    region.close()


@pytest.mark.skipif(HUGE_PAGES_ALWAYS, reason="transparent huge pages are 'always' here: a fault "
                    "maps 2 MiB, so a step's faults are not one per 4 KiB page")
def test_the_step_timer_counts_one_fault_per_fresh_page():
    timer = StepTimer()
    timer.begin_step()
    timer.end_step()
    timer.begin_step()
    _touch_fresh_pages(4096)  # 16 MiB of pages no one has touched: 4,096 faults
    timer.end_step()
    idle, touching = (row["minor_faults"] for row in timer.rows())
    assert idle < NOISE
    assert 4096 <= touching < 4096 + NOISE


def test_steps_csv_rows_with_an_impossible_fault_count_are_dropped_and_counted():
    header = ["step", "warmup", "traced", "step_ms", "minor_faults"]
    raw = [dict(zip(header, cells)) for cells in (
        ("0", "1", "0", "9.0", "12000"), ("1", "0", "0", "5.0", "100"), ("2", "0", "0", "5.0", "-3"),
        ("3", "0", "0", "5.0", "nan"), ("4", "0", "0", "5.0", "300"), ("5", "0", "1", "6.0", "5000"))]
    rows, dropped = step_rows.checked_rows("steps.csv", raw)
    assert [r["step"] for r in rows] == [0, 1, 4, 5]
    assert dropped == {step_rows.BAD_FAULTS: 2}
    # The mean of the unprofiled steady steps (1 and 4); the warm-up and the traced step are out.
    assert page_faults.faults_per_step(rows, warmup_steps=1) == 200.0


def test_a_run_without_fault_counts_has_none():
    rows = [{"step": 0, "step_ms": 5.0}, {"step": 1, "step_ms": 5.0}]
    assert page_faults.faults_per_step(rows, warmup_steps=0) is None
    assert page_faults.faults_per_step(None, warmup_steps=0) is None


def test_a_keras_call_of_several_updates_shares_its_faults_out():
    (a, b, c, d) = expand_executions([{"step": 0, "step_ms": 4.0, "minor_faults": 400, "loss": 1.0}],
                                     steps_per_execution=4, updates_per_epoch=8, total_updates=4)
    assert [r["minor_faults"] for r in (a, b, c, d)] == [100.0] * 4
    assert [r["step_ms"] for r in (a, b, c, d)] == [1.0] * 4


def test_a_real_run_writes_its_faults_and_the_breakdown_reports_them(torch_run):
    from gapscope.analysis.results.breakdown import breakdown
    from gapscope.analysis.model.run import load_run
    header = (torch_run / "steps.csv").read_text().splitlines()[0].split(",")
    assert header[-2:] == ["minor_faults", "rss_mb"]
    run = load_run(torch_run)
    expected = page_faults.faults_per_step(run.rows, run.warmup_steps)
    assert expected is not None and expected >= 0
    document = breakdown(run).to_json_dict()
    assert document["minor_faults_per_step"] == round(expected, 1)


def _breakdown(faults: float | None, step_ms: float = 100.0) -> Breakdown:
    return Breakdown(PhaseSource.TIMERS, [], [step_ms] * 4, {}, minor_faults_per_step=faults)


def test_compare_says_the_faults_of_each_side_with_the_spread_of_its_repeats():
    evidence = page_fault_evidence([_breakdown(1000.0), _breakdown(1200.0)],
                            [_breakdown(3000.0), _breakdown(15000.0)])
    assert evidence.kind == EvidenceKind.PAGE_FAULTS
    assert evidence.a["minor_faults_per_step"] == 1100.0 and evidence.b["minor_faults_per_step"] == 9000.0
    # (9000 - 1100) faults at 1.5 µs each.
    assert evidence.delta_ms == pytest.approx(11.85)
    text = evidence_text._page_faults(evidence, "A", "B")
    assert text.startswith("page faults per unprofiled step: A 1,100 vs B 9,000 (repeats 3,000 to "
                           "15,000), about +11.850 ms")
    # Few faults on both sides, or a side not counted (an older run): nothing to say.
    assert page_fault_evidence([_breakdown(500.0)], [_breakdown(900.0)]) is None
    assert page_fault_evidence([_breakdown(None)], [_breakdown(15000.0)]) is None


def test_costly_faults_get_a_breakdown_note_and_a_suggestion(torch_explained_copy):
    from gapscope.analysis.results.suggestions import Rule, suggest
    assert page_faults.costly(13000, 100.0)          # ~19.5 ms of a 100 ms step
    assert not page_faults.costly(13000, 1000.0)     # 2 % of a 1 s step
    assert not page_faults.costly(900, 10.0)         # few, though 13 % of a 10 ms step
    note = page_faults.note(13000, 100.0, "default")
    assert note.startswith("steady steps took 13,000 minor page faults each, about 19.5 ms (20 % "
                           "of the step)")
    assert page_faults.note(13000, 100.0, "malloc-keep") is None
    run = torch_explained_copy
    run.breakdown.minor_faults_per_step = 13000.0
    phases = {"data_load": 0.0, "forward": 50.0, "backward": 40.0, "optimizer": 5.0, "other": 5.0}
    (found,) = suggest(run, phases, {}, 100.0)
    assert (found.rule, found.suggested) == (Rule.PAGE_FAULTS, "mlp:torch:malloc-keep")
    assert "13,000 page faults per step, about 19.5 ms, 20 % of the step" in evidence_text.suggestion(found)


def _repeats(run, step_ms: float, faults: list[float]) -> list[Breakdown]:
    side = []
    for count in faults:
        repeat = copy.copy(run.breakdown)
        repeat.step_times_ms = [step_ms * (1 + i / 1000) for i in range(10)]
        repeat.minor_faults_per_step = count
        # Hand-made steps: the real run's load (the suite may run beside other work) is not theirs.
        repeat.reliability_warnings, repeat.busy_load = [], None
        side.append(repeat)
    return side


def test_faults_that_carry_the_gap_lead_the_evidence_and_join_the_headline(torch_explained_copy):
    from gapscope.analysis.results.compare import Comparison, compare_pair
    from gapscope.analysis.renderers.compare_columns import verdict_lines
    run = torch_explained_copy
    # B's steps average 100.45 ms against A's 80.36 (a 20.09 ms gap) and take 13,133.3 faults
    # against 300: 12,833.3 more, about 19.25 ms at 1.5 µs each, 96 % of the gap.
    pair = compare_pair(run, run, (_repeats(run, 80.0, [300.0] * 3),
                                   _repeats(run, 100.0, [13000.0, 13600.0, 12800.0])))
    first = pair.evidence[0]
    assert first.kind == EvidenceKind.PAGE_FAULTS
    assert first.delta_ms == pytest.approx(19.25)
    assert first.share_of_gap == pytest.approx(19.25 / 20.09, abs=1e-4)
    assert pair.faults_behind_gap is first
    (headline, *_) = verdict_lines(Comparison([run, run], [pair], []))
    assert "12,833 more page faults per step (about +19.250 ms)" in headline
    # The JSON (and the TensorBoard tab, which shows it) says the same.
    from gapscope.analysis.renderers import compare_json
    (doc,) = compare_json.document(Comparison([run, run], [pair], []))["comparisons"]
    assert doc["faults_behind_gap"]["text"] == "12,833 more page faults per step (about +19.250 ms)"
    assert doc["evidence"][0]["text"].startswith("page faults per unprofiled step:")
    # The suggestion gives the repeats' figure, as the evidence does.
    (fresh,) = [s for s in pair.suggestions if s.figures.get("minor_faults_per_step")]
    assert fresh.figures["minor_faults_per_step"] == 13133.3
    # Faults that do not move with the gap (each side alike) stay last and out of the headline.
    pair = compare_pair(run, run, (_repeats(run, 80.0, [13000.0] * 3),
                                   _repeats(run, 100.0, [13000.0] * 3)))
    assert pair.evidence[-1].kind == EvidenceKind.PAGE_FAULTS and pair.faults_behind_gap is None


def test_repeats_in_different_allocator_states_are_warned_of(torch_explained_copy):
    from gapscope.analysis.results.compare import compare
    run = torch_explained_copy
    steady = _repeats(run, 100.0, [14400.0, 15200.0, 16000.0])   # within 1.5x of each other
    apart = _repeats(run, 120.0, [14400.0, 30200.0, 16000.0])    # the trial gap_truth met
    warnings = compare([run, run], [steady, apart]).warnings
    # (30,200 - 14,400) faults at 1.5 µs: 23.7 ms between the repeats' estimated costs.
    assert [w for w in warnings if "allocator states" in w] == [
        f"{run.breakdown.name}: its repeats took 14,400 to 30,200 page faults a step (about 23.7 ms "
        "apart at 1.5 µs each): their processes sat in different allocator states, which spreads "
        "its step time; more repeats average it out, and the malloc-keep variant removes it (the "
        "loop then keeps its memory, which is another configuration)"]
    assert page_faults.states_warning("x", [300.0, 900.0]) is None       # too few to cost time
    assert page_faults.states_warning("x", [14400.0, None]) is None      # one not counted


@pytest.fixture
def torch_explained_copy(torch_run):
    from gapscope.analysis.results.explain import explain
    from gapscope.analysis.model.run import load_run
    run = explain(load_run(torch_run))
    run.breakdown = copy.copy(run.breakdown)
    return run


def test_the_variant_resolves_to_its_setting_and_is_refused_off_glibc(monkeypatch):
    assert variants.resolve("torch", "malloc-keep", False) == ("malloc-keep", {"malloc_keep": True})
    monkeypatch.setattr(variants.platform, "libc_ver", lambda: ("musl", "1.2"))
    with pytest.raises(variants.UnsupportedVariantError, match="sets glibc's allocator; this Python runs on musl"):
        variants.resolve("keras", "malloc-keep", False)


# Three 24 MiB blocks a step, touched and freed: glibc's default moves its mmap threshold to
# 24 MiB after the first free (blocks then come from the heap) and its trim threshold to 48 MiB,
# so the 72 MiB freed each step go back to the kernel and each step faults them in again, as
# the torch CNN's ~60 MB do. Kept, the heap keeps them after the first step.
_ALLOCATOR_STEPS = """
import ctypes, json, resource, sys
if sys.argv[1] == "keep":
    from gapscope.workloads.runners.malloc_keep import keep_freed_memory
    keep_freed_memory()
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
size, counts = 24 << 20, []
for _ in range(5):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [libc.malloc(size) for _ in range(3)]
    for block in blocks:
        ctypes.memset(block, 1, size)
    for block in blocks:
        libc.free(block)
    counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps(counts))
"""


@pytest.mark.skipif(HUGE_PAGES_ALWAYS, reason="transparent huge pages are 'always' here: the heap's "
                    "faults map 2 MiB each, so the 4 KiB counts below do not hold")
@pytest.mark.skipif(variants.platform.libc_ver()[0] != "glibc", reason="malloc-keep sets glibc's allocator")
def test_malloc_keep_stops_steps_taking_fresh_pages_from_the_kernel():
    def steps(mode):
        done = subprocess.run([sys.executable, "-c", _ALLOCATOR_STEPS, mode], cwd=ROOT,
                              capture_output=True, text=True, timeout=120, check=True)
        return json.loads(done.stdout)
    pages = 3 * (24 << 20) // PAGE  # 18,432
    default, kept = steps("default"), steps("keep")
    # Each trim leaves glibc's 128 KiB top pad mapped: 32 pages fewer from the second step on.
    assert all(abs(n - pages) < NOISE for n in default), default
    assert abs(kept[0] - pages) < NOISE, kept           # the first step maps its pages once
    assert all(n < NOISE for n in kept[1:]), kept        # then reuses them
