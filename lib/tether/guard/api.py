"""The bench API: hold the host for a measurement and re-check it around every arm.

    with acquire(target="auto", wait_s=60, idle_secs=5, purpose="sweep x") as held:
        with held.arm("A") as check:
            ...time arm A...
        if check.contaminated: flag the cell
        run["guard"] = held.evidence()

Under an outer ``tether guard --hold`` holding the same lock, ``acquire`` does not lock again
(that would deadlock on our own ancestor) and records that it is nested.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tether.errors import HostBusyError
from tether.guard import _proc
from tether.guard import idle as idle_mod
from tether.guard.lock import HostLock, LockStatus, nested_holder
from tether.guard.probes import BUSY, IDLE


class HostUnavailable(HostBusyError):
    """HostBusyError carrying what was seen: the lock status and the last snapshot."""

    def __init__(
        self,
        message: str,
        lock_status: LockStatus | None = None,
        snapshot: idle_mod.Snapshot | None = None,
        target: str = "cpu",
    ) -> None:
        super().__init__(message)
        self.lock_status = lock_status
        self.snapshot = snapshot
        self.target = target

    def evidence(self) -> dict[str, Any]:
        return {
            "lock": self.lock_status.as_dict() if self.lock_status else None,
            "snapshot": self.snapshot.as_dict() if self.snapshot else None,
            "reason": str(self),
        }


def _foreign_pids(snap: idle_mod.Snapshot) -> set[int]:
    return {int(f["pid"]) for p in snap.probes for f in p.evidence.get("foreign") or []}


@dataclass
class ArmCheck:
    """Process evidence around one arm; ``contaminated`` when a foreign process showed up."""

    label: str
    contaminated: bool = False
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    new_pids: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "contaminated": self.contaminated,
            "new_foreign_pids": list(self.new_pids),
            "before": self.before,
            "after": self.after,
        }


@dataclass
class Holding:
    """The host, held. ``evidence()`` is what a run stores under ``guard``."""

    lock: HostLock
    target: str
    nested: bool
    record: dict[str, Any] | None
    before: idle_mod.Snapshot
    after: idle_mod.Snapshot | None = None
    arms: list[ArmCheck] = field(default_factory=list)
    waited_s: float = 0.0

    def recheck(self, full: bool = True) -> idle_mod.Snapshot:
        self.after = idle_mod.snapshot(self.target, full=full, nested=self.nested)
        return self.after

    def evidence(self) -> dict[str, Any]:
        return {
            "lock": str(self.lock.path),
            "holder": self.record,
            "nested": self.nested,
            "target": self.target,
            "waited_s": round(self.waited_s, 3),
            "before": self.before.as_dict(),
            "after": self.after.as_dict() if self.after else None,
            "arms": [a.as_dict() for a in self.arms],
        }

    @contextmanager
    def arm(self, label: str) -> Iterator[ArmCheck]:
        """Cheap process probes before and after the arm (no sampling window, no sleep)."""
        check = ArmCheck(label)
        first = idle_mod.snapshot(self.target, full=False)
        check.before = {"verdict": first.verdict, "foreign": sorted(_foreign_pids(first))}
        try:
            yield check
        finally:
            last = idle_mod.snapshot(self.target, full=False)
            seen = _foreign_pids(first) | _foreign_pids(last)
            check.after = {"verdict": last.verdict, "foreign": sorted(_foreign_pids(last))}
            check.new_pids = sorted(seen)
            # on a cpu target the load average rises with our own arm, so only a foreign
            # process (never the load) can contaminate an arm
            busy = self.target != "cpu" and BUSY in (first.verdict, last.verdict)
            check.contaminated = busy or bool(seen)
            self.arms.append(check)


def _busy_message(status: LockStatus) -> str:
    return f"host busy: {status.summary()}"


class _Waiting:
    """Says on ``err`` that the guard is waiting and why: at once, then every ``every_s``.

    A guard that waits in silence looks hung; one that prints every poll floods the log.
    """

    def __init__(self, err: TextIO | None, wait_s: float, start: float, every_s: float) -> None:
        self.err, self.wait_s, self.start, self.every_s = err, wait_s, start, every_s
        self.next_at: float | None = None

    def __call__(self, why: Callable[[], str]) -> None:
        now = time.monotonic()
        if (
            self.err is None
            or self.wait_s <= 0
            or (self.next_at is not None and now < self.next_at)
        ):
            return
        self.next_at = now + self.every_s
        waited = now - self.start
        print(f"guard: waiting ({waited:.0f} s of {self.wait_s:g} s): {why()}", file=self.err)


@contextmanager
def acquire(
    *,
    target: str = "auto",
    wait_s: float = 0.0,
    idle_secs: float = 0.0,
    lock_path: Path | str | None = None,
    purpose: str = "",
    poll_s: float = 0.25,
    err: TextIO | None = None,
    report_s: float = 5.0,
) -> Iterator[Holding]:
    """Hold the host lock and see the host idle for ``idle_secs`` in a row, within ``wait_s``.

    While it waits it says so on ``err`` (what it waits for: the holder, or the probe that
    says busy) when it starts waiting and then every ``report_s`` seconds. Raises
    HostUnavailable (a HostBusyError) naming the holder or the busy probe when the deadline
    passes. The lock is released on exit unless a child inherited its descriptor.
    """
    vendor = idle_mod.resolve_target(target)
    lock = HostLock(lock_path, warn=err or sys.stderr)
    start = time.monotonic()
    deadline = start + max(0.0, wait_s)
    waiting = _Waiting(err, wait_s, start, report_s)
    outer = nested_holder(lock)
    if outer is not None:
        _proc.EXTRA_ROOTS.add(int(outer["pid"]))
    try:
        while outer is None and not lock.try_acquire(purpose):
            if time.monotonic() >= deadline:
                st = lock.status()
                raise HostUnavailable(_busy_message(st), st, None, vendor)
            waiting(lambda: lock.status(settle_s=0.0).summary())
            time.sleep(poll_s)
        waiting.next_at = None  # a new reason to wait is said at once
        try:
            idle_since: float | None = None
            while True:
                snap = idle_mod.snapshot(vendor, nested=outer is not None)
                now = time.monotonic()
                if snap.verdict == IDLE:
                    idle_since = now if idle_since is None else idle_since
                    if now - idle_since >= idle_secs:
                        break
                else:
                    idle_since = None
                    waiting(lambda: f"host not idle yet: {snap.reason()}")  # noqa: B023 (called now)
                if now >= deadline:
                    raise HostUnavailable(
                        f"host not idle within {wait_s:g} s: {snap.reason()}",
                        None,
                        snap,
                        vendor,
                    )
                time.sleep(min(poll_s, max(0.0, deadline - now)) or poll_s)
            held = Holding(
                lock=lock,
                target=vendor,
                nested=outer is not None,
                record=outer if outer is not None else lock.record,
                before=snap,
                waited_s=time.monotonic() - start,
            )
            yield held
        finally:
            lock.release()
    finally:
        if outer is not None:
            _proc.EXTRA_ROOTS.discard(int(outer["pid"]))
