"""The host lock under real contention: several processes, SIGKILL, stale and forged records.

Every lock file lives in tmp_path (a fixture); nothing here touches the real host lock.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tether.errors import GuardError, HostBusyError
from tether.guard import _proc, lock
from tether.guard.api import acquire
from tether.guard.lock import HostLock

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


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop(lock.ENV_HELD, None)
    env["TETHER_GUARD_LOAD_LIMIT"] = "1000"  # the box's own load must not make tests flaky
    env["TETHER_GUARD_LOCK"] = str(tmp_path / "gpu.lock")
    return env


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(lock.ENV_HELD, raising=False)
    monkeypatch.setenv("TETHER_GUARD_LOAD_LIMIT", "1000")
    monkeypatch.setenv("TETHER_GUARD_LOCK", str(tmp_path / "gpu.lock"))


def test_racing_processes_hold_one_at_a_time(tmp_path: Path) -> None:
    path, log = tmp_path / "gpu.lock", tmp_path / "log.jsonl"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(path), str(log), "8"], env=_env(tmp_path)
        )
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


def _start_guard(tmp_path: Path, cmd: list[str]) -> subprocess.Popen[bytes]:
    path = tmp_path / "gpu.lock"
    argv = [sys.executable, "-m", "tether", "--root", str(ROOT), "--store", str(tmp_path / "store")]
    argv += ["guard", "--hold", "--target", "cpu", "--lock", str(path), "--", *cmd]
    proc = subprocess.Popen(argv, env=_env(tmp_path), stderr=subprocess.DEVNULL)
    holder = path.with_name(path.name + ".holder.json")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if holder.exists() and json.loads(holder.read_text()).get("pid") == proc.pid:
            return proc
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("guard never took the lock")


def test_sigkilled_holder_frees_the_lock_at_once(tmp_path: Path) -> None:
    path = tmp_path / "gpu.lock"
    code = (
        "import sys, time\nfrom tether.guard.lock import HostLock\n"
        f"lk = HostLock({str(path)!r}); assert lk.try_acquire()\n"
        "print('locked', flush=True); time.sleep(30)"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], env=_env(tmp_path), stdout=subprocess.PIPE
    )
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


def test_inherited_descriptor_keeps_host_locked_after_guard_dies(tmp_path: Path) -> None:
    guard = _start_guard(tmp_path, ["sleep", "30"])
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


def test_nested_guard_does_not_deadlock(tmp_path: Path) -> None:
    path = tmp_path / "gpu.lock"
    inner_py = "from tether.guard.api import acquire\nwith acquire(target='cpu', wait_s=0) as h: print('nested', h.nested)"
    base = [sys.executable, "-m", "tether", "--root", str(ROOT), "--store", str(tmp_path / "s")]
    hold = ["guard", "--hold", "--target", "cpu", "--lock", str(path)]
    argv = [*base, *hold, "--", *base, *hold, "--wait", "0", "--", sys.executable, "-c", inner_py]
    done = subprocess.run(argv, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "nested True" in done.stdout
    assert "nested under an outer guard" in done.stderr


def test_signals_are_forwarded_to_the_command(tmp_path: Path) -> None:
    script = "trap 'exit 7' TERM; sleep 30 & wait"
    guard = _start_guard(tmp_path, ["sh", "-c", script])
    time.sleep(0.2)  # let sh install its trap
    guard.send_signal(signal.SIGTERM)
    assert guard.wait(timeout=20) == 7
