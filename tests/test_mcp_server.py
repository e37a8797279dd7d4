"""`gapscope mcp` started as a subprocess and driven by the MCP SDK's own stdio client: its tools
answer with the CLI's JSON and the verdict as fields, refuse writes outside their root, report
a run's progress and stop it when the request is cancelled. One server for the module."""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner

from gapscope.cli import cli
from gapscope.profilers.phases import PHASES

pytest.importorskip("mcp")
from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CNN = REPO / "tests" / "fixtures" / "cnn_cpu"   # two real runs, marked busy (their README)
QUIET = {"others_cpu_pct": 1.0, "steal_pct": 0.0, "cores": 2}
RUN_STEPS = 5000   # far more than the run gets through before the test cancels it


def quiet_copy(run: Path, folder: Path) -> Path:
    """The fixture run as if recorded on a quiet machine (the figures are unchanged)."""
    shutil.copytree(run, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["machine_load"] = QUIET
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _structured(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def _drive(root: Path, ab_folder: Path, baseline: Path) -> dict:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "gapscope.cli", "mcp", "--root", str(root)],
                                   # The test process's environment, as a client's shell gives it: a check
                                   # compares OMP_NUM_THREADS with the baseline's (another test sets it).
                                   env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=str(REPO))
    got: dict = {"progress": []}
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        got["tools"] = sorted(t.name for t in (await session.list_tools()).tools)
        # Relative paths start at the root folder; absolute ones are read where they are.
        got["breakdown"] = await session.call_tool("breakdown", {"paths": ["torch-quiet"]})
        got["breakdown2"] = await session.call_tool("breakdown", {"paths": ["torch-quiet", "keras-quiet"]})
        got["compare"] = await session.call_tool("compare", {"runs": ["torch-quiet", "keras-quiet"]})
        got["compare_busy"] = await session.call_tool("compare", {"runs": [str(CNN / "torch"),
                                                                           str(CNN / "keras")]})
        got["breakdown_busy"] = await session.call_tool("breakdown", {"paths": [str(CNN / "torch")]})
        got["layers"] = await session.call_tool("layers", {"paths": ["keras-quiet"]})
        got["memory"] = await session.call_tool("memory", {"paths": ["keras-quiet"]})
        got["compile_why"] = await session.call_tool("compile_why", {"paths": ["torch-quiet"]})
        got["check"] = await session.call_tool("check", {"target": str(ab_folder), "baseline": str(baseline)})
        got["outside"] = await session.call_tool("run", {"workload": "linreg", "framework": "torch",
                                                         "out": "../elsewhere"})
        got["symlink"] = await session.call_tool("run", {"workload": "linreg", "framework": "torch",
                                                         "out": "link/runs"})
        got["both"] = await session.call_tool("compare", {"runs": ["torch-quiet"], "measure": ["mlp:torch"]})

        async def on_progress(done, total, message):
            got["progress"].append((done, total, message))
            if done >= 1:
                scope.cancel()   # the client abandons the call: MCP's notifications/cancelled
        with anyio.CancelScope() as scope:
            await session.call_tool("run", {"workload": "linreg", "framework": "torch",
                                            "steps": RUN_STEPS, "warmup": 2, "out": "cancelled"},
                                    progress_callback=on_progress)
        got["cancelled"] = scope.cancelled_caught
        with anyio.fail_after(90):   # the run records how it ended, then its process exits
            while not any(json.loads(p.read_text())["status"] == "failed" for p in
                          (root / "cancelled").glob("*/manifest.json")):
                await anyio.sleep(0.5)
        got["after"] = await session.call_tool("list_workloads", {})   # the server goes on
    return got


@pytest.fixture(scope="module")
def served(tmp_path_factory, ab_folder):
    root = tmp_path_factory.mktemp("mcp-root")
    # A baseline of the session's A/B folder (linreg:torch), to check that folder against.
    baseline = root / "baseline.json"
    saved = CliRunner().invoke(cli, ["check", str(ab_folder), "--baseline", str(baseline), "--save",
                                     "--save-busy"])
    assert saved.exit_code == 0, saved.output
    quiet_copy(CNN / "torch", root / "torch-quiet")
    quiet_copy(CNN / "keras", root / "keras-quiet")
    outside = tmp_path_factory.mktemp("mcp-outside")
    (root / "link").symlink_to(outside, target_is_directory=True)
    started = time.monotonic()
    got = anyio.run(_drive, root, ab_folder, baseline)
    got.update(root=root, outside_dir=outside, seconds=time.monotonic() - started, ab_folder=ab_folder,
               baseline=baseline)
    return got


def _cli_json(*args) -> tuple[dict | list, int]:
    result = CliRunner().invoke(cli, [*args, "--format", "json"])
    return json.loads(result.stdout), result.exit_code


def test_the_server_lists_every_tool(served):
    assert served["tools"] == sorted(["list_workloads", "run", "breakdown", "compare", "check",
                                      "layers", "compile_why", "memory"])
    listed = _structured(served["after"])
    assert [w["name"] for w in listed["json"]["workloads"]][:2] == ["linreg", "mlp"]


def test_breakdown_and_compare_answer_the_clis_json(served):
    root = served["root"]
    one, two = _structured(served["breakdown"]), _structured(served["breakdown2"])
    assert one["json"] == _cli_json("breakdown", str(root / "torch-quiet"))[0]
    assert two["json"] == _cli_json("breakdown", str(root / "torch-quiet"), str(root / "keras-quiet"))[0]
    # The torch run's steady unprofiled step is its steps.csv step 2: 715.684717 ms, forward 284.265927.
    assert one["json"]["step_ms"]["mean"] == pytest.approx(715.684717)
    assert one["json"]["phases"]["forward"]["ms"] == pytest.approx(284.265927)
    assert (one["verdict"], one["inconclusive"], one["reason"]) == ("measured", False, None)
    compared = _structured(served["compare"])
    expected, code = _cli_json("compare", str(root / "torch-quiet"), str(root / "keras-quiet"))
    assert compared["json"] == expected and compared["exit_code"] == code == 0
    pair = expected["comparisons"][0]
    # Keras' step 239.275 ms against torch's 715.685: faster, said as a field and in the text.
    assert pair["ratio"] == pytest.approx(239.275 / 715.685, abs=1e-3)
    assert (compared["verdict"], compared["inconclusive"]) == ("faster", False)
    assert compared["text"].startswith("cnn keras is ") and " faster than cnn torch" in compared["text"]
    assert set(pair["phases"]) == set(PHASES)


def test_a_busy_machine_answers_inconclusive(served):
    busy = _structured(served["compare_busy"])
    expected, code = _cli_json("compare", str(CNN / "torch"), str(CNN / "keras"))
    assert busy["json"] == expected and code == busy["exit_code"] == 3
    assert busy["inconclusive"] is True and busy["verdict"] == "inconclusive"
    assert busy["reason"] == "busy machine while cnn torch and cnn keras ran"
    assert busy["text"].startswith("INCONCLUSIVE: ")
    one = _structured(served["breakdown_busy"])
    assert one["inconclusive"] is True and "74 % of the 2 cores" in one["reason"]


def test_layers_and_memory_are_parts_of_the_breakdowns_json(served):
    root = served["root"]
    layers = _structured(served["layers"])
    expected, _ = _cli_json("breakdown", "--layers", str(root / "keras-quiet"))
    assert layers["json"] == expected
    # TF's scopes, read as four layers (tests/test_layers.py, the fixture's README).
    assert sorted(r["name"] for r in layers["json"]["layers"]["layers"]) == ["conv2d", "dense", "loss",
                                                                             "max_pooling2d"]
    memory = _structured(served["memory"])
    (run,) = memory["json"]["runs"]
    assert run["memory"] == _cli_json("breakdown", str(root / "keras-quiet"))[0]["memory"]
    assert "step peak 70.52 MB" in memory["text"]


def test_writes_outside_the_root_are_refused(served):
    for key, given in (("outside", "../elsewhere"), ("symlink", "link/runs")):
        result = served[key]
        assert result.is_error
        assert f"gapscope: error: {given}: outside the folder this server writes in" in result.content[0].text
    assert not any(served["outside_dir"].iterdir()) and not (served["root"].parent / "elsewhere").exists()
    assert served["both"].is_error and "not both" in served["both"].content[0].text


def test_a_cancelled_run_reported_progress_and_stopped(served):
    assert served["cancelled"]
    steps = [(done, total) for done, total, message in served["progress"] if done >= 1]
    assert steps and all(total == RUN_STEPS for _, total in steps)
    assert all(message.startswith("linreg torch") for _, _, message in served["progress"])
    (manifest,) = (served["root"] / "cancelled").glob("*/manifest.json")
    recorded = json.loads(manifest.read_text())
    assert recorded["status"] == "failed" and recorded["error"] == "interrupted"
    assert steps[0][0] < RUN_STEPS   # stopped when told, not at its end


def test_check_and_compile_why_answer_as_the_cli(served):
    checked = _structured(served["check"])
    expected, code = _cli_json("check", str(served["ab_folder"]), "--baseline", str(served["baseline"]))
    assert checked["json"] == expected and checked["exit_code"] == code
    # Its own runs against themselves: unchanged, or no verdict where they ran beside other work.
    assert checked["verdict"] == expected["verdict"] in ("unchanged", "inconclusive")
    assert checked["inconclusive"] == (expected["verdict"] == "inconclusive")
    assert expected["ratio"] == pytest.approx(1.0) and checked["text"].startswith("check linreg:torch: ")
    why = _structured(served["compile_why"])
    assert why["json"]["runs"] == [{"run_id": "cnn-torch-default-20261126-222948-62fb", "label": "cnn torch",
                                    "compile": None}]   # an eager run keeps no compile.json
    assert why["text"].startswith("cnn torch: no compile record")


def test_without_the_sdk_the_command_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "mcp", None)   # `import mcp` now raises ImportError
    for name in [m for m in sys.modules if m.startswith(("mcp.", "gapscope.agent.server"))]:
        monkeypatch.delitem(sys.modules, name)
    result = CliRunner().invoke(cli, ["mcp", "--root", str(tmp_path)])
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "gapscope: error: gapscope mcp needs the MCP SDK (mcp is missing): pip install 'gapscope[mcp]'"]
