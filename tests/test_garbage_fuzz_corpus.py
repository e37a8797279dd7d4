"""The fuzz corpus: each hand-made bad trace in tests/fuzz/ is refused in one line or read with
what was wrong counted, never summed into confident figures or a traceback."""
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from gapscope.analysis.results.breakdown import breakdown_from_trace
from gapscope.analysis.readers.torch_trace import read_torch_trace
from gapscope.cli import cli
from gapscope.profilers.errors import TraceFormatError

CORPUS = Path(__file__).parent / "fuzz"
EXPECTED = tomllib.loads((CORPUS / "expected.toml").read_text())


def _read(path: Path):
    if path.name.endswith(".xplane.pb"):
        pytest.importorskip("tensorflow")
        from gapscope.analysis.readers.xplane import read_xplane
        return read_xplane(path)
    return read_torch_trace(path)


def test_every_corpus_file_has_an_expected_outcome():
    files = {p.name for p in CORPUS.iterdir() if p.name != "expected.toml"}
    assert files == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file(name):
    expected, path = EXPECTED[name], CORPUS / name
    if "error" in expected:
        with pytest.raises(TraceFormatError) as caught:
            _read(path)
        message = str(caught.value)
        assert expected["error"] in message and "\n" not in message
        return
    trace = _read(path)
    assert trace.metadata.get("dropped_events", {}) == expected.get("dropped", {})
    assert trace.metadata.get("step_problems", {}) == expected.get("step_problems", {})
    assert all(e.dur_us >= 0 and e.start_us >= 0 for e in trace.events)
    result = breakdown_from_trace(trace)
    assert len(result.steps) == expected["steps"]
    result.self_check()
    assert all(s.step_ms > 0 for s in result.steps)


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items()
                                        if "error" in e and not n.endswith(".pb")))
def test_corpus_refusals_are_one_line_exit_2_on_the_command_line(name, tmp_path):
    result = CliRunner().invoke(cli, ["breakdown", str(CORPUS / name)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert len(result.output.strip().splitlines()) == 1, result.output
