"""gapscope's command line: thin click commands over workloads/, profilers/ and analysis/."""
from __future__ import annotations

import errno
import functools
import logging
import os
import sys
from pathlib import Path

import click

from gapscope.profilers import strict_json
from gapscope.profilers.environment import threads_of
from gapscope.profilers.errors import (EXIT_BAD_INPUT, EXIT_INCONCLUSIVE, EXIT_RUN_FAILED, GapscopeInputError,
                              GapscopeRunError)
from gapscope.analysis.renderers import registry
from gapscope.workloads.devices import DEVICES
from gapscope.workloads.settings import MAX_BATCH, MAX_EPOCHS, MAX_STEPS, MAX_WIDTH, MIN_WIDTH


class _Percent(click.ParamType):
    """'3%' or '3' -> 0.03: a precision, more than 0 and at most 50 %."""

    name = "percent"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        try:
            number = float(str(value).strip().removesuffix("%"))
        except ValueError:
            self.fail(f"{value!r} is not a percentage such as 3%", param, ctx)
        if not 0 < number <= 50:
            self.fail(f"{value!r}: give a precision above 0 and at most 50%", param, ctx)
        return number / 100


PERCENT = _Percent()


class _FiniteRange(click.FloatRange):
    """A FloatRange that refuses nan, which compares false with both bounds and so passed them."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if number != number:
            self.fail(f"{value!r} is not a number", param, ctx)
        return number

DEFAULT_OUT = os.environ.get("GAPSCOPE_OUT", "traces")
# TensorFlow's C++ start-up chatter (oneDNN, CPU features, absl) and the Python warnings of
# TensorFlow and absl would bury gapscope's own output in every command; errors still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
for _framework_logger in ("tensorflow", "absl"):
    logging.getLogger(_framework_logger).setLevel(logging.ERROR)


class _ShortUsageError(click.ClickException):
    """A usage error in two lines at most (click's own takes three or more)."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, error: click.UsageError):
        super().__init__(error.format_message())
        self.hint = f"try '{error.ctx.command_path} -h' for help" if error.ctx else None

    def show(self, file=None) -> None:
        click.echo(f"gapscope: error: {self.message}", err=True)
        if self.hint:
            click.echo(self.hint, err=True)


class _Group(click.Group):
    """Turns user mistakes into one line on stderr and exit code 2, never a traceback; SIGINT
    and SIGTERM stop the command (exit 130 or 143) after the run in flight recorded its end."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise _ShortUsageError(exc) from None

    def invoke(self, ctx):
        from gapscope.profilers.run_lifecycle import exit_code_of, signals_interrupt
        try:
            with signals_interrupt() as request:
                try:
                    return super().invoke(ctx)
                except (Exception, KeyboardInterrupt) as exc:
                    # A library that caught the signal's exception (Ray's wait) raises its own:
                    # once asked to stop, the command was stopped, whatever error followed.
                    stopped = request.behind(exc)
                    if stopped is exc:
                        raise
                    raise stopped from None
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise _ShortUsageError(exc) from None
        except GapscopeInputError as exc:
            click.echo(f"gapscope: error: {exc}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except GapscopeRunError as exc:  # a cluster that went away mid-command
            click.echo(f"gapscope: error: {exc}", err=True)
            sys.exit(EXIT_RUN_FAILED)
        except KeyboardInterrupt as exc:  # SIGTERM too (run_lifecycle.Interrupted)
            detail = str(exc)
            click.echo(f"gapscope: interrupted{f' ({detail})' if detail else ''}", err=True)
            sys.exit(exit_code_of(exc))
        except OSError as exc:
            if exc.errno == errno.EPIPE:
                raise  # click quiets a closed pipe itself
            # A full disk, a folder that vanished: the environment, not a gapscope bug.
            where = f" {exc.filename}" if exc.filename else ""
            click.echo(f"gapscope: error:{where} {exc.strerror or exc}", err=True)
            sys.exit(EXIT_RUN_FAILED)


def format_option(renderers: dict = registry.BREAKDOWN):
    """--format, its choices the formats the result type has a renderer for."""
    def decorate(command):
        return click.option("--format", "fmt", type=click.Choice(tuple(renderers)), default="table",
                            show_default=True, help="Output format.")(command)
    return decorate


def wide_option(command):
    """--wide: tables side by side at their natural width, lines unwrapped (default: 80 columns)."""
    def set_width(ctx, param, wide):
        from gapscope.analysis.renderers import fit
        fit.WIDTH = None if wide else fit.DEFAULT_WIDTH  # set each time: tests invoke many commands
        return wide
    return click.option("--wide", is_flag=True, expose_value=False, callback=set_width,
                        help="Keep tables side by side however wide (default: fit 80 columns).")(command)


def legend_option(command):
    """--no-legend: the breakdown table without the footer that explains its columns."""
    return click.option("--no-legend", "no_legend", is_flag=True,
                        help="Leave out the table's legend (what the columns and marks mean).")(command)


def layers_option(command):
    """--layers: each layer's forward and backward time, FLOPs and GFLOP/s beside the phases."""
    return click.option("--layers", is_flag=True,
                        help="Also per layer: forward and backward ms per traced step, GFLOP "
                             "and GFLOP/s, and the time outside layers.")(command)


def session_option(command):
    return click.option(
        "--session", metavar="N|FILE|all", default=None,
        help="A folder holding several profiler sessions: the one to read, by its number as "
             "the folder's listing gives it or its file; all: one process's successive "
             "windows read as one run, steps put together.")(command)


def _session_entries(paths, session: str):
    """The one folder --session chooses in, as the entry the command reads."""
    from gapscope.analysis.model.locate import locate
    from gapscope.analysis.model.run import RunEntry
    if len(paths) != 1:
        raise GapscopeInputError(f"--session {session}: give one folder, not {len(paths)} paths")
    return [RunEntry(None, Path(paths[0]), place=locate(paths[0], session=session))]


def trace_rules_options(command):
    """--phase and --step-marker, on the commands that read traces: the runs they load read
    their traces by them."""
    @functools.wraps(command)
    def with_rules(*args, phases=(), step_marker=None, layer_depth=None, **kwargs):
        from gapscope.analysis.events.trace_rules import TraceRules, check_step_marker, parse_phase
        from gapscope.analysis.model.run import reading_rules
        rules = TraceRules(tuple(parse_phase(text) for text in phases), check_step_marker(step_marker),
                           layer_depth)
        with reading_rules(rules):
            return command(*args, **kwargs)
    options = [
        click.option("--phase", "phases", multiple=True, metavar="NAME=PATTERN",
                     help="Ranges or ops named PATTERN are phase NAME (data_load, forward, "
                          "backward or optimizer), before the common names gapscope knows "
                          "('## forward ##', Lightning's hooks, ...). PATTERN matches the whole "
                          "name: * any text, ? one character, nothing else special. Repeatable.\n"
                          "e.g. --phase 'data_load=## sparse_data_dist ##'"),
        click.option("--step-marker", default=None, metavar="NAME",
                     help="Each range or op named NAME (* and ? as in --phase) is one step, "
                          "instead of ProfilerStep#N; short ranges (Optimizer.step*) are the "
                          "boundaries between steps. Without step markers, steps run between "
                          "optimizer steps, else the whole trace is one window."),
        click.option("--layer-depth", type=click.IntRange(min=0), default=None, metavar="N",
                     help="In a trace recorded with_modules, the layers are the modules at "
                          "depth N of their nesting (0 the model itself, 1 its children); "
                          "default: the model's children, past wrappers that hold one module."),
    ]
    return functools.reduce(lambda c, option: option(c), reversed(options), with_rules)


def engine_options(command):
    """--engine and --rank-retries, on the commands that break jobs down: the engine that
    analyses the ranks (analysis.results.engines.choose), started only if a job needs it."""
    @functools.wraps(command)
    def with_engine(*args, engine=None, rank_retries=0, **kwargs):
        from gapscope.analysis.results.engines.choose import using_engine
        from gapscope.workloads.progress import rank_progress
        with using_engine(engine, rank_retries, rank_progress()):
            return command(*args, **kwargs)
    options = [
        click.option("--engine", default=None, metavar="ENGINE",
                     help="What analyses a job's ranks: local (a process pool, the default), "
                          "dask or ray (a cluster started here), tcp://HOST:PORT or "
                          "dask://HOST:PORT (a Dask scheduler), ray://HOST:PORT (Ray Client). "
                          "Default: $GAPSCOPE_ENGINE, else local."),
        click.option("--rank-retries", type=click.IntRange(min=0), default=0, metavar="N",
                     help="Run a rank whose analysis raised up to N more times (never for bad "
                          "input); a rank still failing is a missing rank, named."),
    ]
    return functools.reduce(lambda c, option: option(c), reversed(options), with_engine)


def _breakdown_options(fmt: str, no_legend: bool) -> dict:
    """The terminal table alone has a legend to leave out; other formats take no options."""
    return {"legend": not no_legend} if fmt == "table" else {}


def _warn_oversubscribed(nproc: int) -> None:
    """More ranks than cores is allowed (a test of the launcher), but every step time then
    measures the ranks' contention for cores: said once, before anything runs."""
    cores = os.cpu_count() or 1
    if nproc > cores:
        click.echo(f"gapscope: warning: --nproc {nproc} on {cores} core(s): the ranks share cores, "
                   "so their step times measure that contention as much as the model", err=True)


def _say(quiet: bool, message: str) -> None:
    """Progress goes to stderr so that stdout stays clean for --format json pipes."""
    if not quiet:
        click.echo(message, err=True)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gapscope")
def cli():
    """Why does the same model train faster in one framework than another? gapscope runs
    workloads under the torch and TensorFlow profilers and breaks every step into data_load,
    forward, backward, optimizer and other.

    \b
    Example:
      gapscope run mlp --framework torch
      gapscope breakdown traces/<run-id> --format json
    """


@cli.command("list")
@click.option("--no-parameters", is_flag=True,
              help="With --format json: skip building every model to count its parameters (faster).")
@format_option(("table", "json"))
@wide_option
def list_command(fmt, no_parameters):
    """List workloads, frameworks and their variants; --format json adds the parameter count of
    each workload per framework (builds every model: takes seconds).

    \b
    Example:
      gapscope list --format json
    """
    from gapscope.analysis.renderers.fit import Page
    from gapscope.workloads.catalog import catalog
    # Counting parameters imports torch and TensorFlow: only the JSON, which carries them, pays.
    entries = catalog(count_parameters=fmt == "json" and not no_parameters,
                      progress=lambda message: click.echo(f"{message}...", err=True))
    if fmt == "json":
        click.echo(strict_json.dumps(entries, indent=2))
        return
    page = Page()
    for entry in entries["workloads"]:
        page.line(f"{entry['name']:<15} {entry['description']}", hang=16)
    for framework, names in entries["variants"].items():
        page.line(f"variants for {framework}: {', '.join(names)}", hang=4)
    page.line("combine variants with commas: --variant compile-reduce-overhead,high-precision")
    page.line("parameter counts per framework: gapscope list --format json")
    click.echo(page.text(), nl=False)


def size_options(command):
    """--batch-size and --width: the same workload at another batch or model size."""
    options = [
        click.option("--batch-size", type=click.IntRange(1, MAX_BATCH), default=None,
                     help="Samples per step instead of the workload's own (see `gapscope list`)."),
        click.option("--width", type=_FiniteRange(MIN_WIDTH, MAX_WIDTH), default=None,
                     help="Hidden layer widths times this (MLP units, the CNN's dense layer, "
                          "LSTM units), e.g. 2 for twice as wide; the manifest has the model."),
    ]
    return functools.reduce(lambda c, option: option(c), reversed(options), command)


def run_options(command):
    options = [
        click.option("--variant", default="default", show_default=True,
                     help="Comma-separated variants, e.g. compile-reduce-overhead,high-precision "
                          "(see `gapscope list`)."),
        click.option("--steps", type=click.IntRange(2, MAX_STEPS), default=60, show_default=True,
                     help="Training steps in the run. The step time comes from the steps "
                          "after --warmup that the profiler did not record (45 by default): "
                          "give more for a tighter interval."),
        click.option("--epochs", type=click.IntRange(1, MAX_EPOCHS), default=None,
                     help="Whole passes over the data set instead of --steps."),
        click.option("--data", "data_path", type=click.Path(exists=True, dir_okay=True),
                     default=None, help="A real MNIST you have (mnist.npz or IDX files); "
                                        "nothing is downloaded."),
        click.option("--warmup", "warmup_steps", type=click.IntRange(1, MAX_STEPS), default=5,
                     show_default=True, help="First steps excluded from the steady state."),
        click.option("--trace/--no-trace", default=True, show_default=True,
                     help="Record a profiler trace (detailed) or only step timers (cheap)."),
        click.option("--trace-steps", type=click.IntRange(1, MAX_STEPS), default=10,
                     show_default=True, help="Steps recorded by the profiler, right after warm-up: "
                     "they say where the time goes, the unprofiled steps how much (the default "
                     "is cut to the steps there are)."),
        click.option("--device", type=click.Choice(DEVICES), default="auto",
                     show_default=True),
        click.option("--out", "out_dir", type=click.Path(file_okay=False), default=DEFAULT_OUT,
                     show_default=True, help="Folder that receives the run directories."),
        click.option("--quiet", "-q", is_flag=True, help="No progress messages."),
    ]

    @functools.wraps(command)
    def checked(**kwargs):
        _check_lengths(kwargs)
        return command(**kwargs)
    return functools.reduce(lambda c, option: option(c), reversed(options), checked)


def _check_lengths(settings: dict) -> None:
    """Refuses contradictory step counts before anything runs (one line, exit 2). A trace
    window the user asked for is never cut short; only the default one is fitted to --steps."""
    from gapscope.workloads.settings import RunSettings
    ctx = click.get_current_context()
    if (ctx.get_parameter_source("trace_steps") == click.core.ParameterSource.DEFAULT
            and settings.get("epochs") is None):
        room = settings["steps"] - max(1, settings["warmup_steps"])
        settings["trace_steps"] = max(1, min(settings["trace_steps"], room))
    RunSettings(workload="", framework="", trace=settings.get("trace", True), **{
        k: settings[k] for k in ("steps", "epochs", "warmup_steps", "trace_steps")
        if k in settings}).check_lengths()


@cli.command()
@click.argument("workload")
@click.option("--framework", type=click.Choice(("torch", "keras", "keras-torch", "keras-jax", "tf")),
              default=None, help="torch; keras (Keras 3 on TF); keras-torch (Keras 3 on torch); "
                                  "keras-jax (Keras 3 on JAX, extra [jax]); tf (raw TensorFlow loop).")
@run_options
@size_options
@click.option("--nproc", type=int, default=1, show_default=True,
              help="Processes (ranks) on this node: more than 1 trains with DistributedDataParallel "
                   "under torchrun (gloo on CPU, NCCL on GPU), each rank on --batch-size samples "
                   "per step, into one job directory with a run per rank.")
@click.option("--nnodes", type=int, default=1, show_default=True,
              help="Nodes of the job (run the same command on each, with its --node-rank).")
@click.option("--node-rank", type=int, default=0, show_default=True,
              help="This node's rank, 0 to --nnodes - 1; node 0 writes the job manifest.")
@click.option("--rdzv-endpoint", default=None,
              help="HOST:PORT where node 0 meets the others (default with one node: a free port here).")
@click.option("--job-id", default=None,
              help="Name every node gives the job (also torchrun's --rdzv-id); needed with --nnodes > 1.")
@format_option()
@legend_option
@wide_option
def run(workload, framework, fmt, quiet, no_legend, **settings):
    """Run WORKLOAD once in a new run directory and print its breakdown.

    \b
    Example:
      gapscope run mlp --framework keras --steps 100 --trace-steps 30
      gapscope run cnn --framework torch --nproc 2
    """
    from gapscope.workloads.registry import FRAMEWORKS, get_workload
    get_workload(workload)  # 'unknown workload' first: a missing --framework is the lesser news
    if framework is None:
        raise GapscopeInputError(f"--framework is required: {', '.join(FRAMEWORKS)}")
    outcomes = _run_all(workload, [framework], quiet, settings)
    if settings["node_rank"] > 0:  # node 0 finishes the job and has every rank to break down
        click.echo(f"node {settings['node_rank']}: its ranks ended; node 0 writes the job manifest")
        return
    _print_breakdowns(outcomes, fmt, no_legend)
    if quiet and fmt == "table":  # nothing else said where the run went; last, for `tail -1`
        click.echo(f"run: {outcomes[0].run_dir}")


@cli.command()
@run_options
@size_options
@format_option()
@legend_option
@wide_option
def demo(fmt, quiet, no_legend, **settings):
    """Run the MLP in PyTorch and in Keras/TF and print both breakdowns side by side.

    \b
    Example:
      gapscope demo --steps 100
    """
    outcomes = _run_all("mlp", ["torch", "keras"], quiet, settings)
    _print_breakdowns(outcomes, fmt, no_legend)


def _run_all(workload: str, frameworks: list[str], quiet: bool, settings: dict):
    from gapscope.profilers.nvml import gpu_count
    from gapscope.profilers.run_dir import ensure_out_dir
    from gapscope.workloads.launch import launch
    from gapscope.workloads.progress import run_progress
    from gapscope.workloads.registry import get_workload
    from gapscope.workloads.settings import RunSettings
    get_workload(workload)  # refuse an unknown name before any progress message
    all_settings = [RunSettings(workload=workload, framework=framework,
                                **{k: v for k, v in settings.items() if k != "out_dir"})
                    for framework in frameworks]
    for run_settings in all_settings:  # every variant refused before anything is written
        run_settings.with_variant(cuda_available=gpu_count() > 0)
    ensure_out_dir(settings["out_dir"])  # and an --out that cannot be written
    _warn_oversubscribed(settings.get("nproc") or 1)
    outcomes = []
    for framework, run_settings in zip(frameworks, all_settings):
        total = None if run_settings.epochs else run_settings.steps
        _say(quiet, f"running {workload} on {framework} "
                    f"({f'{run_settings.epochs} epochs' if total is None else f'{total} steps'})...")
        with run_progress(f"{workload} {framework}", total, quiet) as on_steps:
            outcome = launch(run_settings, settings["out_dir"], on_steps)
        _say(quiet, f"  {outcome.status}: {outcome.run_dir}")
        outcomes.append(outcome)
    failed = [o for o in outcomes if o.status != "complete"]
    for outcome in failed:
        click.echo(f"gapscope: run {outcome.run_dir.name} failed: {outcome.error}", err=True)
    if failed and len(failed) == len(outcomes):
        sys.exit(EXIT_BAD_INPUT if all(o.exit_code == EXIT_BAD_INPUT for o in failed)
                 else EXIT_RUN_FAILED)
    return outcomes


def _print_breakdowns(outcomes, fmt: str, no_legend: bool = False) -> None:
    from gapscope.analysis.results.distributed_breakdown import breakdown_of
    from gapscope.analysis.model.job import is_job
    from gapscope.analysis.model.locate import locate
    complete = [o for o in outcomes if o.status == "complete"]
    places = [locate(o.run_dir) for o in complete]
    runs = [p for p in places if not is_job(p)]
    jobs = [p for p in places if is_job(p)]  # --nproc N: the job across its ranks
    if runs or not jobs:
        click.echo(registry.BREAKDOWN[fmt].render([breakdown_of(p) for p in runs],
                                                  **_breakdown_options(fmt, no_legend)), nl=False)
    if jobs:
        click.echo(registry.JOB_BREAKDOWN[fmt].render([breakdown_of(p) for p in jobs]), nl=False)
    if len(complete) < len(outcomes):
        sys.exit(EXIT_RUN_FAILED)


@cli.command()
@click.argument("name", required=False)
@click.option("--file", "matrix_file", type=click.Path(dir_okay=False), default=None,
              help="Your own matrix TOML (the bundled ones' format) instead of NAME.")
@click.option("--list", "list_matrices", is_flag=True, help="List the named matrices.")
@click.option("--steps", type=click.IntRange(2, MAX_STEPS), default=50, show_default=True,
              help="Steps per row (ignored with --epochs).")
@click.option("--epochs", type=click.IntRange(1, MAX_EPOCHS), default=None,
              help="Whole epochs per row, as the blog ran (41 epochs of 60,000 images).")
@click.option("--warmup", "warmup_steps", type=click.IntRange(1, MAX_STEPS), default=5,
              show_default=True)
@click.option("--trace-steps", type=click.IntRange(1, MAX_STEPS), default=10, show_default=True,
              help="Steps each row's profiler records, for its phase breakdown.")
@click.option("--device", type=click.Choice(DEVICES), default="auto",
              show_default=True)
@click.option("--data", "data_path", type=click.Path(exists=True), default=None,
              help="A real MNIST you have (mnist.npz or IDX files).")
@size_options
@click.option("--baseline", default=None, help="Row id the step-time ratios refer to.")
@click.option("--repeats", type=click.IntRange(1, 50), default=1, show_default=True,
              help="Runs of every row, interleaved (row 1, row 2, ..., row 1, row 2, ...), each "
                   "a fresh process; the ratios then carry 95 % intervals.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=DEFAULT_OUT,
              show_default=True, help="Folder that receives <matrix>/ with one run per row.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@format_option(registry.MATRIX)
@wide_option
def matrix(name, matrix_file, list_matrices, baseline, repeats, out_dir, quiet, fmt, **settings):
    """Run the named matrix NAME (or --file PATH), each row in its own process, and print its
    table. The runs go to --out/<matrix name>/.

    Resumes: rows already complete in --out with the same settings are not run again. A
    failing row is recorded with its reason and the others go on; Ctrl-C stops the matrix,
    the row in flight recorded as interrupted.

    \b
    Example:
      gapscope matrix --list
      gapscope matrix seed-4060ti --steps 50 --format markdown
      gapscope matrix --file my-matrix.toml --steps 20
      gapscope matrix seed-examples --steps 40 --repeats 3
    """
    from gapscope.workloads.matrix import load_matrix, load_matrix_file, matrix_names
    if name and matrix_file:
        raise GapscopeInputError("give a matrix NAME or --file PATH, not both")
    if list_matrices or not (name or matrix_file):
        from gapscope.analysis.renderers.fit import Page
        page = Page()  # descriptions wrap under themselves, within 80 columns
        for matrix_name in matrix_names():
            loaded = load_matrix(matrix_name)
            page.line(f"{matrix_name:<20} {len(loaded.rows):>3} rows  {loaded.description}", hang=30)
        click.echo(page.text(), nl=False)
        return
    from gapscope.analysis.results.matrix_results import UNANALYSABLE, matrix_result
    from gapscope.profilers.run_dir import ensure_out_dir
    from gapscope.workloads.matrix import record_row_failures, run_matrix
    from gapscope.workloads.progress import matrix_progress
    from gapscope.workloads.settings import RunSettings
    _check_lengths(settings)
    loaded = load_matrix_file(matrix_file) if matrix_file else load_matrix(name)
    if baseline is not None and baseline not in {row.id for row in loaded.rows}:
        raise GapscopeInputError(f"no row {baseline!r} in matrix {loaded.name}")  # before running
    base = RunSettings(workload="", framework="", **settings)
    ensure_out_dir(Path(out_dir) / loaded.name)  # before the progress bar starts
    with matrix_progress(loaded, quiet, repeats) as on_row:
        outcomes = run_matrix(loaded, Path(out_dir), base, on_row, repeats)
    result = matrix_result(loaded, outcomes, baseline)
    unanalysable = {row.id: row.reason for row in result.rows
                    if row.status == "failed" and (row.reason or "").startswith(UNANALYSABLE)}
    record_row_failures(loaded, Path(out_dir), unanalysable)
    for row_id, reason in unanalysable.items():
        _say(quiet, f"  {row_id}: failed ({reason})")
    click.echo(registry.MATRIX[fmt].render(result), nl=False)
    if any(row.status == "failed" for row in result.rows):
        sys.exit(EXIT_RUN_FAILED)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--source", type=click.Choice(("auto", "timers", "trace", "compensated")),
              default="auto", show_default=True,
              help="auto: step time from unprofiled steps, each phase from the step timers where "
                   "they see it, else from the trace with the profiler's cost taken out; "
                   "timers: step timers only; trace: the trace as recorded (profiler cost inside); "
                   "compensated: every phase from the compensated trace.")
@click.option("--quiet", "-q", is_flag=True,
              help="No progress messages (as run and compare take it; breakdown prints none).")
@session_option
@format_option()
@legend_option
@layers_option
@wide_option
@trace_rules_options
@engine_options
def breakdown(paths, source, fmt, quiet, no_legend, session, layers):
    """Per-phase breakdown of PATHS: run directories, folders of runs, matrix folders, folders or
    trace files (.pt.trace.json[.gz] from any torch.profiler run, or .xplane.pb).

    A folder of runs breaks down every run that finished and lists the others (exit 1).

    \b
    Example:
      gapscope breakdown traces/mlp-torch-default-* --format markdown
    """
    from gapscope.analysis.model.locate import nested_folders
    from gapscope.analysis.model.run import expand_runs
    from gapscope.api import breakdowns, breakdowns_json
    _check_layers_format(layers, fmt)
    entries = expand_runs(paths) if session is None else _session_entries(paths, session)
    results, jobs, problems, layer_results = breakdowns(entries, source, layers)
    if fmt == "json":
        if results or jobs:
            click.echo(breakdowns_json(results, jobs, layer_results if layers else None), nl=False)
    else:
        if results:
            options = _breakdown_options(fmt, no_legend)
            click.echo(registry.BREAKDOWN[fmt].render(results, **options), nl=False)
            if layers:
                click.echo(registry.LAYERS[fmt].render(layer_results), nl=False)
        if jobs:
            click.echo(registry.JOB_BREAKDOWN[fmt].render(jobs), nl=False)
    for problem in problems:
        click.echo(f"gapscope: skipped {problem}", err=True)
    for path in paths:
        for folder, kind in nested_folders(path):
            click.echo(f"gapscope: note: {folder} is {kind}, not broken down with the runs "
                       f"beside it: gapscope breakdown {folder}", err=True)
    if problems:
        sys.exit(EXIT_RUN_FAILED)


@cli.command("capture")
@click.argument("target", required=False)
@click.option("--pid", type=click.IntRange(1), default=None,
              help="The running job: a torch loop under gapscope.capture, or a Lightning or "
                   "Hugging Face Trainer fit under gapscope's callback.")
@click.option("--steps", type=click.IntRange(1, MAX_STEPS), default=10, show_default=True,
              help="With --pid: how many of its next steps to trace.")
@click.option("--timeout", "timeout_s", type=_FiniteRange(1, 24 * 3600), default=600,
              show_default=True, help="With --pid: seconds to wait for the window.")
@click.option("--duration", "duration_s", type=_FiniteRange(0.01, 600), default=2.0, show_default=True,
              help="With grpc:// TARGET: seconds to trace.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=DEFAULT_OUT,
              show_default=True, help="With grpc:// TARGET: where the profile's folder goes.")
@click.option("--step-marker", default=None, metavar="NAME",
              help="As for breakdown: the range or op that marks a step in the trace; without "
                   "step markers the traced window is one step.")
@format_option()
@legend_option
@wide_option
@click.pass_context
def capture_command(ctx, target, pid, steps, timeout_s, duration_s, out_dir, step_marker, fmt,
                    no_legend):
    """Trace a running job now and print the breakdown: with --pid, the next STEPS steps of a
    gapscope-instrumented torch job, against its own unprofiled steps (the job pays one flag
    check per step until asked); with grpc://host:port (several: comma-separated), DURATION
    seconds of a TensorFlow job that started tf.profiler.experimental.server.

    \b
    Examples:
      gapscope capture --pid 12345 --steps 10
      gapscope capture grpc://localhost:6009 --duration 2
    """
    if (target is None) == (pid is None):
        raise GapscopeInputError("give either --pid PID (a gapscope-instrumented torch job) or "
                                 "grpc://host:port (a TensorFlow profiler server), not both or neither")
    if target is not None:
        from gapscope.ondemand.tf_client import trace_servers
        window = trace_servers(target, duration_s, out_dir)
        click.echo(f"gapscope: traced {target} for {duration_s:g} s into {window}", err=True)
    else:
        from gapscope.ondemand.ask import WindowNotTraced, ask_window, window_note
        from gapscope.ondemand.registry import MAX_WINDOW_STEPS
        if steps > MAX_WINDOW_STEPS:
            click.echo(f"gapscope: note: --steps {steps} capped at {MAX_WINDOW_STEPS}: the profiler "
                       "holds a window's every event in memory until it ends (ask again for more)",
                       err=True)
            steps = MAX_WINDOW_STEPS
        try:
            window = ask_window(pid, steps, timeout_s)
        except WindowNotTraced as exc:
            click.echo(f"gapscope: {exc}", err=True)
            sys.exit(EXIT_RUN_FAILED)
        click.echo(f"gapscope: process {pid} traced its window into {window}", err=True)
        note = window_note(window, steps)
        if note:
            click.echo(f"gapscope: note: {note}", err=True)
    ctx.invoke(breakdown, paths=(str(window),), fmt=fmt, no_legend=no_legend, step_marker=step_marker)


@cli.command()
@click.argument("run_dir", type=click.Path())
@click.option("--once", is_flag=True, help="Print the run's state now and exit.")
@click.option("--interval", "interval_s", type=_FiniteRange(0.1, 60), default=1.0, show_default=True,
              help="Seconds between looks.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="table: refreshed in place on a terminal, a line per step "
                                      "when piped; json: the state at each look.")
def watch(run_dir, once, interval_s, fmt):
    """Follow RUN_DIR's steps.csv as the run appends to it (about once a second): phases per
    step, step time, the steady mean so far and whether other processes take the cores.

    \b
    Example:
      gapscope watch traces/my-run-torch-user-20261127-013210-a2ae
    """
    from gapscope.watch.follow import follow
    console = None
    if sys.stdout.isatty():
        from rich.console import Console
        console = Console()
    follow(Path(run_dir), once=once, interval_s=interval_s, fmt=fmt, echo=click.echo, console=console)


@cli.command()
@click.argument("runs", nargs=-1, required=True)
@click.option("--measure", is_flag=True,
              help="RUNS are configurations WORKLOAD:FRAMEWORK[:VARIANT] to run now, interleaved "
                   "A B, B A, ..., each repeat a fresh process, into one A/B folder under --out.")
@click.option("--repeats", type=click.IntRange(1, 200), default=None,
              help="With --measure: runs of each configuration [default: 5, enough to tell a "
                   "20 % gap from noise here; with --precision the most, default 50].")
@click.option("--precision", type=PERCENT, default=None, metavar="PCT",
              help="With --measure: add interleaved repeats until every ratio's 95 % interval "
                   "is within ±PCT (e.g. 3%), or --budget is spent; says why it stopped.")
@click.option("--budget", type=_FiniteRange(0.5, 24 * 60), default=None, metavar="MINUTES",
              help="With --precision: time the measurement may take [default: 10].")
@click.option("--steps", type=click.IntRange(2, MAX_STEPS), default=60, show_default=True,
              help="With --measure: steps per run (warm-up and traced steps included).")
@click.option("--warmup", "warmup_steps", type=click.IntRange(1, MAX_STEPS), default=5,
              show_default=True, help="With --measure: first steps excluded from the steady state.")
@click.option("--trace-steps", type=click.IntRange(1, MAX_STEPS), default=10, show_default=True,
              help="With --measure: steps each run's profiler records, for the evidence.")
@click.option("--device", type=click.Choice(DEVICES), default="auto",
              show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=DEFAULT_OUT,
              show_default=True, help="With --measure: folder that receives the A/B folder.")
@click.option("--check-suggestions", is_flag=True,
              help="Measure each suggested variant against the configuration it changes (A/B, "
                   "--repeats interleaved runs of --steps into --out) and say whether it helped.")
@click.option("--different-workloads", is_flag=True,
              help="Compare runs of different workloads (or own loops captured under different "
                   "names) on purpose.")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages.")
@click.option("--verbose", "-v", is_flag=True,
              help="The table format's evidence too: the phase table, host vs device time, "
                   "evidence per run and the runs' notes (default: the gap, its top phases and "
                   "causes).")
@click.option("--memory", is_flag=True,
              help="Lead with the memory gap: who holds more at the end of forward, at the "
                   "step's peak, in resident memory (the JSON has it in each comparison).")
@format_option(registry.COMPARE)
@layers_option
@wide_option
@trace_rules_options
@engine_options
def compare(runs, measure, repeats, precision, budget, out_dir, check_suggestions,
            different_workloads, quiet, verbose, fmt, layers, memory, **settings):
    """Compare RUNS of one workload: the unprofiled step time of each with its 95 % interval,
    per phase the delta to the first run (the baseline) with its interval, then the evidence
    behind the biggest deltas (kernel counts, fusion, dispatch, transfers, compile).

    RUNS are run directories, or one A/B folder, or with --measure configurations to run now.
    Between two ordinary runs the interval is the noise within each run only; --measure
    repeats both, interleaved, and the interval includes the drift between processes.
    Exit 3 (INCONCLUSIVE, no verdict and no suggestion) when other processes took the cores
    while a run ran.

    \b
    Example:
      gapscope compare traces/mlp-torch-default-* traces/mlp-torch-compile-* \\
          --format markdown
      gapscope compare --measure cnn:keras cnn:torch --repeats 5
      gapscope compare --measure cnn:keras cnn:torch --precision 3% --budget 10
    """
    from gapscope.analysis.results.measured import compare_measurement
    from gapscope.analysis.model.job import is_job
    from gapscope.analysis.model.locate import locate
    from gapscope.analysis.model.run import is_measurement
    from gapscope.api import precision_note, runs_comparison
    if precision is not None and not measure:
        raise GapscopeInputError("--precision goes with --measure")
    if budget is not None and precision is None:
        raise GapscopeInputError("--budget goes with --precision (a budget for reaching it)")
    budget = 10.0 if budget is None else budget
    _check_layers_format(layers, fmt)
    from gapscope.workloads.ab import DEFAULT_REPEATS
    repeats = repeats or (50 if precision is not None else DEFAULT_REPEATS)
    stopped: list[str] = []
    if measure:
        _check_lengths(settings)
        runs = [str(_measure(runs, repeats, out_dir, quiet, settings, precision=precision,
                             budget_s=budget * 60, stopped=stopped))]
    measured = len(runs) == 1 and is_measurement(runs[0])
    places = [] if measured else [locate(r) for r in runs]  # each run's manifest read here, once
    if measured:
        comparison = compare_measurement(runs[0])
        precision_note(comparison, precision, stopped)
    elif any(is_job(p) for p in places):
        _compare_scaling(places, fmt)
        return
    else:
        comparison = runs_comparison(places, different_workloads)
    if check_suggestions:
        _check_suggestions(comparison, repeats, out_dir, quiet, settings)
    options = {"verbose": verbose} if fmt == "table" else {}  # the other formats hold it all
    if memory and fmt in ("table", "markdown"):
        from gapscope.analysis.results.memory.gap import memory_lines
        click.echo("\n".join(memory_lines(comparison)) + "\n")
    click.echo(registry.COMPARE[fmt].render(comparison, **options), nl=False)
    if layers and fmt != "json":  # the JSON holds each run's layers and the cause's layer
        sides = [(comparison.runs[0].layers, run.layers) for run in comparison.runs[1:]]
        click.echo(registry.LAYERS_COMPARE[fmt].render(sides), nl=False)
    for warning in comparison.warnings:
        if fmt != "table":  # the table prints its warnings itself
            click.echo(f"gapscope: warning: {warning}", err=True)
    if comparison.inconclusive:
        sys.exit(EXIT_INCONCLUSIVE)


def _check_layers_format(layers: bool, fmt: str) -> None:
    if layers and fmt not in registry.LAYERS:
        raise GapscopeInputError("--layers goes with --format table, markdown or json, "
                                 f"not {fmt}")


def _compare_scaling(paths, fmt: str) -> None:
    """A run (or job) against a job: scaling efficiency and where the step gap went."""
    from gapscope.analysis.results.breakdown import breakdown as breakdown_run
    from gapscope.analysis.results.distributed_breakdown import job_breakdown
    from gapscope.analysis.model.job import batch_size, is_job, load_job
    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.results.scaling import job_side, run_side, scaling
    if len(paths) != 2:
        raise GapscopeInputError("compare of a distributed job takes two: the baseline "
                                 "(e.g. the 1-process run) and the job")
    if fmt not in registry.SCALING:
        raise GapscopeInputError(f"--format {fmt} is not available for a scaling comparison")
    sides = []
    for path in paths:
        if is_job(path):
            job = load_job(path)
            jb = job_breakdown(job)
            sides.append(job_side(jb, job.batch_size, jb.threads))
        else:
            run = load_run(path)
            sides.append(run_side(breakdown_run(run), batch_size(run),
                                  threads_of(run.manifest)))
    result = scaling(*sides)
    click.echo(registry.SCALING[fmt].render(result), nl=False)
    for warning in result.warnings:
        if fmt != "table":
            click.echo(f"gapscope: warning: {warning}", err=True)


def _check_suggestions(comparison, repeats: int, out_dir: str, quiet: bool, settings: dict) -> None:
    """Each suggestion is a hypothesis: measured as an A/B of its current configuration against
    the suggested one. One that cannot run here (a GPU variant on a CPU) is said, not fatal."""
    from gapscope.analysis.results.suggestions import measured
    _check_lengths(settings)
    for pair in comparison.pairs:
        for suggestion in pair.suggestions:
            _say(quiet, f"checking {suggestion.suggested} against {suggestion.current}...")
            try:
                folder = _measure([suggestion.current, suggestion.suggested], repeats, out_dir,
                                  quiet, settings, failed_is_fatal=False)
            except GapscopeInputError as exc:
                folder, problem = None, str(exc)
            else:
                problem = "a run failed (see above)"
            if folder is None:
                comparison.warnings.append(f"{suggestion.suggested} not checked: {problem}")
                continue
            suggestion.check = measured(folder)


def _measure(specs, repeats: int, out_dir: str, quiet: bool, settings: dict,
             failed_is_fatal: bool = True, precision: float | None = None,
             budget_s: float = 600.0, stopped: list[str] | None = None) -> Path | None:
    """The A/B folder; a failed run ends the command, or with `failed_is_fatal` False is
    said and gives None. With `precision`, rounds go on until analysis.results.precision says stop;
    its reason is said and appended to `stopped`."""
    from gapscope.api import measured_folder
    from gapscope.workloads.ab import RunFailed
    from gapscope.workloads.launch import RunInterrupted
    try:
        folder = measured_folder(list(specs), repeats, out_dir, settings,
                                 say=lambda message: _say(quiet, message),
                                 warn=lambda message: click.echo(f"gapscope: {message}", err=True),
                                 precision=precision, budget_s=budget_s, stopped=stopped)
    except RunFailed as exc:
        click.echo(f"gapscope: A/B measurement failed: {exc}", err=True)
        if failed_is_fatal:
            sys.exit(EXIT_RUN_FAILED)
        return None
    except RunInterrupted as stop:
        folder = getattr(stop, "ab_folder", None)
        if folder is not None:
            click.echo(f"gapscope: its complete runs are kept; resume with: gapscope compare "
                       f"--measure {folder}", err=True)
        raise
    return folder


@cli.command()
@click.argument("target")
@click.option("--baseline", "baseline_file", required=True, type=click.Path(dir_okay=False),
              help="The stored baseline (JSON): read, or written with --save.")
@click.option("--save", is_flag=True,
              help="Measure TARGET and store it as the baseline (an existing file is kept).")
@click.option("--save-busy", is_flag=True,
              help="With --save: store the baseline even if other processes took the cores "
                   "while it was measured (every check against it is then inconclusive).")
@click.option("--threshold", type=PERCENT, default="5%", show_default=True,
              help="A regression is slower than the baseline by more than this, beyond noise.")
@click.option("--repeats", type=click.IntRange(2, 200), default=5, show_default=True,
              help="Fresh processes measuring TARGET.")
@click.option("--config", "config_label", default=None,
              help="With an A/B folder as TARGET: which configuration of it (default: the "
                   "baseline's, or the first when saving).")
@click.option("--steps", type=click.IntRange(2, MAX_STEPS), default=60, show_default=True,
              help="Steps per run (warm-up included); no profiler runs.")
@click.option("--warmup", "warmup_steps", type=click.IntRange(1, MAX_STEPS), default=5,
              show_default=True, help="First steps excluded from the steady state.")
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=DEFAULT_OUT,
              show_default=True, help="Folder that receives the measurement's runs.")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages.")
@click.option("--format", "fmt", type=click.Choice(["line", "json"]), default="line",
              show_default=True)
def check(target, baseline_file, save, save_busy, threshold, repeats, config_label, out_dir, quiet,
          fmt, **settings):
    """Regression check for CI: TARGET's step time against a stored baseline. Exit 1 when it is
    slower by more than --threshold and the 95 % interval of the ratio excludes no change
    (the two-level interval of `compare --measure`); exit 3 when other processes took the
    cores meanwhile (no verdict is a fact then); exit 0 otherwise, also when faster.

    TARGET is a configuration WORKLOAD:FRAMEWORK[:VARIANT], measured now in --repeats fresh
    processes without a profiler, or an A/B folder whose runs are reused.

    \b
    Example:
      gapscope check cnn:torch --baseline ci/cnn-torch.json --save
      gapscope check cnn:torch --baseline ci/cnn-torch.json --threshold 5%
      gapscope check traces/ab-cnn-20261125-1015-1a2b --baseline ci/cnn-torch.json
    """
    from gapscope.analysis.measures.reliability import busy_machine
    from gapscope.analysis.results.regression import Baseline, read_baseline
    from gapscope.api import check_of, check_runs, machine, process_means
    from gapscope.workloads.ab import RunFailed
    baseline_path = Path(baseline_file)
    if save_busy and not save:
        raise GapscopeInputError("--save-busy goes with --save")
    if save:
        _baseline_folder(baseline_path)  # before measuring: a minute's runs are not lost on it
    baseline = None if save else read_baseline(baseline_path)
    try:
        config, runs, run_settings = check_runs(target, config_label or (baseline and baseline.config),
                                                repeats, out_dir, settings,
                                                lambda message: _say(quiet, message))
    except RunFailed as exc:
        click.echo(f"gapscope: check failed: {exc}", err=True)
        sys.exit(EXIT_RUN_FAILED)
    if save:
        means, within, unreliable = process_means(runs)
        busy = any(busy_machine(run.manifest) for run in runs)
        from gapscope.profilers.run_dir import write_new
        if busy and not save_busy:
            # A step time measured beside other work is the neighbours' figure: stored, it
            # would poison every check after it (12.9 ms kept for a 1.7 ms step here).
            click.echo(f"gapscope: baseline not written: other processes took the cores while "
                       f"{config} was measured; measure on a quiet machine, or --save-busy to "
                       "keep it (every check against it is then inconclusive)", err=True)
            sys.exit(EXIT_INCONCLUSIVE)
        # Kept with its busy mark: every check against a busy machine's baseline is inconclusive.
        stored = Baseline(config, means, within, run_settings, machine(), busy)
        # Created exclusively: of two saves at once, the second is refused, not told "written".
        write_new(baseline_path, (strict_json.dumps(stored.to_json_dict(), indent=2) + "\n").encode(),
                  exists=_KEPT_BASELINE)
        click.echo(f"baseline written: {baseline_path} ({config}: {sum(means) / len(means):.3f} ms, "
                   f"{len(means)} repeats)")
        for warning in unreliable + (["checks against this baseline are inconclusive: record "
                                      "it again on a quiet machine"] if busy else []):
            click.echo(f"gapscope: warning: {warning}", err=True)
        return
    result = check_of(baseline, config, runs, threshold)
    if fmt == "json":
        click.echo(strict_json.dumps(result.to_json_dict(), indent=2))
    else:
        click.echo(result.line())
        for warning in result.warnings:
            click.echo(f"gapscope: warning: {warning}", err=True)
    sys.exit(result.exit_code)


def _baseline_folder(path: Path) -> None:
    """The folder a new baseline goes to, made where missing; one line where it cannot be (a
    file in the way) or the baseline exists already."""
    if os.path.lexists(path):
        raise GapscopeInputError(f"{path}: exists; {_KEPT_BASELINE}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        # mkdir says "File exists" for a file where a folder is wanted: name the file.
        in_way = next((p for p in (path.parent, *path.parent.parents)
                       if os.path.lexists(p) and not p.is_dir()), None)
        why = f"{in_way} is a file" if in_way is not None else exc.strerror or exc
        raise GapscopeInputError(f"{path}: cannot save a baseline there ({why})") from None


_KEPT_BASELINE = "remove it or name another to --save"


@cli.command()
@click.argument("workload")
@click.option("--framework", "configs", default=None,
              help="Comma-separated FRAMEWORK[:VARIANT], two or more: torch,keras or "
                   "torch:compile,keras:jit. The ratios refer to the first.")
@click.option("--batch-size", "batch_sizes", default=None,
              help="Batch sizes to sweep, e.g. 16,64,256,1024.")
@click.option("--width", "widths", default=None,
              help="Hidden-width multipliers to sweep, e.g. 0.5,1,2,4 (parameters in the JSON).")
@click.option("--repeats", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Interleaved runs of every configuration at every point.")
@click.option("--steps", type=click.IntRange(2, MAX_STEPS), default=60, show_default=True)
@click.option("--warmup", "warmup_steps", type=click.IntRange(1, MAX_STEPS), default=5,
              show_default=True)
@click.option("--trace-steps", type=click.IntRange(1, MAX_STEPS), default=10, show_default=True)
@click.option("--device", type=click.Choice(DEVICES), default="auto", show_default=True)
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=DEFAULT_OUT,
              show_default=True, help="Folder that receives sweep-<workload>-<time>/.")
@click.option("--over-steps", type=click.IntRange(1, 10**9), default=None, metavar="N",
              help="Also compare whole runs of N steps, each configuration's compile included: "
                   "where compiling pays at each point.")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages.")
@format_option(registry.SWEEP)
@wide_option
def sweep(workload, configs, batch_sizes, widths, repeats, out_dir, over_steps, quiet, fmt,
          **settings):
    """Run WORKLOAD's configurations over batch sizes (or model widths), every point an
    interleaved A/B measurement, and report step time, samples/s and phase shares per point,
    each configuration's ratio to the first, and where it crosses 1 (who wins changes). A
    plot (sweep.png) goes into the sweep folder. `gapscope sweep FOLDER` reports one again.
    Exit 3 (INCONCLUSIVE, no verdict) when other processes took the cores meanwhile.

    \b
    Example:
      gapscope sweep mlp --framework torch,keras --batch-size 16,64,256,1024
      gapscope sweep cnn --framework torch,keras --width 0.5,1,2 --repeats 5
      gapscope sweep mlp --framework torch,torch:compile --batch-size 16,256 \\
          --over-steps 1000
    """
    from gapscope.analysis.renderers.sweep_render import plot
    from gapscope.analysis.results.sweep_results import sweep_result
    from gapscope.profilers.run_dir import SWEEP_STATE
    if (Path(workload) / SWEEP_STATE).is_file():
        folder = Path(workload)
    else:
        folder = _sweep(workload, configs, batch_sizes, widths, repeats, out_dir, quiet, settings)
    result = sweep_result(folder, over_steps)
    click.echo(registry.SWEEP[fmt].render(result), nl=False)
    _say(quiet, f"plot: {plot(result, folder / 'sweep.png')}")
    if result.gaps:  # an incomplete sweep is not a result to build on: said, and not rc 0
        click.echo(f"gapscope: sweep incomplete: {result.axis_name} "
                   f"{', '.join(f'{g.value:g}' for g in result.gaps)} without figures", err=True)
        sys.exit(EXIT_RUN_FAILED)
    if result.inconclusive:  # compare's gate: step times from a busy machine give no verdict
        if fmt != "table":
            click.echo(f"gapscope: warning: {result.inconclusive}", err=True)
        sys.exit(EXIT_INCONCLUSIVE)


def _sweep(workload, configs, batch_sizes, widths, repeats, out_dir, quiet, settings) -> Path:
    from gapscope.profilers.run_dir import ensure_out_dir
    from gapscope.workloads.ab import RunFailed
    from gapscope.workloads.registry import get_workload
    from gapscope.workloads.settings import RunSettings
    from gapscope.workloads.sweep import parse_values, sweep as run_sweep
    get_workload(workload)
    if (batch_sizes is None) == (widths is None):
        raise GapscopeInputError("sweep one axis: give --batch-size VALUES or --width VALUES")
    axis, text = ("batch_size", batch_sizes) if batch_sizes is not None else ("width", widths)
    values = parse_values(axis, text)
    entries = [c.strip() for c in (configs or "").split(",") if c.strip()]
    if len(entries) < 2:
        raise GapscopeInputError("a sweep compares two or more configurations: --framework torch,keras")
    _check_lengths(settings)
    ensure_out_dir(out_dir)

    def on_run(value, repeat, config, outcome):
        if outcome is None:
            _say(quiet, f"{axis.replace('_', ' ')} {value:g}, repeat {repeat + 1}/{repeats}: "
                        f"running {config.label}...")
    try:
        folder = run_sweep(workload, entries, axis, values, repeats,
                           RunSettings(workload="", framework="", **settings), out_dir, on_run)
    except RunFailed as exc:
        click.echo(f"gapscope: sweep failed: {exc}", err=True)
        sys.exit(EXIT_RUN_FAILED)
    _say(quiet, f"sweep folder: {folder}")
    return folder


@cli.command()
@click.argument("logdir", default=DEFAULT_OUT, type=click.Path())
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; loopback unless you mean to share it.")
@click.option("--port", type=click.IntRange(0, 65535), default=6006, show_default=True,
              help="0 picks a free port.")
@click.option("--with-torch-tb-profiler", "torch_tb_profiler", is_flag=True,
              help="Load torch-tb-profiler's tab too (off by default: offline it never renders).")
def tensorboard(logdir, host, port, torch_tb_profiler):
    """Open TensorBoard over LOGDIR on gapscope's own tab (breakdown, steps and compare of every
    run, offline), beside Scalars, Text and XProf's profile tab (its Trace Viewer shows gapscope's
    phase lines). Prints the URL of gapscope's tab; runs until Ctrl-C or SIGTERM.

    \b
    Example:
      gapscope tensorboard traces --port 6007
    """
    from gapscope.analysis.tensorboard.server import check_address, serve_forever
    if not Path(logdir).is_dir():
        raise GapscopeInputError(f"{logdir}: no such directory")
    check_address(host, port)
    serve_forever(logdir, host=host, port=port, announce=lambda url: click.echo(url),
                  warn=lambda message: click.echo(f"gapscope: {message}", err=True),
                  torch_tb_profiler=torch_tb_profiler)


@cli.command()
@click.argument("run", type=click.Path())
@click.option("--out", "out_file", type=click.Path(dir_okay=False), default=None,
              help="The JSON file (.json.gz: compressed; <host>.xplane.pb: an XSpace for XProf) "
                   "[default: <run>.phases.trace.json here].")
@click.option("--force", is_flag=True,
              help="Replace an --out file that exists (a symlink there is replaced, never written through).")
@session_option
@trace_rules_options
def trace(run, out_file, force, session):
    """Export RUN's trace as Chrome trace-event JSON for chrome://tracing and ui.perfetto.dev:
    gapscope's steps, one track per phase (the five add up to each step) and one of the
    run's layers (where it names them) above the trace's own events. RUN is a run
    directory, a folder with a trace, or a trace file.
    An --out ending in .xplane.pb gets an XSpace instead, with the steps, phases and layers as lines
    above the threads, for XProf's Trace Viewer (TensorBoard's Profile tab lists it under
    <logdir>/<run>/plugins/profile/<session>/). Prints the file written.

    \b
    Example:
      gapscope trace traces/<run-id> --out mlp-torch.trace.json
      gapscope trace user-profile \\
          --out user-profile/plugins/profile/gapscope/me.xplane.pb
    """
    import gzip

    from gapscope.analysis.renderers.traces import trace_events, xspace
    from gapscope.analysis.model.run import load_run
    from gapscope.analysis.results.layers import run_layer_spans
    from gapscope.profilers.run_dir import ensure_out_dir, write_atomic, write_new
    if out_file:
        _refuse_existing(Path(out_file), force)  # before the work, not after it
    loaded = load_run(run if session is None else _session_entries([run], session)[0].place)
    if loaded.trace is None:
        raise GapscopeInputError(f"{run}: holds no trace file (run with --trace)")
    if not loaded.timeline.steps:
        raise GapscopeInputError(f"{loaded.trace_file}: no training steps found")
    out = Path(out_file or f"{loaded.run_id.split('.')[0]}.phases.trace.json")
    _refuse_existing(out, force)
    ensure_out_dir(out.parent)  # one line before the work, as run, matrix and report do
    if out.name.endswith(".xplane.pb"):  # the profile plugin reads the host from the name
        data = xspace.render(loaded.trace, loaded.timeline, out.name[:-len(".xplane.pb")],
                             run_layer_spans(loaded))
    else:
        from gapscope.analysis.results.memory.figures import allocator_events
        text = trace_events.render(loaded.trace, loaded.timeline, loaded.label, run_layer_spans(loaded),
                                   allocator_events(loaded)[0])  # counter tracks of memory
        data = gzip.compress(text.encode()) if out.name.endswith(".gz") else text.encode()
    # Atomic either way: --force replaces the name (a symlink's target is never written); without
    # it a file that appeared meanwhile is not overwritten.
    (write_atomic if force else write_new)(out, data)
    click.echo(str(out))


def _refuse_existing(out: Path, force: bool) -> None:
    if out.is_dir():
        raise GapscopeInputError(f"--out {out}: is a folder; name a file")
    if not force and (out.exists() or out.is_symlink()):
        raise GapscopeInputError(f"--out {out}: exists; use --force to replace it")


@cli.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path())
@click.option("--out", "out_file", type=click.Path(dir_okay=False),
              default="gapscope-report/report.md", show_default=True,
              help="The Markdown report; the .html copy and the plots (.png, .svg) go beside it.")
@click.option("--source", type=click.Choice(("auto", "trace", "timers")), default="auto",
              show_default=True, help="Trace (sees inside compiled steps) or step timers.")
@click.option("--baseline", default=None,
              help="Run the speed ratios refer to: label, run id, matrix row id or path "
                   "(default: the first).")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages.")
@trace_rules_options
@engine_options
def report(runs, out_file, source, baseline, quiet):
    """Write a report on RUNS (run directories, folders of runs, a matrix folder): environment,
    breakdown tables, comparison, and plots of the phases, the step time over each run and
    the speed ratios. Prints the paths of the files written.

    \b
    Example:
      gapscope report traces/mlp-torch-default-* traces/mlp-keras-default-* \\
          --out report/mlp.md
    """
    from rich.console import Console

    from gapscope.analysis.report import write_report
    console = Console(stderr=True, quiet=quiet, highlight=False)
    files = write_report(runs, out_file, source, baseline,
                         progress=lambda message: console.print(f"{message}...", markup=False))
    for path in files.all:
        click.echo(str(path))
    for run in files.problems:
        click.echo(f"gapscope: run {run.label} has no results: {run.problem}", err=True)
    if files.problems:
        sys.exit(EXIT_RUN_FAILED)


@cli.command("mcp")
@click.option("--root", required=True, type=click.Path(file_okay=False),
              help="The only folder the server writes in (runs, A/B folders); relative paths "
                   "the tools are given start there.")
def mcp_command(root):
    """Serve gapscope to an AI agent: a Model Context Protocol server on stdin/stdout with the
    tools list_workloads, run, breakdown, compare (and measure), check, layers, compile_why and
    memory, each returning the command's JSON with its verdict. Needs the `mcp` extra.

    \b
    Example (an MCP client's configuration starts it):
      gapscope mcp --root ~/gapscope-runs
    """
    try:
        from gapscope.agent.server import serve
    except ImportError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in ("mcp", "mcp_types", "anyio", "pydantic"):
            raise
        raise GapscopeInputError(f"gapscope mcp needs the MCP SDK ({missing} is missing): "
                                 "pip install 'gapscope[mcp]'") from None
    serve(root)


def main():
    from gapscope.analysis.model.own_process import no_huge_page_stalls
    no_huge_page_stalls()
    cli(prog_name="gapscope")


if __name__ == "__main__":
    main()
