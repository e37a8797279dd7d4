"""The agent tools' work: each the CLI's `--format json` document (built by the same calls) with the
verdict state as fields and a short text; plain Python, so the server only wires it to MCP."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from gapscope.profilers.errors import EXIT_INCONCLUSIVE, GapscopeInputError

# progress(done, total, message): runs or steps done so far, for MCP progress notifications.
Progress = Callable[[float, float | None, str], None]


def _no_progress(done: float, total: float | None, message: str) -> None:
    pass


@dataclass
class Answer:
    """One tool's answer. `document` is what `gapscope <command> --format json` prints (parsed);
    `verdict`, `inconclusive` and `reason` the state an agent branches on; `text` a few lines."""

    verdict: str
    document: dict | list
    text: str
    inconclusive: bool = False
    reason: str | None = None
    exit_code: int = 0
    extra: dict = field(default_factory=dict)

    def to_json_dict(self) -> dict:
        return {"verdict": self.verdict, "inconclusive": self.inconclusive, "reason": self.reason,
                "exit_code": self.exit_code, "text": self.text, **self.extra, "json": self.document}


def writable(root: Path, out: str) -> Path:
    """`out` (relative to `root`, or absolute) with symlinks and `..` resolved, refused unless it
    lies inside `root`: the only folder this server writes in. A symlink made inside it later
    is not watched: give the server a folder only you write in."""
    base = root.resolve()
    target = (base / out).resolve()
    if not target.is_relative_to(base):
        raise GapscopeInputError(f"{out}: outside the folder this server writes in ({base})")
    return target


def list_workloads() -> Answer:
    """`gapscope list --format json --no-parameters`."""
    from gapscope.workloads.catalog import catalog
    entries = catalog(count_parameters=False)
    names = ", ".join(w["name"] for w in entries["workloads"])
    return Answer("listed", entries, f"workloads: {names}; frameworks: {', '.join(entries['frameworks'])}")


def run(root: Path, workload: str, framework: str, variant: str = "default", steps: int = 60,
        warmup: int = 5, trace_steps: int | None = None, device: str = "auto", out: str = ".",
        progress: Progress = _no_progress) -> Answer:
    """`gapscope run WORKLOAD --framework F --variant V --steps N --format json`, into `out`
    under `root`; the run directory in `run_dir`."""
    from gapscope.analysis.model.locate import locate
    from gapscope.analysis.renderers import registry
    from gapscope.analysis.results.distributed_breakdown import breakdown_of
    from gapscope.api import run_length
    from gapscope.profilers.nvml import gpu_count
    from gapscope.profilers.run_dir import ensure_out_dir
    from gapscope.workloads.launch import launch
    from gapscope.workloads.registry import check_framework, get_workload
    from gapscope.workloads.settings import RunSettings
    out_dir = writable(root, out)
    get_workload(workload)
    check_framework(framework)
    settings = RunSettings(workload=workload, framework=framework, variant=variant,
                           **run_length(steps, warmup, trace_steps, device))
    settings.with_variant(cuda_available=gpu_count() > 0)  # refused before anything is written
    ensure_out_dir(out_dir)
    label = f"{workload} {framework}"
    progress(0, steps, f"{label}: starting")
    outcome = launch(settings, out_dir, lambda done: progress(done, steps, f"{label}: steps"))
    if outcome.status != "complete":
        raise GapscopeInputError(f"run {outcome.run_dir.name} failed: {outcome.error}")
    result = breakdown_of(locate(outcome.run_dir))
    answer = _breakdown_answer([result], json.loads(registry.BREAKDOWN["json"].render([result])))
    answer.extra["run_dir"] = str(outcome.run_dir)
    return answer


def breakdown(paths: list[str], source: str = "auto", layers: bool = False) -> Answer:
    """`gapscope breakdown PATHS --format json` (with `layers`: `--layers`)."""
    from gapscope.analysis.model.run import expand_runs
    from gapscope.api import breakdowns, breakdowns_json
    results, jobs, problems, layer_results = breakdowns(expand_runs(paths), source, layers)
    if not results and not jobs:
        raise GapscopeInputError(f"nothing could be broken down: {problems[0]}")
    document = json.loads(breakdowns_json(results, jobs, layer_results if layers else None))
    answer = _breakdown_answer(results, document)
    if layers:
        answer.text += "".join(f"\n{found.label}: {len(found.rows)} layers" for found in layer_results)
    if problems:
        answer.extra["skipped"] = problems
        answer.exit_code = 1
    return answer


def _breakdown_answer(results, document) -> Answer:
    """A breakdown's state: inconclusive where a run ran on a busy machine (its figures are the
    neighbours' as much as its own), else measured; the text a line per run."""
    from gapscope.analysis.measures.reliability import is_load_warning
    busy = [w for b in results for w in b.reliability_warnings if is_load_warning(w)]
    lines = []
    for b in results:
        doc = b.to_json_dict()
        phases = {p: f["ms"] for p, f in doc["phases"].items() if f["ms"] is not None}
        top = max(phases, key=phases.get) if phases else None
        step = doc["step_ms"]["mean"]
        lines.append((f"{b.name}: {step:.3f} ms a step" if step is not None else f"{b.name}: no step time")
                     + (f"; most in {top} ({phases[top]:.3f} ms)" if top else ""))
    if busy:
        lines.append(f"INCONCLUSIVE: {busy[0]}")
    return Answer("inconclusive" if busy else "measured", document, "\n".join(lines),
                  inconclusive=bool(busy), reason=busy[0] if busy else None)


def layers(paths: list[str], source: str = "auto") -> Answer:
    """`gapscope breakdown --layers PATHS --format json`: each run's `layers`."""
    return breakdown(paths, source, layers=True)


def compile_why(paths: list[str]) -> Answer:
    """Each run's `compile` object of `gapscope breakdown --format json` (Dynamo's stages, graph
    breaks, recompiles; TF's traces and retraces), with its compile line."""
    from gapscope.analysis.model.run import expand_runs
    from gapscope.api import breakdowns
    results, _, problems, _ = breakdowns(expand_runs(paths))
    if not results:
        raise GapscopeInputError(f"no run to read: {problems[0]}" if problems else "no run to read")
    runs = [{"run_id": b.run_id, "label": b.name,
             "compile": b.compile_why.to_json_dict() if b.compile_why else None} for b in results]
    lines = [f"{b.name}: {b.compile_why.line()}" if b.compile_why else
             f"{b.name}: no compile record (an eager run, or recorded before compile.json)"
             for b in results]
    answer = _breakdown_answer(results, {"runs": runs})
    answer.text = "\n".join(lines + [answer.text.splitlines()[-1]] if answer.inconclusive else lines)
    return answer


def memory(paths: list[str]) -> Answer:
    """One run: its `memory` object of `breakdown --format json` with its notes. Two or more: the
    memory gap of each against the first, `comparisons[].memory` of `compare --format json`,
    with the lines `compare --memory` leads with."""
    if len(paths) >= 2:
        from gapscope import api
        from gapscope.analysis.results.memory.gap import memory_lines
        comparison = api.compare(*paths)
        answer = _compare_answer(comparison)
        memories = [{"a": c["a"], "b": c["b"], "memory": c.get("memory")}
                    for c in answer.document["comparisons"]]
        answer.text = "\n".join(memory_lines(comparison)
                                + ([f"INCONCLUSIVE: {answer.reason}"] if answer.inconclusive else []))
        answer.document = {"comparisons": memories}
        return answer
    from gapscope.analysis.model.run import expand_runs
    from gapscope.api import breakdowns
    results, _, _, _ = breakdowns(expand_runs(paths))
    runs = [{"run_id": b.run_id, "label": b.name,
             "memory": b.memory.to_json_dict() if b.memory is not None else None} for b in results]
    answer = _breakdown_answer(results, {"runs": runs})
    lines = [f"{b.name}: {line}" for b in results
             for line in (b.memory.lines() if b.memory is not None else ["no memory figures"])]
    answer.text = "\n".join(lines + ([answer.reason] if answer.inconclusive else []))
    return answer


def compare(runs: list[str], different_workloads: bool = False) -> Answer:
    """`gapscope compare RUNS --format json`: run directories (the first the baseline) or one
    A/B folder."""
    from gapscope import api
    return _compare_answer(api.compare(*runs, different_workloads=different_workloads))


def measure(root: Path, configs: list[str], repeats: int | None = None,
            precision: float | None = None, budget_minutes: float | None = None, steps: int = 60,
            warmup: int = 5, trace_steps: int | None = None, device: str = "auto", out: str = ".",
            progress: Progress = _no_progress) -> Answer:
    """`gapscope compare --measure CONFIGS --format json` (with `precision`: `--precision`, and
    `budget_minutes`: `--budget`), into an A/B folder under `out` inside `root`."""
    from gapscope import api
    from gapscope.analysis.model.run import is_measurement
    from gapscope.profilers.run_dir import ensure_out_dir
    out_dir = writable(root, out)
    if len(configs) == 1 and is_measurement(root / configs[0]):  # resumed: it is written in
        configs = [str(writable(root, configs[0]))]
    if budget_minutes is not None and precision is None:
        raise GapscopeInputError("budget_minutes goes with precision (a budget for reaching it)")
    ensure_out_dir(out_dir)
    comparison = api.measure(*configs, repeats=repeats, precision=precision,
                             budget=10.0 if budget_minutes is None else budget_minutes,
                             steps=steps, warmup=warmup, trace_steps=trace_steps, device=device,
                             out=out_dir, progress=progress)
    return _compare_answer(comparison)


def _compare_answer(comparison) -> Answer:
    from gapscope.analysis.renderers import compare_json, evidence_text
    from gapscope.analysis.renderers.compare_columns import verdict_lines
    state = comparison.verdict
    lines = verdict_lines(comparison)
    for pair in comparison.pairs:  # none on a busy machine: a suggestion drawn from noise misleads
        lines += [evidence_text.suggestion(s) for s in pair.suggestions]
    document = json.loads(compare_json.render(comparison))
    return Answer(state.verdict, document, "\n".join(lines), state.inconclusive, state.reason,
                  EXIT_INCONCLUSIVE if comparison.inconclusive else 0)


def check(root: Path, target: str, baseline: str, threshold: float = 0.05, repeats: int = 5,
          config: str | None = None, steps: int = 60, warmup: int = 5, device: str = "auto",
          out: str = ".") -> Answer:
    """`gapscope check TARGET --baseline FILE --format json`: TARGET (a configuration measured now
    into `out` inside `root`, or an A/B folder) against the stored baseline."""
    from gapscope import api
    from gapscope.analysis.results.regression import Verdict
    out_dir = writable(root, out)
    result = api.check(target, baseline, threshold, repeats, config, steps, warmup, device, out_dir)
    inconclusive = result.verdict == Verdict.INCONCLUSIVE
    reason = next((w for w in result.warnings if "busy" in w), "busy machine") if inconclusive else None
    return Answer(str(result.verdict), result.to_json_dict(), result.line(), inconclusive, reason,
                  result.exit_code)
