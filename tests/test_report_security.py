"""The report is meant to be shared: nothing that came from a run becomes markup or a link in
report.html, and a matrix state file cannot lead the report outside the matrix folder."""
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.model import run as model_run
from gapscope.analysis.model.locate import Place
from gapscope.cli import cli

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(2)>"
LINK = "[click](javascript:alert(3))"
SVG = "<svg onload=alert(4)>"


class _Markup(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, name, value or "") for name, value in attrs]


def _run_dir(folder, name, fixtures_dir, **manifest):
    run = folder / name
    run.mkdir(parents=True)
    shutil.copy(fixtures_dir / "marked_two_steps.pt.trace.json", run / "w.1.pt.trace.json")
    doc = {"run_id": name, "status": "complete", "workload": "mlp", "framework": "torch",
           "variant": "default", "device": "cpu", **manifest}
    (run / "manifest.json").write_text(json.dumps(doc))
    return run


@pytest.fixture
def hostile_runs(tmp_path, fixtures_dir):
    first = _run_dir(tmp_path, "r1", fixtures_dir, variant=SCRIPT + LINK, device=IMG,
                     host=SVG, versions={"torch": SCRIPT})
    # A second trace file, newer, with markup in its name: the note says which file was used.
    evil_trace = first / f"{SVG}.pt.trace.json"
    shutil.copy(first / "w.1.pt.trace.json", evil_trace)
    failed = _run_dir(tmp_path, "r2", fixtures_dir, status="failed", error=IMG + SCRIPT)
    second = _run_dir(tmp_path, "r3", fixtures_dir, variant=IMG)
    return [first, failed, second]


def test_report_html_escapes_everything_that_came_from_a_run(hostile_runs, tmp_path):
    out = tmp_path / "report" / "r.md"
    result = CliRunner().invoke(cli, ["report", *map(str, hostile_runs), "--out", str(out)])
    assert result.exit_code == 1, result.output  # the failed run is listed, the others reported
    page = out.with_suffix(".html").read_text()
    markup = _Markup()
    markup.feed(page)
    assert "script" not in markup.tags and "svg" not in markup.tags
    assert not [a for a in markup.attrs if a[1].startswith("on")]
    assert not [a for a in markup.attrs if a[1] == "href"]
    assert all(value.startswith("data:image/png;base64,") for tag, name, value in markup.attrs
               if name == "src")
    # The text is still there, shown as text.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;img src=x onerror=alert(2)&gt;" in page
    assert "&lt;svg onload=alert(4)&gt;" in page
    assert markup.tags.count("img") == page.count("data:image/png;base64,") >= 2  # the plots, embedded


def test_report_markdown_holds_no_markup_from_a_run(hostile_runs, tmp_path):
    out = tmp_path / "report" / "r.md"
    CliRunner().invoke(cli, ["report", *map(str, hostile_runs), "--out", str(out)])
    text = out.read_text()
    assert "<" not in text and ">" not in text  # GitHub and editors render raw HTML in Markdown
    assert text.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 2
    assert "&lt;img src=x onerror=alert(2)&gt;" in text and "&lt;svg onload=alert(4)&gt;" in text


def test_report_follows_matrix_entries_only_inside_the_matrix_folder(tmp_path, fixtures_dir, monkeypatch):
    matrix = tmp_path / "matrix"
    _run_dir(matrix, "good-run", fixtures_dir)
    _run_dir(tmp_path, "outside", fixtures_dir, variant="ESCAPED")  # must never be reported
    rows = {"good": {"status": "complete", "run_dir": "good-run"},
            "etc": {"status": "complete", "run_dir": "/etc"},
            "up": {"status": "complete", "run_dir": "../outside"},
            "abs": {"status": "complete", "run_dir": str(tmp_path / "outside")}}
    (matrix / "matrix.json").write_text(json.dumps({"rows": rows}))
    located = []
    real_locate = model_run.locate  # where every named path is located, once
    monkeypatch.setattr(model_run, "locate", lambda p: located.append(p) or real_locate(p))
    out = tmp_path / "report" / "r.md"
    result = CliRunner().invoke(cli, ["report", str(matrix), "--out", str(out)])
    assert result.exit_code == 1, result.output
    paths = [Path(p) for p in located if not isinstance(p, Place)]  # a Place: located already
    assert paths and all(p.parent == matrix for p in paths if p != matrix), paths
    text = out.read_text()
    assert "ESCAPED" not in text and "good" in text
    for row in ("etc", "outside"):  # each named as the folder inside the matrix it would be
        assert f"{matrix / row}: no such file or directory" in text
    assert "run etc has no results" in result.output and "run up has no results" in result.output


@pytest.mark.parametrize("command", [["breakdown"], ["compare"]])
def test_every_markdown_format_holds_no_markup_from_a_run(hostile_runs, command):
    """Issue 47 item 8: `breakdown --format markdown` emitted 15 raw <img onerror=...> tags
    from run metadata, while report.md escaped them."""
    runs = [str(r) for r in hostile_runs if r.name != "r2"]
    result = CliRunner().invoke(cli, [*command, *runs, "--format", "markdown"])
    assert result.exit_code in (0, 3), result.output
    markup = _Markup()
    markup.feed(result.stdout)
    assert markup.tags == [] and "<" not in result.stdout
    assert "&lt;img src=x onerror=alert(2)&gt;" in result.stdout
