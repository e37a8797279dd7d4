"""Sampled and lone ranks: a job with ranks missing is broken down over the ranks present (job
step and skew as lower bounds, no straggler, one warning naming the missing ranks as ranges); a
lone NCCL or gloo rank gets its communication table; an NCCL kernel is named after the CPU-side
collective that launched it. Figures worked out by hand in each fixture's README.md."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.measures.collectives import find_collectives
from gapscope.analysis.model.job import is_job, load_job, rank_ranges
from gapscope.analysis.model.run import load_run
from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.results.distributed_breakdown import JobBreakdown, breakdown_of, job_breakdown
from gapscope.cli import cli
from gapscope.profilers.errors import GapscopeInputError

FOREIGN = Path(__file__).parent / "fixtures" / "foreign"
SAMPLED = FOREIGN / "sampled_ranks"
LONE_NCCL = FOREIGN / "lone_nccl"
LONE_GLOO = FOREIGN / "lone_gloo"
MISSING_NOTE = "missing 1-4, 6-7"


@pytest.fixture(autouse=True)
def _serial(monkeypatch):
    monkeypatch.setenv("GAPSCOPE_JOB_WORKERS", "1")  # tiny traces: no process pool


def _trace(folder: Path) -> Path:
    return next(folder.glob("*.pt.trace.json"))


def _comm(doc: dict) -> dict:
    """A rank's communication figures rounded to the µs (they are sums of whole µs)."""
    out = {k: round(doc[k], 3) for k in ("comm_ms", "overlapped_ms", "exposed_ms")}
    out["per_kind"] = {k: (v["count"], v["bytes"], round(v["ms"], 3)) for k, v in doc["per_kind"].items()}
    out["exposed_by_phase"] = {p: round(ms, 3) for p, ms in doc["exposed_by_phase"].items() if ms}
    return out


def test_rank_ranges_are_compact():
    assert rank_ranges(range(2, 128)) == "2-127"
    assert rank_ranges([7, 1, 3, 4, 5]) == "1, 3-5, 7"
    assert rank_ranges([]) == ""


def test_two_of_eight_ranks_are_broken_down_with_their_communication():
    job = load_job(SAMPLED)
    assert (job.world_size, job.rank_numbers, job.complete, job.missing) == (8, [0, 5], False,
                                                                             [1, 2, 3, 4, 6, 7])
    jb = job_breakdown(job)
    # Steps of 1000 and 1100 µs: the slowest present is rank 5, each step.
    assert [(n, round(ms, 3), r) for n, ms, r in jb.job_steps] == [(1, 1.1, 5), (2, 1.1, 5)]
    assert jb.job_step_ms == pytest.approx(1.1)
    assert jb.straggler is None and jb.last_arrival == {}
    assert [round(b, 3) for b in jb.busy_ms] == [0.9, 1.0] and jb.skew_ms == pytest.approx(0.1)
    doc = jb.to_json_dict()
    assert (doc["world_size"], doc["ranks_present"], doc["complete"]) == (8, [0, 5], False)
    assert doc["job_step_ms"]["lower_bound"] is True
    assert set(doc["lower_bounds"]) >= {"job_step_ms", "skew_ms"} and "straggler" in doc["omitted"]
    assert [r["rank"] for r in doc["per_rank"]] == [0, 5]
    for comm in doc["communication"]:
        assert _comm(comm) == {"comm_ms": 0.15, "overlapped_ms": 0.05, "exposed_ms": 0.1,
                               "per_kind": {"all_reduce": (1.0, 4000.0, 0.15)},
                               "exposed_by_phase": {"other": 0.1}}
    assert [n for n in jb.notes if "ranks present" in n] == [
        f"warning: 2 of 8 ranks present (the traces of the others are not here): {MISSING_NOTE}; "
        "the job step and skew are lower bounds, no straggler is named"]


def test_cli_breakdown_of_sampled_ranks_says_the_missing_ones_once():
    result = CliRunner().invoke(cli, ["breakdown", str(SAMPLED), "--format", "markdown"])
    assert result.exit_code == 0, result.output
    assert result.output.count(MISSING_NOTE) == 1
    assert "8 ranks (2 present: 0, 5)" in result.output and "| per step | rank0 | rank5 |" in result.output
    assert "at least 1.100" in result.output and "straggler: not named: 2 of 8 ranks present" in result.output
    as_json = CliRunner().invoke(cli, ["breakdown", str(SAMPLED), "--format", "json"])
    job = json.loads(as_json.output)["job"]
    assert job["complete"] is False and job["straggler"] is None


def _retitled(folder: Path, ranks: dict[str, tuple[int, int]]) -> Path:
    """Copies of the sampled traces saying other ranks and world sizes."""
    folder.mkdir()
    for source, (rank, world) in zip(sorted(SAMPLED.glob("*.json")), ranks.values()):
        doc = json.loads(source.read_text())
        doc["distributedInfo"].update(rank=rank, world_size=world)
        (folder / f"trace_{rank}.pt.trace.json").write_text(json.dumps(doc))
    return folder


def test_two_ranks_of_128_name_the_missing_as_one_range(tmp_path):
    folder = _retitled(tmp_path / "big", {"a": (0, 128), "b": (1, 128)})
    jb = breakdown_of(folder)
    assert jb.world_size == 128 and jb.numbers == [0, 1]
    assert any("missing 2-127;" in note for note in jb.notes)
    assert jb.samples_per_step is None and "x128" in jb.label


def test_a_rank_beyond_the_world_is_one_line_and_exit_2(tmp_path):
    folder = _retitled(tmp_path / "odd", {"a": (0, 8), "b": (9, 8)})
    result = CliRunner().invoke(cli, ["breakdown", str(folder)])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "ranks 0, 9 of a world of 8" in lines[0] and "extra ranks 9" in lines[0]


def _job_dir(root: Path, present: tuple[int, ...], world: int = 8, entries=None) -> Path:
    """A gapscope job directory by hand: its manifest names every rank complete; the rank
    directories of `present` hold the sampled traces (rank 0's for every rank but 5)."""
    traces = {0: _trace_of(0), 5: _trace_of(5)}
    for rank in present:
        folder = root / f"rank{rank}"
        folder.mkdir(parents=True)
        doc = json.loads(traces.get(rank, traces[0]).read_text())
        doc["distributedInfo"]["rank"] = rank
        (folder / "w.1.pt.trace.json").write_text(json.dumps(doc))
        (folder / "manifest.json").write_text(json.dumps({
            "run_id": f"job-rank{rank}", "status": "complete", "workload": "mlp",
            "framework": "torch", "variant": "default", "warmup_steps": 0, "rank": rank,
            "job_id": "job", "world_size": world}))
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.json").write_text(json.dumps({
        "run_id": "job", "status": "complete", "workload": "mlp", "framework": "torch",
        "distributed": {"world_size": world, "backend": "nccl", "ranks": [
            {"rank": r, "dir": f"rank{r}", "status": "complete"}
            for r in (range(world) if entries is None else entries)]}}))
    return root


def _trace_of(rank: int) -> Path:
    return next(p for p in SAMPLED.glob("*.json") if json.loads(p.read_text())["distributedInfo"]["rank"] == rank)


def test_own_job_with_rank_directories_absent_is_sampled(tmp_path):
    """A finished gapscope job whose other rank directories are not here (another node's disk,
    a partial copy): the ranks present; a rank directory there but broken is still refused."""
    job = load_job(_job_dir(tmp_path / "job", (0, 5)))
    assert (job.world_size, job.rank_numbers) == (8, [0, 5])
    assert any("rank directories are not in the job directory" in n and MISSING_NOTE in n
               for n in job.notes)
    assert job_breakdown(job).job_step_ms == pytest.approx(1.1)
    # A folder of those rank directories alone (no job manifest): the same.
    copied = tmp_path / "copied"
    copied.mkdir()
    for rank in (0, 5):
        shutil.copytree(tmp_path / "job" / f"rank{rank}", copied / f"rank{rank}")
    assert load_job(copied).rank_numbers == [0, 5]
    # A rank directory that exists without its manifest: broken, not sampled.
    broken = _job_dir(tmp_path / "broken", (0, 5))
    (broken / "rank3").mkdir()
    with pytest.raises(GapscopeInputError, match="rank 3 has no run directory"):
        load_job(broken)
    result = CliRunner().invoke(cli, ["breakdown", str(broken)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1, result.output
    # None of them here: nothing to break down.
    with pytest.raises(GapscopeInputError, match="none of its 8 rank directories is here"):
        load_job(_job_dir(tmp_path / "empty", ()))
    # The job manifest itself naming too few ranks: refused as before.
    short = _job_dir(tmp_path / "short", (0, 5), entries=(0, 5))
    with pytest.raises(GapscopeInputError, match=r"ranks 0, 5 of a world of 8: missing 1-4, 6-7"):
        load_job(short)


@pytest.mark.parametrize("path", [LONE_NCCL, _trace(LONE_NCCL)], ids=["folder", "file"])
def test_lone_nccl_rank_gets_its_communication_table(path):
    assert is_job(path, lone=True) and not is_job(path)  # compare still reads it as a run
    assert load_run(path).trace is not None
    jb = breakdown_of(path)
    assert isinstance(jb, JobBreakdown)
    assert (jb.world_size, jb.numbers, jb.backend, jb.complete) == (2, [1], "nccl", False)
    assert jb.job_step_ms == pytest.approx(1.0) and jb.straggler is None
    assert _comm(jb.communication[0]) == {
        "comm_ms": 0.25, "overlapped_ms": 0.05, "exposed_ms": 0.2,
        "per_kind": {"all_reduce": (1.0, 4000.0, 0.15), "all_to_all": (1.0, 2000.0, 0.1)},
        "exposed_by_phase": {"other": 0.2}}
    assert any("1 of 2 ranks present" in n and "missing 0;" in n for n in jb.notes)


def test_cli_breakdown_of_a_lone_rank_prints_the_communication_table():
    result = CliRunner().invoke(cli, ["breakdown", str(_trace(LONE_NCCL))])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "2 ranks (1 present: 1)" in out and "communication" in out and "all_to_all count" in out
    assert "send" not in out and "rank skew" not in out


def test_sendrecv_kernel_is_named_by_the_collective_that_launched_it(tmp_path):
    kinds = [c.kind for c in find_collectives(*_read(_trace(LONE_NCCL)))]
    assert kinds == ["all_reduce", "all_to_all", "all_reduce", "all_to_all"]
    # The same kernels with no host range around their launch: the kernel's name is all there is.
    doc = json.loads(_trace(LONE_NCCL).read_text())
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["name"] not in (
        "c10d::alltoall_", "nccl:all_to_all") and (e.get("args") or {}).get("Collective name") != "all_to_allv"]
    bare = tmp_path / "bare.pt.trace.json"
    bare.write_text(json.dumps(doc))
    assert [c.kind for c in find_collectives(*_read(bare))] == ["all_reduce", "send", "all_reduce", "send"]


def _read(path: Path):
    run = load_run(path)
    return run.trace, run.timeline


def test_lone_gloo_rank_time_is_communication_not_dispatch():
    jb = breakdown_of(LONE_GLOO)
    assert (jb.world_size, jb.numbers, jb.backend) == (2, [0], "gloo")
    assert _comm(jb.communication[0]) == {
        "comm_ms": 0.31, "overlapped_ms": 0.005, "exposed_ms": 0.305,
        "per_kind": {"all_reduce": (1.0, 4000.0, 0.31)},
        "exposed_by_phase": {"backward": 0.005, "other": 0.3}}
    # The rank's `other` (0.4 ms): the gloo wait is communication, none of it dispatch.
    rank = breakdown(load_run(_trace(LONE_GLOO)))
    parts = rank.to_json_dict()["phases"]["other"]["parts"]
    assert rank.phases["other"].ms == pytest.approx(0.4)
    assert parts == pytest.approx({"communication": 0.3, "loop and callbacks": 0.1})
    table = CliRunner().invoke(cli, ["breakdown", str(LONE_GLOO)])
    assert table.exit_code == 0 and "· communication" in table.output
    assert "· framework dispatch" not in table.output


def test_scaling_against_sampled_ranks_says_the_gap_is_a_bound():
    result = CliRunner().invoke(cli, ["compare", str(LONE_NCCL), str(SAMPLED), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert "sampled_ranks x8: 2 of 8 ranks present: its job step is a lower bound, and so the gap" \
        in doc["warnings"]


GENERIC_NCCL = FOREIGN / "generic_nccl"


def test_generic_nccl_kernels_take_their_kind_from_the_launching_range(tmp_path):
    """ncclDevKernel_Generic names no collective: record_param_comms, nccl:* or c10d::* around its
    launch does, and an hccl:* range (Ascend's) as well; with none, it is still communication."""
    kinds = [c.kind for c in find_collectives(*_read(_trace(GENERIC_NCCL)))]
    assert kinds == ["all_reduce", "all_to_all", "all_reduce", "all_to_all"]
    doc = json.loads(_trace(GENERIC_NCCL).read_text())
    for event in doc["traceEvents"]:  # the all-to-alls named by an hccl: range alone
        if event["name"] == "nccl:all_to_all":
            event["name"] = "hccl:all_to_all"
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e["name"] != "c10d::alltoall_" and
                          (e.get("args") or {}).get("Collective name") != "all_to_allv"]
    hccl = tmp_path / "hccl.pt.trace.json"
    hccl.write_text(json.dumps(doc))
    assert [c.kind for c in find_collectives(*_read(hccl))] == kinds
    doc["traceEvents"] = [e for e in doc["traceEvents"] if not e["name"].startswith(
        ("c10d::", "nccl:", "hccl:", "record_param_comms"))]
    bare = tmp_path / "bare.pt.trace.json"
    bare.write_text(json.dumps(doc))
    found = find_collectives(*_read(bare))
    assert [c.kind for c in found] == ["unnamed"] * 4
    assert [c.end_us - c.start_us for c in found] == [150, 100, 150, 100]


def test_an_hccl_range_is_communication_in_other(tmp_path):
    """A host range of Ascend's collective library is the rank waiting on its peers, not dispatch."""
    doc = json.loads(_trace(LONE_GLOO).read_text())
    renamed = 0
    for event in doc["traceEvents"]:
        if event["name"].startswith("gloo:"):
            event["name"] = "hccl:" + event["name"][5:]
            renamed += 1
    assert renamed
    path = tmp_path / "hccl.pt.trace.json"
    path.write_text(json.dumps(doc))
    parts = breakdown(load_run(path)).to_json_dict()["phases"]["other"]["parts"]
    assert parts.get("communication", 0) == pytest.approx(0.3)


@pytest.mark.parametrize("gzipped", [False, True])
def test_distributed_info_after_the_events_is_found(tmp_path, gzipped):
    """Newer Kineto writes distributedInfo after traceEvents, past what the head read holds:
    the sampled ranks were then no job at all."""
    import gzip
    folder = tmp_path / "tail"
    folder.mkdir()
    for source, rank in zip(sorted(SAMPLED.glob("*.json")), (0, 1)):
        doc = json.loads(source.read_text())
        info = {**doc.pop("distributedInfo"), "rank": rank, "world_size": 128}
        # Events first, then 300 kB of metadata, then the info: beyond a 256 kB head.
        text = json.dumps({"traceEvents": doc.pop("traceEvents"), **doc, "padding": "x" * 300_000,
                           "distributedInfo": info})
        name = folder / f"trace_{rank}.pt.trace.json"
        if gzipped:
            Path(f"{name}.gz").write_bytes(gzip.compress(text.encode()))
        else:
            name.write_text(text)
    jb = breakdown_of(folder)
    assert jb.world_size == 128 and jb.numbers == [0, 1]
    assert any("missing 2-127;" in note for note in jb.notes)


def _inflations(monkeypatch) -> list:
    """The gzip inflations of the command that follows (each one's child process)."""
    from gapscope.analysis.readers import gunzip
    started = []
    start = gunzip.ChildGunzip.__init__
    monkeypatch.setattr(gunzip.ChildGunzip, "__init__", lambda self, *args: started.append(1) or start(self, *args))
    return started


@pytest.mark.parametrize("in_folder", [False, True])
def test_a_lone_gzip_rank_with_its_info_after_the_events_is_inflated_once(tmp_path, monkeypatch, in_folder):
    """Its head does not say its rank: the trace read to learn it is the one its run analyses
    (before, the whole gzip was inflated for its tail, then again for the run)."""
    import gzip
    doc = json.loads(_trace(LONE_NCCL).read_text())
    info = doc.pop("distributedInfo")
    text = json.dumps({"traceEvents": doc.pop("traceEvents"), **doc, "padding": "x" * 300_000,
                       "distributedInfo": info})
    folder = tmp_path / "lone"
    folder.mkdir()
    path = folder / "host1.pt.trace.json.gz"
    path.write_bytes(gzip.compress(text.encode()))
    started = _inflations(monkeypatch)
    result = CliRunner().invoke(cli, ["breakdown", str(folder if in_folder else path), "--format", "json"])
    assert result.exit_code == 0, result.output
    job = json.loads(result.output)["job"]
    assert (job["world_size"], job["ranks_present"]) == (info["world_size"], [info["rank"]])
    assert len(started) == 1


def test_a_gzip_trace_of_no_job_is_inflated_once(tmp_path, monkeypatch):
    import gzip
    doc = json.loads(_trace(LONE_NCCL).read_text())
    doc.pop("distributedInfo")
    path = tmp_path / "one.pt.trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    started = _inflations(monkeypatch)
    result = CliRunner().invoke(cli, ["breakdown", str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    assert "job" not in json.loads(result.output) and len(started) == 1


def test_a_trace_changed_after_it_was_read_ahead_is_read_again(tmp_path):
    from gapscope.analysis.model import kept_traces
    from gapscope.analysis.model.run import read_trace
    path = tmp_path / "w.pt.trace.json"
    path.write_text(_trace(LONE_NCCL).read_text())
    first = kept_traces.read_ahead(path, read_trace)
    assert kept_traces.read_ahead(path, read_trace) is first  # looked at twice, read once
    path.write_text(path.read_text() + " ")  # another size: another file
    assert read_trace(path) is not first and kept_traces.take(path) is None
