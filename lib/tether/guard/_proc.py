"""Reading /proc: process start times, parent chains, boot identity.

A pid alone does not name a process (pids are reused), so the guard always pairs it with the
start time computed from /proc/<pid>/stat field 22 and the boot time, and with the boot id.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (which may hold spaces and parens)."""
    try:
        raw = (PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    close = raw.rfind(")")
    if close < 0:
        return None
    # fields[0] is field 3 (state); field N is fields[N - 3]
    return raw[close + 2 :].split()


def boot_time() -> float | None:
    """Seconds since the epoch at which this kernel booted (``btime`` in /proc/stat)."""
    try:
        for line in (PROC / "stat").read_text(encoding="utf-8").splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def boot_id() -> str | None:
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def start_time(pid: int) -> float | None:
    """Epoch seconds at which ``pid`` started, or None if it does not exist."""
    fields = _stat_fields(pid)
    btime = boot_time()
    if fields is None or btime is None or len(fields) < 20:
        return None
    try:
        ticks = int(fields[19])  # field 22: starttime in clock ticks since boot
    except ValueError:
        return None
    return round(btime + ticks / os.sysconf("SC_CLK_TCK"), 2)


def parent(pid: int) -> int | None:
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 2:
        return None
    try:
        return int(fields[1])  # field 4: ppid
    except ValueError:
        return None


def ancestors(pid: int) -> list[int]:
    """Parent chain of ``pid`` up to (not including) pid 0; loops are cut."""
    chain: list[int] = []
    cur = parent(pid)
    while cur and cur not in chain and len(chain) < 4096:
        chain.append(cur)
        cur = parent(cur)
    return chain


def is_ancestor(candidate: int, pid: int | None = None) -> bool:
    """Whether ``candidate`` is an ancestor of ``pid`` (default: this process)."""
    return candidate in ancestors(os.getpid() if pid is None else pid)


# Outer guard holders whose process trees count as ours (set only by a validated nested guard).
EXTRA_ROOTS: set[int] = set()


def is_ours(pid: int) -> bool:
    """Whether ``pid`` is this process, a descendant, or in a validated outer holder's tree."""
    return any(is_self_or_descendant(pid, r) for r in (os.getpid(), *EXTRA_ROOTS))


def is_self_or_descendant(pid: int, root: int | None = None) -> bool:
    """Whether ``pid`` is ``root`` (default: this process) or one of its descendants."""
    root = os.getpid() if root is None else root
    return pid == root or root in ancestors(pid)


def all_pids() -> list[int]:
    try:
        return sorted(int(p.name) for p in PROC.iterdir() if p.name.isdigit())
    except OSError:
        return []


def cmdline(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode("utf-8", errors="replace").strip()


def comm(pid: int) -> str:
    try:
        return (PROC / str(pid) / "comm").read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def alive(pid: int, started: float | None = None) -> bool:
    """Whether ``pid`` exists and (when ``started`` is given) is the same process that started then."""
    fields = _stat_fields(pid)
    if not fields or fields[0] in ("Z", "X"):  # a zombie holds no locks and runs nothing
        return False
    now = start_time(pid)
    if now is None:
        return False
    # ticks are 1/100 s; allow rounding slack but not a different process
    return started is None or abs(now - float(started)) < 0.05


def flock_holders(path: str | os.PathLike[str]) -> list[int] | None:
    """Pids the kernel lists as holding a flock on ``path`` (/proc/locks), or None if unknown.

    The pid is the process that took the lock; it stays listed while a child that inherited
    the descriptor keeps the lock alive after that process died. Waiters (``->``) are left out.
    """
    try:
        st = os.stat(path)
        lines = (PROC / "locks").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    want = (os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)
    pids: list[int] = []
    for line in lines:
        parts = line.split()
        if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
            continue
        try:
            major, minor, ino = parts[5].split(":")
            where = (int(major, 16), int(minor, 16), int(ino))
            pid = int(parts[4])
        except ValueError:
            continue
        if where == want and pid not in pids:
            pids.append(pid)
    return pids
