"""TensorBoard over runs made through the API, checked in a real (headless) Chromium: the
phase scalars, the breakdown table in the Text dashboard and both profiler tabs."""
from __future__ import annotations

import pytest

import user_loops
from analysis.tensorboard_server import TensorBoardServer
from browser import HeadlessChromium, ensure_chromium

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


@pytest.fixture(scope="module")
def tensorboard(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("tensorboard_runs")
    torch_run = user_loops.torch_loop(logdir).run_dir.name
    keras_run = user_loops.keras_fit(logdir)[0].run_dir.name
    with TensorBoardServer(logdir, ready_timeout=60) as server:
        yield server.url, torch_run, keras_run


@pytest.fixture(scope="module")
def browser(chromium, tensorboard):
    with HeadlessChromium(chromium) as page:
        yield page


def test_scalars_dashboard_shows_phase_scalars_of_both_runs(browser, tensorboard):
    url, torch_run, keras_run = tensorboard
    browser.open(url + "#scalars")
    text = browser.wait_for_text([torch_run, keras_run, "step_ms", "loss",
                                  *(f"phase_ms/{p}" for p in ("data_load", "forward", "backward",
                                                              "optimizer", "other"))], timeout=60)
    assert "No scalar data was found" not in text


def test_text_dashboard_shows_the_breakdown_table(browser, tensorboard):
    url, torch_run, keras_run = tensorboard
    browser.open(url + "#text")
    browser.wait_for_text(["breakdown", "ms per steady-state step"], timeout=60)
    cells = browser.evaluate(_CELLS)
    # Markdown rendered as tables, one per run: the phases and the step are cells.
    for cell in ("phase", "data_load", "forward", "backward", "optimizer", "other", "step"):
        assert cells.count(cell) >= 2, (cell, cells[:40])
    assert "user-mlp torch user ms" in cells and "user-mlp keras user ms" in cells


@pytest.mark.parametrize("tab,shows", [
    ("pytorch_profiler", ["Overview"]),
    ("profile", ["XProf", "Overview Page"]),
])
def test_profiler_tabs_open_on_the_runs(browser, tensorboard, tab, shows):
    """Each plugin's own page (an iframe) lists the run in its format: torch traces, or the
    XSpace session of the TF profiler."""
    url, torch_run, keras_run = tensorboard
    run = torch_run if tab == "pytorch_profiler" else keras_run
    browser.open(f"{url}#{tab}")
    browser.wait_for_text([*shows, run], timeout=90)
    frames = browser.evaluate(_FRAMES)
    mine = [f for f in frames if f["src"].endswith(f"name={tab}")]
    assert mine, frames
    assert run in mine[0]["text"] and all(s in mine[0]["text"] for s in shows), mine[0]["text"][:1000]
