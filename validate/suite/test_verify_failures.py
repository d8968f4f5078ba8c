"""Failures named as they happen: the plugin's failure log, and the verify run's
``failures``, also for a suite that stops before its summary (a lent host's deadline).
Fixture suites are written into tmp_path."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tether import verify
from tether.cli import main
from tether.errors import RunFileError
from tether.pytest_plugin import FAILURES_ENV, read_failures
from tether.render import render_all
from tether.store import load_store, write_run

from validate.suite.runfactory import resealed
from validate.suite.workers import ONE_PROCESS_AND_XDIST

ROOT = Path(__file__).resolve().parents[2]

FAILING = """
    import pytest

    def test_passes():
        pass

    def test_fails():
        assert 1 == 2, "one is not two"

    @pytest.fixture
    def broken():
        raise RuntimeError("fixture broke")

    def test_setup_error(broken):
        pass
"""
# A suite whose second test ends the process: nothing after it is reported, no summary.
CUT_OFF = """
    import os

    def test_fails_first():
        assert False, "seen before the cut"

    def test_ends_the_run():
        os._exit(3)

    def test_never_runs():
        pass
"""

# A suite interrupted in its second test, as a deadline's SIGINT (or Ctrl-C) stops it: pytest
# then writes a junit xml of what ran until then, no failure in it.
INTERRUPTED = """
    import os
    import signal

    def test_passes_first():
        pass

    def test_is_interrupted():
        # Python's own handler, whatever the process inherited: a suite started in the
        # background of a non-interactive shell inherits SIGINT ignored, and the kill would
        # then interrupt nothing.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), signal.SIGINT)

    def test_never_runs():
        pass
"""


def _suite(tmp_path: Path, body: str) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text("", encoding="utf-8")
    (suite / "test_fixture_failures.py").write_text(textwrap.dedent(body), encoding="utf-8")
    return suite


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_XDIST)
def test_each_failure_is_logged_once_with_its_phase_and_message(
    tmp_path: Path, workers: tuple[str, ...]
) -> None:
    log = tmp_path / "failures.jsonl"
    suite = _suite(tmp_path, FAILING)
    cmd = [sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider", *workers]
    env = {**os.environ, FAILURES_ENV: str(log)}
    done = subprocess.run(cmd, cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    got = sorted(read_failures(log), key=lambda f: f["nodeid"])
    assert [(f["nodeid"].split("::")[-1], f["when"]) for f in got] == [
        ("test_fails", "call"),
        ("test_setup_error", "setup"),
    ]
    assert "one is not two" in got[0]["message"]
    assert "fixture broke" in got[1]["message"]


def test_a_torn_last_line_is_dropped_and_any_other_bad_line_named(tmp_path: Path) -> None:
    log = tmp_path / "failures.jsonl"
    good = json.dumps({"nodeid": "t.py::test_a", "when": "call", "message": "m"})
    log.write_text(good + '\n{"nodeid": "t.py::te', encoding="utf-8")
    assert [f["nodeid"] for f in read_failures(log)] == ["t.py::test_a"]
    log.write_text('{"nodeid": \n' + good + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"failures\.jsonl:1: not a JSON line"):
        read_failures(log)
    with pytest.raises(RunFileError, match="failures"):
        verify.failures_seen(log)
    assert read_failures(tmp_path / "absent.jsonl") == []


@pytest.mark.usefixtures("private_guard")
def test_a_verify_cut_off_before_its_summary_still_names_what_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(verify, "detect_vendor", lambda: "cpu")
    outer = os.environ.get(FAILURES_ENV)
    out, err = io.StringIO(), io.StringIO()
    argv = ["--root", str(ROOT), "--store", str(tmp_path / "s"), "verify"]
    rc = main([*argv, "--suite", str(_suite(tmp_path, CUT_OFF))], out=out, err=err)
    assert rc == 1, out.getvalue() + err.getvalue()
    assert "failed: " in out.getvalue() and "seen before the cut" in out.getvalue()
    (run,) = load_store(tmp_path / "s")
    assert run.status == "rejected"
    assert "no junit xml" in (run.reason or "") and "1 failure(s)" in (run.reason or "")
    assert run.results["failed"] == 1
    assert [f.split("::")[-1] for f in run.results["failures"]] == ["test_fails_first"]
    assert os.environ.get(FAILURES_ENV) == outer  # set for the child only


@pytest.mark.usefixtures("private_guard")
@pytest.mark.usefixtures("repo_without_signing")  # renders unsigned FIXTURE runs
def test_an_interrupted_verify_is_no_pass_of_the_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its junit xml shows one test passed and none failed; pytest's exit status says it
    stopped. The run is rejected, marked stopped, and the README says so, not a pass."""
    monkeypatch.setattr(verify, "detect_vendor", lambda: "cpu")
    out, err = io.StringIO(), io.StringIO()
    store = tmp_path / "s"
    argv = ["--root", str(ROOT), "--store", str(store), "verify"]
    rc = main([*argv, "--suite", str(_suite(tmp_path, INTERRUPTED))], out=out, err=err)
    assert rc == 1, out.getvalue() + err.getvalue()
    (run,) = load_store(store)
    assert run.status == "rejected" and run.results["stopped"] is True
    assert (run.results["passed"], run.results["failed"]) == (1, 0)
    assert "stopped before the end of the suite, 1 passed until then" in (run.reason or "")
    # As the Tested line shows it (that line takes runs of the whole suite: this one, resealed
    # as if it had been, a FIXTURE).
    whole = tmp_path / "whole"
    write_run(resealed(run, results={**run.results, "complete": True}), whole)
    readme = render_all(ROOT, whole)[Path("README.md")].decode()
    line = readme.split("Tested: ")[1].split("\n")[0]
    assert line.startswith("FAILED (pytest exit status") and "before the suite stopped" in line
    assert "the whole suite" not in line
