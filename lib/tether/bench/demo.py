"""``tether demo``: measure a small sweep under the guard, say what it measured, render docs.

Without a GPU it runs the project's CPU sweep (the registered sweep that needs no GPU), on a
GPU host the project's headline sweep. Either way the run goes to the project's scratch store
(``<scratch>/results``) and the docs rendered from it to ``<scratch>/docs``, so a demo never
changes the committed store or docs unless asked to (``tether demo --publish``, or an explicit
``--store``). It prints what it measured: the arms, the cells, their verdicts and the A/A floor
and replicate band as the docs define them (tether.stats), and where to look next. Old demo
runs in the scratch store are pruned to the newest few, announced.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tether import registry
from tether.bench.sweep import Target
from tether.errors import RunFileError, UsageError
from tether.guard.api import acquire
from tether.render import write_all
from tether.stats import MIN_RUNS, aggregate, judge
from tether.stopping import SafeBench, StopSignals
from tether.store.io import load_run, store_files
from tether.store.signing import configured_signer

KEEP_SCRATCH_RUNS = 5  # per (kind, name, arch): enough to compare the last few demos
LISTED_CELLS = 12  # a map this small is listed cell by cell; a larger one by its extremes


@dataclass
class DemoResult:
    run: Any
    store: Path
    docs: Path | None
    written: list[Path]


def demo_sweep(reg: Any, on_cpu: bool, headline: str | None) -> Any:
    """The sweep the demo measures on this host."""
    if on_cpu:
        cpu = sorted(n for n, s in reg.sweeps.items() if not s.needs_gpu and s.kind == "sweep")
        if len(cpu) != 1:
            raise UsageError(
                "tether demo on a host without a GPU needs exactly one registered sweep that "
                f"needs no GPU; found {', '.join(cpu) or 'none'}"
            )
        return reg.get_sweep(cpu[0])
    if headline is None:
        raise UsageError(
            "tether demo on a GPU host measures the [tool.tether] headline sweep; none is set"
        )
    return reg.get_sweep(headline)


def run_demo(
    project: Any,
    *,
    store: Path,
    docs: Path | None,
    target: Any = None,
    err: TextIO | None = None,
    wait_s: float = 30.0,
) -> DemoResult:
    """Run the demo sweep for this host under the guard and render docs from its store."""

    configured_signer()  # a signing key set wrongly is said before anything is measured
    reg = registry.for_project(project)
    target = target or Target.detect()
    on_cpu = target.device == "cpu"
    sweep = demo_sweep(reg, on_cpu, project.headline)
    # As every measuring verb: a stop signal writes the cells measured so far, and one after
    # the last cell waits until the run is on disk (tether.stopping). A bare Bench lost the
    # whole run to a Ctrl-C in the guard's closing idle check.
    with StopSignals() as sigs:
        try:
            with acquire(
                target="cpu" if on_cpu else "auto",
                wait_s=wait_s,
                purpose=f"tether demo {sweep.name}",
                err=err,
            ) as holding:
                bench = SafeBench(
                    project.root, store, reg, target, holding=holding, err=err, signals=sigs
                )
                run = bench.sweep(sweep)
            sigs.release()
        except KeyboardInterrupt as exc:
            raise sigs.as_raised(exc) from None
    written: list[Path] = []
    if docs is not None:
        written = list(write_all(project.root, store, out_root=docs))
    return DemoResult(run=run, store=store, docs=docs, written=written)


def _fmt_floor(floor: tuple[float, float] | None) -> str:
    return "-" if floor is None else f"{floor[0]:.3f}-{floor[1]:.3f}"


def summary_lines(run: Any, runs: Any = ()) -> list[str]:
    """What a run measured, in the docs' words: arms, cells, verdicts, geomean and noise.

    Every number is recomputed from the raw samples by tether.stats, as the docs do, and
    judged with the run's replicates among ``runs`` (the store it was written to): the words
    are the ones ``store show``, ``compare`` and the rendered documents print.
    """

    arms = run.config.get("arms") or {}
    lines = [
        f"measured {run.kind} {run.name} on {run.provenance.device} ({run.arch}), "
        f"guard {run.guard.mode}"
    ]
    if arms:
        a, b = arms.get("A", "?"), arms.get("B", "?")
        lines.append(f"  arms: A = {a}, B = {b}, A2 = a second instance of A (the A/A control)")
    if run.status != "ok":
        lines.append(f"  {run.status}: {run.reason}")
        return lines
    stats = judge(run, list(runs))
    if not stats:
        lines.append(f"  {len(run.cells)} cells, none with an A/A control to judge")
        return lines
    agg = aggregate(stats)
    assert agg.geomean is not None and agg.worst is not None
    lines += [
        f"  {agg.count} cells: {agg.wins} faster, {agg.losses} slower, {agg.levels} level "
        "(a cell is faster or slower only beyond its noise: its A/A floor times its replicate "
        f"band, each symmetric about 1.0), {agg.flagged} flagged",
        f"  geomean ratio median(A)/median(B) {agg.geomean:.3f} (above 1: B faster): "
        f"{agg.word}; noise {_fmt_floor(agg.noise)} (A/A floor {_fmt_floor(agg.floor)}, "
        f"replicate band {_fmt_floor(agg.band)})",
    ]
    if agg.provisional:
        lines.append(
            f"  provisional: the band rests on {agg.runs} run; a verdict backs a policy or a "
            f"gate only with {MIN_RUNS} runs of one commit from separate processes"
        )
    shown = stats if len(stats) <= LISTED_CELLS else sorted(stats, key=lambda s: s.ratio)
    if len(stats) > LISTED_CELLS:
        shown = [*shown[:3], *shown[-3:]]
        lines.append(f"  the 3 lowest and 3 highest of {len(stats)} cells:")
    width = max(len(s.label) for s in shown)
    for s in shown:
        flags = f"  [{', '.join(s.flags)}]" if s.flags else ""
        lines.append(
            f"    {s.label.ljust(width)}  ratio {s.ratio:.3f}  noise {_fmt_floor(s.noise)}"
            f"  {s.word}{flags}"
        )
    return lines


@dataclass(frozen=True)
class Pruned:
    """What ``prune_scratch`` did: run files removed, and how many runs remain."""

    removed: tuple[Path, ...]
    kept: int
    unreadable: int  # files left alone because they do not load


def prune_scratch(store: Path, keep: int = KEEP_SCRATCH_RUNS) -> Pruned:
    """Keep the newest ``keep`` runs of each (kind, name, arch) in the scratch ``store``;
    remove the older ones. Files that do not load are left alone (and counted). ``keep`` 0
    keeps everything. Never call this on a store whose runs are evidence."""

    groups: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    unreadable = 0
    files = store_files(store)
    for path in files:
        try:
            run = load_run(path)
        except RunFileError:
            unreadable += 1
            continue
        groups[(run.kind, run.name, run.arch)].append(run)
    removed: list[Path] = []
    if keep > 0:
        for runs in groups.values():
            runs.sort(key=lambda r: (r.started, r.id), reverse=True)
            for run in runs[keep:]:
                run.path.unlink(missing_ok=True)
                removed.append(run.path)
    kept = sum(len(v) for v in groups.values()) - len(removed)
    return Pruned(tuple(sorted(removed)), kept, unreadable)
