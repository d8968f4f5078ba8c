"""The bench verbs: ``tether sweep``, ``tether gate``, ``tether probe`` and ``tether demo``.

Each writes one run (or, for demo, a run and the docs rendered from it) and says where.
Torch is imported inside the handlers only.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tether.cli import Context


def register(sub: Any) -> None:
    p = sub.add_parser("sweep", help="run a sweep definition (validate/sweeps/) into the store")
    p.add_argument("name", nargs="?", help="sweep name; omit with --list")
    p.add_argument("--list", action="store_true", help="list the sweep definitions")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(handler=_sweep)

    g = sub.add_parser("gate", help="measure the throughput gates of this arch and record them")
    g.add_argument("--id", dest="gate_id", help="only this gate")
    g.set_defaults(handler=_gate)

    pr = sub.add_parser("probe", help="time the causal triton call against a dense matmul bound")
    pr.add_argument("--tiny", action="store_true", help="toy sizes (CPU / interpreter smoke)")
    pr.set_defaults(handler=_probe)

    d = sub.add_parser("demo", help="measure a small sweep and render the docs from it")
    d.add_argument("--scratch", type=Path, help="scratch folder (default: ROOT/scratch)")
    d.set_defaults(handler=_demo)


def _report_run(run: Any, store: Path, ctx: Context) -> int:
    path = Path(store) / run.arch / f"{run.id}.json"
    print(f"{run.kind} {run.name}: {run.status} ({len(run.cells)} cells) -> {path}", file=ctx.out)
    if run.status != "ok":
        print(f"reason: {run.reason}", file=ctx.err)
        return 1
    return 0


def _sweep(args: argparse.Namespace, ctx: Context) -> int:
    from tether.bench.sweep import list_sweeps, load_sweep, run_sweep
    from tether.errors import UsageError

    if args.list:
        for name in list_sweeps(ctx.root):
            print(name, file=ctx.out)
        return 0
    if not args.name:
        raise UsageError("tether sweep: name a sweep (or --list)")
    sweep = load_sweep(args.name, ctx.root)
    err = None if args.no_progress else ctx.err
    run = run_sweep(sweep, store=ctx.store, root=ctx.root, err=err)
    return _report_run(run, ctx.store, ctx)


def _gate(args: argparse.Namespace, ctx: Context) -> int:
    from tether.bench.gate import run_gates

    outcomes = run_gates(ctx.store, ctx.root, gate_id=args.gate_id)
    failed = 0
    for out in outcomes:
        print(out.line(), file=ctx.out)
        failed += out.failed
    return 1 if failed else 0


def _probe(args: argparse.Namespace, ctx: Context) -> int:
    from tether.bench.probe import run_probe

    run = run_probe(store=ctx.store, root=ctx.root, tiny=args.tiny)
    return _report_run(run, ctx.store, ctx)


def _demo(args: argparse.Namespace, ctx: Context) -> int:
    from tether.bench.demo import run_demo
    from tether.bench.sweep import Target

    target = Target.detect()
    store = docs = None
    if target.device == "cpu":
        scratch = args.scratch or ctx.root / "scratch"
        store, docs = scratch / "results", scratch / "docs"
    elif args.store is not None:
        store = ctx.store
    result = run_demo(ctx.root, store=store, docs=docs, target=target, err=ctx.err)
    code = _report_run(result.run, result.store, ctx)
    if result.docs is not None:
        print(f"docs rendered from it: {result.docs} ({len(result.written)} files)", file=ctx.out)
        print(f"start with {result.docs / 'README.md'}", file=ctx.out)
    return code
