"""Fixtures shared by the suite's own tests. Everything here is a FIXTURE made in tmp_path.

The builders stay plain functions where a test needs to choose what it builds:
``runfactory.make_*_run`` (made-up runs, written into a store when given one),
``fixture_project.fixture_project`` (a configured project folder) and ``run_cli`` (tether
in-process). The fixtures below are the setups many tests repeat with no choice to make.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tether import project as tether_project
from tether.guard import lock
from tether.store import Run

from validate.suite.fixture_project import fixture_project
from validate.suite.runfactory import make_fixture_store

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_session_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU host's session stamps the checkout's commit (TETHER_GIT_SHA, TETHER_GIT_DIRTY:
    ci/h200-call.sh) for the runs it writes, and `tether verify` hands it to the suite. The
    suite's tests write runs into FIXTURE repositories of their own, whose commit that stamp is
    not: inherited, it would name the checkout's commit in them (on 2026-12-06 the H100's
    verify failed 40-odd such tests). A test of the stamp sets it itself."""
    monkeypatch.delenv("TETHER_GIT_SHA", raising=False)
    monkeypatch.delenv("TETHER_GIT_DIRTY", raising=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A FIXTURE project at ``tmp_path/repo`` with the defaults of ``fixture_project`` (its
    store ``results/`` not yet made)."""
    return fixture_project(tmp_path / "repo")


@pytest.fixture
def fixture_store(project: Path) -> list[Run]:
    """``runfactory.make_fixture_store`` written into ``project``'s store: the runs, in write
    order (two sweeps, a gate, a probe, a verify run, a not_measured sweep)."""
    return make_fixture_store(project / "results")


@pytest.fixture
def private_guard(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A guard of the test's own: its lock at ``tmp_path/gpu.lock`` (returned), no hold
    inherited from the session that runs the tests, and a load limit the shared box's own
    load never reaches. Subprocesses started with ``os.environ`` (``guard_env``) see it too."""
    path = tmp_path / "gpu.lock"
    monkeypatch.delenv(lock.ENV_HELD, raising=False)
    monkeypatch.setenv("TETHER_GUARD_LOAD_LIMIT", "1000")  # the shared box's load is not ours
    monkeypatch.setenv("TETHER_GUARD_LOCK", str(path))
    return path


@pytest.fixture
def guard_env(private_guard: Path) -> dict[str, str]:
    """The environment for a subprocess that must use ``private_guard``'s lock."""
    return dict(os.environ)


@pytest.fixture
def lock_holder(
    private_guard: Path, guard_env: dict[str, str]
) -> Iterator[subprocess.Popen[bytes]]:
    """A separate process (our child, so never our ancestor) holding ``private_guard``'s lock
    until the test ends."""
    code = (
        "import time\nfrom tether.guard.lock import HostLock\n"
        f"lk = HostLock({str(private_guard)!r}); assert lk.try_acquire('fixture holder')\n"
        "print('locked', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=guard_env, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"locked"
    yield proc
    proc.kill()
    proc.wait()
    proc.stdout.close()


@pytest.fixture
def repo_without_signing(monkeypatch: pytest.MonkeyPatch) -> None:
    """This repository's project config with ``[tool.tether.signing] require`` off, for the
    tests that render or check its real templates against made-up FIXTURE stores: their runs
    are unsigned, and under require none of them would be cited. What require does is tested
    on FIXTURE projects that require it (test_signed_evidence.py, test_store_signing.py)."""
    real = tether_project.get

    def get(root: Path | None = None) -> tether_project.Project:
        proj = real(root)
        if proj.require_signed and proj.root.resolve() == REPO:
            return dataclasses.replace(proj, require_signed=False)
        return proj

    monkeypatch.setattr(tether_project, "get", get)
