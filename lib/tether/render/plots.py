"""SVG figures: a sweep's per-group geomean curve drawn over each group's A/A floor band.

Bytes must not depend on the clock, the process or the host: the Agg backend, a fixed
``svg.hashsalt`` (element ids), no ``Date`` metadata, text drawn as paths, and one explicit
rc set applied around each figure so a user's matplotlibrc cannot leak in.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from tether.stats import CurvePoint

# Everything that shapes the output bytes, pinned.
_RC = {
    "svg.hashsalt": "tether",
    "svg.fonttype": "path",
    "svg.image_inline": True,
    "font.family": ["DejaVu Sans"],
    "font.size": 9.0,
    "figure.figsize": (6.4, 3.6),
    "figure.dpi": 100.0,
    "savefig.dpi": 100.0,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "lines.linewidth": 1.5,
    "path.simplify": False,
}


def curve_svg(
    points: Sequence[CurvePoint], title: str, arms: tuple[str, str], superseded: bool
) -> bytes:
    """The figure for one sweep's curve; ``arms`` is (A, B) for the axis label."""
    # The Figure API, not pyplot: no global figure registry, no GUI backend selection.
    import matplotlib
    from matplotlib.figure import Figure

    xs = [float(p.value) for p in points]  # type: ignore[arg-type]
    found = [p.aggregate.geomean for p in points]
    los = [p.aggregate.floor[0] for p in points if p.aggregate.floor]
    his = [p.aggregate.floor[1] for p in points if p.aggregate.floor]
    if None in found or len(los) != len(xs):
        raise ValueError("curve points must all have cells")
    gms = [float(g) for g in found if g is not None]
    with matplotlib.rc_context(rc=dict(_RC)):  # type: ignore[arg-type]
        fig = Figure()
        ax = fig.subplots()
        ax.fill_between(xs, los, his, step=None, alpha=0.25, color="grey", label="A/A floor")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.plot(xs, gms, marker="o", color="tab:blue", label=f"geomean {arms[1]} vs {arms[0]}")
        if len(set(xs)) > 1 and min(xs) > 0:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(p.value) for p in points])
        ax.minorticks_off()
        ax.set_xlabel(points[0].axis if points else "")
        ax.set_ylabel(f"median({arms[0]}) / median({arms[1]})")
        full = f"{title} [{'superseded: re-measure' if superseded else 'current'}]"
        ax.set_title(full)
        ax.legend(loc="best")
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()
