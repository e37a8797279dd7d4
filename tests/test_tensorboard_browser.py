"""TensorBoard over runs made through the API, checked in a real (headless) Chromium: gapscope's
own tab (what it draws, what it requests, what it logs), the phase scalars, the breakdown table in
the Text dashboard, both profiler tabs and XProf's Trace Viewer on the torch run. Screenshots are
kept as test artefacts."""
from __future__ import annotations

import json
import os
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import pytest

import h200_runs
import user_loops
from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.results.compare import compare
from gapscope.analysis.results.explain import explain
from gapscope.analysis.renderers import evidence_text
from gapscope.analysis.model.run import load_run
from gapscope.analysis.tensorboard.server import TensorBoardServer
from browser import HeadlessChromium, ensure_chromium
from gapscope.profilers.phases import PHASES

# A torch.profiler trace written by no gapscope code; named to sort after the gapscope runs, so
# that torch-tb-profiler (which shows its first run) still opens on the torch run.
FOREIGN = "user-profile"

# Text of every table cell on the page, through shadow roots.
_CELLS = """(() => {
  const cells = [];
  const walk = (node) => {
    if (!node) return;
    if (node.nodeName === 'TD' || node.nodeName === 'TH') cells.push(node.textContent.trim());
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const child of node.childNodes) walk(child);
  };
  walk(document.documentElement);
  return cells;
})()"""


# Width and height of every chart canvas or SVG drawn on the page (through shadow roots); null
# while there is none.
_CHART_SIZES = """(() => {
  const sizes = [];
  const walk = (node) => {
    if (!node) return;
    if (node.nodeName === 'CANVAS' || node.nodeName === 'svg') {
      const box = node.getBoundingClientRect();
      if (node.nodeName === 'CANVAS' || box.width > 100) sizes.push([box.width, box.height]);
    }
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const child of node.childNodes) walk(child);
  };
  walk(document.documentElement);
  const drawn = sizes.filter(([width, height]) => width > 0 && height > 0);
  return drawn.length ? drawn : null;
})()"""


# Source and text of each plugin iframe (same origin, so its document is readable).
_FRAMES = """(() => {
  const frames = [];
  const text = (node, out) => {
    if (!node || ['SCRIPT', 'STYLE'].includes(node.nodeName)) return;
    if (node.nodeType === Node.TEXT_NODE) out.push(node.textContent);
    if (node.shadowRoot) text(node.shadowRoot, out);
    for (const child of node.childNodes) text(child, out);
  };
  const walk = (node) => {
    if (!node) return;
    if (node.nodeName === 'IFRAME' && node.contentDocument) {
      const out = [];
      text(node.contentDocument.documentElement, out);
      frames.push({src: node.src, text: out.join(' ').replace(/\\s+/g, ' ')});
    }
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const child of node.childNodes) walk(child);
  };
  walk(document.documentElement);
  return frames;
})()"""


@pytest.fixture(scope="module")
def chromium():
    path = ensure_chromium()
    if path is None:
        pytest.skip("Chromium is missing and could not be installed here (Debian's `chromium` "
                    "package needs apt-get run as root)")
    return path


# The value of a function of gapscope's plugin document (its iframe, same origin), or null
# while TensorBoard has not made the iframe yet.
_IN_GAPSCOPE = """(() => {
  const find = (node) => {
    if (!node) return null;
    if (node.nodeName === 'IFRAME' && (node.src || '').endsWith('name=gapscope')) return node;
    for (const child of [node.shadowRoot, ...node.childNodes]) {
      const found = find(child);
      if (found) return found;
    }
    return null;
  };
  const frame = find(document.documentElement);
  if (!frame || !frame.contentDocument || !frame.contentDocument.body) return null;
  return (%s)(frame.contentDocument);
})()"""


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("tensorboard_runs")
    user_loops.torch_loop(logdir)
    user_loops.keras_fit(logdir)
    user_loops.torch_profiler_tutorial(logdir / FOREIGN)
    return logdir


@pytest.fixture(scope="module")
def server(logdir):
    """torch-tb-profiler loaded (`--with-torch-tb-profiler`), to check what its tab shows."""
    with TensorBoardServer(logdir, ready_timeout=60, torch_tb_profiler=True) as server:
        yield server


@pytest.fixture(scope="module")
def tensorboard(logdir, server):
    torch_run, = (p.name for p in logdir.glob("user-mlp-torch-*"))
    keras_run, = (p.name for p in logdir.glob("user-mlp-keras-*"))
    return server.url, torch_run, keras_run


@pytest.fixture(scope="module")
def browser(chromium, tensorboard):
    with HeadlessChromium(chromium) as page:
        page.watch()
        yield page


@pytest.fixture(scope="module")
def artefacts(tmp_path_factory) -> Path:
    """Screenshots go to $GAPSCOPE_TEST_ARTEFACTS when set (kept after the run), else to a
    temporary folder."""
    folder = os.environ.get("GAPSCOPE_TEST_ARTEFACTS")
    if not folder:
        return tmp_path_factory.mktemp("screenshots")
    Path(folder).mkdir(parents=True, exist_ok=True)
    return Path(folder)


def screenshot(browser, folder: Path, name: str) -> Path:
    path = browser.screenshot(folder / f"{name}.png")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000, (path, len(data))
    return path


def fixed(value: float, digits: int = 3) -> str:
    """A figure as the page writes it (JavaScript's toFixed: ties away from zero)."""
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def signed(value: float, digits: int = 3) -> str:
    return ("+" if value > 0 else "") + fixed(value, digits)


def open_fresh(browser, url: str) -> None:
    """A full page load (not a hash change), with the events of earlier pages forgotten."""
    browser.open("about:blank")
    browser.clear_events()
    browser.open(url)


def wait_for_value(browser, expression: str, timeout: float = 90):
    """The first truthy value of a JavaScript expression in the page."""
    deadline = time.monotonic() + timeout
    while True:
        value = browser.evaluate(expression)
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the page never satisfied {expression}; it shows "
                               f"{browser.text()[:1500]}")
        time.sleep(0.5)


def wait_in_gapscope(browser, function: str, timeout: float = 90):
    """The first truthy value of `function` (of the plugin's document)."""
    return wait_for_value(browser, _IN_GAPSCOPE % function, timeout)


def assert_offline_and_clean(browser, url: str) -> None:
    """Every request went to this TensorBoard and succeeded; nothing gapscope runs logged an
    error or threw."""
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    requests = browser.requests()
    assert any("/data/plugin/gapscope/" in r["url"] for r in requests.values())
    outside = [r["url"] for r in requests.values()
               if not r["url"].startswith((origin + "/", "data:", "blob:", "about:"))]
    assert outside == []
    failed = [r for r in requests.values() if r["failed"] or (r["status"] or 0) >= 400]
    assert failed == []
    mine = [e for e in browser.errors()
            if any("plugin/gapscope" in u for u in e["urls"]) or "gapscope" in e["text"]]
    assert mine == []


def test_gapscope_tab_shows_every_runs_breakdown_steps_and_the_compare(browser, tensorboard,
                                                                          logdir, artefacts):
    url, torch_run, keras_run = tensorboard
    names = (keras_run, torch_run, FOREIGN)  # the page's order: paths under the logdir
    docs = {name: breakdown(load_run(logdir / name)).to_json_dict() for name in names}
    open_fresh(browser, url + "#gapscope")
    # Each run's step mean, in the runs table and beside its bar; the phase names; the views.
    figures = [fixed(docs[name]["step_ms"]["mean"]) for name in names]
    browser.wait_for_text(["Phases per run", "Breakdown:", "Steps over time", "traced window",
                           *PHASES, *figures, "(baseline)", "add up to"], timeout=120)
    charts = wait_in_gapscope(browser, """(doc) => {
      const charts = [...doc.querySelectorAll('svg.chart')].map((svg) => {
        const box = svg.getBoundingClientRect();
        return {kind: svg.getAttribute('class').split(' ')[1], width: box.width,
                height: box.height, marks: svg.querySelectorAll('rect').length};
      });
      return charts.length >= 4 ? charts : null;
    }""")
    assert {c["kind"] for c in charts} >= {"overview", "breakdown", "steps", "deltas"}, charts
    assert all(c["width"] > 100 and c["height"] > 20 and c["marks"] > 0 for c in charts), charts
    # The first run is shown in detail: its step figure is the breakdown's step mean.
    shown = wait_in_gapscope(browser, "(doc) => doc.querySelector('td.step-mean')?.textContent")
    assert shown == fixed(docs[keras_run]["step_ms"]["mean"])
    # Under other, its parts as the JSON has them.
    parts = wait_in_gapscope(browser, """(doc) => [...doc.querySelectorAll('tr.other-part')].map(
      (tr) => [tr.children[0].textContent, tr.children[1].textContent])""")
    expected = docs[keras_run]["phases"]["other"]["parts"]
    assert expected and parts == [[f"· {k}", fixed(v)] for k, v in expected.items()]
    # Its kernels, compile, transfers and resources, as explain has them.
    evidence = explain(load_run(logdir / keras_run))
    kernels = wait_in_gapscope(browser, """(doc) => {
      const rows = [...doc.querySelectorAll('tr.top-kernel td.kernel-name')];
      return rows.length ? rows.map((td) => td.textContent) : null;
    }""")
    assert kernels == [w["name"] for w in evidence.kernels.top]
    facts = wait_in_gapscope(browser, """(doc) => ['compile', 'transfers', 'resources'].map(
      (kind) => doc.querySelector(`p.facts.${kind}`)?.textContent)""")
    assert f"first step {fixed(evidence.compile.first_step_ms)} ms" in facts[0]
    assert facts[1] == evidence.transfers.note and "CPU load mean" in facts[2]
    browser.evaluate(_IN_GAPSCOPE % "(doc) => doc.querySelector('[data-view=details]').scrollIntoView()")
    screenshot(browser, artefacts, "gapscope-details")
    browser.evaluate(_IN_GAPSCOPE % "(doc) => window.scrollTo(0, 0)")
    screenshot(browser, artefacts, "gapscope-overview")
    assert_offline_and_clean(browser, url)

    # A gapscope run in detail: warm-up, traced window and unprofiled steps from its steps.csv.
    run = load_run(logdir / torch_run)
    kinds = ["warm-up" if i < run.warmup_steps else "traced" if r["traced"] else "unprofiled"
             for i, r in enumerate(run.rows)]
    browser.evaluate(_IN_GAPSCOPE % f"""(doc) => doc.querySelector(
        'a.run-link[data-run="{torch_run}"]').click()""")
    browser.wait_for_text([f"Breakdown: {run.label}", *(f"{k} ({kinds.count(k)})" for k in set(kinds))],
                          timeout=60)
    drawn = wait_in_gapscope(browser, """(doc) => {
      const bars = [...doc.querySelectorAll('svg.steps rect.step')];
      return bars.length ? bars.map((bar) => bar.getAttribute('class').replace('step step-', '')) : null;
    }""")
    assert drawn == kinds
    assert wait_in_gapscope(browser, "(doc) => doc.querySelector('td.step-mean')?.textContent") == \
        fixed(docs[torch_run]["step_ms"]["mean"])
    browser.evaluate(_IN_GAPSCOPE % "(doc) => doc.querySelector('[data-view=steps]').scrollIntoView()")
    screenshot(browser, artefacts, "gapscope-steps")

    # The compare of the two traced gapscope runs (keras first by path: the baseline).
    compared = compare([explain(load_run(logdir / n)) for n in (keras_run, torch_run)])
    pair = compared.pairs[0]
    rows = wait_in_gapscope(browser, """(doc) => {
      const table = doc.querySelector('[data-view=compare] table');
      return table && [...table.querySelectorAll('tbody tr')].map(
          (tr) => [...tr.children].map((td) => td.textContent));
    }""")
    assert [r[0] for r in rows] == [*PHASES, "step (the gap)"]
    # Each Δ with its interval as the CLI's table writes it; no verdict under INCONCLUSIVE.
    from gapscope.analysis.renderers.compare_columns import phase_rows
    assert [r[3] for r in rows] == [r[3] for r in phase_rows(compared)[:len(rows)]]
    if pair.inconclusive:
        assert {r[5] for r in rows} == {"no verdict"}
    else:
        assert [r[5] for r in rows[:-1]] == [
            "within noise" if g.within_noise else "slower" if g.delta_ms > 0 else "faster"
            for g in pair.phases]
        assert rows[-1][5] == ("gap within noise" if pair.within_noise else
                               "slower" if pair.gap_ms > 0 else "faster")
    # The evidence reads as the CLI prints it (empty bullets once passed unnoticed).
    bullets = wait_in_gapscope(browser, """(doc) => [...doc.querySelectorAll(
      '[data-view=compare] ul.evidence li')].map((li) => li.textContent)""")
    assert pair.evidence and bullets == [evidence_text.sentence(e, pair) for e in pair.evidence]
    shown = browser.evaluate(_IN_GAPSCOPE % """(doc) => [...doc.querySelectorAll(
      '[data-view=compare] ul.suggestions li')].map((li) => li.textContent)""")
    assert shown == [evidence_text.suggestion(x) for x in pair.suggestions]
    browser.evaluate(_IN_GAPSCOPE % "(doc) => doc.querySelector('[data-view=compare]').scrollIntoView()")
    screenshot(browser, artefacts, "gapscope-compare")
    assert_offline_and_clean(browser, url)


# Per row of the phases-per-run chart: the summed width of its phase bars, in pixels.
_OVERVIEW_BARS = """(doc) => {
  const svg = doc.querySelector('svg.overview');
  if (!svg) return null;
  const rows = {};
  for (const rect of svg.querySelectorAll('rect.phase')) {
    const y = rect.getAttribute('y');
    rows[y] = (rows[y] || 0) + Number(rect.getAttribute('width'));
  }
  return {scale: svg.getAttribute('class').split(' ')[2],
          widths: Object.entries(rows).sort((a, b) => a[0] - b[0]).map(([, w]) => w)};
}"""


def test_the_printed_url_lands_on_the_gapscope_tab_and_the_chart_has_two_scales(
        browser, server, tensorboard, logdir, artefacts):
    """The URL `gapscope tensorboard` prints (server.landing_url) opens gapscope's tab, which
    says what the profiler tabs show offline; the phases-per-run chart draws the runs to scale
    or each as 100 % of its step, opening on shares when the steps are 10x apart or more."""
    url, torch_run, keras_run = tensorboard
    assert server.landing_url == url.rstrip("/") + "/#gapscope"
    open_fresh(browser, server.landing_url)
    browser.wait_for_text(["Phases per run", *server_tab_notes()], timeout=120)
    docs = [breakdown(load_run(logdir / name)).to_json_dict() for name in (keras_run, torch_run, FOREIGN)]
    steps = [doc["step_ms"]["mean"] for doc in docs]
    # What a bar holds: the phases, a negative `other` (noise) taking no room.
    held = [sum(max(0.0, doc["phases"][p]["ms"]) for p in PHASES) for doc in docs]
    default = "shares" if max(steps) / min(steps) > 10 else "time"
    shown = wait_in_gapscope(browser, _OVERVIEW_BARS)
    assert shown["scale"] == f"scale-{default}" and len(shown["widths"]) == 3
    screenshot(browser, artefacts, "tab-landing")
    for scale in ("shares", "time"):
        browser.evaluate(_IN_GAPSCOPE % f"""(doc) => doc.querySelector(
            'input[name=overview-scale][value={scale}]').click()""")
        shown = wait_in_gapscope(browser, _OVERVIEW_BARS.replace(
            "if (!svg)", f"if (!svg || !svg.classList.contains('scale-{scale}'))"))
        # A step is 560 px: every run's in shares; to scale, the slowest's, the others in proportion.
        expected = [560.0 * h / (s if scale == "shares" else max(steps)) for h, s in zip(held, steps)]
        assert shown["widths"] == pytest.approx(expected, rel=1e-3), scale
    assert_offline_and_clean(browser, url)


def server_tab_notes() -> list[str]:
    from gapscope.analysis.tensorboard.server import tab_notes
    return tab_notes(True)


def test_scalars_dashboard_shows_phase_scalars_of_both_runs(browser, tensorboard, artefacts):
    url, torch_run, keras_run = tensorboard
    open_fresh(browser, url + "#scalars")
    text = browser.wait_for_text([torch_run, keras_run, "step_ms", "loss",
                                  *(f"phase_ms/{p}" for p in ("data_load", "forward", "backward",
                                                              "optimizer", "other"))], timeout=60)
    assert "No scalar data was found" not in text
    # Charts are drawn after the tags are listed.
    assert wait_for_value(browser, _CHART_SIZES, timeout=60)
    screenshot(browser, artefacts, "scalars")


def test_text_dashboard_shows_the_breakdown_table(browser, tensorboard, artefacts):
    url, torch_run, keras_run = tensorboard
    open_fresh(browser, url + "#text")
    browser.wait_for_text(["breakdown", "ms per steady-state step"], timeout=60)
    # The runs' tables are drawn one after the other (a loaded machine read the page between
    # them): wait for the header of each.
    headers = ["user-mlp torch user ms", "user-mlp keras user ms"]
    cells = wait_for_value(browser, f"(() => {{ const cells = {_CELLS}; return "
                           f"{json.dumps(headers)}.every(h => cells.includes(h)) ? cells : null; }})()",
                           timeout=60)
    screenshot(browser, artefacts, "text")
    # Markdown rendered as tables, one per run: the phases and the step are cells.
    for cell in ("phase", "data_load", "forward", "backward", "optimizer", "other", "step"):
        assert cells.count(cell) >= 2, (cell, cells[:40])


@pytest.mark.parametrize("tab,shows", [
    ("pytorch_profiler", ["Overview"]),
    ("profile", ["XProf", "Overview Page", "Sessions (3)"]),
])
def test_profiler_tabs_open_on_the_runs(browser, tensorboard, tab, shows):
    """Each plugin's own page (an iframe) opens on the torch run: torch-tb-profiler on its trace,
    XProf (which lists sessions in reverse name order) on the XSpace gapscope wrote of it, with
    the Keras run's TF profile session and gapscope's copy of it with the phase lines beside it."""
    url, torch_run, keras_run = tensorboard
    run = torch_run
    browser.open(f"{url}#{tab}")
    browser.wait_for_text([*shows, run], timeout=90)
    frames = browser.evaluate(_FRAMES)
    mine = [f for f in frames if f["src"].endswith(f"name={tab}")]
    assert mine, frames
    assert run in mine[0]["text"] and all(s in mine[0]["text"] for s in shows), mine[0]["text"][:1000]


# The value of a function of XProf's page (the Profile tab's iframe, same origin), or null while
# TensorBoard has not made the iframe yet.
_IN_XPROF = _IN_GAPSCOPE.replace("name=gapscope", "name=profile")

# Picks `value` in the select of XProf's side panel whose heading starts with `label` ("Sessions",
# "Tools"): true once the select shows it; null while it does not (the option is clicked then).
_CHOOSE = """(doc) => {
  const item = [...doc.querySelectorAll('.item-container')]
      .find((node) => node.textContent.trim().startsWith(%s));
  const select = item && item.querySelector('mat-select');
  if (!select) return null;
  if (select.textContent.trim() === %s) return true;
  select.click();
  const option = [...doc.querySelectorAll('mat-option')].find((o) => o.textContent.trim() === %s);
  if (option) option.click();
  return null;
}"""

# What XProf's Trace Viewer (catapult, in an iframe of XProf's page) has loaded and drawn: per
# process its name and threads (name, id, slice titles in time order), the track headings from
# top to bottom with their height, and the size of each canvas; null until its model is loaded
# and its tracks drawn.
_TRACE_VIEWER = """(() => {
  const docs = [];
  const frames = (node) => {
    if (!node) return;
    if (node.nodeName === 'IFRAME' && node.contentDocument) {
      docs.push(node.contentDocument);
      frames(node.contentDocument.documentElement);
    }
    if (node.shadowRoot) frames(node.shadowRoot);
    for (const child of node.childNodes) frames(child);
  };
  frames(document.documentElement);
  const doc = docs.find((d) => d.querySelector('tf-trace-viewer'));
  const viewer = doc && doc.querySelector('tf-trace-viewer');
  if (!viewer || !viewer._model || viewer._isLoading) return null;
  const processes = viewer._model.getAllProcesses().map((p) => ({
    name: p.name,
    threads: Object.values(p.threads).map((t) => ({
      name: t.name, tid: t.tid,
      slices: [...t.sliceGroup.slices].sort((a, b) => a.start - b.start).map((s) => s.title)})),
  }));
  const headings = [], canvases = [];
  const walk = (node) => {
    if (!node) return;
    const box = node.getBoundingClientRect && node.getBoundingClientRect();
    if (node.nodeName === 'TR-UI-B-HEADING' && node.textContent.trim())
      headings.push([node.textContent.replace('\\u25be', '').trim(), box.top, box.height]);
    if (node.nodeName === 'CANVAS') canvases.push([box.width, box.height]);
    if (node.shadowRoot) walk(node.shadowRoot);
    for (const child of node.childNodes) walk(child);
  };
  walk(doc.documentElement);
  // The model loads before the tracks are laid out: until a canvas is sized past the browser's
  // default 300x150, nothing has been drawn yet (a slow machine shows that state for a while).
  if (!canvases.some(([width, height]) => width > 302 || height > 150)) return null;
  return {processes, headings, canvases, url: doc.location.href};
})()"""


def test_profile_tab_trace_viewer_draws_the_torch_run_with_its_phase_line(browser, tensorboard,
                                                                         logdir, artefacts):
    """XProf lists the XSpace gapscope wrote at the end of the torch run, and its Trace Viewer
    (offline: no request leaves this TensorBoard) draws the step and phase lines above the
    run's thread, with the phases of every traced step."""
    url, torch_run, keras_run = tensorboard
    shown = open_trace_viewer(browser, url, f"{torch_run}/gapscope")
    (host,) = [p for p in shown["processes"] if p["name"].endswith("/host:CPU")]
    threads = sorted(host["threads"], key=lambda t: t["tid"])
    assert [t["name"] for t in threads[:2]] == ["Steps", "gapscope phases"]
    timeline = load_run(logdir / torch_run).timeline
    indices = range(len(timeline.steps))
    assert threads[0]["slices"] == [f"step {timeline.step_number(i)}" for i in indices]
    assert threads[1]["slices"] == [phase for i in indices for _, _, phase in timeline.covering(i)]
    assert len(threads) > 2 and all(t["name"].startswith("thread ") for t in threads[2:])
    # Drawn, in that order from the top: the track headings, and slices on a canvas.
    drawn = [name for name, top, height in sorted(shown["headings"], key=lambda h: h[1]) if height > 0]
    assert drawn[:3] == ["Steps", "gapscope phases", threads[2]["name"]], drawn
    assert any(width > 500 and height > 100 for width, height in shown["canvases"]), shown["canvases"]
    screenshot(browser, artefacts, "xprof-trace-viewer-torch")


def test_profile_tab_trace_viewer_draws_the_keras_run_with_its_phase_line(browser, tensorboard,
                                                                         logdir, artefacts):
    """The TF profiler's own XSpace of the Keras run with gapscope's lines added (session
    `gapscope`): the step and phase lines above TF's threads, TF's step markers ("train <n>")
    and ops kept."""
    url, torch_run, keras_run = tensorboard
    shown = open_trace_viewer(browser, url, f"{keras_run}/gapscope")
    (host,) = [p for p in shown["processes"] if p["name"].endswith("/host:CPU")]
    threads = sorted(host["threads"], key=lambda t: t["tid"])
    assert [t["name"] for t in threads[:2]] == ["Steps", "gapscope phases"]
    timeline = load_run(logdir / keras_run).timeline
    indices = range(len(timeline.steps))
    assert threads[1]["slices"] == [phase for i in indices for _, _, phase in timeline.covering(i)]
    steps = [name for t in threads[2:] for name in t["slices"] if name.startswith("train ")]
    assert len(steps) >= 4 and len(threads) > 4, host["threads"]
    drawn = [name for name, top, height in sorted(shown["headings"], key=lambda h: h[1]) if height > 0]
    assert drawn[:2] == ["Steps", "gapscope phases"], drawn
    assert any(width > 500 and height > 100 for width, height in shown["canvases"]), shown["canvases"]
    screenshot(browser, artefacts, "xprof-trace-viewer-keras")


def open_trace_viewer(browser, url: str, session: str) -> dict:
    """The Profile tab on `session`, its Trace Viewer loaded: what _TRACE_VIEWER reads of it.
    Offline: every request of the viewer went to this TensorBoard and succeeded."""
    open_fresh(browser, url + "#profile")
    for label, value in (("Sessions", session), ("Tools", "Trace Viewer")):
        value = json.dumps(value)
        wait_for_value(browser, _IN_XPROF % (_CHOOSE % (json.dumps(label), value, value)), timeout=120)
    shown = wait_for_value(browser, _TRACE_VIEWER, timeout=120)
    assert "trace_viewer_index.html" in shown["url"] and quote(session, safe="") in shown["url"]
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
    viewer = [r for r in browser.requests().values()
              if "trace_viewer" in r["url"] or "tag=trace_viewer" in unquote(r["url"])]
    assert viewer and all(r["url"].startswith(origin + "/") and r["status"] == 200 for r in viewer), viewer
    return shown


# Each row of a table of the plugin's page (`selector` names the rows), its cells' text; null
# while there is none.
_ROWS = """(doc) => {
  const rows = [...doc.querySelectorAll(%s)];
  return rows.length ? rows.map((tr) => [...tr.children].map((td) => td.textContent)) : null;
}"""


def _tick_only(browser, names: list[str]) -> None:
    """Compare exactly `names`, in that order (the first ticked is the baseline)."""
    for box in browser.evaluate(_IN_GAPSCOPE % """(doc) => [...doc.querySelectorAll(
        'input.compare-pick')].filter((b) => b.checked).map((b) => b.dataset.run)"""):
        browser.evaluate(_IN_GAPSCOPE % f"""(doc) => doc.querySelector(
            'input.compare-pick[data-run="{box}"]').click()""")
    for name in names:
        wait_in_gapscope(browser, f"""(doc) => {{
          const box = doc.querySelector('input.compare-pick[data-run="{name}"]');
          if (box && !box.checked) box.click();
          return box && box.checked;
        }}""")


def _route(url: str, route: str) -> dict:
    from urllib.request import urlopen
    with urlopen(f"{url.rstrip('/')}/data/plugin/gapscope/{route}", timeout=120) as answer:
        return json.loads(answer.read())


def test_layers_and_compile_views_render_the_figures_of_the_json(browser, tensorboard, logdir,
                                                                 torch_run, keras_run, artefacts):
    """Issues 31 and 32: the Layers view draws each layer's figures as /details holds them, and
    two runs' layers lined up as /compare holds them; the Compile view draws the compiled
    run's stages, its graph break with reason and line, and the pair's amortisation point."""
    import shutil
    from urllib.parse import urlencode

    from gapscope.workloads.launch import launch
    from gapscope.workloads.settings import RunSettings
    url = tensorboard[0]
    views = logdir / "views"  # under its own folder, taken away after: the tests above count runs
    try:
        for run in (torch_run, keras_run):
            shutil.copytree(run, views / run.name)
        h200 = f"views/{h200_runs.run_folder(views, 'compile').name}"
        dynamic = {}
        for variant in ("default", "compile"):
            outcome = launch(RunSettings("dynamic", "torch", variant=variant, steps=10,
                                         warmup_steps=3, trace_steps=3), views)
            assert outcome.status == "complete", outcome.error
            dynamic[variant] = f"views/{outcome.run_dir.name}"
        mlp = [f"views/{keras_run.name}", f"views/{torch_run.name}"]
        open_fresh(browser, url + "#gapscope")
        wait_in_gapscope(browser, f"""(doc) => !!doc.querySelector('a.run-link[data-run="{mlp[0]}"]')""")

        # One run's layers: every figure of its /details document, the keras run's three layers.
        browser.evaluate(_IN_GAPSCOPE % f"""(doc) => doc.querySelector(
            'a.run-link[data-run="{mlp[0]}"]').click()""")
        panel = _route(url, f"details?run={quote(mlp[0])}")["panels"]["layers"]
        assert [r["name"] for r in panel["rows"]] == ["dense1", "logits", "loss"]
        rows = wait_in_gapscope(browser, _ROWS % "'[data-view=layers] tr.layer-row'")
        expected = [[r["name"], *(fixed(c[k], d) for k, d in (
            ("forward_ms", 3), ("backward_ms", 3), ("forward_gflop", 4), ("backward_gflop", 4),
            ("forward_gflops", 1), ("backward_gflops", 1))), f"{fixed(100 * c['share'], 1)} %",
            c["fused"] or "-"] for r in panel["rows"] for c in r["sides"]]
        assert rows == expected
        # Keras fuses dense1's bias and ReLU into its matmul (the spec's activation), logits' bias.
        assert [row[-1] for row in rows] == ["fwd dense+bias+ReLU", "fwd dense+bias", "-"]
        outside = wait_in_gapscope(browser, _ROWS % "'[data-view=layers] tr.layers-outside'")
        assert outside[0][1:3] == [fixed(panel["outside"][0][p]) for p in ("forward", "backward")]
        # Keras' train_step is a tf.function: its traces, as /details has them.
        traced = _route(url, f"details?run={quote(mlp[0])}")["panels"]["compile"]
        line = wait_in_gapscope(browser, "(doc) => doc.querySelector('[data-view=compile] p.compile-line')?.textContent")
        assert line == traced["line"] and "train_step traced" in line

        # Two runs' layers lined up by name, with the deltas of /compare's document.
        _tick_only(browser, mlp)
        pair = _route(url, "compare?" + urlencode([("run", n) for n in mlp]))["panels"][0]["layers"]
        assert pair["matched_by"] == "name" and all(r["matched"] for r in pair["rows"])
        rows = wait_in_gapscope(browser, _ROWS % "'[data-view=compare] tr.layer-row'")
        assert [r[0] for r in rows] == ["dense1", "logits", "loss"]
        assert [r[1:4] for r in rows] == [
            [fixed(r["sides"][0]["forward_ms"]), fixed(r["sides"][1]["forward_ms"]),
             signed(r["delta_ms"]["forward"])] for r in pair["rows"]]
        assert [r[4:7] for r in rows] == [
            [fixed(r["sides"][0]["backward_ms"]), fixed(r["sides"][1]["backward_ms"]),
             signed(r["delta_ms"]["backward"])] for r in pair["rows"]]
        browser.evaluate(_IN_GAPSCOPE % "(doc) => doc.querySelector('[data-view=compare] tr.layer-row').scrollIntoView()")
        screenshot(browser, artefacts, "gapscope-layers-compare")

        # The torch run's optimizer per layer (RMSprop one tensor at a time on the CPU).
        browser.evaluate(_IN_GAPSCOPE % f"""(doc) => doc.querySelector(
            'a.run-link[data-run="{mlp[1]}"]').click()""")
        (opt,) = _route(url, f"details?run={quote(mlp[1])}")["panels"]["layers"]["optimizer"]
        line = wait_in_gapscope(browser, "(doc) => doc.querySelector('[data-view=layers] p.optimizer-layers')?.textContent")
        assert line == (f"{opt['run']}: optimizer per layer ({opt['source']}, ms per traced step): "
                        + ", ".join(f"{n} {fixed(ms)}" for n, ms in opt["layers"].items())
                        + f"; outside layers {fixed(opt['outside_ms'])}")
        assert list(opt["layers"]) == ["dense1", "logits"]

        # A GPU run's device kernels by layer (the H200's compiled mlp), as /details holds them.
        browser.evaluate(_IN_GAPSCOPE % f"""(doc) => doc.querySelector(
            'a.run-link[data-run="{h200}"]').click()""")
        (kernels,) = _route(url, f"details?run={quote(h200)}")["panels"]["layers"]["kernels"]
        rows = wait_in_gapscope(browser, _ROWS % "'[data-view=layers] tr.kernel-row'")
        groups = [(r["name"], r) for r in kernels["layers"]] + [
            ("mixed", kernels["mixed"]), ("outside layers", kernels["outside"])]
        assert rows == [[name, *(cell for p in ("forward", "backward") for cell in (
            f"{g[p]['kernels']:g}", fixed(1000 * g[p]["ms"], 1),
            "-" if g[p].get("gflops") is None else fixed(g[p]["gflops"], 1)))] for name, g in groups]
        assert [r[1] for r in rows] == ["2", "3", "3", "2", "0"]   # tests/test_kernel_layers.py

        # The compiled run: its stages, its graph break's reason and line.
        browser.evaluate(_IN_GAPSCOPE % f"""(doc) => doc.querySelector(
            'a.run-link[data-run="{dynamic["compile"]}"]').click()""")
        why = _route(url, f"details?run={quote(dynamic['compile'])}")["panels"]["compile"]
        (brk,) = why["graph_breaks"]
        assert brk["reason"] == "Data-dependent branching" and brk["place"].startswith("dynamic.py:")
        line = wait_in_gapscope(browser, "(doc) => doc.querySelector('[data-view=compile] p.compile-line')?.textContent")
        assert line == why["line"]
        stages = wait_in_gapscope(browser, _ROWS % "'[data-view=compile] tr.compile-stage'")
        assert [s[:2] for s in stages] == [[s["name"], fixed(s["ms"])] for s in why["stages"]] + \
            [["unattributed", fixed(why["unattributed_ms"])]]
        breaks = wait_in_gapscope(browser, _ROWS % "'[data-view=compile] tr.graph-break'")
        assert breaks == [[brk["reason"], brk["place"], str(brk["times_logged"]), str(brk["first_step"])]]
        browser.evaluate(_IN_GAPSCOPE % "(doc) => doc.querySelector('[data-view=compile]').scrollIntoView()")
        screenshot(browser, artefacts, "gapscope-compile")

        # Eager against compiled: where compiling pays, as /compare says it.
        _tick_only(browser, [dynamic["default"], dynamic["compile"]])
        pays = _route(url, "compare?" + urlencode([("run", dynamic["default"]), ("run", dynamic["compile"])]))
        pays = pays["panels"][0]["compile"]["amortisation"]
        shown = wait_in_gapscope(browser, "(doc) => doc.querySelector('[data-view=compare] p.amortisation')?.textContent")
        assert shown == pays["text"] and shown.startswith("compile: ")
        assert_offline_and_clean(browser, url)
    finally:
        shutil.rmtree(views, ignore_errors=True)


def test_an_ab_folder_opens_as_the_clis_comparison(chromium, ab_folder, tmp_path):
    """Issue 35 item 4: the tab pre-ticked two repeats of one configuration and compared it with
    itself. It ticks two configurations, and shows the verdict lines `compare FOLDER` prints."""
    import shutil

    from gapscope.analysis.renderers.compare_columns import verdict_lines
    from gapscope.analysis.results.measured import compare_measurement
    shutil.copytree(ab_folder, tmp_path / ab_folder.name)
    from gapscope.analysis.renderers.compare_columns import phase_rows
    measured = compare_measurement(ab_folder)
    expected = verdict_lines(measured)
    with TensorBoardServer(tmp_path, ready_timeout=60) as server, HeadlessChromium(chromium) as page:
        open_fresh(page, server.url + "#gapscope")
        shown = wait_in_gapscope(page, """(doc) => {
          const items = [...doc.querySelectorAll('[data-view=compare] ul.verdicts li')];
          return items.length ? items.map((li) => li.textContent) : null;
        }""")
        rows = wait_in_gapscope(page, """(doc) => {
          const table = doc.querySelector('[data-view=compare] table');
          return table && [...table.querySelectorAll('tbody tr')].map(
              (tr) => [...tr.children].map((td) => td.textContent));
        }""")
    assert shown == expected and any("pair ratios" in line for line in shown), (shown, expected)
    # Issue 45: the tab's intervals are the CLI's (repeats: two-level, lopsided ones as [low, high]).
    cli_rows = phase_rows(measured)
    assert [r[3] for r in rows] == [r[3] for r in cli_rows[:len(rows)]], (rows, cli_rows)
    if measured.pairs[0].inconclusive:
        assert {r[5] for r in rows} == {"no verdict"}


def test_memory_view_renders_the_figures_of_the_json(browser, tensorboard, artefacts):
    """Issue 36: the Memory view draws the selected run's memory figures as /details holds them:
    the step peak, per phase the high-water mark and the net change, and one step's allocation
    curve over its phase bands."""
    url, name, _ = tensorboard  # the torch loop's run (capture API): profile_memory in its window
    open_fresh(browser, url + "#gapscope")
    wait_in_gapscope(browser, f"""(doc) => !!doc.querySelector('a.run-link[data-run="{name}"]')""")
    browser.evaluate(_IN_GAPSCOPE % f"""(doc) => doc.querySelector('a.run-link[data-run="{name}"]').click()""")
    memory = _route(url, f"details?run={quote(name)}")["panels"]["memory"]
    assert memory is not None and memory["peak_allocated_mb"] > 0  # profile_memory in the window
    facts = wait_in_gapscope(browser, "(doc) => doc.querySelector('[data-view=memory] p.memory-facts')?.textContent")
    assert f"step peak {fixed(memory['peak_allocated_mb'])} MB" in facts
    rows = wait_in_gapscope(browser, _ROWS % "'[data-view=memory] tr.memory-phase'")
    assert rows == [[phase, fixed(f["high_water_mb"]), signed(f["net_mb"])]
                    for phase, f in memory["phases"].items()]
    curve = wait_in_gapscope(browser, """(doc) => {
      const svg = doc.querySelector('[data-view=memory] svg.chart.memory');
      return svg ? [svg.querySelectorAll('path.level').length, svg.querySelectorAll('rect.band').length] : null;
    }""")
    assert curve == [1, len(memory["step_curve"]["phases"])]
    browser.evaluate(_IN_GAPSCOPE % "(doc) => doc.querySelector('[data-view=memory]').scrollIntoView()")
    screenshot(browser, artefacts, "gapscope-memory")
    # Issue 35: in a 1400 px window no view is wider than its box (nothing to scroll sideways).
    wide = wait_in_gapscope(browser, """(doc) => {
      const views = [...doc.querySelectorAll('section[data-view]')];
      return views.length >= 6 ? {wide: views.filter((s) => s.scrollWidth > s.clientWidth + 1)
                                      .map((s) => [s.dataset.view, s.scrollWidth, s.clientWidth])} : null;
    }""")
    assert wide == {"wide": []}, wide
    assert_offline_and_clean(browser, url)
