"""The two real H200 traces (tests/fixtures/h200) as gapscope run folders: a manifest that names
the mlp's layers and batch beside the trace, as `gapscope run` writes it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from gapscope.workloads.registry import get_workload

H200 = Path(__file__).resolve().parent / "fixtures" / "h200"
SPECS = [layer.to_dict() for layer in get_workload("mlp").layers()]  # dense1 (ReLU), logits, loss


def run_folder(parent: Path, name: str) -> Path:
    """`parent`/h200-`name`: the mlp-`name` trace (eager or compile) with its manifest."""
    folder = parent / f"h200-{name}"
    folder.mkdir(parents=True)
    shutil.copy(H200 / f"mlp-{name}.pt.trace.json.gz", folder)
    (folder / "manifest.json").write_text(json.dumps({
        "run_id": f"h200-{name}", "status": "complete", "workload": "mlp", "framework": "torch",
        "layers": SPECS, "workload_spec": {"batch_size": get_workload("mlp").batch_size}}))
    return folder
