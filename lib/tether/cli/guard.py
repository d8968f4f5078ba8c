"""``tether guard status``, ``tether guard --hold -- CMD`` and ``tether verify``."""

from __future__ import annotations

import argparse
from typing import Any

from tether.errors import UsageError


def _strip_dashdash(cmd: list[str]) -> list[str]:
    return cmd[1:] if cmd and cmd[0] == "--" else cmd


def _guard(args: argparse.Namespace, ctx: Any) -> int:
    from tether.guard import idle
    from tether.guard.lock import HostLock

    cmd = _strip_dashdash(list(args.cmd))
    if args.hold:
        from tether.guard.hold import run_held

        rc, _evidence = run_held(
            cmd,
            target=args.target,
            wait_s=args.wait,
            idle_secs=args.idle_secs,
            lock_path=args.lock,
            err=ctx.err,
            store=ctx.store,
            root=ctx.root,
        )
        return rc
    if cmd == ["status"] or not cmd:
        st = HostLock(args.lock, warn=ctx.err).status()
        print(st.summary(), file=ctx.out)
        snap = idle.snapshot(args.target)
        print(f"host ({snap.target}): {snap.verdict}; load {snap.loadavg}", file=ctx.out)
        for p in snap.probes:
            print(f"  {p.name}: {p.state} ({p.evidence.get('note', '')})", file=ctx.out)
        return 0
    raise UsageError(
        f"guard: unknown action {' '.join(cmd)!r}; use `guard status` or `guard --hold -- CMD`"
    )


def _verify(args: argparse.Namespace, ctx: Any) -> int:
    from tether.guard.verify import run_verify

    # A refusal (no GPU of the vendor asked for) is recorded in the scratch store unless a
    # store was named: it must not touch the committed store unasked.
    refusals = ctx.store if ctx.store_given else ctx.project.scratch / "results"
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
        refusal_store=refusals,
    )


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    g = sub.add_parser("guard", help="the GPU host lock: status, or --hold -- CMD")
    g.add_argument("--hold", action="store_true", help="run CMD holding the host")
    g.add_argument("--wait", type=float, default=0.0, metavar="S", help="deadline to get the host")
    g.add_argument("--idle-secs", type=float, default=0.0, metavar="S", help="idle this long first")
    g.add_argument(
        "--lock", default=None, metavar="PATH", help="lock file (default: $TETHER_GUARD_LOCK)"
    )
    g.add_argument("--target", default="auto", choices=("auto", "cuda", "rocm", "cpu"))
    g.add_argument("cmd", nargs=argparse.REMAINDER, help="`status`, or `-- CMD...` with --hold")
    g.set_defaults(handler=_guard)

    v = sub.add_parser("verify", help="run the validation suite under the guard and record it")
    v.add_argument("--vendor", default="auto", choices=("auto", "cuda", "rocm"))
    v.add_argument("--suite", default="validate")
    v.add_argument("--wait", type=float, default=0.0, metavar="S")
    v.add_argument("--lock", default=None, metavar="PATH")
    v.add_argument("extra", nargs=argparse.REMAINDER, help="-- extra pytest arguments")
    v.set_defaults(handler=_verify)
