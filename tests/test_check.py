"""gapscope check: a configuration against a stored baseline, exit 1 on a regression beyond noise."""
import json

import pytest
from click.testing import CliRunner

from gapscope.analysis.results.regression import Baseline, Verdict, check, read_baseline
from gapscope.cli import cli
from gapscope.profilers.errors import GapscopeInputError

_RUN = ["--steps", "16", "--warmup", "3", "--repeats", "3", "--quiet"]


def _baseline(step_ms, within=None):
    return Baseline("cnn:torch", step_ms, within or [0.0] * len(step_ms), {"steps": 60},
                    {"host": "vm", "cpu": "x"})


@pytest.mark.parametrize("now,threshold,verdict", [
    ([110.0, 111.0, 109.0], 0.05, Verdict.REGRESSION),   # +10 %, tight: beyond noise
    ([103.0, 104.0, 102.0], 0.05, Verdict.UNCHANGED),    # +3 %: real, but under the threshold
    ([90.0, 140.0, 100.0], 0.05, Verdict.UNCHANGED),     # +10 % on average, but noise
    ([80.0, 81.0, 79.0], 0.05, Verdict.FASTER),
])
def test_verdicts_by_hand(now, threshold, verdict):
    result = check(_baseline([100.0, 101.0, 99.0]), "cnn:torch", now, [0.0] * 3, threshold,
                   {"host": "vm", "cpu": "x"})
    assert result.verdict == verdict
    assert result.exit_code == (1 if verdict == Verdict.REGRESSION else 0)
    assert result.warnings == []


@pytest.mark.parametrize("busy_now,busy_baseline", [(True, False), (False, True)])
def test_a_busy_machine_gives_no_verdict(busy_now, busy_baseline):
    """+10 % beyond noise is a regression on a quiet machine; measured (or baselined) while other
    processes took the cores it is inconclusive, exit 3, whichever way the figures point."""
    baseline = _baseline([100.0, 101.0, 99.0])
    if busy_baseline:
        baseline = Baseline(baseline.config, baseline.step_ms, baseline.within, baseline.settings,
                            baseline.machine, busy=True)
    result = check(baseline, "cnn:torch", [110.0, 111.0, 109.0], [0.0] * 3, 0.05,
                   {"host": "vm", "cpu": "x"}, busy=busy_now)
    assert result.verdict == Verdict.INCONCLUSIVE and result.exit_code == 3
    assert result.line().startswith("check cnn:torch: INCONCLUSIVE: 1.100x the baseline")
    assert ("the baseline was measured on a busy machine: record it again on a quiet one"
            in result.warnings) is busy_baseline


def test_a_different_machine_or_configuration_is_said():
    result = check(_baseline([100.0, 101.0, 99.0]), "cnn:torch:compile", [100.0] * 3, [0.0] * 3,
                   0.05, {"host": "ci-7", "cpu": "x"})
    assert result.warnings == ["the baseline measured cnn:torch, this check cnn:torch:compile",
                               "host differs from the baseline's: ci-7 vs vm"]


@pytest.mark.parametrize("content,says", [
    ('{"format": "gapscope-baseline/1", "config": "a:torch", "step_ms": [NaN], "within": [0],'
     ' "settings": {}, "machine": {}}', "NaN is not a number"),
    ('{"format": "gapscope-baseline/1", "config": "a:torch", "step_ms": [-3], "within": [0],'
     ' "settings": {}, "machine": {}}', "corrupt baseline"),
    ('{"format": "gapscope-baseline/1", "config": "a:torch", "step_ms": [3, 4], "within": [0],'
     ' "settings": {}, "machine": {}}', "corrupt baseline"),
    ('{"format": "gapscope-baseline/1", "config": "a:torch", "step_ms": [3], "within": [0],'
     ' "settings": {}, "machine": {}, "busy": "no"}', "busy must be true or false"),
    ('{"format": "gapscope-baseline/1", "config": "a:torch", "step_ms": [1e300], "within": [0],'
     ' "settings": {}, "machine": {}}', "step times of 0.001 to 8.64e[+]07 ms"),
    ('{"format": "gapscope-baseline/1", "config": "a:torch", "step_ms": [1e-9], "within": [0],'
     ' "settings": {}, "machine": {}}', "corrupt baseline"),
    # Issue 47 item 9: nonsense settings were kept.
    ('{"format": "gapscope-baseline/1", "config": "a:torch", "step_ms": [3], "within": [0],'
     ' "settings": {"batch_size": "x"}, "machine": {}}', "settings.batch_size should be a whole number from 1"),
    ('{"format": "gapscope-baseline/1", "config": "a:torch", "step_ms": [3], "within": [0],'
     ' "settings": {"steps": -1}, "machine": {}}', "settings.steps should be a whole number from 1"),
    ('{"format": "gapscope-baseline/1", "config": "a:torch", "step_ms": [3], "within": [0],'
     ' "settings": {"width": 0}, "machine": {}}', "settings.width must be a number above 0"),
    ('{"format": "something else"}', "not a gapscope baseline"),
    ("[" * 100_000, "not a gapscope baseline"),
    ("not json", "not a gapscope baseline"),
])
def test_a_corrupt_baseline_is_refused_in_one_line(tmp_path, content, says):
    path = tmp_path / "b.json"
    path.write_text(content)
    with pytest.raises(GapscopeInputError, match=says):
        read_baseline(path)
    result = CliRunner().invoke(cli, ["check", "linreg:torch", "--baseline", str(path), *_RUN,
                                      "--out", str(tmp_path)])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("ab-*"))   # refused before anything ran


def _verdict_or_busy(result, doc: dict, verdict: str, exit_code: int) -> bool:
    """The verdict a quiet machine gives (True), or, where the machine or the baseline's was
    busy, inconclusive with exit 3 and the reason among the warnings (False)."""
    busy = any("busy machine" in w for w in doc["warnings"]) or doc["baseline"]["busy"]
    expected = ("inconclusive", 3) if busy else (verdict, exit_code)
    assert (doc["verdict"], result.exit_code) == expected, result.output
    return not busy


def _measured_busy(folder) -> bool:
    from gapscope.analysis.measures.reliability import busy_machine
    return any(busy_machine(json.loads(m.read_text())) for m in folder.glob("*/manifest.json"))


def _mark_busy(folder):
    """An A/B folder's copy whose runs all say other processes took the cores (every one: the
    check saves one configuration's runs, and the folder's order names none first)."""
    for manifest in folder.glob("*/manifest.json"):
        doc = json.loads(manifest.read_text())
        doc["machine_load"] = {"others_cpu_pct": 88.0, "steal_pct": 0.0, "cores": 2}
        manifest.write_text(json.dumps(doc))


def test_save_then_check_unchanged_then_a_planted_slowdown(tmp_path, monkeypatch):
    runner = CliRunner()
    baseline = tmp_path / "ci" / "linreg.json"   # its folder is made: a fresh clone has none
    out = ["--out", str(tmp_path / "runs")]
    saved = runner.invoke(cli, ["check", "linreg:torch", "--baseline", str(baseline), "--save", *_RUN, *out])
    (folder,) = (tmp_path / "runs").glob("ab-linreg-*")
    if _measured_busy(folder):
        # Beside other work the baseline is refused, not written (exit 3); kept on request.
        assert saved.exit_code == 3 and "baseline not written" in saved.stderr, saved.output
        assert not baseline.exists()
        saved = runner.invoke(cli, ["check", str(folder), "--baseline", str(baseline), "--save",
                                    "--save-busy"])
        assert read_baseline(baseline).busy
    assert saved.exit_code == 0, saved.output
    assert saved.stdout.startswith(f"baseline written: {baseline} (linreg:torch: ")
    stored = read_baseline(baseline)
    assert stored.config == "linreg:torch" and len(stored.step_ms) == 3
    assert stored.settings["trace"] is False        # a check times without the profiler
    # Saving over it is refused; the file stays as it was.
    again = runner.invoke(cli, ["check", "linreg:torch", "--baseline", str(baseline), "--save", *_RUN, *out])
    assert again.exit_code == 2 and "exists" in again.stderr
    assert read_baseline(baseline) == stored
    # The same A/B folder checked against the baseline it gave: no change at all. Each check
    # that follows is a fact on a quiet machine; on a busy one (the suite also runs beside two
    # busy processes) it must say so and give no verdict: exit 3, never a pass or a failure.
    same = runner.invoke(cli, ["check", str(folder), "--baseline", str(baseline), "--format", "json"])
    doc = json.loads(same.stdout)
    assert doc["ratio"] == 1.0 and doc["ratio_ci95"] == [1.0, 1.0]
    _verdict_or_busy(same, doc, "unchanged", 0)
    _two_saves_at_once(folder, tmp_path / "b2.json", monkeypatch)
    # Unchanged, measured again: no regression (a loose threshold for the noise of 3 repeats).
    fresh = runner.invoke(cli, ["check", "linreg:torch", "--baseline", str(baseline),
                                "--threshold", "50%", "--format", "json", *_RUN, *out])
    _verdict_or_busy(fresh, json.loads(fresh.stdout), "unchanged", 0)
    # Planted: two DataLoader worker processes for a 0.3 ms step (several times slower).
    slowed = runner.invoke(cli, ["check", "linreg:torch:nw2", "--baseline", str(baseline),
                                 "--format", "json", *_RUN, *out])
    doc = json.loads(slowed.stdout)
    if _verdict_or_busy(slowed, doc, "regression", 1):
        assert doc["ratio_ci95"][0] > 1.05
    assert "the baseline measured linreg:torch, this check linreg:torch:nw2" in doc["warnings"]


def _two_saves_at_once(folder, baseline, monkeypatch):
    """Issue 47 item 7: two saves at once both printed "baseline written". The other save lands
    while this one works (planted at the last step before its write): this one is refused in
    one line, theirs is kept, and no temporary file is left."""
    from gapscope import api as api_module   # the CLI's check asks gapscope.api for the machine
    machine = api_module.machine

    def theirs_lands_meanwhile():
        baseline.write_text("theirs")
        return machine()
    monkeypatch.setattr(api_module, "machine", theirs_lands_meanwhile)
    result = CliRunner().invoke(cli, ["check", str(folder), "--baseline", str(baseline), "--save",
                                      "--save-busy"])
    monkeypatch.setattr(api_module, "machine", machine)
    assert result.exit_code == 2 and "baseline written" not in result.output, result.output
    assert result.stderr.strip().splitlines() == [
        f"gapscope: error: {baseline}: exists; remove it or name another to --save"]
    assert baseline.read_text() == "theirs"
    assert not [p for p in baseline.parent.iterdir() if p.name.startswith(f".{baseline.name}")]


def test_a_baseline_measured_busy_is_not_saved_unless_asked(tmp_path):
    import shutil
    made = CliRunner().invoke(cli, ["compare", "--measure", "linreg:torch", "linreg:torch:nw2",
                                    "--repeats", "2", "--steps", "8", "--warmup", "2",
                                    "--trace-steps", "2", "--out", str(tmp_path / "runs"), "-q"])
    (measured,) = (tmp_path / "runs").glob("ab-*")
    assert made.exit_code in (0, 3), made.output
    folder = tmp_path / "busy-ab"
    shutil.copytree(measured, folder)
    _mark_busy(folder)
    baseline = tmp_path / "b.json"
    refused = CliRunner().invoke(cli, ["check", str(folder), "--baseline", str(baseline), "--save"])
    assert refused.exit_code == 3 and not baseline.exists()
    assert refused.stderr.startswith("gapscope: baseline not written: other processes took the cores")
    kept = CliRunner().invoke(cli, ["check", str(folder), "--baseline", str(baseline), "--save",
                                    "--save-busy"])
    assert kept.exit_code == 0 and read_baseline(baseline).busy
    assert "inconclusive" in kept.stderr


def test_save_refuses_a_folder_it_cannot_make_before_measuring(tmp_path):
    (tmp_path / "a-file").write_text("x")
    given = tmp_path / "a-file" / "ci" / "b.json"
    result = CliRunner().invoke(cli, ["check", "linreg:torch", "--baseline", str(given), "--save",
                                      *_RUN, "--out", str(tmp_path / "runs")])
    assert result.exit_code == 2 and result.stderr.strip().splitlines() == [
        f"gapscope: error: {given}: cannot save a baseline there ({tmp_path / 'a-file'} is a file)"]
    under_the_file = CliRunner().invoke(cli, ["check", "linreg:torch", "--baseline",
                                              str(tmp_path / "a-file" / "b.json"), "--save"])
    assert under_the_file.stderr.strip().splitlines() == [  # mkdir's own words: "File exists"
        f"gapscope: error: {tmp_path / 'a-file' / 'b.json'}: cannot save a baseline there "
        f"({tmp_path / 'a-file'} is a file)"]
    assert not (tmp_path / "runs").exists()   # refused before anything ran
    assert CliRunner().invoke(cli, ["check", "linreg:torch", "--baseline", str(given),
                                    "--save-busy"]).exit_code == 2


def test_a_different_thread_setting_is_said():
    machine = {"host": "vm", "cpu": "x", "OMP_NUM_THREADS": "unset"}
    baseline = Baseline("cnn:torch", [100.0] * 3, [0.0] * 3, {}, machine)
    result = check(baseline, "cnn:torch", [100.0] * 3, [0.0] * 3, 0.05, {**machine, "OMP_NUM_THREADS": "1"})
    assert result.warnings == ["OMP_NUM_THREADS differs from the baseline's: 1 vs unset"]

