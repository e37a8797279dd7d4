"""gapscope's command process asks NumPy for no huge pages (their on-the-spot compaction doubled a
big trace's analysis); a user's NUMPY_MADVISE_HUGEPAGE wins, and the processes it starts keep
NumPy's default."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

_PROBE = """
import os, subprocess, sys
import click
from gapscope import cli as commands
@commands.cli.command("probe-pages")
def probe():
    from numpy._core import multiarray
    child = subprocess.run([sys.executable, "-c", "from numpy._core import multiarray; "
                            "print(multiarray._get_madvise_hugepage())"], capture_output=True, text=True)
    click.echo(f"{multiarray._get_madvise_hugepage()} {child.stdout.strip()}")
sys.argv = ["gapscope", "probe-pages"]
commands.main()
"""


@pytest.mark.parametrize("setting, expected", [(None, "False"), ("1", "True")])
def test_the_command_process_alone_asks_for_no_huge_pages(setting, expected):
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_MADVISE_HUGEPAGE"}
    if setting is not None:
        env["NUMPY_MADVISE_HUGEPAGE"] = setting
    default = subprocess.run([sys.executable, "-c", "from numpy._core import multiarray; "
                              "print(multiarray._get_madvise_hugepage())"],
                             capture_output=True, text=True, env=env).stdout.strip()
    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    own, child = done.stdout.split()
    assert own == expected and child == default  # a process it starts: NumPy's own default
