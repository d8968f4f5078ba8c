"""Routed public-API cases counted by arm: the plugin's fixture, the xdist merge, the verify
run's ``routed_cases`` and its schema. Fixture suites are written into tmp_path."""

from __future__ import annotations

import copy
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
from tether.pytest_plugin import SUMMARY_ENV, read_routed_summary
from tether.store import load_store, run_from_json

from validate.suite.runfactory import make_verify_run, resealed
from validate.suite.workers import ONE_PROCESS_AND_XDIST

ROOT = Path(__file__).resolve().parents[2]

# A FIXTURE suite: three tests record four routed calls on two made-up arms.
SUITE = {
    # the plugin loads through its pytest11 entry point (the project's install)
    "conftest.py": "",
    "test_fixture_routed.py": """
        import pytest

        @pytest.mark.parametrize("arm", ["arm_a", "arm_a", "arm_b"])
        def test_call(routed_case, arm):
            routed_case(arm)

        def test_two_calls(routed_case):
            routed_case("arm_b")
    """,
}


def _suite(tmp_path: Path) -> Path:
    suite = tmp_path / "routed_suite"
    suite.mkdir()
    for name, body in SUITE.items():
        (suite / name).write_text(textwrap.dedent(body), encoding="utf-8")
    return suite


def _pytest(suite: Path, summary: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider", *extra]
    env = {**os.environ, SUMMARY_ENV: str(summary)}
    return subprocess.run(cmd, cwd=suite, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("workers", ONE_PROCESS_AND_XDIST)
def test_the_session_writes_the_counts_merged_over_workers(
    tmp_path: Path, workers: tuple[str, ...]
) -> None:
    summary = tmp_path / "summary.json"
    done = _pytest(_suite(tmp_path), summary, *workers)
    assert done.returncode == 0, done.stdout + done.stderr
    assert read_routed_summary(summary) == {"arm_a": 2, "arm_b": 2}


def test_without_the_variable_nothing_is_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(SUMMARY_ENV, raising=False)
    suite = _suite(tmp_path)
    cmd = [sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(cmd, cwd=suite, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(tmp_path.rglob("*.json"))


def test_a_malformed_summary_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"routed_cases": {"arm_a": -1}}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"routed_cases\.arm_a"):
        read_routed_summary(path)
    with pytest.raises(RunFileError, match="routed_cases"):
        verify.routed_cases(path)
    assert verify.routed_cases(tmp_path / "absent.json") is None


@pytest.mark.usefixtures("private_guard")
def test_verify_records_the_routed_cases(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify, "detect_vendor", lambda: "cpu")
    # Inside a real `tether verify` (a GPU host's), the outer verify has set it for this suite.
    outer = os.environ.get(SUMMARY_ENV)
    out, err = io.StringIO(), io.StringIO()
    argv = ["--root", str(ROOT), "--store", str(tmp_path / "s"), "verify"]
    rc = main([*argv, "--suite", str(_suite(tmp_path))], out=out, err=err)
    assert rc == 0, out.getvalue() + err.getvalue()
    lines = out.getvalue().strip().splitlines()
    assert lines[-1] == "[verify-cpu] OK"
    assert "[verify-cpu] routed public-API cases by arm: arm_a 2, arm_b 2" in lines
    (run,) = load_store(tmp_path / "s")
    assert run.results["routed_cases"] == {"arm_a": 2, "arm_b": 2}
    assert os.environ.get(SUMMARY_ENV) == outer  # set for the child only


@pytest.mark.parametrize(
    ("counts", "problem"),
    [
        pytest.param({"triton": -1}, "non-negative int", id="negative"),
        pytest.param({"triton": 1.5}, "non-negative int", id="float"),
        pytest.param({"triton": True}, "non-negative int", id="bool"),
        pytest.param({"a|b": 1}, "identifiers", id="pipe-in-name"),
        pytest.param([1], "expected object", id="list"),
    ],
)
def test_schema_refuses_bad_routed_cases(counts: object, problem: str) -> None:
    base = make_verify_run()

    def sealed(routed: object) -> dict:
        # As the harness would write it: digest and content-addressed id recomputed, so the
        # schema, not the digest, is what answers.
        return resealed(base, results={**base.results, "routed_cases": routed}).to_json()

    good = sealed({"triton": 3, "sdpa_cudnn": 0})
    assert run_from_json(good, "fixture.json").results["routed_cases"]["triton"] == 3
    with pytest.raises(RunFileError, match=problem):
        run_from_json(sealed(copy.deepcopy(counts)), "fixture.json")
