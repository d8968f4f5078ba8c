"""``tether demo``: measure a small sweep under the guard, then render the docs from it.

Without a GPU it runs the project's CPU sweep (the registered sweep that needs no GPU) into the
scratch store (``<scratch>/results``) and renders into ``<scratch>/docs``, so a newcomer sees
the whole pipeline (guard, engine with its A/A control and replicate blocks, store, render) in
well under a minute. On a GPU host it runs the project's headline sweep, also into scratch
unless told ``--into-store``. It never writes the repository's documents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tether.errors import UsageError


def demo_sweep(registry: Any, on_cpu: bool, headline: str | None) -> Any:
    """The sweep the demo measures on this host."""
    if on_cpu:
        cpu = sorted(n for n, s in registry.sweeps.items() if not s.needs_gpu and s.kind == "sweep")
        if len(cpu) != 1:
            raise UsageError(
                "tether demo on a host without a GPU needs exactly one registered sweep that "
                f"needs no GPU; found {', '.join(cpu) or 'none'}"
            )
        return registry.get_sweep(cpu[0])
    if headline is None:
        raise UsageError(
            "tether demo on a GPU host measures the [tool.tether] headline sweep; none is set"
        )
    return registry.get_sweep(headline)


def story(run: Any) -> list[str]:
    """What was measured, in the words the documents use."""
    from tether.stats import aggregate, cell_stats

    lines = [
        f"arms: B = {run.arms.get('B')} against A = {run.arms.get('A')}, A2 = a second A (the A/A control)"
    ]
    stats = cell_stats(run)
    agg = aggregate(stats)
    if agg.count and agg.geomean is not None and agg.floor is not None and agg.band is not None:
        lines.append(
            f"{agg.count} cells: {agg.wins} faster, {agg.losses} slower beyond their noise, "
            f"{agg.levels} level; geomean B over A {agg.geomean:.3f}, "
            f"A/A floor {agg.floor[0]:.3f}-{agg.floor[1]:.3f}, "
            f"replicate band {agg.band[0]:.3f}-{agg.band[1]:.3f}"
        )
    for s in stats:
        lines.append(f"  {s.label}: {s.ratio:.3f} ({s.verdict})")
    return lines


def run_demo(ctx: Any, *, scratch: Path | None = None, into_store: bool = False) -> int:
    """Run the demo for this host under the guard and render docs from its store."""
    from tether import registry
    from tether.bench.sweep import Bench, Target
    from tether.guard.api import acquire
    from tether.render import write_all

    reg = registry.for_project(ctx.project)
    target = Target.detect()
    on_cpu = target.device == "cpu"
    sweep = demo_sweep(reg, on_cpu, ctx.project.headline)
    base = (scratch or ctx.project.scratch).resolve()
    store = ctx.store if (into_store and not on_cpu) else base / "results"
    docs = base / "docs"
    with acquire(
        target="cpu" if on_cpu else "auto",
        wait_s=30.0,
        purpose=f"tether demo {sweep.name}",
        err=ctx.err,
    ) as holding:
        bench = Bench(ctx.root, store, reg, target, holding=holding, err=ctx.err)
        run = bench.sweep(sweep)
    print(
        f"{run.kind} {run.name}: {run.status} ({len(run.cells)} cells, guard {run.guard.mode}) "
        f"-> {run.path}",
        file=ctx.out,
    )
    if run.status != "ok":
        print(f"reason: {run.reason}", file=ctx.err)
        return 1
    for line in story(run):
        print(line, file=ctx.out)
    written = write_all(ctx.root, store, out_root=docs)
    print(f"docs rendered from {store}: {docs} ({len(written)} files changed)", file=ctx.out)
    print(f"start with {docs / 'README.md'}", file=ctx.out)
    return 0
