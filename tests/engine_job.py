"""A small synthetic job for the engine tests: four ranks copied from the hand-made sampled-rank
traces (tests/fixtures/foreign/sampled_ranks, figures worked out in its README), ranks 0-2 from
rank 0's trace (steps of 1.000 ms), rank 3 from rank 5's (1.100 ms: data load 100 µs longer)."""
from __future__ import annotations

import json
from pathlib import Path

SAMPLED = Path(__file__).parent / "fixtures" / "foreign" / "sampled_ranks"
WORLD = 4


def make_job(folder: Path, world: int = WORLD) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    fast, slow = sorted(SAMPLED.glob("*.json"))  # worker0, worker5
    for rank in range(world):
        doc = json.loads((slow if rank == world - 1 else fast).read_text())
        doc["distributedInfo"].update(rank=rank, world_size=world)
        (folder / f"trace_{rank}.pt.trace.json").write_text(json.dumps(doc))
    return folder


def job_json(job) -> str:
    """The job's JSON as `breakdown --format json` writes it, less the engine that made it."""
    from analysis.renderers import registry
    job.engine = None
    return registry.JOB_BREAKDOWN["json"].render([job])
