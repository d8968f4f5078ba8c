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

from tether.errors import GuardError
from tether.guard import _proc

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
    from tether.store.provenance import git_state

    return git_state(Path(__file__).resolve().parent)[0]


def _ci_url() -> str | None:
    keys = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    server, repo, run = (os.environ.get(k) for k in keys)
    return f"{server}/{repo}/actions/runs/{run}" if server and repo and run else None


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


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


def describe_holder(record: dict[str, Any] | None) -> str:
    if not record:
        return "an unrecorded process"
    argv = " ".join(str(a) for a in record.get("argv") or [])
    return (
        f"pid {record.get('pid')} ({record.get('user')}@{record.get('host')}: {argv}) "
        f"since {record.get('acquired_at')}"
    )


@dataclass
class LockStatus:
    """What `tether guard status` and a losing guard report about the lock."""

    path: str
    state: str  # free | held | stale
    record: dict[str, Any] | None = None
    record_live: bool = False
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.state == "free":
            return f"lock {self.path}: free"
        if self.state == "held":
            return f"lock {self.path}: held by {describe_holder(self.record)}"
        return f"lock {self.path}: stale ({'; '.join(self.notes)})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "state": self.state,
            "record": self.record,
            "record_live": self.record_live,
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
        """Replace the holder record atomically (temp file in the same folder, then rename)."""
        tmp = self.holder_path.with_name(f".{self.holder_path.name}.{os.getpid()}.tmp")
        fd = open_checked(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            os.write(fd, (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        if self.holder_path.is_symlink():
            tmp.unlink(missing_ok=True)
            raise GuardError(f"{self.holder_path}: is a symlink; refusing to replace it")
        os.replace(tmp, self.holder_path)

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

    def status(self, settle_s: float = 0.5) -> LockStatus:
        """Free, held (by a live recorded holder) or stale (record names a dead process)."""
        deadline = time.monotonic() + settle_s
        while True:
            busy = self.is_busy()
            record = self.read_record()
            live = bool(record) and record_is_live(record)  # type: ignore[arg-type]
            released = bool(record and record.get("released_at"))
            # a new holder locks first and writes its record just after: give it a moment
            if not busy or (live and not released) or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        st = LockStatus(str(self.path), "free", record, live)
        if busy and live and not released:
            st.state = "held"
        elif busy:
            st.state = "stale"
            st.notes.append(
                f"locked, but the record names {describe_holder(record)} which is "
                + ("released" if released else "not running")
                + "; a child that inherited the descriptor still holds it"
            )
        elif record and not released and not live:
            st.state = "stale"
            st.notes.append(f"free; last holder {describe_holder(record)} died without releasing")
        return st

    def __enter__(self) -> HostLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def held_env(lock: HostLock, holder_pid: int | None = None) -> dict[str, str]:
    """The environment entry telling a nested guard that this lock is already held for it."""
    return {ENV_HELD: f"{lock.path}:{holder_pid or os.getpid()}"}


def nested_holder(lock: HostLock) -> dict[str, Any] | None:
    """The outer holder's record when we run under a guard holding this same lock, else None."""
    env = os.environ.get(ENV_HELD)
    if not env or ":" not in env:
        return None
    path, _, pid_s = env.rpartition(":")
    if os.path.realpath(path) != os.path.realpath(lock.path) or not pid_s.isdigit():
        return None
    record = lock.read_record()
    if not record or record.get("released_at") or not record_is_live(record):
        return None
    if not lock.is_busy():
        return None  # the env outlived its guard; a real lock is needed
    pid = int(pid_s)
    if record.get("pid") == pid or _proc.is_ancestor(int(record["pid"])):
        return record
    return None
