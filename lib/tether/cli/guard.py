"""``tether guard status``, ``tether guard --hold -- CMD`` and ``tether verify``.

``tether.verify`` (which reads pytest's plugin, and the timing engine's run records) is
imported inside the verify handler: help must work under the base install, without pytest.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tether.cli import Subparsers
from tether.errors import GuardError, UsageError, guard_status_code
from tether.guard import idle
from tether.guard.hold import run_held
from tether.guard.lock import HostLock

GUARD_DESCRIPTION = """\
Hold the GPU host for a command, or say whether it can be had now.

  tether guard status                 who holds the lock, and whether the GPUs are idle
  tether guard --hold -- CMD ARGS...  run CMD holding the lock (its children inherit it)

The lock is an flock on a local file that is never deleted, plus a holder record beside it
(pid, start time, boot id, user, command). The record is checked against the live process
and the kernel's lock table (/proc/locks), so a forged or stale record is reported as such.
A nested `guard --hold` (or a sweep under one) borrows the outer hold only when it is a
descendant of the holding process.

`guard --hold` waits up to --wait seconds for the lock and for --idle-secs of idle GPUs in a
row, saying every few seconds what it waits for. When the host cannot be had it records a
"not measured" verify run (in the project's scratch store unless --store is given) and exits
75. Otherwise it exits with CMD's status.
"""

GUARD_EPILOG = """\
exit codes of `guard status`:
  0   free: nobody holds the lock and the GPUs (or, with no GPU, the CPUs) are idle
  75  held or busy: the lock is held, or a foreign process is using the GPUs
  69  unknown: the lock cannot be inspected (unsafe folder, symlink) or a probe cannot answer

settings (environment variables the guard reads):
  TETHER_GUARD_LOCK           the lock file (default: /var/lock/tether-gpu.lock when writable,
                              else $XDG_RUNTIME_DIR or /tmp/tether-gpu-<uid>.lock); --lock wins.
                              Its folder must be owned by you or root, and carry the sticky bit
                              if anybody may write to it.
  TETHER_GUARD_ALLOW_NFS      1: accept a lock on a network filesystem (flock there may not
                              exclude other hosts; a warning is printed)
  TETHER_GUARD_HELD           set by `guard --hold` for CMD: LOCK:PID of the holding guard. It
                              is honoured only in descendants of that process; do not set it.
  TETHER_GUARD_LOAD_LIMIT     1-minute load average above which a host is busy (default
                              1.5 x cores + 1)
  TETHER_GUARD_NVML           0: skip the NVML probe (nvidia-smi still answers)
  TETHER_GUARD_PROBE_TIMEOUT  seconds before a hanging probe (nvidia-smi, amd-smi, ...) counts
                              as unknown (default 5)
  XDG_RUNTIME_DIR             where the default lock goes when /var/lock is not writable
  GITHUB_SERVER_URL, GITHUB_REPOSITORY, GITHUB_RUN_ID
                              when all set, the holder record carries the CI run's URL
"""

VERIFY_DESCRIPTION = """\
Run the validation suite under the guard and record the outcome as a verify run.

The last line is `[verify-cuda] OK` (or rocm) only when something passed and nothing failed
or errored. On a host without a GPU (not a verify host) the run goes to the project's scratch
store unless --store is given; a wrong --vendor exits 77 (not run here) and writes nothing.
The guard's settings are listed in `tether guard --help`.
"""


def _strip_dashdash(cmd: list[str]) -> list[str]:
    return cmd[1:] if cmd and cmd[0] == "--" else cmd


def scratch_store(ctx: Any) -> Path:
    """Where a run that is not evidence for the project goes: the scratch store, unless the
    user named a store with --store (then that one)."""
    return Path(ctx.store) if ctx.store_given else Path(ctx.project.scratch) / "results"


def host_state(lock_status: Any, verdict: str) -> str:
    """free, held, busy or unknown from the lock (None: could not be inspected) and probes."""
    if lock_status is None:
        return "unknown"
    if lock_status.busy:
        return "held"
    if verdict == "busy":
        return "busy"
    if verdict != "idle":
        return "unknown"
    return "free"


def _status(args: argparse.Namespace, ctx: Any) -> int:

    lock_error = None
    try:
        st = HostLock(args.lock, warn=ctx.err).status()
    except GuardError as exc:
        st, lock_error = None, str(exc)
    snap = idle.snapshot(args.target)
    state = host_state(st, snap.verdict)
    code = guard_status_code(state)
    if args.json:
        doc = {
            "state": state,
            "exit_code": code,
            "lock": st.as_dict() if st is not None else {"error": lock_error},
            "host": snap.as_dict(),
        }
        print(json.dumps(doc, indent=1, sort_keys=True, default=str), file=ctx.out)
        return code
    print(st.summary() if st is not None else f"lock: unknown: {lock_error}", file=ctx.out)
    print(f"host ({snap.target}): {snap.verdict}; load {snap.loadavg}", file=ctx.out)
    for p in snap.probes:
        print(f"  {p.name}: {p.state} ({p.evidence.get('note', '')})", file=ctx.out)
    print(f"state: {state} (exit {code})", file=ctx.out)
    return code


def _guard(args: argparse.Namespace, ctx: Any) -> int:
    cmd = _strip_dashdash(list(args.cmd))
    if args.hold:
        if args.json:
            raise UsageError("guard: --json goes with `guard status`, not with --hold")
        rc, _evidence = run_held(
            cmd,
            target=args.target,
            wait_s=args.wait,
            idle_secs=args.idle_secs,
            lock_path=args.lock,
            err=ctx.err,
            store=scratch_store(ctx),
            root=ctx.root,
        )
        return rc
    # `status` is a positional swallowed with what follows it, so options after it are ours
    if not cmd or cmd[0] == "status":
        rest = cmd[1:]
        if "--json" in rest:
            args.json = True
            rest.remove("--json")
        if rest:
            raise UsageError(f"guard status: unexpected {' '.join(rest)!r}")
        return _status(args, ctx)
    raise UsageError(
        f"guard: unknown action {' '.join(cmd)!r}; use `guard status` or `guard --hold -- CMD`"
    )


def _verify(args: argparse.Namespace, ctx: Any) -> int:
    from tether.verify import run_verify

    # Off this vendor's hosts (a refusal, or a CPU-only run) the run goes to the scratch store
    # unless a store was named: it must not touch the committed store unasked.
    return run_verify(
        vendor=args.vendor,
        suite=args.suite,
        wait_s=args.wait,
        extra=_strip_dashdash(list(args.extra)),
        store=ctx.store,
        root=ctx.root,
        out=ctx.out,
        err=ctx.err,
        lock_path=args.lock,
        off_target_store=None if ctx.store_given else scratch_store(ctx),
        workers=args.workers,
    )


def _wait_and_lock(parser: argparse.ArgumentParser) -> None:
    """--wait and --lock, the same for every verb that takes the guard itself."""
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        metavar="S",
        help="seconds to wait for the lock and an idle host before giving up (default 0)",
    )
    parser.add_argument(
        "--lock", default=None, metavar="PATH", help="lock file (default: $TETHER_GUARD_LOCK)"
    )


def register(sub: Subparsers) -> None:
    g = sub.add_parser(
        "guard",
        help="the GPU host lock: status, or --hold -- CMD",
        description=GUARD_DESCRIPTION,
        epilog=GUARD_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g.add_argument("--hold", action="store_true", help="run CMD (after --) holding the host")
    _wait_and_lock(g)
    g.add_argument(
        "--idle-secs",
        type=float,
        default=0.0,
        metavar="S",
        help="the host must be idle this many seconds in a row before CMD starts (default 0)",
    )
    g.add_argument(
        "--target",
        default="auto",
        choices=("auto", "cuda", "rocm", "cpu"),
        help="which devices must be idle: auto detects the vendor; cpu checks the load only",
    )
    g.add_argument(
        "--json", action="store_true", help="`guard status`: print one JSON document instead"
    )
    g.add_argument("cmd", nargs=argparse.REMAINDER, help="`status`, or `-- CMD...` with --hold")
    g.set_defaults(handler=_guard)

    v = sub.add_parser(
        "verify",
        help="run the validation suite under the guard and record it",
        description=VERIFY_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    v.add_argument(
        "--vendor",
        default="auto",
        choices=("auto", "cuda", "rocm"),
        help="the GPU vendor this host must have (auto: whatever it has; none runs on the CPU)",
    )
    v.add_argument("--suite", default="validate", help="the pytest path to run (default: validate)")
    _wait_and_lock(v)
    v.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="pytest-xdist workers (default: one per visible GPU; more share GPUs round-robin)",
    )
    v.add_argument("extra", nargs=argparse.REMAINDER, help="-- extra pytest arguments")
    v.set_defaults(handler=_verify)
