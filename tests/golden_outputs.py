"""What breakdown, compare, report and the TensorBoard plugin's routes print for the committed
fixture traces: the golden outputs a refactor must leave byte-identical (paths made relative).

`python tests/golden_outputs.py OUT [RUN...]` writes them to OUT, with extra run directories
(real runs, not deterministic enough to commit) analysed too, for a before/after comparison."""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
# Each input under one folder with a fixed name: the outputs name them, never the temp folder.
INPUTS = {
    "marked/w.1.pt.trace.json": "marked_two_steps.pt.trace.json",
    "foreign/x.pt.trace.json": "foreign_one_step.pt.trace.json",
    "gpu/g.1.pt.trace.json": "async_gpu_two_steps.pt.trace.json",
    "job/rank0.pt.trace.json": "distributed/gloo_rank0_two_steps.pt.trace.json",
    "job/rank1.pt.trace.json": "distributed/gloo_rank1_two_steps.pt.trace.json",
}
FORMATS = ("table", "json")


def lay_out(root: Path, extra_runs=()) -> list[str]:
    """The inputs under `root`; the names the commands are given."""
    for name, fixture in INPUTS.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(FIXTURES / fixture, root / name)
    names = sorted({name.split("/")[0] for name in INPUTS})
    for run in map(Path, extra_runs):
        shutil.copytree(run, root / run.name, symlinks=True)
        names.append(run.name)
    return names


def outputs(root: Path, names: list[str]) -> dict[str, str]:
    """Every output by a file name that says what made it; `root` written as <root>."""
    from click.testing import CliRunner

    from gapscope.cli import cli
    found, runner = {}, CliRunner()

    def invoke(key: str, args: list[str]) -> None:
        result = runner.invoke(cli, args, env={"COLUMNS": "80", "GAPSCOPE_JOB_WORKERS": "1"})
        found[key] = f"exit {result.exit_code}\n{result.output}"

    cwd = os.getcwd()
    os.chdir(root)
    try:
        for name in names:
            for fmt in FORMATS:
                invoke(f"breakdown-{name}.{fmt}", ["breakdown", name, "--format", fmt])
        runs = [n for n in names if n != "job"]
        for fmt in FORMATS:
            invoke(f"compare.{fmt}", ["compare", *runs[:2], "--format", fmt])
        invoke("breakdown-all.json", ["breakdown", *names, "--format", "json"])
        invoke("report.out", ["report", *runs, "--out", "report/r.md", "--quiet"])
        if (root / "report" / "r.md").is_file():
            found["report.md"] = (root / "report" / "r.md").read_text()
        # One worker, as the commands above: the job JSON names its engine's workers.
        workers = os.environ.get("GAPSCOPE_JOB_WORKERS")
        os.environ["GAPSCOPE_JOB_WORKERS"] = "1"
        try:
            found.update(_plugin_routes(root, runs))
        finally:
            if workers is None:
                os.environ.pop("GAPSCOPE_JOB_WORKERS")
            else:
                os.environ["GAPSCOPE_JOB_WORKERS"] = workers
    finally:
        os.chdir(cwd)
    return {key: _GENERATED.sub("<generated>", text.replace(str(root), "<root>"))
            for key, text in found.items()}


# The report's date of writing: the one thing in it that is not the runs'.
_GENERATED = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")


def _plugin_routes(root: Path, runs: list[str]) -> dict[str, str]:
    from tensorboard.plugins import base_plugin
    from werkzeug.test import Client

    from gapscope.analysis.tensorboard.plugin.plugin import GapscopePlugin
    apps = GapscopePlugin(base_plugin.TBContext(logdir=str(root))).get_plugin_apps()

    def get(route: str, **query) -> str:
        response = Client(apps[route]).get("/", query_string=query)
        return f"{response.status_code}\n" + json.dumps(json.loads(response.get_data()),
                                                         indent=1, sort_keys=True)

    found = {"plugin-runs.json": get("/runs")}
    for name in runs:
        found[f"plugin-steps-{name}.json"] = get("/steps", run=name)
        found[f"plugin-details-{name}.json"] = get("/details", run=name)
    found["plugin-compare.json"] = get("/compare", run=runs[:2])
    return found


def main(out: str, *extra_runs: str) -> None:
    import tempfile
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "in"
        root.mkdir()
        for key, text in outputs(root, lay_out(root, extra_runs)).items():
            (out_dir / key).write_text(text)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main(*sys.argv[1:])
