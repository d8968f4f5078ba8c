"""The measuring verbs: ``tether sweep``, ``tune``, ``gate``, ``probe`` and ``demo``.

Each holds the host (the guard lock and idle evidence, recorded in the run) unless told
``--unguarded`` (the run is then marked and can never be evidence), refuses early with exit 77
when the hardware it needs is absent, and writes one run per measurement. Torch is imported
inside the handlers only.

The timing engine (``tether.bench``, which draws its progress bar with rich) is imported inside
the handlers too: ``tether --help`` and ``tether VERB --help`` build every verb's parser, and
they must work under the base install (jinja2 only), where neither rich nor torch is there.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tether import registry
from tether.cli import Context, Subparsers
from tether.cli._bench_host import KNOBS, bench_for
from tether.errors import UsageError
from tether.render.policy_file import policy
from tether.store.audit import load_store_checked


def _add_measure_options(p: argparse.ArgumentParser, grid: bool = True) -> None:
    g = p.add_argument_group("where and how")
    g.add_argument(
        "--unguarded",
        action="store_true",
        help="do not hold the host lock; the run is marked unguarded and is never evidence",
    )
    g.add_argument(
        "--wait", type=float, default=60.0, metavar="S", help="seconds to wait for the host (60)"
    )
    g.add_argument("--device", type=int, metavar="N", help="the GPU index to measure on")
    g.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    t = p.add_argument_group("timing knobs (override the sweep's timing policy)")
    for name, (_, kind, text) in KNOBS.items():
        t.add_argument(f"--{name.replace('_', '-')}", dest=name, type=kind, help=text)
    if grid:
        t.add_argument(
            "--replicates",
            type=int,
            metavar="R",
            help="replicate blocks of the grid (the sweep's own)",
        )
        a = p.add_argument_group("grid overrides")
        a.add_argument(
            "--axis",
            action="append",
            default=[],
            metavar="NAME=V1,V2",
            help="replace an axis's values (repeatable); values parse as JSON, else text",
        )
        a.add_argument(
            "--fixed",
            action="append",
            default=[],
            metavar="NAME=V",
            help="set a fixed field (repeatable)",
        )


def register(sub: Subparsers) -> None:
    p = sub.add_parser("sweep", help="measure a registered sweep into one run of the store")
    p.add_argument("name", nargs="?", help="the sweep (see --list)")
    p.add_argument("--list", action="store_true", help="list the registered sweeps and exit")
    s = p.add_argument_group("sharding over this host's GPUs")
    s.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help="split the cells over N worker processes, one per GPU (0: one per visible GPU); "
        "a cell's A, A2 and B stay on one GPU; the shards merge into one run",
    )
    s.add_argument("--shard-dir", type=Path, help="where shard files go (default: a temp folder)")
    s.add_argument("--shard-worker", type=int, help=argparse.SUPPRESS)
    _add_measure_options(p)
    p.set_defaults(handler=_sweep, kind="sweep")

    tu = sub.add_parser(
        "tune", help="measure a tuning grid (candidate configs against a reference arm)"
    )
    tu.add_argument("name", nargs="?", help="the tuning grid (see --list)")
    tu.add_argument("--list", action="store_true", help="list the registered tuning grids")
    _add_measure_options(tu)
    tu.set_defaults(handler=_sweep, kind="tune")

    g = sub.add_parser("gate", help="measure this arch's throughput gates and record them")
    g.add_argument("--id", dest="gate_id", help="only this gate")
    _add_measure_options(g, grid=False)
    g.set_defaults(handler=_gate)

    pr = sub.add_parser("probe", help="a probe's calls against bounds measured in the same run")
    pr.add_argument("name", nargs="?", help="the probe (default: the only one registered)")
    _add_measure_options(pr, grid=False)
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


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _apply_grid(sweep: Any, args: argparse.Namespace) -> Any:
    axes = dict(sweep.axes)
    fixed = dict(sweep.fixed)
    for item in args.axis:
        name, sep, values = item.partition("=")
        if not sep or not name or not values:
            raise UsageError(f"--axis {item!r}: expected NAME=V1,V2")
        axes[name] = tuple(_parse_value(v) for v in values.split(","))
        fixed.pop(name, None)
    for item in args.fixed:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--fixed {item!r}: expected NAME=V")
        fixed[name] = _parse_value(value)
        axes.pop(name, None)
    if axes == dict(sweep.axes) and fixed == dict(sweep.fixed):
        return sweep
    return sweep.replace(axes=axes, fixed=fixed)


def _report_run(run: Any, ctx: Context) -> int:
    path = run.path or ctx.store / run.arch / f"{run.id}.json"
    print(
        f"{run.kind} {run.name}: {run.status} ({len(run.cells)} cells, guard {run.guard.mode}) "
        f"-> {path}",
        file=ctx.out,
    )
    if run.status != "ok":
        print(f"reason: {run.reason}", file=ctx.err)
        return 1
    return 0


def _sweep(args: argparse.Namespace, ctx: Context) -> int:
    from tether.bench.demo import summary_lines
    from tether.cli.shards import run_sharded

    reg = registry.for_project(ctx.project)
    if args.list:
        for name, sweep in sorted(reg.sweeps.items()):
            if sweep.kind == args.kind:
                print(f"{name}: {sweep.description}", file=ctx.out)
        return 0
    if not args.name:
        raise UsageError(f"{args.kind}: name one (or --list)")
    sweep = reg.get_sweep(args.name)
    if sweep.kind != args.kind:
        raise UsageError(
            f"{args.name} is a {sweep.kind}, not a {args.kind}: use tether {sweep.kind}"
        )
    sweep = _apply_grid(sweep, args)
    if getattr(args, "shards", None) is not None or getattr(args, "shard_worker", None) is not None:
        return run_sharded(args, ctx, sweep)
    with bench_for(
        ctx, args, f"tether {args.kind} {sweep.name}", args.kind, sweep.name, sweep.needs_gpu
    ) as bench:
        run = bench.sweep(sweep)

    for line in summary_lines(run, _store_runs(ctx.store)):
        print(line, file=ctx.out)
    return _report_run(run, ctx)


def _store_runs(store: Any) -> list[Any]:
    """The runs of ``store`` that load (a run's replicates for its summary's verdicts)."""

    return list(load_store_checked(store).runs) if store.is_dir() else []


def _gate(args: argparse.Namespace, ctx: Context) -> int:
    from tether.bench.gate import measure_gate, select_gates
    from tether.bench.sweep import Target

    found = policy(ctx.root)
    gates = found[1] if found else ()
    arch = Target.detect(args.device).arch
    chosen = select_gates(tuple(gates), arch, args.gate_id)
    policy_file = ctx.project.rel(ctx.project.policy) if ctx.project.policy else "pyproject.toml"
    failed = 0
    with bench_for(ctx, args, "tether gate", "gate", args.gate_id or "gates") as bench:
        for gate in chosen:
            out = measure_gate(bench, gate, policy_file)
            print(out.line(), file=ctx.out)
            failed += out.failed
    return 1 if failed else 0


def _probe(args: argparse.Namespace, ctx: Context) -> int:
    from tether.bench.probe import run_probe

    reg = registry.for_project(ctx.project)
    name = args.name
    if name is None:
        if len(reg.probes) != 1:
            raise UsageError(f"probe: name one of {', '.join(sorted(reg.probes)) or 'none'}")
        name = next(iter(reg.probes))
    probe = reg.get_probe(name)
    with bench_for(
        ctx, args, f"tether probe {name}", "probe", name, probe.sweep.needs_gpu
    ) as bench:
        run = run_probe(bench, probe)
    return _report_run(run, ctx)


def _demo(args: argparse.Namespace, ctx: Context) -> int:
    from tether.bench.demo import KEEP_SCRATCH_RUNS, prune_scratch, run_demo, summary_lines
    from tether.bench.sweep import Target

    if args.publish and ctx.store_given:
        raise UsageError("demo: --publish writes the project's store; --store names another")
    keep = KEEP_SCRATCH_RUNS if args.keep is None else args.keep
    if keep < 0:
        raise UsageError(f"demo: --keep {keep}: must be 0 (keep all) or more")
    scratch = args.scratch.resolve() if args.scratch else ctx.project.scratch
    in_scratch = not (args.publish or ctx.store_given)
    store = scratch / "results" if in_scratch else ctx.store
    docs = scratch / "docs"
    result = run_demo(ctx.project, store=store, docs=docs, target=Target.detect(), err=ctx.err)
    for line in summary_lines(result.run, _store_runs(store)):
        print(line, file=ctx.out)
    code = _report_run(result.run, ctx)
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
