"""What the guard tells: `tether guard status` exit codes and JSON, a help that documents every
setting, and waiting that says why (the lock's holder, the busy probe).

Every lock lives in tmp_path (validate/suite/conftest.py's private_guard); the fixture project
is written there too.
"""

from __future__ import annotations

import io
import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from tether.cli import main
from tether.errors import GUARD_STATUS_CODES
from tether.guard.api import HostUnavailable, acquire
from tether.guard.lock import HostLock

from validate.suite.fixture_project import run_cli

GUARD_SOURCES = Path(__file__).resolve().parents[2] / "lib" / "tether" / "guard"

pytestmark = pytest.mark.usefixtures("private_guard")


# -- `guard status`: exit codes, JSON ---------------------------------------------------------


def test_status_exit_codes_free_held_unknown(project: Path, tmp_path: Path) -> None:
    rc, out, _ = run_cli(project, "guard", "--target", "cpu", "status")
    assert rc == GUARD_STATUS_CODES["free"] == 0 and "state: free" in out
    lk = HostLock(tmp_path / "gpu.lock")
    assert lk.try_acquire("fixture")
    try:
        rc, out, _ = run_cli(project, "guard", "--target", "cpu", "status")
    finally:
        lk.release()
    assert rc == GUARD_STATUS_CODES["held"] != 0 and "state: held" in out
    unsafe = tmp_path / "unsafe"
    unsafe.mkdir()
    unsafe.chmod(0o777)
    rc, out, _ = run_cli(
        project, "guard", "--lock", str(unsafe / "x.lock"), "--target", "cpu", "status"
    )
    assert rc == GUARD_STATUS_CODES["unknown"] and rc not in (0, GUARD_STATUS_CODES["held"])
    assert "world-writable" in out


def test_status_json(project: Path) -> None:
    rc, out, _ = run_cli(project, "guard", "--target", "cpu", "status", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["state"] == "free" and doc["exit_code"] == 0
    assert doc["lock"]["state"] == "free" and doc["host"]["verdict"] == "idle"


def test_help_documents_the_status_codes_and_every_setting(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--root", str(project), "guard", "--help"]) == 0
    text = capsys.readouterr().out
    read = set()
    for path in GUARD_SOURCES.glob("*.py"):
        read |= set(re.findall(r"TETHER_GUARD_[A-Z_]+", path.read_text(encoding="utf-8")))
    assert {"TETHER_GUARD_LOAD_LIMIT", "TETHER_GUARD_LOCK", "TETHER_GUARD_HELD"} <= read
    missing = sorted(name for name in read if name not in text)
    assert not missing, f"settings the guard reads but `tether guard --help` omits: {missing}"
    for code in set(GUARD_STATUS_CODES.values()):
        assert re.search(rf"^\s+{code}\s", text, re.M), f"exit code {code} not explained"


# -- waiting says so, and why ------------------------------------------------------------------


def test_waiting_for_the_lock_reports_progress_and_the_holder(
    tmp_path: Path, lock_holder: subprocess.Popen[bytes]
) -> None:
    err = io.StringIO()
    t0 = time.monotonic()
    with (
        pytest.raises(HostUnavailable),
        acquire(target="cpu", wait_s=1.0, poll_s=0.05, err=err, report_s=0.3),
    ):
        pass
    assert time.monotonic() - t0 >= 1.0
    lines = [ln for ln in err.getvalue().splitlines() if ln.startswith("guard: waiting")]
    assert 2 <= len(lines) <= 6, err.getvalue()  # at once, then every report_s: not every poll
    assert all(f"pid {lock_holder.pid}" in ln for ln in lines)


def test_waiting_for_idle_names_the_busy_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_GUARD_LOAD_LIMIT", "-1")  # any load is too much
    err = io.StringIO()
    with (
        pytest.raises(HostUnavailable),
        acquire(target="cpu", wait_s=0.5, poll_s=0.05, err=err, report_s=10),
    ):
        pass
    (line,) = [ln for ln in err.getvalue().splitlines() if ln.startswith("guard: waiting")]
    assert "loadavg busy" in line
