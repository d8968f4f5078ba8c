"""The host lock: one flock'd file per host, never deleted, plus a holder record beside it.

flock (not a pid file) is the lock because the kernel frees it the moment the last descriptor
closes, so a killed guard never wedges the host; the descriptor is inherited by the held
command, so a killed guard does not free the host while that command's children still run.
The holder record only *describes* the holder; it is never trusted to decide who holds.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import json
import os
import socket
import stat
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tether.atomic import utc_stamp, write_atomic
from tether.errors import GuardError
from tether.guard import _proc
from tether.store.provenance import git_state

ENV_LOCK = "TETHER_GUARD_LOCK"
ENV_ALLOW_NFS = "TETHER_GUARD_ALLOW_NFS"
ENV_HELD = "TETHER_GUARD_HELD"

# flock over these is either a no-op or per-client, so it cannot exclude another host's user
NETWORK_FS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs", "lustre", "afs", "gpfs"}
)


def _expected_uids() -> frozenset[int]:
    """Owners a lock or record may have: us, or root (a shared /var/lock file)."""
    return frozenset({os.getuid(), 0})


def default_lock_path() -> Path:
    env = os.environ.get(ENV_LOCK)
    if env:
        return Path(env)
    if os.access("/var/lock", os.W_OK):
        return Path("/var/lock/tether-gpu.lock")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and os.access(runtime, os.W_OK) else Path("/tmp")
    return base / f"tether-gpu-{os.getuid()}.lock"


def fs_type(path: Path) -> str | None:
    """Filesystem type of the mount holding ``path`` (longest mount-point prefix in /proc/mounts)."""
    target = os.path.realpath(path)
    best, best_type = "", None
    try:
        lines = Path("/proc/mounts").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1].replace("\\040", " ")
        inside = target == mnt or target.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= len(best):
            best, best_type = mnt, parts[2]
    return best_type


def check_local(path: Path, warn: TextIO | None = None) -> None:
    """Refuse a lock on a network filesystem unless $TETHER_GUARD_ALLOW_NFS=1 (then warn)."""
    kind = fs_type(path.parent)
    if kind is None or (kind not in NETWORK_FS and not kind.startswith("fuse.sshfs")):
        return
    if os.environ.get(ENV_ALLOW_NFS) == "1":
        print(
            f"tether guard: warning: lock {path} is on {kind}; flock may not exclude other hosts",
            file=warn or sys.stderr,
        )
        return
    raise GuardError(
        f"lock {path}: directory is on a network filesystem ({kind}) where flock does not "
        f"exclude other hosts; use a local path via ${ENV_LOCK} or set {ENV_ALLOW_NFS}=1"
    )


def check_folder(folder: Path) -> None:
    """Refuse a lock folder in which another account could delete or replace the lock.

    The folder and every folder above it must be owned by this user or root, and one that
    anybody may write to must carry the sticky bit (as /tmp and /run/lock do): without it any
    user can unlink our lock and make a second one, and two guards then "hold" the host.
    """
    real = Path(os.path.realpath(folder))
    for here in (real, *real.parents):
        try:
            st = os.stat(here)
        except OSError as exc:
            raise GuardError(f"lock folder {here}: cannot inspect it: {exc.strerror}") from exc
        if not stat.S_ISDIR(st.st_mode):
            raise GuardError(f"lock folder {here}: not a folder")
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid not in _expected_uids():
            raise GuardError(
                f"lock folder {here}: owned by uid {st.st_uid}, not by this user or root, so "
                f"its owner could replace the lock; choose a folder you own via ${ENV_LOCK}"
            )
        if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
            raise GuardError(
                f"lock folder {here}: world-writable (mode {mode:04o}) without the sticky bit, "
                f"so any user could delete or replace the lock; use `chmod +t` on it or choose "
                f"another folder via ${ENV_LOCK}"
            )


def open_checked(path: Path, flags: int, mode: int = 0o644) -> int:
    """Open without following symlinks and refuse a file another account owns."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise GuardError(f"{path}: is a symlink; refusing to follow it") from exc
        raise GuardError(f"{path}: cannot open: {exc.strerror}") from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise GuardError(f"{path}: not a regular file")
    if st.st_uid not in _expected_uids():
        os.close(fd)
        raise GuardError(
            f"{path}: owned by uid {st.st_uid}, not by this user or root; refusing to use it"
        )
    return fd


def _git_sha() -> str:
    """The holder's commit, by the same rule as a run's provenance (a sender's stamp first)."""

    return git_state(Path(__file__).resolve().parent)[0]


def _ci_url() -> str | None:
    keys = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    server, repo, run = (os.environ.get(k) for k in keys)
    return f"{server}/{repo}/actions/runs/{run}" if server and repo and run else None


def _utc(ts: float) -> str:
    return utc_stamp(ts)


def holder_record(lock: Path, purpose: str = "", argv: list[str] | None = None) -> dict[str, Any]:
    pid = os.getpid()
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return {
        "lock": str(lock),
        "pid": pid,
        "start_time": _proc.start_time(pid),
        "host": socket.gethostname(),
        "boot_id": _proc.boot_id(),
        "user": user,
        "argv": list(sys.argv if argv is None else argv),
        "purpose": purpose,
        "git_sha": _git_sha(),
        "ci_url": _ci_url(),
        "acquired_at": _utc(time.time()),
        "released_at": None,
    }


def record_is_live(record: dict[str, Any]) -> bool:
    """Whether the process a record names still runs (same pid, start time and boot)."""
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    if record.get("boot_id") and record.get("boot_id") != _proc.boot_id():
        return False
    return _proc.alive(pid, record.get("start_time"))


# What a holder record is worth, checked against the live process and the kernel's lock table.
VERIFIED = "verified"  # names a live process (pid, start time, boot) that holds the flock
FORGED = "forged"  # names a live process that does not hold the flock
DEAD = "dead"  # names a process that is gone (or a pid reused since, or an earlier boot)
RELEASED = "released"  # its holder released the lock
MISSING = "missing"  # no record at all
UNREADABLE = "unreadable"  # not a holder record (bad JSON, missing or mistyped fields)
UNVERIFIABLE = "unverifiable"  # another host's process, or no /proc/locks to ask


@dataclass(frozen=True)
class RecordCheck:
    """The verdict on a holder record and why."""

    state: str
    note: str = ""


def check_record(record: dict[str, Any] | None, holders: list[int] | None) -> RecordCheck:
    """Validate ``record`` against the live process it names and ``holders`` (the pids the
    kernel lists as holding the flock; None when unknown).

    A record is only a description written by whoever took the lock, so anyone able to write
    the file could name any process; the kernel's lock table says who really holds it.
    """
    if record is None:
        return RecordCheck(MISSING, "no holder record")
    pid, started = record.get("pid"), record.get("start_time")
    if "unreadable" in record or not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return RecordCheck(UNREADABLE, "the holder record is not valid (no usable pid)")
    if started is not None and (isinstance(started, bool) or not isinstance(started, (int, float))):
        return RecordCheck(
            UNREADABLE, f"the holder record's start_time {started!r} is not a number"
        )
    if record.get("released_at"):
        return RecordCheck(RELEASED, f"pid {pid} released it at {record.get('released_at')}")
    host = record.get("host")
    if host is not None and host != socket.gethostname():
        if holders:  # taken on this host, yet the record claims another one
            listed = ", ".join(map(str, holders))
            return RecordCheck(FORGED, f"names host {host!r}, but pid {listed} here holds it")
        return RecordCheck(UNVERIFIABLE, f"names host {host!r}, not this one")
    if not record_is_live(record):
        return RecordCheck(DEAD, f"pid {pid} is not running (or is another process now)")
    if started is None:
        return RecordCheck(FORGED, f"names pid {pid} without its start time")
    if holders is None:
        return RecordCheck(UNVERIFIABLE, "the kernel's lock table (/proc/locks) is unreadable")
    if pid in holders:
        return RecordCheck(VERIFIED)
    held_by = (
        f"the kernel lists pid {', '.join(map(str, holders))} as holding it"
        if holders
        else "nobody holds it"
    )
    return RecordCheck(FORGED, f"names pid {pid}, which does not hold the lock; {held_by}")


def trusted(check: RecordCheck, record: dict[str, Any] | None, holders: list[int] | None) -> bool:
    """Whether a record may be believed: verified, or (with no /proc/locks to ask) naming a
    live process of this host and boot."""
    if check.state == VERIFIED:
        return True
    return (
        check.state == UNVERIFIABLE
        and holders is None
        and record is not None
        and record.get("host") in (None, socket.gethostname())
        and record_is_live(record)
    )


def describe_pid(pid: int) -> str:
    """A pid as the kernel knows it (for a holder that its record does not describe)."""
    cmd = _proc.cmdline(pid)
    return f"pid {pid} ({cmd[:120]})" if cmd else f"pid {pid} (not running)"


def describe_holder(record: dict[str, Any] | None) -> str:
    if not record:
        return "an unrecorded process"
    argv = " ".join(str(a) for a in record.get("argv") or [])
    if len(argv) > 120:  # a long command line must not push out who holds it and since when
        argv = argv[:117] + "..."
    return (
        f"pid {record.get('pid')} ({record.get('user')}@{record.get('host')}: {argv}) "
        f"since {record.get('acquired_at')}"
    )


@dataclass
class LockStatus:
    """What `tether guard status` and a losing guard report about the lock.

    ``state``: free (nobody holds the flock), held (a live process holds it) or stale (the
    flock is held by a descriptor whose taker died, e.g. a child of a killed guard, or it is
    free but the last record was never released). ``record_state`` is the holder record's
    verdict (see check_record); ``holders`` the pids the kernel lists (None when unknown).
    """

    path: str
    state: str  # free | held | stale
    record: dict[str, Any] | None = None
    record_live: bool = False
    notes: list[str] = field(default_factory=list)
    record_state: str = MISSING
    holders: list[int] | None = None
    busy: bool = False  # somebody holds the flock (whatever the record says)

    def summary(self) -> str:
        if self.state == "free":
            extra = f" ({'; '.join(self.notes)})" if self.notes else ""
            return f"lock {self.path}: free{extra}"
        if self.state == "held":
            if not self.notes:  # the record was trusted (see HostLock.status)
                return f"lock {self.path}: held by {describe_holder(self.record)}"
            who = ", ".join(describe_pid(p) for p in self.holders or ()) or "an unknown process"
            return f"lock {self.path}: held by {who}; {'; '.join(self.notes)}"
        return f"lock {self.path}: stale ({'; '.join(self.notes)})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "state": self.state,
            "record": self.record,
            "record_live": self.record_live,
            "record_state": self.record_state,
            "holders": None if self.holders is None else list(self.holders),
            "busy": self.busy,
            "notes": list(self.notes),
        }


class HostLock:
    """An exclusive flock on ``path``; the descriptor is ``fd`` while held."""

    def __init__(self, path: Path | str | None = None, *, warn: TextIO | None = None) -> None:
        self.path = Path(path) if path is not None else default_lock_path()
        self.holder_path = self.path.with_name(self.path.name + ".holder.json")
        self.warn = warn
        self.fd: int | None = None
        self.record: dict[str, Any] | None = None

    def _open(self) -> int:
        check_local(self.path, self.warn)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise GuardError(f"lock {self.path}: cannot create its directory: {exc}") from exc
        check_folder(self.path.parent)
        return open_checked(self.path, os.O_RDONLY | os.O_CREAT)

    def try_acquire(self, purpose: str = "") -> bool:
        """Take the lock without waiting; True when taken (and the holder record written)."""
        if self.fd is not None:
            return True
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self.fd = fd
        self.record = holder_record(self.path, purpose)
        try:
            self.write_record(self.record)
        except BaseException:
            self.release()
            raise
        return True

    def write_record(self, record: dict[str, Any]) -> None:
        """Replace the holder record atomically (tether.atomic, its temp file in the lock's
        own folder: a PID and a random part in its name, so a temp file a killed holder left
        never blocks a later holder that gets the same PID)."""
        if self.holder_path.is_symlink():
            raise GuardError(f"{self.holder_path}: is a symlink; refusing to replace it")
        payload = (json.dumps(record, indent=1, sort_keys=True) + "\n").encode()
        try:
            write_atomic(self.holder_path, payload, temp_dir=self.holder_path.parent)
        except OSError as exc:
            raise GuardError(f"{self.holder_path}: cannot write the holder record: {exc}") from exc

    def read_record(self) -> dict[str, Any] | None:
        try:
            fd = open_checked(self.holder_path, os.O_RDONLY)
        except GuardError:
            if not os.path.lexists(self.holder_path):
                return None
            raise
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read()
        try:
            data = json.loads(raw)
        except ValueError:
            return {"unreadable": raw[:200].decode("utf-8", errors="replace")}
        return data if isinstance(data, dict) else None

    def release(self) -> None:
        """Close our descriptor; inheriting children keep the host locked until they exit."""
        if self.fd is None:
            return
        if self.record is not None:
            self.record["released_at"] = _utc(time.time())
            # the flock, not the record, is what frees the host: a failed write is harmless
            with contextlib.suppress(GuardError, OSError):
                self.write_record(self.record)
        os.close(self.fd)
        self.fd = None

    def is_busy(self) -> bool:
        """Whether another open description holds the lock (ours counts as busy too)."""
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # closing drops the probe lock
        return False

    def holders(self) -> list[int] | None:
        """Pids the kernel lists as holding this lock (None when /proc/locks is unreadable)."""
        return _proc.flock_holders(self.path)

    def status(self, settle_s: float = 0.5) -> LockStatus:
        """Free, held or stale, with the holder record checked against the live process and
        the kernel's lock table, so a forged record cannot blame a made-up holder."""
        deadline = time.monotonic() + settle_s
        while True:
            busy = self.is_busy()
            record = self.read_record()
            holders = self.holders() if busy else []
            check = check_record(record, holders)
            # a new holder locks first and writes its record just after: give it a moment
            if not busy or check.state == VERIFIED or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        live = bool(record and record_is_live(record))
        st = LockStatus(str(self.path), "free", record, live, [], check.state, holders, busy)
        live_holders = [p for p in holders or () if _proc.alive(p)]
        if busy and trusted(check, record, holders):
            st.state = "held"
        elif busy and live_holders:
            st.state = "held"
            st.notes.append(f"its holder record is {check.state}: {check.note}")
        elif busy:
            st.state = "stale"
            st.notes.append(
                f"locked, but the record names {describe_holder(record)} which is "
                + ("released" if check.state == RELEASED else "not running")
                + "; a child that inherited the descriptor still holds it"
            )
        elif check.state == DEAD:
            st.state = "stale"
            st.notes.append(f"free; last holder {describe_holder(record)} died without releasing")
        elif check.state in (FORGED, UNREADABLE):
            st.notes.append(f"the holder record is {check.state}: {check.note}")
        return st

    def __enter__(self) -> HostLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def held_env(lock: HostLock, holder_pid: int | None = None) -> dict[str, str]:
    """The environment entry telling a nested guard that this lock is already held for it."""
    return {ENV_HELD: f"{lock.path}:{holder_pid or os.getpid()}"}


def nested_holder(lock: HostLock) -> dict[str, Any] | None:
    """The outer holder's record when this process runs under a guard holding this same lock.

    ``$TETHER_GUARD_HELD`` only says that a nested hold is intended; it is honoured when the
    record it points at is verified (a live process that the kernel lists as holding the
    flock) and that process is an ancestor of this one in the process tree. An unrelated
    process that copies the variable is therefore not let in, and waits like anyone else.
    """
    env = os.environ.get(ENV_HELD)
    if not env or ":" not in env:
        return None
    path, _, pid_s = env.rpartition(":")
    if os.path.realpath(path) != os.path.realpath(lock.path) or not pid_s.isdigit():
        return None
    if not lock.is_busy():
        return None  # the env outlived its guard; a real lock is needed
    record = lock.read_record()
    holders = lock.holders()
    check = check_record(record, holders)
    refused = None
    if record is None or not trusted(check, record, holders):
        refused = f"its holder record is {check.state} ({check.note or 'no record'})"
    elif record.get("pid") != int(pid_s):
        refused = f"it names pid {pid_s} but the lock's holder is pid {record.get('pid')}"
    elif not _proc.is_ancestor(int(record["pid"])):
        refused = f"pid {record['pid']} holds the lock but is not an ancestor of this process"
    if refused is not None:
        print(
            f"tether guard: ${ENV_HELD} is not honoured: {refused}; taking the lock normally",
            file=lock.warn or sys.stderr,
        )
        return None
    return record
