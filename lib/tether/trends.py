"""Nightly history per sweep and arch: the headline over time, and changes beyond the A/A floor.

The headline of a run is the geomean of its cells' ratios over the population the renderer
uses for headlines (``tether.stats.aggregate``), recomputed from raw samples like every other
number. Between two consecutive nightlies the headline is said to have *changed* only when
the newer one lies outside both runs' A/A floors scaled onto the older headline: the floor is
what two instances of the same arm disagree by, so a smaller move is noise, not news. A change
names both runs and both commits so a reviewer can bisect.

The renderer gets plain data (``trend_context``) and SVG text (``trend_figures``); it decides
where they go. Figures are deterministic: fixed hash salt, no date metadata, sorted input.
"""

from __future__ import annotations

import io
import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from tether.stats import aggregate, cell_stats, field_of

FIGURE_DIR = "figures"


def _prov(run: Any, name: str) -> Any:
    return field_of(field_of(run, "provenance", {}), name)


def headline(run: Any) -> dict[str, Any]:
    """One point of a trend: the run's headline geomean and floor, or why it has none."""
    status = field_of(run, "status")
    point: dict[str, Any] = {
        "run": field_of(run, "id"),
        "started": _prov(run, "started"),
        "git_sha": _prov(run, "git_sha"),
        "harness": _prov(run, "harness_fingerprint"),
        "status": status,
        "reason": field_of(run, "reason"),
        "geomean": None,
        "floor": None,
        "cells": 0,
        "population": None,
    }
    if status != "ok" or not field_of(run, "cells"):
        return point
    agg = aggregate(cell_stats(run))
    point.update(
        geomean=agg.geomean,
        floor=list(agg.floor) if agg.floor else None,
        cells=agg.count,
        population=agg.population,
    )
    return point


def change_between(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any] | None:
    """The change from ``old`` to ``new`` when it lies beyond both A/A floors, else None."""
    if old["geomean"] is None or new["geomean"] is None:
        return None
    ratio = new["geomean"] / old["geomean"]
    lo = min(old["floor"][0], new["floor"][0])
    hi = max(old["floor"][1], new["floor"][1])
    if lo <= ratio <= hi:
        return None
    return {
        "direction": "up" if ratio > hi else "down",
        "ratio": ratio,
        "floor": [lo, hi],
        "from_run": old["run"],
        "to_run": new["run"],
        "from_sha": old["git_sha"],
        "to_sha": new["git_sha"],
        "harness_changed": old["harness"] != new["harness"],
    }


def _series(runs: Iterable[Any]) -> dict[tuple[str, str], list[Any]]:
    series: dict[tuple[str, str], list[Any]] = {}
    for run in runs:
        if field_of(run, "kind") != "sweep":
            continue
        series.setdefault((_prov(run, "arch"), field_of(run, "name")), []).append(run)
    for history in series.values():
        history.sort(key=lambda r: (_prov(r, "started"), field_of(r, "id")))
    return series


def figure_name(arch: str, sweep: str) -> str:
    """Where the trend figure of ``sweep`` on ``arch`` goes, relative to docs/."""
    return f"{FIGURE_DIR}/trend-{arch}-{sweep}.svg"


def trend_context(runs: Iterable[Any]) -> dict[str, Any]:
    """Template data: ``{"trends": [...]}``, one entry per (arch, sweep), sorted.

    Each entry: ``arch``, ``sweep``, ``points`` (oldest first, see ``headline``), ``changes``
    (consecutive measured nightlies whose headline moved beyond the floor), ``latest`` (the
    newest point) and ``figure`` (its SVG path under docs/, written by ``trend_figures``).
    """
    trends = []
    for (arch, sweep), history in sorted(_series(runs).items()):
        points = [headline(r) for r in history]
        measured = [p for p in points if p["geomean"] is not None]
        changes = [
            c
            for old, new in itertools.pairwise(measured)
            if (c := change_between(old, new)) is not None
        ]
        trends.append(
            {
                "arch": arch,
                "sweep": sweep,
                "points": points,
                "measured": len(measured),
                "changes": changes,
                "latest": points[-1],
                "figure": figure_name(arch, sweep),
            }
        )
    return {"trends": trends}


def trend_svg(trend: Mapping[str, Any]) -> str:
    """A small SVG of one trend: headline per nightly with its floor band; same input, same bytes."""
    import matplotlib
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    measured = [p for p in trend["points"] if p["geomean"] is not None]
    xs = list(range(len(measured)))
    with matplotlib.rc_context({"svg.hashsalt": "tether-trends", "svg.fonttype": "none"}):
        fig = Figure(figsize=(6.0, 2.4))
        FigureCanvasSVG(fig)
        ax = fig.add_subplot()
        if measured:
            g = [p["geomean"] for p in measured]
            ax.fill_between(
                xs,
                [p["geomean"] * p["floor"][0] for p in measured],
                [p["geomean"] * p["floor"][1] for p in measured],
                alpha=0.25,
                linewidth=0,
                label="A/A floor",
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


def trend_figures(runs: Iterable[Any]) -> dict[str, str]:
    """``{path under docs/: svg text}`` for every trend in ``trend_context(runs)``."""
    return {t["figure"]: trend_svg(t) for t in trend_context(runs)["trends"]}
