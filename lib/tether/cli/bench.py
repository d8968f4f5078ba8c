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

    d = sub.add_parser(
        "demo",
        help="measure a small sweep, say what it measured, and render the docs from it",
        description=(
            "Measure a small sweep under the guard (cpu-demo without a GPU, the main GPU sweep "
            "on a GPU host), print its arms, cells, verdicts and A/A floor, and render the docs "
            "from it. The run and the docs go to the project's scratch folder, never to the "
            "committed store, unless --publish or --store says otherwise. Old demo runs in the "
            "scratch store are pruned to the newest few (--keep)."
        ),
    )
    d.add_argument(
        "--scratch", type=Path, help="scratch folder (default: the project's [tool.tether] scratch)"
    )
    d.add_argument(
        "--publish",
        action="store_true",
        help="write the run into the project's results store (evidence), not the scratch store",
    )
    d.add_argument(
        "--keep",
        type=int,
        default=None,
        metavar="N",
        help="runs of each sweep to keep in the scratch store, newest first (default 5; 0 keeps all)",
    )
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
    from tether.bench.demo import KEEP_SCRATCH_RUNS, prune_scratch, run_demo, summary_lines
    from tether.bench.sweep import Target
    from tether.errors import UsageError

    if args.publish and ctx.store_given:
        raise UsageError("demo: --publish writes the project's store; --store names another")
    keep = KEEP_SCRATCH_RUNS if args.keep is None else args.keep
    if keep < 0:
        raise UsageError(f"demo: --keep {keep}: must be 0 (keep all) or more")
    scratch = args.scratch.resolve() if args.scratch else ctx.project.scratch
    in_scratch = not (args.publish or ctx.store_given)
    store = scratch / "results" if in_scratch else ctx.store
    docs = scratch / "docs"
    result = run_demo(ctx.root, store=store, docs=docs, target=Target.detect(), err=ctx.err)
    for line in summary_lines(result.run):
        print(line, file=ctx.out)
    code = _report_run(result.run, result.store, ctx)
    if in_scratch:
        pruned = prune_scratch(store, keep)
        note = f"scratch store {store}: {pruned.kept} run(s)"
        if pruned.removed:
            note += (
                f"; removed the {len(pruned.removed)} oldest (keeping the newest {keep} per sweep)"
            )
        elif keep:
            note += f" (the newest {keep} per sweep are kept; --keep changes it)"
        if pruned.unreadable:
            note += f"; {pruned.unreadable} file(s) that do not load left alone"
        print(note, file=ctx.out)
    if result.docs is not None:
        print(f"docs rendered from it: {result.docs} ({len(result.written)} files)", file=ctx.out)
        print(f"look at: {result.docs / 'README.md'}", file=ctx.out)
    print(f"every cell: tether --store {result.store} store show {result.run.id}", file=ctx.out)
    if in_scratch:
        print("to keep it as evidence: tether demo --publish", file=ctx.out)
    return code
