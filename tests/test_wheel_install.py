"""gapscope built as a wheel and installed without -e into a fresh virtual environment holds only
the `gapscope` name: a user's project with its own analysis/, profilers/, workloads/ and cli.py runs
the README's own loop and `gapscope breakdown`, and its `import analysis` is still its own."""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from test_quickstart import LOOP_FILE, blocks, quick_start

PROJECT = Path(__file__).resolve().parent.parent
# What setup.cfg builds from: the rest of the checkout is not part of the wheel.
BUILD_INPUTS = ("setup.cfg", "pyproject.toml", "README.md", "cli.py", "gapscope", "analysis",
                "profilers", "workloads")
USER_NAMES = ("analysis", "profilers", "workloads")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the checkout (links kept as links, as git checks them out),
    so the build leaves nothing in the working tree."""
    source = tmp_path_factory.mktemp("source")
    for name in BUILD_INPUTS:
        if (PROJECT / name).is_dir():
            shutil.copytree(PROJECT / name, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy(PROJECT / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(out), str(source)],
                   check=True, capture_output=True, timeout=300)
    (built,) = out.glob("gapscope-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed by pip, no -e. Its dependencies are this
    environment's, on its path through a .pth line (such a path's own .pth files, this
    environment's editable gapscope among them, are not run)."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True,
                   timeout=300)
    packages = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path"
                                    "('purelib'))"], check=True, capture_output=True,
                                   text=True).stdout.strip())
    (packages / "gapscope_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return env_dir


@pytest.fixture(scope="module")
def user_project(tmp_path_factory) -> Path:
    """A user's ML project whose own packages bear gapscope's folder names."""
    project = tmp_path_factory.mktemp("project")
    for name in USER_NAMES:
        (project / name).mkdir()
        (project / name / "__init__.py").write_text(f'OWNER = "user {name}"\n')
    (project / "profilers" / "job_dir.py").write_text('OWNER = "user profilers.job_dir"\n')
    (project / "cli.py").write_text('raise SystemExit("the user\'s cli.py was imported")\n')
    (project / LOOP_FILE).write_text(blocks(quick_start(), "python")[0])
    return project


def _run(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_wheels_top_level_holds_gapscope_only(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert {n.split("/")[0] for n in names} == {"gapscope", wheel.name.split("-py3")[0] + ".dist-info"}
    for module in ("gapscope/cli.py", "gapscope/analysis/results/compare.py",
                   "gapscope/profilers/job_dir.py", "gapscope/workloads/launch.py",
                   "gapscope/analysis/tensorboard/plugin/static/index.js"):
        assert module in names, module
    assert "gapscope = gapscope.cli:main" in entry_points
    assert "gapscope = gapscope.analysis.tensorboard.plugin.plugin:GapscopePlugin" in entry_points


def test_the_readme_loop_and_breakdown_run_beside_the_users_own_packages(installed, user_project):
    python, gapscope = installed / "bin" / "python", installed / "bin" / "gapscope"
    loop = _run([str(python), LOOP_FILE], user_project)
    assert loop.returncode == 0, loop.stderr[-2000:]
    (run,) = (user_project / "quickstart").glob("my-loop-*")
    done = _run([str(gapscope), "breakdown", str(run), "--format", "json"], user_project)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["workload"] == "my-loop" and doc["steps"] > 0 and doc["step_ms"]["median"] > 0
    # The user's names are still theirs, and gapscope's code came from the wheel, not the checkout.
    probe = _run([str(python), "-c", "import analysis, profilers, workloads, gapscope.analysis; "
                  "print(analysis.OWNER, profilers.OWNER, workloads.OWNER); "
                  "print(gapscope.analysis.__file__)"], user_project)
    assert probe.returncode == 0, probe.stderr[-2000:]
    owners, location = probe.stdout.splitlines()
    assert owners == "user analysis user profilers user workloads"
    assert Path(location).is_relative_to(installed) and not Path(location).is_relative_to(PROJECT)
