"""`gapscope mcp`: the agent tools (gapscope.agent.tools) served over stdio with the official MCP SDK."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Callable, Literal

import anyio
import anyio.lowlevel
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from gapscope.agent import tools
from gapscope.profilers import strict_json
from gapscope.profilers.errors import GapscopeInputError, GapscopeRunError
from gapscope.workloads.ab import RunFailed
from gapscope.workloads.child_process import RunInterrupted, StopRequest

INSTRUCTIONS = """gapscope breaks a training step into data_load, forward, backward, optimizer and
other, and explains why one framework or variant trains faster than another. Every tool returns
the JSON of `gapscope <command> --format json` under `json`, and beside it `verdict`,
`inconclusive` and `reason`: when `inconclusive` is true (other processes took the cores) the
figures are no fact; measure again on a quiet machine rather than act on them. To test an idea:
`compare` with `measure` (two configurations WORKLOAD:FRAMEWORK[:VARIANT], interleaved repeats),
read the verdict, try a suggestion (a configuration it names), and measure again."""

Paths = Annotated[list[str], Field(description="Run directories, folders of runs, A/B folders, "
                                               "trace files.")]
Configs = Annotated[list[str], Field(description="WORKLOAD:FRAMEWORK[:VARIANT], e.g. mlp:torch, "
                                                 "mlp:keras:jit.")]
Out = Annotated[str, Field(description="Folder for the runs, inside the server's root folder.")]
# An agent's run is bounded: 10,000 steps of the largest workload take minutes here, not days.
MAX_AGENT_STEPS = 10_000
Steps = Annotated[int, Field(ge=2, le=MAX_AGENT_STEPS, description="Training steps a run.")]
Warmup = Annotated[int, Field(ge=1, le=MAX_AGENT_STEPS,
                              description="First steps left out of the steady state.")]
TraceSteps = Annotated[int | None, Field(ge=1, le=MAX_AGENT_STEPS,
                                         description="Steps the profiler records.")]
Precision = Annotated[float | None, Field(gt=0, le=0.5, description="e.g. 0.03 for ±3 %")]
Device = Literal["auto", "cpu", "cuda"]


def build(root: Path) -> MCPServer:
    """The server whose tools write only under `root` (runs, A/B folders)."""
    server = MCPServer("gapscope", instructions=INSTRUCTIONS, log_level="WARNING")

    @server.tool(description="List gapscope's workloads, framework paths and variants "
                             "(`gapscope list --format json --no-parameters`).")
    async def list_workloads(ctx: Context) -> CallToolResult:
        return await _answer(ctx, lambda progress: tools.list_workloads())

    @server.tool(description="Run one workload once in a new run directory and break its steps "
                             "down (`gapscope run --format json`); reports progress by step; "
                             "cancellable (the run is recorded as interrupted).")
    async def run(ctx: Context, workload: str, framework: Literal["torch", "keras", "keras-torch", "tf"],
                  variant: str = "default", steps: Steps = 60, warmup: Warmup = 5,
                  trace_steps: TraceSteps = None, device: Device = "auto", out: Out = ".") -> CallToolResult:
        return await _answer(ctx, lambda progress: tools.run(
            root, workload, framework, variant, steps, warmup, trace_steps, device, out, progress))

    @server.tool(description="Per-phase breakdown of runs (`gapscope breakdown --format json`).")
    async def breakdown(ctx: Context, paths: Paths,
                        source: Literal["auto", "timers", "trace", "compensated"] = "auto") -> CallToolResult:
        return await _answer(ctx, lambda progress: tools.breakdown(_read(root, paths), source))

    @server.tool(description="Compare runs of one workload, the first the baseline (`gapscope compare "
                             "--format json`): the gap per phase with intervals, its causes and "
                             "suggestions. With `measure` instead of `runs`: run the configurations "
                             "now, interleaved (`compare --measure`, `precision` and "
                             "`budget_minutes` as --precision and --budget); progress by run; "
                             "cancellable.")
    async def compare(ctx: Context, runs: Paths | None = None, measure: Configs | None = None,
                      repeats: Annotated[int | None, Field(ge=1, le=200)] = None,
                      precision: Precision = None,
                      budget_minutes: Annotated[float | None, Field(ge=0.5, le=1440)] = None,
                      steps: Steps = 60, warmup: Warmup = 5, trace_steps: TraceSteps = None,
                      device: Device = "auto", out: Out = ".",
                      different_workloads: bool = False) -> CallToolResult:
        if (runs is None) == (measure is None):
            raise ToolError("gapscope: error: give `runs` (to compare) or `measure` (configurations "
                            "to run), not both")
        if measure is None:
            return await _answer(ctx, lambda progress: tools.compare(_read(root, runs),
                                                                     different_workloads))
        return await _answer(ctx, lambda progress: tools.measure(
            root, measure, repeats, precision, budget_minutes, steps, warmup, trace_steps, device, out,
            progress))

    @server.tool(description="Regression check (`gapscope check --format json`): a configuration "
                             "measured now (or an A/B folder) against a stored baseline; verdict "
                             "regression, faster, unchanged or inconclusive.")
    async def check(ctx: Context, target: str, baseline: str,
                    threshold: Annotated[float, Field(gt=0, le=0.5)] = 0.05,
                    repeats: Annotated[int, Field(ge=2, le=200)] = 5, config: str | None = None,
                    steps: Steps = 60, warmup: Warmup = 5, device: Device = "auto",
                    out: Out = ".") -> CallToolResult:
        return await _answer(ctx, lambda progress: tools.check(
            root, _target(root, target), _read(root, [baseline])[0], threshold, repeats, config,
            steps, warmup, device, out))

    @server.tool(description="Each layer's forward and backward time of runs (`gapscope breakdown "
                             "--layers --format json`).")
    async def layers(ctx: Context, paths: Paths) -> CallToolResult:
        return await _answer(ctx, lambda progress: tools.layers(_read(root, paths)))

    @server.tool(description="Why compiled is (or is not) faster: each run's compile record "
                             "(Dynamo stages, graph breaks, recompiles; TF retraces), the `compile` "
                             "object of `gapscope breakdown --format json`.")
    async def compile_why(ctx: Context, paths: Paths) -> CallToolResult:
        return await _answer(ctx, lambda progress: tools.compile_why(_read(root, paths)))

    @server.tool(description="Memory: one run's figures (`memory` of `breakdown --format json`); two "
                             "or more, who holds more against the first (`compare --memory`).")
    async def memory(ctx: Context, paths: Paths) -> CallToolResult:
        return await _answer(ctx, lambda progress: tools.memory(_read(root, paths)))

    return server


def _read(root: Path, paths: list[str]) -> list[str]:
    """Paths to read, a relative one taken from the root folder (reading is not confined)."""
    return [str(root / p) for p in paths]


def _target(root: Path, target: str) -> str:
    """A check's target: an A/B folder that exists (from the root folder), else a configuration."""
    return str(root / target) if (root / target).exists() else target


async def _answer(ctx: Context, work: Callable[[tools.Progress], tools.Answer]) -> CallToolResult:
    """Runs `work` on a worker thread, its progress sent as MCP progress notifications. A cancelled
    request stops its runs as SIGTERM stops the CLI's (recorded as interrupted). A bad input is
    a one-line tool error, as the CLI's exit 2."""
    request = StopRequest()
    # A run's steps are told on the thread that reads its output, not the worker: the way back
    # to the event loop is its token.
    loop = anyio.lowlevel.current_token()

    def progress(done: float, total: float | None, message: str) -> None:
        if request.signum is not None:  # cancelled: nobody waits for its progress
            return
        try:
            anyio.from_thread.run(ctx.report_progress, done, total, message, token=loop)
        except Exception:  # the server is closing
            pass

    def in_thread() -> tools.Answer:
        with request.bound():
            return work(progress)
    try:
        answer = await anyio.to_thread.run_sync(in_thread, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        request.stop()
        raise
    except (GapscopeInputError, GapscopeRunError) as exc:
        raise ToolError(f"gapscope: error: {exc}") from None
    except RunFailed as exc:
        raise ToolError(f"gapscope: A/B measurement failed: {exc}") from None
    except RunInterrupted as exc:
        raise ToolError(f"gapscope: interrupted ({exc})") from None
    except OSError as exc:  # a full disk, a folder that vanished: as the CLI says it
        where = f" {exc.filename}" if exc.filename else ""
        raise ToolError(f"gapscope: error:{where} {exc.strerror or exc}") from None
    document = answer.to_json_dict()
    return CallToolResult(content=[TextContent(type="text", text=answer.text),
                                   TextContent(type="text", text=strict_json.dumps(document, indent=2))],
                          structured_content=document)


def serve(root: str | Path) -> None:
    """Serves over stdin/stdout until the client closes them."""
    folder = Path(root)
    if not folder.is_dir():
        raise GapscopeInputError(f"--root {root}: no such directory")
    anyio.run(build(folder.resolve()).run_stdio_async)
