"""History per sweep and arch: the headline over time, and changes beyond its noise.

The headline of a run is the geomean of its cells' ratios over the whole map
(``tether.stats.aggregate``), recomputed from raw samples like every other number. Only
evidence-grade runs (ok, guarded) are points; sharded and unsharded runs trend apart. Between
two consecutive runs the headline is said to have *changed* only beyond both runs' A/A floors,
both runs' replicate bands and the sweep's run-to-run band (how far replicate runs of one
setup moved, not counting the pair being judged): a smaller move is noise, not news. Two
consecutive replicates of one setup are never a change: their spread is that band. A change
names both runs and both commits so a reviewer can bisect.

The renderer gets plain data (``trend_context``) and SVG text (``trend_figures``); it decides
where they go. Figures are deterministic: fixed hash salt, no date metadata, sorted input.
"""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Iterable, Mapping
from typing import Any

from tether.stats import aggregate, cell_stats, judge
from tether.store.cite import same_setup, setup_of
from tether.store.model import Run


def headline(run: Run, runs: Iterable[Run] = ()) -> dict[str, Any]:
    """One point of a trend: the run's whole-map geomean with its floor and replicate band,
    judged with its replicates among ``runs`` (tether.stats.judge), and the word it gets."""
    # A tuple, so the store's index by setup is made once (tether.store.cite.siblings).
    agg = aggregate(judge(run, tuple(runs)))
    return {
        "run": run.id,
        "started": run.started,
        "git_sha": run.provenance.git_sha,
        "harness": run.harness_fingerprint,
        "geomean": agg.geomean,
        "floor": list(agg.floor) if agg.floor else None,
        "band": list(agg.band) if agg.band else None,
        "noise": list(agg.noise) if agg.noise else None,
        "verdict": agg.verdict,
        "word": agg.word,
        "provisional": agg.provisional,
        "cells": agg.count,
    }


# One setup's replicate headlines as (geomean, run id, place in the series), lowest first.
_Spread = list[tuple[float, str, int]]


def _replicate_spreads(history: list[Run]) -> list[_Spread]:
    """The headlines of each setup's replicates among ``history`` (``_Spread``), for the
    setups with two or more. Each run's headline is computed once, and the widest move
    between two replicates is then the spread from the lowest to the highest: a series of
    hundreds of replicates is judged in as many steps, not in one per pair."""
    groups: dict[tuple[object, ...], _Spread] = {}
    for place, run in enumerate(history):
        geomean = aggregate(cell_stats(run)).geomean
        if geomean:
            groups.setdefault(setup_of(run), []).append((geomean, run.id, place))
    return [sorted(group) for group in groups.values() if len(group) >= 2]


def _run_band(spreads: list[_Spread], exclude: tuple[str, str]) -> tuple[float, float]:
    """How far the headline moved between two runs of one setup (``_replicate_spreads``),
    over every pair but the one under judgment; (1, 1) when there is none."""
    skip = set(exclude)
    worst = 0.0
    for group in spreads:
        # The widest pair is the two ends (division and log are monotone); the next widest,
        # when the ends are the pair judged, drops one of them.
        ends = [(group[0], group[-1])]
        if {group[0][1], group[-1][1]} == skip:
            ends = [(group[0], group[-2]), (group[1], group[-1])] if len(group) > 2 else []
        for a, b in ends:
            worst = max(worst, _move(a, b))
    return (math.exp(-worst), math.exp(worst))


def _move(a: tuple[float, str, int], b: tuple[float, str, int]) -> float:
    # |log(newer / older)|, the float a pair's move has always been.
    (older, _, _), (newer, _, _) = sorted((a, b), key=lambda p: p[2])
    return abs(math.log(newer / older))


def change_between(
    old: Mapping[str, Any], new: Mapping[str, Any], band: tuple[float, float] = (1.0, 1.0)
) -> dict[str, Any] | None:
    """The change from ``old`` to ``new`` when it lies beyond both runs' noise (A/A floors and
    replicate bands) and the sweep's run-to-run ``band``, else None."""
    if old["geomean"] is None or new["geomean"] is None:
        return None
    ratio = new["geomean"] / old["geomean"]
    lo = min(old["floor"][0], new["floor"][0]) * min(old["band"][0], new["band"][0]) * band[0]
    hi = max(old["floor"][1], new["floor"][1]) * max(old["band"][1], new["band"][1]) * band[1]
    if lo <= ratio <= hi:
        return None
    return {
        "direction": "up" if ratio > hi else "down",
        "ratio": ratio,
        "noise": [lo, hi],
        "from_run": old["run"],
        "to_run": new["run"],
        "from_sha": old["git_sha"],
        "to_sha": new["git_sha"],
        "harness_changed": old["harness"] != new["harness"],
    }


def _series(runs: Iterable[Run]) -> dict[tuple[str, str, bool], list[Run]]:
    """Evidence-grade sweeps per (arch, name, sharded): sharded runs trend apart."""
    series: dict[tuple[str, str, bool], list[Run]] = {}
    for run in runs:
        if run.kind == "sweep" and run.evidence_grade:
            series.setdefault((run.arch, run.name, run.sharded), []).append(run)
    for history in series.values():
        history.sort(key=lambda r: (r.started, r.id))
    return series


def figure_name(arch: str, sweep: str, sharded: bool = False) -> str:
    """Where the trend figure of ``sweep`` on ``arch`` goes, relative to the figures folder."""
    return f"trend-{arch}-{sweep}{'-sharded' if sharded else ''}.svg"


def _grid(run: Run) -> frozenset[tuple[tuple[str, str], ...]]:
    """The cells a run measured, by key: its whole-map geomean is over these."""
    return frozenset(tuple(sorted((k, repr(v)) for k, v in c.key.items())) for c in run.cells)


def incomparable(old: Run, new: Run) -> str | None:
    """Why the headlines of two runs of one sweep are not one series (None: they are). A
    whole-map geomean over another grid, or from another device, describes another population:
    a move between them is no change of the kernels, and calling it one would put a figure on a
    population neither run measured (the seeds' failure)."""
    if old.provenance.device != new.provenance.device:
        return f"device {old.provenance.device} to {new.provenance.device}"
    if _grid(old) != _grid(new):
        return f"grid of {len(old.cells)} cells to another of {len(new.cells)}"
    return None


def trend_context(runs: Iterable[Run]) -> dict[str, Any]:
    """Template data: ``{"trends": [...]}``, one entry per (arch, sweep, sharded), sorted.

    Each entry: ``arch``, ``sweep``, ``sharded``, ``points`` (oldest first, see ``headline``),
    ``changes`` (consecutive runs whose headline moved beyond their noise and the sweep's
    run-to-run band), ``breaks`` (consecutive runs not compared, ``incomparable``), ``latest``
    and ``figure`` (its file name in the figures folder).
    """
    trends = []
    pool = tuple(runs)
    for (arch, sweep, sharded), history in sorted(_series(pool).items()):
        points = [headline(r, pool) for r in history]
        spreads = _replicate_spreads(history)
        changes: list[dict[str, Any]] = []
        breaks: list[dict[str, Any]] = []
        for (ra, pa), (rb, pb) in itertools.pairwise(list(zip(history, points, strict=True))):
            why = incomparable(ra, rb)
            if why is not None:
                breaks.append({"from_run": ra.id, "to_run": rb.id, "why": why})
                continue
            if same_setup(ra, rb):
                # Replicates of one setup (same commit, fingerprints, sweep): how far they
                # moved is the run-to-run band itself, never a change.
                continue
            band = _run_band(spreads, (ra.id, rb.id))
            change = change_between(pa, pb, band)
            if change is not None:
                changes.append(change)
        trends.append(
            {
                "arch": arch,
                "sweep": sweep,
                "sharded": sharded,
                "points": points,
                "measured": len(points),
                "changes": changes,
                "breaks": breaks,
                "latest": points[-1],
                "figure": figure_name(arch, sweep, sharded),
            }
        )
    return {"trends": trends}


def trend_svg(trend: Mapping[str, Any]) -> str:
    """A small SVG of one trend: headline per nightly with its floor band; same input, same bytes."""
    import matplotlib
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    measured = list(trend["points"])
    xs = list(range(len(measured)))
    with matplotlib.rc_context({"svg.hashsalt": "tether-trends", "svg.fonttype": "none"}):
        fig = Figure(figsize=(6.0, 2.4))
        FigureCanvasSVG(fig)
        ax = fig.add_subplot()
        if measured:
            g = [p["geomean"] for p in measured]
            ax.fill_between(
                xs,
                [p["geomean"] * p["floor"][0] * p["band"][0] for p in measured],
                [p["geomean"] * p["floor"][1] * p["band"][1] for p in measured],
                alpha=0.25,
                linewidth=0,
                label="A/A floor x replicate band",
            )
            ax.plot(xs, g, marker="o", label="headline geomean")
            ax.set_xticks(xs, [str(p["git_sha"])[:7] for p in measured], rotation=45, fontsize=7)
            ax.legend(fontsize=7, loc="best")
        else:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_title(f"{trend['arch']}: {trend['sweep']}", fontsize=9)
        ax.set_ylabel("B over A", fontsize=8)
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def trend_figures(runs: Iterable[Run]) -> dict[str, str]:
    """``{path under docs/: svg text}`` for every trend in ``trend_context(runs)``."""
    return {t["figure"]: trend_svg(t) for t in trend_context(runs)["trends"]}
