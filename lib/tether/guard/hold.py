"""``tether guard --hold -- CMD``: run a command while holding the host.

CMD runs in its own process group with the lock descriptor inherited (pass_fds), so a guard
killed with SIGKILL leaves the host locked until CMD and its children are gone. SIGINT,
SIGTERM and SIGHUP sent to the guard are forwarded to CMD's group; the guard then waits for
CMD and exits with its status. When the host cannot be had in time a ``not_measured`` verify run is written
(so the docs can say "not measured" instead of going quiet) and HostBusyError -> exit 75.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from tether.errors import UsageError
from tether.guard import devinfo
from tether.guard.api import Holding, HostUnavailable, acquire
from tether.guard.lock import ENV_HELD, held_env
from tether.store import new_run, write_run
from tether.store.model import GuardRecord
from tether.store.safe import sanitize

# The signals that stop a measurement and still record what it did: the guard forwards them to
# its command (a closed terminal's SIGHUP as well as Ctrl-C and a scheduler's SIGTERM), and the
# bench writes the cells measured so far on each (tether.stopping).
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def safe_reason(text: str, limit: int = 480) -> str:
    """A reason the store accepts (no Markdown structure characters), keeping its meaning."""

    return sanitize(text, limit) or "host not available"


def refused_record(exc: HostUnavailable) -> Any:
    """The guard record of an attempt the host refused: the lock status and last snapshot."""

    ev = exc.evidence()
    lock = ev.get("lock") or {}
    return GuardRecord(
        mode="refused",
        lock=lock.get("path") if isinstance(lock, dict) else None,
        holder=lock.get("record") if isinstance(lock, dict) else None,
        before={"lock": ev.get("lock"), "snapshot": ev.get("snapshot")},
        reason=safe_reason(str(exc)),
    )


def write_not_measured(
    exc: HostUnavailable,
    store: Path,
    root: Path | None,
    name: str = "guard-hold",
    kind: str = "verify",
) -> Path:
    """Record that nothing was measured and why; returns the run file's path."""

    arch, device, driver = devinfo.device_info(exc.target)
    run = new_run(
        kind,
        name,
        arch=arch,
        device=device,
        driver=driver,
        config={},
        status="not_measured",
        reason=safe_reason(str(exc)),
        guard=refused_record(exc),
        root=root,
    )
    return write_run(run, store)


def summarize(held: Holding) -> list[str]:
    """Short human lines for ctx.err: the lock, the verdict before and after, each probe."""
    lines = [
        f"guard: lock {held.lock.path}" + (" (nested under an outer guard)" if held.nested else ""),
        f"guard: before: {held.before.verdict}; load {held.before.loadavg}",
    ]
    for p in held.before.probes:
        lines.append(f"guard:   {p.name}: {p.state} ({p.evidence.get('note', '')})")
    if held.after is not None:
        lines.append(f"guard: after: {held.after.verdict} ({held.after.reason()})")
    return lines


def _exit_status(rc: int) -> int:
    return 128 - rc if rc < 0 else rc  # killed by signal N -> 128 + N, like a shell


def run_held(
    cmd: Sequence[str],
    *,
    target: str = "auto",
    wait_s: float = 0.0,
    idle_secs: float = 0.0,
    lock_path: Path | str | None = None,
    err: TextIO | None = None,
    store: Path | None = None,
    root: Path | None = None,
) -> tuple[int, dict[str, Any]]:
    """Run ``cmd`` under the guard; (CMD's exit status, guard evidence).

    Raises HostUnavailable after writing the not_measured run when ``store`` is given.
    """
    if not cmd:
        raise UsageError("guard --hold: no command given after --")
    err = err or sys.stderr
    try:
        ctx = acquire(
            target=target,
            wait_s=wait_s,
            idle_secs=idle_secs,
            lock_path=lock_path,
            purpose=" ".join(cmd),
            err=err,
        )
        held = ctx.__enter__()
    except HostUnavailable as exc:
        if store is not None:
            path = write_not_measured(exc, store, root)
            print(f"guard: not measured; recorded {path}", file=err)
        raise
    try:
        env = dict(os.environ)
        fds: tuple[int, ...] = ()
        if not held.nested and held.lock.fd is not None:
            env.update(held_env(held.lock))
            fds = (held.lock.fd,)
        else:
            env[ENV_HELD] = os.environ.get(ENV_HELD, "")
        # The handlers go in before the command starts: a stop signal that came between the
        # start and the handlers reached no one (the command ran on to its end, its status 0,
        # as a loaded CI host showed), so one that comes before the child exists is kept and
        # forwarded as soon as it does.
        started: list[subprocess.Popen[bytes]] = []
        pending: list[int] = []

        def forward(signum: int, _frame: FrameType | None) -> None:
            if not started:
                pending.append(signum)
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(started[0].pid, signum)

        # signal handlers can only be installed from the main thread
        main = threading.current_thread() is threading.main_thread()
        sigs = STOP_SIGNALS if main else ()
        old = {s: signal.signal(s, forward) for s in sigs}
        try:
            try:
                child = subprocess.Popen(list(cmd), env=env, pass_fds=fds, start_new_session=True)
            except OSError as exc:
                raise UsageError(f"guard --hold: cannot run {cmd[0]!r}: {exc.strerror}") from exc
            started.append(child)
            for signum in pending:
                forward(signum, None)
            rc = child.wait()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        held.recheck()
        for line in summarize(held):
            print(line, file=err)
        return _exit_status(rc), held.evidence()
    finally:
        ctx.__exit__(None, None, None)
