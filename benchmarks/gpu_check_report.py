"""Writes benchmarks.gpu_check's result as gpu_check.json and gpu_check.md: failures first, then every check of every run."""
from __future__ import annotations

from pathlib import Path

from benchmarks.gpu_checks import STATUSES
from gapscope.profilers import strict_json
from gapscope.profilers.run_dir import write_atomic

REPORT_JSON, REPORT_MD = "gpu_check.json", "gpu_check.md"


def write_reports(report: dict, folder: Path) -> list[Path]:
    json_path, md_path = folder / REPORT_JSON, folder / REPORT_MD
    write_atomic(json_path, strict_json.dumps(report, indent=1) + "\n")
    write_atomic(md_path, markdown(report))
    return [json_path, md_path]


def _rows(report: dict):
    """(run id, check) for every check of every run and probe, in order."""
    for entry in report["runs"] + report["probes"]:
        for check in entry["checks"]:
            yield entry, check


def markdown(report: dict) -> str:
    versions = report.get("versions") or {}
    counts = {s: 0 for s in STATUSES}
    for _, check in _rows(report):
        counts[check["status"]] = counts.get(check["status"], 0) + 1
    lines = ["# gapscope GPU check", "",
             f"Device: {report.get('device') or 'none'}; " + ", ".join(f"{k} {v}" for k, v in versions.items() if v),
             f"{len(report['runs'])} runs in {report.get('wall_s')} s (budget {report.get('budget_s')} s): "
             f"{counts['pass']} checks passed, {counts['fail']} failed, {counts['not judged']} not judged "
             f"(busy machine), {counts['skip']} skipped.", "",
             f"NVTX: {report.get('nvtx_method')}.", f"Other paths: {report.get('other_paths')}.", ""]
    failed = [(e, c) for e, c in _rows(report) if c["status"] == "fail"]
    not_run = [e for e in report["runs"] if e.get("status") == "skipped"]
    if failed or not_run:
        lines += ["## What failed, and why", ""]
        lines += [f"- **{e['id']}** {c['name']}: {_cell(c['detail'])}" for e, c in failed]
        lines += [f"- **{e['id']}** not run: {e.get('error')}" for e in not_run]
        lines.append("")
        for e in report["runs"]:
            if e.get("log_tail"):  # the run folders stay on the device: its last words come here
                lines += [f"`{e['id']}` run.log, last lines:", "", "```", *e["log_tail"], "```", ""]
    lines += ["## Every check", "", "| run | variant | check | result | detail |", "|---|---|---|---|---|"]
    for entry, check in _rows(report):
        lines.append(f"| {entry['id']} | {entry.get('variant', '')} | {check['name']} | {check['status']} "
                     f"| {_cell(check['detail'])} |")
    lines += ["", "## Runs", "", "| run | covers | status | wall s | kernels/step | run directory |",
              "|---|---|---|---|---|---|"]
    for e in report["runs"]:
        lines.append(f"| {e['id']} | {_cell(e.get('covers', ''))} | {e.get('status')} | {e.get('wall_s', '')} "
                     f"| {e.get('kernels_per_step') if e.get('kernels_per_step') is not None else ''} "
                     f"| {e.get('run_dir', '')} |")
    return "\n".join(lines) + "\n"


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
