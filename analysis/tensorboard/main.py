"""TensorBoard with gapscope's plugin loaded explicitly (`python -m analysis.tensorboard.main`),
whether or not the installed package's entry point names it."""
from __future__ import annotations

import os
import sys

from absl import app
from tensorboard import default, main_lib, program
from tensorboard.plugins import base_plugin

from gapscope.analysis.tensorboard.plugin.plugin import PLUGIN_NAME, GapscopePlugin
from gapscope.analysis.tensorboard.server import TORCH_TB_PROFILER, TORCH_TB_PROFILER_ENV


def plugins() -> list:
    """TensorBoard's own plugins and every installed one, with gapscope's from this copy of
    gapscope: an installed entry point may name another copy (an editable install of another
    checkout), and TensorBoard refuses two plugins of one name. torch-tb-profiler only when
    asked: offline its tab spins forever."""
    left_out = {PLUGIN_NAME}
    if os.environ.get(TORCH_TB_PROFILER_ENV) != "1":
        left_out.add(TORCH_TB_PROFILER)
    others = [p for p in default.get_plugins() if getattr(p, "plugin_name", None) not in left_out]
    return others + [GapscopePlugin]


def main() -> None:
    """As tensorboard.main.run_main, with gapscope's plugin list."""
    main_lib.global_init()
    tensorboard = program.TensorBoard(plugins=plugins())
    try:
        app.run(tensorboard.main, flags_parser=tensorboard.configure)
    except base_plugin.FlagsError as error:
        print(f"Error: {error}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
