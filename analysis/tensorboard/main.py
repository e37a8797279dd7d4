"""TensorBoard with gapscope's plugin loaded explicitly (`python -m analysis.tensorboard.main`),
whether or not the installed package's entry point names it."""
from __future__ import annotations

import sys

from absl import app
from tensorboard import default, main_lib, program
from tensorboard.plugins import base_plugin

from analysis.tensorboard.plugin.plugin import PLUGIN_NAME, GapscopePlugin


def plugins() -> list:
    """TensorBoard's own plugins and every installed one, with gapscope's from this copy of
    gapscope: an installed entry point may name another copy (an editable install of another
    checkout), and TensorBoard refuses two plugins of one name."""
    others = [p for p in default.get_plugins() if getattr(p, "plugin_name", None) != PLUGIN_NAME]
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
