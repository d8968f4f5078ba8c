"""The host lock under real contention: several processes, SIGKILL, stale and forged records,
holds borrowed through the environment by a process that is not a descendant, and lock
folders that are not safe to lock in.

Every lock file lives in tmp_path (a fixture, validate/suite/conftest.py's private_guard);
nothing here touches the real host lock.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tether.errors import GUARD_STATUS_CODES, GuardError, HostBusyError
from tether.guard import _proc, lock
from tether.guard.api import HostUnavailable, acquire
from tether.guard.lock import HostLock

from validate.suite.fixture_project import run_cli

ROOT = Path(__file__).resolve().parents[2]

# FIXTURE: a worker that races for the lock ROUNDS times, logging every time it gets the lock and every time it does not.
WORKER = textwrap.dedent(
    """
    import os, sys, time, json
    from tether.guard.lock import HostLock
    path, log, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    held = 0
    while held < rounds:
        lk = HostLock(path)
        if lk.try_acquire("race"):
            t0 = time.monotonic()
            time.sleep(0.01)
            t1 = time.monotonic()
            lk.release()
            held += 1
            line = {"ev": "hold", "pid": os.getpid(), "t0": t0, "t1": t1}
        else:
            st = lk.status()
            holder = (st.record or {}).get("pid")
            line = {"ev": "lose", "pid": os.getpid(), "state": st.state, "holder": holder}
            time.sleep(0.003)
        with open(log, "a") as fh:
            fh.write(json.dumps(line) + "\\n")
    """
)


pytestmark = pytest.mark.usefixtures("private_guard")


def test_racing_processes_hold_one_at_a_time(tmp_path: Path, guard_env: dict[str, str]) -> None:
    path, log = tmp_path / "gpu.lock", tmp_path / "log.jsonl"
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(path), str(log), "8"], env=guard_env)
        for _ in range(4)
    ]
    for p in procs:
        assert p.wait(timeout=60) == 0
    events = [json.loads(line) for line in log.read_text().splitlines()]
    holds = sorted((e for e in events if e["ev"] == "hold"), key=lambda e: e["t0"])
    assert len(holds) == 32
    for a, b in itertools.pairwise(holds):
        assert b["t0"] >= a["t1"], f"overlapping holds: {a} and {b}"
    pids = {p.pid for p in procs}
    losses = [e for e in events if e["ev"] == "lose"]
    assert losses, "four racing workers never collided; the test did not exercise contention"
    for e in losses:
        # a loser either names another live worker or saw the lock freed in the meantime
        assert e["state"] in ("held", "free"), e
        if e["state"] == "held":
            assert e["holder"] in pids and e["holder"] != e["pid"], e
    assert any(e["state"] == "held" for e in losses)


def _start_guard(tmp_path: Path, cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    path = tmp_path / "gpu.lock"
    argv = [sys.executable, "-m", "tether", "--root", str(ROOT), "--store", str(tmp_path / "store")]
    argv += ["guard", "--hold", "--target", "cpu", "--lock", str(path), "--", *cmd]
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.DEVNULL)
    holder = path.with_name(path.name + ".holder.json")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if holder.exists() and json.loads(holder.read_text()).get("pid") == proc.pid:
            return proc
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("guard never took the lock")


def test_sigkilled_holder_frees_the_lock_at_once(tmp_path: Path, guard_env: dict[str, str]) -> None:
    path = tmp_path / "gpu.lock"
    code = (
        "import sys, time\nfrom tether.guard.lock import HostLock\n"
        f"lk = HostLock({str(path)!r}); assert lk.try_acquire()\n"
        "print('locked', flush=True); time.sleep(30)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], env=guard_env, stdout=subprocess.PIPE)
    assert holder.stdout is not None and holder.stdout.readline().strip() == b"locked"
    lk = HostLock(path)
    assert lk.status().state == "held"
    holder.kill()
    holder.wait()
    holder.stdout.close()
    st = lk.status()
    assert st.state == "stale" and "died" in st.summary()
    assert lk.try_acquire(), "a SIGKILLed holder with no children must free the lock at once"
    lk.release()
    assert lk.status().state == "free"


def _child_pgid(guard_pid: int) -> int:
    # The guard writes its holder record (and fsyncs the lock folder) before it starts the
    # command: on a loaded host the child appears a moment after the record.
    deadline = time.monotonic() + 20
    while True:
        kids = [p for p in _proc.all_pids() if _proc.parent(p) == guard_pid]
        if kids or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert kids, "the guard has no child"
    return os.getpgid(kids[0])


def test_inherited_descriptor_keeps_host_locked_after_guard_dies(
    tmp_path: Path, guard_env: dict[str, str]
) -> None:
    guard = _start_guard(tmp_path, ["sleep", "30"], guard_env)
    pgid = _child_pgid(guard.pid)
    guard.kill()  # SIGKILL: no cleanup in the guard at all
    guard.wait()
    lk = HostLock(tmp_path / "gpu.lock")
    try:
        assert not lk.try_acquire(), "the command still runs; the host must stay locked"
        st = lk.status(settle_s=0.05)
        assert st.state == "stale" and "inherited" in st.summary()
    finally:
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not lk.try_acquire():
        assert time.monotonic() < deadline, "lock not freed after the command died"
        time.sleep(0.02)
    lk.release()


def _forge(tmp_path: Path, **fields: object) -> HostLock:
    lk = HostLock(tmp_path / "gpu.lock")
    assert lk.try_acquire()
    rec = dict(lk.record or {})
    lk.release()
    rec.update(released_at=None, **fields)
    lk.write_record(rec)
    return lk


def test_dead_holder_record_is_stale(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    lk = _forge(tmp_path, pid=dead.pid, start_time=None)
    st = lk.status()
    assert st.state == "stale" and str(dead.pid) in st.summary()


def test_reused_pid_with_other_start_time_is_stale(tmp_path: Path) -> None:
    me = os.getpid()
    lk = _forge(tmp_path, pid=me, start_time=(_proc.start_time(me) or 0) - 1000)
    assert not lock.record_is_live(lk.read_record() or {})
    assert lk.status().state == "stale"
    lk2 = _forge(tmp_path, pid=me, boot_id="00000000-0000-0000-0000-000000000000")
    assert lk2.status().state == "stale"
    lk3 = _forge(tmp_path, pid=me)  # the same record with the real start time is live
    assert lock.record_is_live(lk3.read_record() or {})


def test_wait_deadline_names_the_holder(tmp_path: Path) -> None:
    outer = HostLock(tmp_path / "gpu.lock")
    assert outer.try_acquire("outer")
    try:
        t0 = time.monotonic()
        with pytest.raises(HostBusyError) as info, acquire(target="cpu", wait_s=0.5, poll_s=0.05):
            pass
        waited = time.monotonic() - t0
        assert 0.5 <= waited < 5
        assert f"pid {os.getpid()}" in str(info.value) and "since" in str(info.value)
    finally:
        outer.release()


def test_symlinked_lock_and_record_are_refused(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "gpu.lock").symlink_to(victim)
    with pytest.raises(GuardError, match="symlink"):
        HostLock(tmp_path / "gpu.lock").try_acquire()
    other = HostLock(tmp_path / "b.lock")
    other.holder_path.symlink_to(victim)
    with pytest.raises(GuardError, match="symlink"):
        other.try_acquire()
    assert victim.read_text() == "precious\n"


def test_foreign_owned_lock_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gpu.lock").touch()
    # simulate another account owning the file: we are no longer an expected owner
    monkeypatch.setattr(lock, "_expected_uids", lambda: frozenset({4242}))
    with pytest.raises(GuardError, match="owned by uid"):
        HostLock(tmp_path / "gpu.lock").try_acquire()


def test_network_filesystem_refused_unless_allowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lock, "fs_type", lambda _p: "nfs4")
    with pytest.raises(GuardError, match="network filesystem"):
        HostLock(tmp_path / "gpu.lock").try_acquire()
    monkeypatch.setenv(lock.ENV_ALLOW_NFS, "1")
    lk = HostLock(tmp_path / "gpu.lock")
    assert lk.try_acquire()
    lk.release()


def test_nested_guard_does_not_deadlock(tmp_path: Path, guard_env: dict[str, str]) -> None:
    path = tmp_path / "gpu.lock"
    inner_py = "from tether.guard.api import acquire\nwith acquire(target='cpu', wait_s=0) as h: print('nested', h.nested)"
    base = [sys.executable, "-m", "tether", "--root", str(ROOT), "--store", str(tmp_path / "s")]
    hold = ["guard", "--hold", "--target", "cpu", "--lock", str(path)]
    argv = [*base, *hold, "--", *base, *hold, "--wait", "0", "--", sys.executable, "-c", inner_py]
    done = subprocess.run(argv, env=guard_env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "nested True" in done.stdout
    assert "nested under an outer guard" in done.stderr


def test_signals_are_forwarded_to_the_command(tmp_path: Path, guard_env: dict[str, str]) -> None:
    script = "trap 'exit 7' TERM; sleep 30 & wait"
    guard = _start_guard(tmp_path, ["sh", "-c", script], guard_env)
    time.sleep(0.2)  # let sh install its trap
    guard.send_signal(signal.SIGTERM)
    assert guard.wait(timeout=20) == 7


# -- a nested hold is for descendants only ----------------------------------------------------


def test_env_naming_the_holder_does_not_let_an_unrelated_process_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lock_holder: subprocess.Popen[bytes]
) -> None:
    # This test process is the holder's parent, not its descendant: copying the variable the
    # guard gives its command must not borrow the hold.
    monkeypatch.setenv(lock.ENV_HELD, f"{tmp_path / 'gpu.lock'}:{lock_holder.pid}")
    err = io.StringIO()
    with pytest.raises(HostUnavailable) as info, acquire(target="cpu", wait_s=0.2, err=err):
        pass
    assert f"pid {lock_holder.pid}" in str(info.value)
    assert "not an ancestor" in err.getvalue()


def test_a_true_descendant_still_nests(tmp_path: Path, guard_env: dict[str, str]) -> None:
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
        [sys.executable, "-c", code], env=guard_env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "nested True" in done.stdout


# -- holder records are checked against the process and the kernel ----------------------------


def test_forged_record_is_reported_and_the_real_holder_named(
    project: Path, tmp_path: Path, lock_holder: subprocess.Popen[bytes]
) -> None:
    lk = HostLock(tmp_path / "gpu.lock")
    forged = dict(lk.read_record() or {})
    me = os.getpid()
    # a record naming a live process (this one, with its true start time) that holds nothing
    forged.update(pid=me, start_time=lock._proc.start_time(me), argv=["made", "up"])
    lk.write_record(forged)
    st = lk.status(settle_s=0.05)
    assert st.state == "held" and st.record_state == lock.FORGED
    assert lock_holder.pid in (st.holders or [])
    text = st.summary()
    assert "forged" in text and f"pid {lock_holder.pid}" in text
    assert "made up" not in text, "a forged record must not be presented as the holder"
    rc, out, _ = run_cli(project, "guard", "--target", "cpu", "status")
    assert rc == GUARD_STATUS_CODES["held"] and "forged" in out


def test_record_claiming_another_host_cannot_hide_a_local_holder(
    tmp_path: Path, lock_holder: subprocess.Popen[bytes]
) -> None:
    lk = HostLock(tmp_path / "gpu.lock")
    forged = dict(lk.read_record() or {}, host="elsewhere", pid=1, start_time=None)
    lk.write_record(forged)
    st = lk.status(settle_s=0.05)
    assert st.record_state == lock.FORGED and f"pid {lock_holder.pid}" in st.summary()


def test_verified_record_names_the_holder(
    tmp_path: Path, lock_holder: subprocess.Popen[bytes]
) -> None:
    st = HostLock(tmp_path / "gpu.lock").status()
    assert (st.state, st.record_state) == ("held", lock.VERIFIED)
    assert f"pid {lock_holder.pid}" in st.summary() and "fixture holder" not in st.notes


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
