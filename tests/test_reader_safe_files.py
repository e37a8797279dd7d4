"""Reads that must not run away: FIFOs, devices and bad symlinks are refused in one line, sizes capped."""
import gzip
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

import gapscope.analysis.tensorboard.server as tensorboard_server
from gapscope.analysis.results.breakdown import breakdown
from gapscope.analysis.readers import safe_files
from gapscope.analysis.readers.hlo_text import read_hlo_text
from gapscope.analysis.readers.resources_csv import read_resources_csv
from gapscope.analysis.readers.torch_trace import read_torch_trace
from gapscope.analysis.model.run import load_run
from gapscope.cli import cli
from gapscope.profilers.errors import TraceFormatError

ROOT = Path(__file__).resolve().parent.parent

TRACE = {"traceEvents": [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1",
                          "pid": 1, "tid": 1, "ts": 1000, "dur": 100}]}


def _refused_within(seconds, read, path, fragment):
    """Run the read in a thread: a FIFO would block forever, a device would read forever."""
    outcome = {}

    def target():
        try:
            read(path)
        except Exception as exc:  # noqa: BLE001 - the test inspects what came out
            outcome["error"] = exc
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"reading {path} did not return within {seconds} s"
    error = outcome.get("error")
    assert isinstance(error, TraceFormatError), error
    assert fragment in str(error) and "\n" not in str(error)


@pytest.fixture
def odd_paths(tmp_path):
    fifo = tmp_path / "fifo.pt.trace.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.pt.trace.json"
    zero.symlink_to("/dev/zero")
    urandom = tmp_path / "urandom.pt.trace.json"
    urandom.symlink_to("/dev/urandom")
    dangling = tmp_path / "dangling.pt.trace.json"
    dangling.symlink_to(tmp_path / "gone")
    loop = tmp_path / "loop.pt.trace.json"
    loop.symlink_to(loop)
    return {"fifo": (fifo, "a FIFO"), "zero": (zero, "a character device"),
            "urandom": (urandom, "a character device"), "dangling": (dangling, "dangling symlink"),
            "loop": (loop, "symlink loop"), "folder": (tmp_path, "a folder")}


@pytest.mark.parametrize("kind", ["fifo", "zero", "urandom", "dangling", "loop", "folder"])
@pytest.mark.parametrize("reader", [read_torch_trace, read_hlo_text, read_resources_csv],
                         ids=["torch", "hlo_text", "resources_csv"])
def test_non_regular_files_are_refused_at_once(odd_paths, kind, reader):
    path, fragment = odd_paths[kind]
    _refused_within(10, reader, path, fragment)


@pytest.mark.parametrize("kind", ["fifo", "zero", "dangling", "loop"])
def test_xplane_reader_refuses_them_before_loading_the_schema(odd_paths, kind, monkeypatch):
    from gapscope.analysis.readers import xplane
    monkeypatch.setattr(xplane, "_xplane_pb2", lambda: pytest.fail("schema loaded"))
    path, fragment = odd_paths[kind]
    _refused_within(10, xplane.read_xplane, path, fragment)


def test_is_readable_regular_file(tmp_path, odd_paths):
    plain = tmp_path / "w.1.pt.trace.json"
    plain.write_text(json.dumps(TRACE))
    link = tmp_path / "link.pt.trace.json"
    link.symlink_to(plain)
    assert safe_files.is_readable_regular_file(plain)
    assert safe_files.is_readable_regular_file(link)
    assert not safe_files.is_readable_regular_file(tmp_path / "missing.pt.trace.json")
    for path, _ in odd_paths.values():
        assert not safe_files.is_readable_regular_file(path), path


def test_file_over_the_size_cap_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "w.1.pt.trace.json"
    path.write_text(json.dumps(TRACE))
    monkeypatch.setattr(safe_files, "MAX_FILE_BYTES", 100)
    with pytest.raises(TraceFormatError, match="of 1[0-9]{2} bytes is over the 100 bytes gapscope reads"):
        read_torch_trace(path)


def test_gzip_bomb_is_refused_past_the_inflate_cap(tmp_path, monkeypatch):
    # 64 MB of whitespace inside the array: tiny compressed, valid JSON, never-ending to read.
    text = b'{"traceEvents": [' + b" " * (64 << 20) + b"]}"
    path = tmp_path / "bomb.pt.trace.json.gz"
    path.write_bytes(gzip.compress(text, compresslevel=9))
    assert path.stat().st_size < 1 << 20
    monkeypatch.setattr(safe_files, "MAX_DECOMPRESSED_BYTES", 16 << 20)
    with pytest.raises(TraceFormatError, match="inflates past"):
        read_torch_trace(path)


def test_gzip_is_recognised_by_content_whatever_the_name(tmp_path):
    path = tmp_path / "w.1.pt.trace.json"  # gzipped, but not named .gz
    path.write_bytes(gzip.compress(json.dumps(TRACE).encode()))
    assert [e.name for e in read_torch_trace(path).events] == ["ProfilerStep#1"]


def test_an_event_larger_than_any_real_one_is_refused(tmp_path, monkeypatch):
    from gapscope.analysis.readers import torch_trace
    monkeypatch.setattr(torch_trace, "_CHUNK", 1 << 10)
    monkeypatch.setattr(torch_trace, "_BLOCK", 1 << 10)
    monkeypatch.setattr(torch_trace, "_MAX_EVENT", 1 << 16)
    path = tmp_path / "huge.pt.trace.json"
    path.write_text('{"traceEvents": [{"ph": "X", "name": "' + "x" * (1 << 18) + '"}]}')
    with pytest.raises(TraceFormatError, match="an event of over"):
        read_torch_trace(path)


def test_resources_csv_with_nan_or_inf_reads_them_as_no_sample(tmp_path):
    path = tmp_path / "resources.csv"
    path.write_text("t_s,cpu_percent,gpu_util_percent\n0.5,nan,inf\n1.0,50,\n")
    rows = read_resources_csv(path)
    assert rows[0]["cpu_percent"] is None and rows[0]["gpu_util_percent"] is None
    assert rows[1]["cpu_percent"] == 50.0


# --- the same through the command line: one line on stderr, exit 2, at once ---------------

_CLI_KINDS = ["fifo", "zero", "urandom", "dangling", "loop"]


def _gapscope(*args, timeout=60):
    return subprocess.run([sys.executable, "-m", "gapscope.cli", *map(str, args)], cwd=ROOT, timeout=timeout,
                          capture_output=True, text=True)


@pytest.mark.parametrize("kind", _CLI_KINDS)
def test_breakdown_of_an_odd_path_is_one_line_exit_2(odd_paths, kind):
    path, fragment = odd_paths[kind]
    result = _gapscope("breakdown", path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and fragment in result.stderr, result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("kind", _CLI_KINDS)
def test_a_run_folder_whose_only_trace_is_odd_is_refused_by_name(tmp_path, kind):
    folder = tmp_path / "run"
    folder.mkdir()
    target = {"zero": "/dev/zero", "urandom": "/dev/urandom", "dangling": str(tmp_path / "gone")}
    trace = folder / "w.1.pt.trace.json"
    if kind == "fifo":
        os.mkfifo(trace)
    elif kind == "loop":
        trace.symlink_to(trace)
    else:
        trace.symlink_to(target[kind])
    result = CliRunner().invoke(cli, ["breakdown", str(folder)])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "w.1.pt.trace.json: cannot read" in result.output


def test_an_odd_file_beside_a_good_trace_is_skipped_with_a_note(tmp_path):
    (tmp_path / "w.1.pt.trace.json").write_text(json.dumps(TRACE))
    os.mkfifo(tmp_path / "w.2.pt.trace.json")
    result = breakdown(load_run(tmp_path))
    assert any("w.2.pt.trace.json (a FIFO" in note for note in result.notes), result.notes


@pytest.mark.parametrize("name", ["manifest.json", "steps.csv"])
def test_run_files_that_are_devices_are_refused_not_read(tmp_path, name):
    (tmp_path / name).symlink_to("/dev/zero")
    _refused_within(10, load_run, tmp_path, "a character device")


@pytest.mark.parametrize("kind", ["fifo", "zero", "dangling", "loop"])
def test_tensorboard_refuses_a_logdir_with_an_odd_trace_before_starting(tmp_path, kind, monkeypatch):
    run = tmp_path / "logs" / "run-1"
    run.mkdir(parents=True)
    trace = run / "w.1.pt.trace.json"
    if kind == "fifo":
        os.mkfifo(trace)
    elif kind == "loop":
        trace.symlink_to(trace)
    else:
        trace.symlink_to("/dev/zero" if kind == "zero" else str(tmp_path / "gone"))
    monkeypatch.setattr(tensorboard_server.subprocess, "Popen", lambda *a, **k: pytest.fail("TensorBoard started"))
    result = CliRunner().invoke(cli, ["tensorboard", str(tmp_path / "logs"), "--port", "0"])
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and "w.1.pt.trace.json: cannot read" in result.output


def test_the_read_ahead_thread_and_the_inflating_child_end_with_a_failed_read(tmp_path):
    # A decode error after the first chunk: neither the reading thread nor the process that
    # inflates the gzip may outlive the read.
    import psutil
    path = tmp_path / "w.1.pt.trace.json.gz"
    body = ",".join(json.dumps(TRACE["traceEvents"][0]) for _ in range(200_000))
    path.write_bytes(gzip.compress(('{"traceEvents": [' + body + ', {"ph": oops}]}').encode(), 1))
    threads, children = threading.active_count(), psutil.Process().children()
    with pytest.raises(TraceFormatError, match="not a torch profiler trace"):
        read_torch_trace(path)
    assert threading.active_count() == threads
    assert psutil.Process().children() == children


def test_corrupt_gzip_in_the_middle_is_one_line(tmp_path):
    data = bytearray(gzip.compress(json.dumps(TRACE).encode() * 50))
    data[len(data) // 2] ^= 0xFF
    path = tmp_path / "w.1.pt.trace.json.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError, match="corrupt gzip") as caught:
        read_torch_trace(path)
    assert "\n" not in str(caught.value)
