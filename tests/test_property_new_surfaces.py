"""Property tests over issue 47's input surfaces: whatever rows a growing steps.csv holds for
`watch`, whatever --engine address or GAPSCOPE_* variable is given, the command answers with
figures (all finite) or one line and exit 2, never a traceback; nothing it started is left
running."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gapscope.analysis.results.engines.choose import KINDS, parse_engine
from gapscope.cli import cli
from engine_job import make_job
from gapscope.profilers.errors import GapscopeInputError
from gapscope.profilers.run_dir import STEP_COLUMNS
from test_property_run_files import SETTINGS, _all_finite, row

# What an environment variable can hold: any text but NUL and lone surrogates.
env_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)


def _one_line_refusal(result) -> None:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.stderr.startswith("gapscope: error: ") and result.stderr.count("\n") == 1, result.stderr


@settings(SETTINGS, max_examples=60)  # two commands an example
@given(st.lists(row, max_size=30), st.lists(row, max_size=10), st.binary(max_size=40), st.booleans())
@example([], [], b"\xff\xfe\n", False)  # not UTF-8
@example([], [], b"1,2\n", True)  # a header without step and step_ms
def test_watch_answers_any_steps_csv_with_finite_figures_or_one_line(rows, more, tail, headerless):
    """Rows appended in two looks (the follower's offset), then bytes a writer cut short or
    garbled: `watch` without --once follows until the run's recorded end."""
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        (run / "manifest.json").write_text(json.dumps({"run_id": "r", "status": "complete"}))
        header = "" if headerless else ",".join(STEP_COLUMNS) + "\n"
        (run / "steps.csv").write_bytes((header + "".join(",".join(r) + "\n" for r in rows)).encode()
                                        + "".join(",".join(r) + "\n" for r in more).encode() + tail)
        for args in (["--once", "--format", "json"], ["--interval", "0.1"]):
            result = CliRunner().invoke(cli, ["watch", str(run), *args])
            if result.exit_code == 2:
                _one_line_refusal(result)
                continue
            assert result.exit_code == 0 and result.exception is None, result.output
            if "--once" in args:
                state = json.loads(result.stdout)
                assert _all_finite(state) and state["steps"] <= len(rows) + len(more) + 1


ADDRESS_PARTS = st.one_of(env_text, st.sampled_from(["tcp://", "dask://", "ray://", "tcp://:", "://", ":"]))


@SETTINGS
@given(st.lists(ADDRESS_PARTS, max_size=4).map("".join))
@example("tcp://host:٣")  # digits that are not ASCII
@example("tcp://host:99999")
@example("tcp://a b:8786")
@example("ray://[::1]:0")
def test_any_engine_address_is_an_engine_or_one_line(text):
    try:
        spec = parse_engine(text)
    except GapscopeInputError as error:
        assert "\n" not in str(error) and len(str(error)) < 400
        return
    assert spec.kind in KINDS
    if spec.address is not None:
        port = int(spec.address.rpartition(":")[2])
        assert spec.address.isascii() and 0 < port < 65536 and " " not in spec.address


@pytest.fixture(scope="module")
def small_job(tmp_path_factory):
    return make_job(tmp_path_factory.mktemp("surfaces") / "job", world=2)


# Each variable with values that must be refused in one line (a valid one, for `breakdown` of
# a job, must still give its figures). GAPSCOPE_ENGINE values that would start or join a
# cluster are left to tests/test_engine_clusters.py.
NUMBERS = ("GAPSCOPE_READ_WORKERS", "GAPSCOPE_JOB_WORKERS", "GAPSCOPE_MAX_TRACE_EVENTS")


def _starts_nothing(value: str) -> bool:
    try:
        return parse_engine(value).kind == "local"
    except GapscopeInputError:
        return True


@SETTINGS
@given(st.sampled_from((*NUMBERS, "GAPSCOPE_ENGINE")), env_text)
@example("GAPSCOPE_READ_WORKERS", "1024")
@example("GAPSCOPE_JOB_WORKERS", "-3")
@example("GAPSCOPE_JOB_WORKERS", "٣")
@example("GAPSCOPE_MAX_TRACE_EVENTS", "1e9")
@example("GAPSCOPE_ENGINE", "tcp://host:٣")
def test_any_gapscope_variable_gives_figures_or_one_line(small_job, name, value):
    if name == "GAPSCOPE_ENGINE" and not _starts_nothing(value):
        return
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    env = {"GAPSCOPE_JOB_WORKERS": "1", name: value}
    result = CliRunner().invoke(cli, ["breakdown", str(small_job), "--format", "json"], env=env)
    if result.exit_code == 2:
        _one_line_refusal(result)
    else:
        assert result.exit_code == 0 and result.exception is None, result.output
        assert _all_finite(json.loads(result.stdout))
    # A pool the command started is gone with it (multiprocessing's forkserver and resource
    # tracker serve this whole test process, started by its first pool).
    left = [p for p in psutil.Process().children(recursive=True)
            if p.pid not in before and not _multiprocessing_service(p)]
    assert psutil.wait_procs(left, timeout=30)[1] == []


def _multiprocessing_service(process) -> bool:
    try:
        line = " ".join(process.cmdline())
    except psutil.Error:
        return False
    return "multiprocessing.forkserver" in line or "multiprocessing.resource_tracker" in line


def test_the_runtime_folder_variable_is_refused_in_one_line_where_it_is_no_private_folder(tmp_path, monkeypatch):
    """GAPSCOPE_RUNTIME_DIR pointing at a file, at a shared folder, at nothing: `capture --pid`
    of a live process refuses in one line and signals nothing."""
    (tmp_path / "file").write_text("x")
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    for value, words in ((tmp_path / "file", "is not a folder"), (shared, "open to other users"),
                         (tmp_path / "none", "runs no gapscope capture")):
        monkeypatch.setenv("GAPSCOPE_RUNTIME_DIR", str(value))
        result = CliRunner().invoke(cli, ["capture", "--pid", str(psutil.Process().pid), "--steps", "2"])
        _one_line_refusal(result)
        assert words in result.stderr, result.stderr
