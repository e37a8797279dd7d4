"""gapscope's TensorBoard plugin: its static page (served by itself, no CDN) and the JSON routes
under /data/plugin/gapscope/ that the page draws from."""
from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from gapscope.analysis.tensorboard.plugin.views import UnknownRun, Views
from gapscope.analysis.tensorboard.server import TORCH_TB_PROFILER_ENV, tab_notes
from gapscope.analysis.tensorboard.shadow import SOURCE_LOGDIR_ENV
from gapscope.profilers.strict_json import finite

PLUGIN_NAME = "gapscope"
STATIC = Path(__file__).parent / "static"
_TYPES = {".js": "application/javascript", ".css": "text/css"}


# The longest /runs?wait=S analyses runs before it answers (the page asks for 2 s); the others
# are listed as pending, analysed meanwhile, and the page asks again. Without `wait`: all runs.
MAX_RUNS_WAIT_S = 60.0


class GapscopePlugin(base_plugin.TBPlugin):
    """Breakdown, steps and compare views of the runs in the logdir, read as the CLI reads them."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext):
        # `gapscope tensorboard` gives TensorBoard a vetted shadow of the logdir (links, for the
        # third-party plugins) and this plugin the logdir itself, which it reads safely.
        self._views = Views(os.environ.get(SOURCE_LOGDIR_ENV) or context.logdir)
        # `gapscope tensorboard` says whether it loaded torch-tb-profiler; a plain `tensorboard`
        # loads every installed plugin.
        self._torch_tb_profiler = (os.environ.get(TORCH_TB_PROFILER_ENV, "1") == "1"
                                   and importlib.util.find_spec("torch_tb_profiler") is not None)

    def get_plugin_apps(self):
        apps = {f"/static/{path.name}": self._static(path) for path in STATIC.iterdir()
                if path.suffix in _TYPES}
        apps.update({"/runs": self._serve_runs, "/steps": self._serve_steps,
                     "/details": self._serve_details, "/compare": self._serve_compare})
        return apps

    def is_active(self) -> bool:
        return self._views.has_runs()

    def frontend_metadata(self):
        # TensorBoard loads the module into an iframe: "./static/index.js" from plugin/gapscope/.
        return base_plugin.FrontendMetadata(es_module_path="/static/index.js", tab_name="gapscope")

    @staticmethod
    def _static(path: Path):
        @wrappers.Request.application
        def serve(request):
            return http_util.Respond(request, path.read_bytes(), _TYPES[path.suffix])
        return serve

    @wrappers.Request.application
    def _serve_runs(self, request):
        try:
            wait_s = _wait_s(request.args.get("wait"))
        except ValueError as exc:
            return _json(request, {"error": str(exc)}, code=400)
        document = self._views.runs(wait_s=wait_s)
        return _json(request, {**document, "tab_notes": tab_notes(self._torch_tb_profiler)})

    @wrappers.Request.application
    def _serve_steps(self, request):
        return _answer(request, lambda: self._views.steps(request.args.get("run", "")))

    @wrappers.Request.application
    def _serve_details(self, request):
        return _answer(request, lambda: self._views.details(request.args.get("run", "")))

    @wrappers.Request.application
    def _serve_compare(self, request):
        return _answer(request, lambda: self._views.compare(request.args.getlist("run")))


def _wait_s(text: str | None) -> float | None:
    """`wait`: seconds, 0 to MAX_RUNS_WAIT_S as plain digits; anything else (-1, 1e9, nan, abc
    were taken silently) is a ValueError the route answers with 400."""
    if text is None:
        return None
    if not _SECONDS.fullmatch(text) or float(text) > MAX_RUNS_WAIT_S:
        raise ValueError(f"wait={text[:40]!r}: give seconds from 0 to {MAX_RUNS_WAIT_S:g}")
    return float(text)


_SECONDS = re.compile(r"[0-9]{1,6}(?:\.[0-9]{1,6})?")


def _answer(request, document):
    """A run the logdir does not hold is the request's fault (404); every problem a run has
    is part of the document, so the page can say it."""
    try:
        return _json(request, document())
    except UnknownRun as exc:
        return _json(request, {"error": f"no run {exc.args[0]!r} under the logdir"}, code=404)


def _json(request, document: dict, code: int = 200):
    return http_util.Respond(request, finite(document), "application/json", code=code)
