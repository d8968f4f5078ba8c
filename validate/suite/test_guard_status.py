"""The guard under hostile neighbours: borrowed holds, forged records, unsafe lock folders,
status exit codes, waiting that says why, and every setting documented.

Every lock lives in tmp_path (a fixture); the fixture project is written there too.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tether.cli import main
from tether.errors import GUARD_STATUS_CODES, GuardError
from tether.guard import lock
from tether.guard.api import HostUnavailable, acquire
from tether.guard.lock import HostLock

from validate.suite.fixture_project import fixture_project, run_cli

GUARD_SOURCES = Path(__file__).resolve().parents[2] / "lib" / "tether" / "guard"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(lock.ENV_HELD, raising=False)
    monkeypatch.setenv("TETHER_GUARD_LOAD_LIMIT", "1000")  # the shared box's load is not ours
    monkeypatch.setenv("TETHER_GUARD_LOCK", str(tmp_path / "gpu.lock"))


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(lock.ENV_HELD, None)
    env["TETHER_GUARD_LOCK"] = str(tmp_path / "gpu.lock")
    return env


def _holder(tmp_path: Path) -> subprocess.Popen[bytes]:
    """A separate process (our child, so never our ancestor) holding the fixture lock."""
    code = (
        "import time\nfrom tether.guard.lock import HostLock\n"
        f"lk = HostLock({str(tmp_path / 'gpu.lock')!r}); assert lk.try_acquire('fixture holder')\n"
        "print('locked', flush=True); time.sleep(60)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=_env(tmp_path), stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"locked"
    return proc


@pytest.fixture
def holder(tmp_path: Path):  # type: ignore[no-untyped-def]
    proc = _holder(tmp_path)
    yield proc
    proc.kill()
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


# -- a nested hold is for descendants only ----------------------------------------------------


def test_env_naming_the_holder_does_not_let_an_unrelated_process_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, holder: subprocess.Popen[bytes]
) -> None:
    # This test process is the holder's parent, not its descendant: copying the variable the
    # guard gives its command must not borrow the hold.
    monkeypatch.setenv(lock.ENV_HELD, f"{tmp_path / 'gpu.lock'}:{holder.pid}")
    err = io.StringIO()
    with pytest.raises(HostUnavailable) as info, acquire(target="cpu", wait_s=0.2, err=err):
        pass
    assert f"pid {holder.pid}" in str(info.value)
    assert "not an ancestor" in err.getvalue()


def test_a_true_descendant_still_nests(tmp_path: Path) -> None:
    # The holder's own child, given the variable by the holder, is a descendant: it nests.
    code = (
        "import subprocess, sys, time\nfrom tether.guard.lock import HostLock, held_env\n"
        "import os\n"
        f"lk = HostLock({str(tmp_path / 'b.lock')!r}); assert lk.try_acquire('outer')\n"
        "env = dict(os.environ, **held_env(lk))\n"
        "inner = 'from tether.guard.api import acquire\\n"
        'with acquire(target="cpu", wait_s=0, lock_path=%r) as h: print("nested", h.nested)\''
        f" % {str(tmp_path / 'b.lock')!r}\n"
        "sys.exit(subprocess.run([sys.executable, '-c', inner], env=env).returncode)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(tmp_path), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "nested True" in done.stdout


# -- holder records are checked against the process and the kernel ----------------------------


def test_forged_record_is_reported_and_the_real_holder_named(
    tmp_path: Path, holder: subprocess.Popen[bytes]
) -> None:
    lk = HostLock(tmp_path / "gpu.lock")
    forged = dict(lk.read_record() or {})
    me = os.getpid()
    # a record naming a live process (this one, with its true start time) that holds nothing
    forged.update(pid=me, start_time=lock._proc.start_time(me), argv=["made", "up"])
    lk.write_record(forged)
    st = lk.status(settle_s=0.05)
    assert st.state == "held" and st.record_state == lock.FORGED
    assert holder.pid in (st.holders or [])
    text = st.summary()
    assert "forged" in text and f"pid {holder.pid}" in text
    assert "made up" not in text, "a forged record must not be presented as the holder"
    rc, out, _ = run_cli(fixture_project(tmp_path / "repo"), "guard", "--target", "cpu", "status")
    assert rc == GUARD_STATUS_CODES["held"] and "forged" in out


def test_record_claiming_another_host_cannot_hide_a_local_holder(
    tmp_path: Path, holder: subprocess.Popen[bytes]
) -> None:
    lk = HostLock(tmp_path / "gpu.lock")
    forged = dict(lk.read_record() or {}, host="elsewhere", pid=1, start_time=None)
    lk.write_record(forged)
    st = lk.status(settle_s=0.05)
    assert st.record_state == lock.FORGED and f"pid {holder.pid}" in st.summary()


def test_verified_record_names_the_holder(tmp_path: Path, holder: subprocess.Popen[bytes]) -> None:
    st = HostLock(tmp_path / "gpu.lock").status()
    assert (st.state, st.record_state) == ("held", lock.VERIFIED)
    assert f"pid {holder.pid}" in st.summary() and "fixture holder" not in st.notes


# -- the lock folder must be safe ------------------------------------------------------------


def test_world_writable_folder_without_sticky_bit_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "open"
    folder.mkdir()
    folder.chmod(0o777)
    with pytest.raises(GuardError, match=r"world-writable .* without the sticky bit"):
        HostLock(folder / "gpu.lock").try_acquire()
    assert not (folder / "gpu.lock").exists(), "nothing is created in an unsafe folder"
    folder.chmod(0o1777)  # like /tmp: anybody may create, only owners may delete
    ok = HostLock(folder / "gpu.lock")
    assert ok.try_acquire()
    ok.release()


def test_folder_owned_by_another_account_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "theirs"
    folder.mkdir()
    if os.getuid() == 0:
        os.chown(folder, 4242, 4242)  # root can make the folder really someone else's
    else:  # otherwise make our own uid unexpected: only root may own the lock folder
        monkeypatch.setattr(lock, "_expected_uids", lambda: frozenset({0}))
    with pytest.raises(GuardError, match=rf"lock folder {re.escape(str(folder))}: owned by uid"):
        HostLock(folder / "gpu.lock").try_acquire()


# -- `guard status`: exit codes, JSON ---------------------------------------------------------


def test_status_exit_codes_free_held_unknown(tmp_path: Path) -> None:
    root = fixture_project(tmp_path / "repo")
    rc, out, _ = run_cli(root, "guard", "--target", "cpu", "status")
    assert rc == GUARD_STATUS_CODES["free"] == 0 and "state: free" in out
    lk = HostLock(tmp_path / "gpu.lock")
    assert lk.try_acquire("fixture")
    try:
        rc, out, _ = run_cli(root, "guard", "--target", "cpu", "status")
    finally:
        lk.release()
    assert rc == GUARD_STATUS_CODES["held"] != 0 and "state: held" in out
    unsafe = tmp_path / "unsafe"
    unsafe.mkdir()
    unsafe.chmod(0o777)
    rc, out, _ = run_cli(
        root, "guard", "--lock", str(unsafe / "x.lock"), "--target", "cpu", "status"
    )
    assert rc == GUARD_STATUS_CODES["unknown"] and rc not in (0, GUARD_STATUS_CODES["held"])
    assert "world-writable" in out


def test_status_json(tmp_path: Path) -> None:
    rc, out, _ = run_cli(
        fixture_project(tmp_path / "repo"), "guard", "--target", "cpu", "status", "--json"
    )
    doc = json.loads(out)
    assert rc == 0 and doc["state"] == "free" and doc["exit_code"] == 0
    assert doc["lock"]["state"] == "free" and doc["host"]["verdict"] == "idle"


def test_help_documents_the_status_codes_and_every_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = fixture_project(tmp_path / "repo")
    assert main(["--root", str(root), "guard", "--help"]) == 0
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
    tmp_path: Path, holder: subprocess.Popen[bytes]
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
    assert all(f"pid {holder.pid}" in ln for ln in lines)


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


# -- a refusal is not evidence: it goes to the scratch store -----------------------------------


def test_refused_hold_records_in_scratch_not_the_committed_store(
    tmp_path: Path, holder: subprocess.Popen[bytes]
) -> None:
    root = fixture_project(tmp_path / "repo")
    argv = ("guard", "--hold", "--wait", "0.2", "--target", "cpu", "--", "true")
    rc, _, err = run_cli(root, *argv)
    assert rc == 75, err
    assert not (root / "results").exists(), "a refusal must not write the committed store"
    runs = list((root / "scratch" / "results").rglob("*.json"))
    assert len(runs) == 1 and str(runs[0]) in err
    rc, _, _ = run_cli(root, "--store", str(tmp_path / "mine"), *argv)
    assert rc == 75 and len(list((tmp_path / "mine").rglob("*.json"))) == 1
    assert not (root / "results").exists()


def test_verify_on_a_host_without_gpu_records_in_scratch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether import verify

    monkeypatch.setattr(verify, "detect_vendor", lambda: "cpu")
    root = fixture_project(tmp_path / "repo")
    suite = tmp_path / "tiny_suite"
    suite.mkdir()
    (suite / "test_tiny.py").write_text("def test_a():\n    pass\n", encoding="utf-8")
    rc, out, err = run_cli(root, "verify", "--suite", str(suite))
    assert rc == 0, out + err
    assert not (root / "results").exists()
    assert len(list((root / "scratch" / "results").rglob("*.json"))) == 1
    assert "no GPU on this host" in err
