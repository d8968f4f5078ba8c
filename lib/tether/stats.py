"""Statistics recomputed from raw samples: ratios, A/A floors, verdicts, aggregates, claims.

Conventions, fixed here and nowhere else:

- A cell's *ratio* is ``median(A) / median(B)`` over seconds-per-call samples: the speedup of
  arm B over arm A. Above 1 means B is faster.
- A cell's *A/A floor* is the range of the same statistic taken between the A arm and its own
  A/A control (``A2``). Samples are split by repetition index into even and odd halves, and the
  floor is ``[min, max]`` of ``median(A_h) / median(A2_g)`` over the full sets and the four
  half pairings, widened to include 1.0 (two instances of one arm are level by definition).
  Medians of halves converge as samples accrue, so the floor tightens with more samples; a
  pairwise range by index would only widen.
- A cell's *verdict* is ``level`` when its ratio lies inside its floor, ``win`` above it and
  ``loss`` below it.
- An aggregate's floor applies the same construction to the geomean: for each of the five
  A/A statistics, the geomean over the population's cells; ``[min, max]`` widened to 1.0.

Runs and cells are read by attribute or by key, so this module works on tether.store's
dataclasses and on plain run-file dictionaries alike. Pure numpy and Python, no torch.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tether.policy import WHOLE_MAP, Evidence, Population, shape_fields

# The axes a curve may be drawn over, in order of preference.
CURVE_AXES = ("seqlen", "kv_len", "qo_len")


def field_of(obj: Any, name: str, default: Any = None) -> Any:
    """``obj.name`` or ``obj[name]``: the store's dataclasses and raw JSON both work."""
    if isinstance(obj, Mapping):
        return obj.get(name, default)
    return getattr(obj, name, default)


def _median(xs: Sequence[float]) -> float:
    # statistics.median equals np.median bit for bit (the middle value, or the two middle values
    # summed then halved) and costs far less on the short sample lists of a cell; the check
    # computes every run's headline for the trends, so this is on its path.
    if not len(xs):
        raise ValueError("median of no samples")
    return float(statistics.median(float(x) for x in xs))


def _halves(xs: Sequence[float]) -> tuple[Sequence[float], Sequence[float]]:
    """Even and odd repetitions; a single sample stands for both halves."""
    if len(xs) < 2:
        return xs, xs
    return xs[0::2], xs[1::2]


def aa_statistics(a: Sequence[float], a2: Sequence[float]) -> tuple[float, ...]:
    """The five A/A ratios a floor is built from: full sets, then the four half pairings."""
    if not a or not a2:
        raise ValueError("A/A statistics need at least one A and one A2 sample")
    a_halves, a2_halves = _halves(a), _halves(a2)
    out = [_median(a) / _median(a2)]
    out += [_median(x) / _median(y) for x in a_halves for y in a2_halves]
    return tuple(out)


def floor_of(stats: Iterable[float]) -> tuple[float, float]:
    vals = list(stats)
    return (min(*vals, 1.0), max(*vals, 1.0))


def verdict(ratio: float, floor: tuple[float, float]) -> str:
    if ratio > floor[1]:
        return "win"
    if ratio < floor[0]:
        return "loss"
    return "level"


@dataclass(frozen=True)
class CellStat:
    """One cell judged against its own A/A control."""

    key: Mapping[str, object]
    label: str  # the key as ``axis=value`` pairs, sorted by axis
    a_median: float  # seconds per call
    b_median: float
    ratio: float  # median(A) / median(B): above 1 means B is faster
    aa: tuple[float, ...]
    floor: tuple[float, float]
    verdict: str  # win | loss | level
    flags: tuple[str, ...]
    shape: Mapping[str, object]  # shape_fields(key, grid.fixed)
    entry_points: tuple[str, ...]


def key_label(key: Mapping[str, object]) -> str:
    return " ".join(f"{k}={key[k]}" for k in sorted(key))


def _grid_fixed(run: Any) -> Mapping[str, object]:
    grid = field_of(field_of(run, "config", {}), "grid", {})
    return field_of(grid, "fixed", {}) or {}


def cell_stat(cell: Any, fixed: Mapping[str, object]) -> CellStat:
    samples = field_of(cell, "samples")
    a, a2, b = samples["A"], samples["A2"], samples["B"]
    aa = aa_statistics(a, a2)
    floor = floor_of(aa)
    a_med, b_med = _median(a), _median(b)
    ratio = a_med / b_med
    key = dict(field_of(cell, "key"))
    reach = field_of(cell, "reach", {}) or {}
    return CellStat(
        key=key,
        label=key_label(key),
        a_median=a_med,
        b_median=b_med,
        ratio=ratio,
        aa=aa,
        floor=floor,
        verdict=verdict(ratio, floor),
        flags=tuple(sorted(field_of(cell, "flags", ()) or ())),
        shape=shape_fields(key, fixed),
        entry_points=tuple(field_of(reach, "entry_points", ()) or ()),
    )


def cell_stats(run: Any) -> tuple[CellStat, ...]:
    """The cells of a sweep run, judged and sorted by key so file order never matters.

    A cell whose samples give no usable statistic raises RunFileError naming the run's file
    (or id) and the cell, never a bare arithmetic error deep inside a render or a check.
    """
    fixed = _grid_fixed(run)
    stats = [_judged(run, i, c, fixed) for i, c in enumerate(field_of(run, "cells", ()))]
    return tuple(sorted(stats, key=lambda s: tuple(sorted(s.key.items()))))


def _judged(run: Any, index: int, cell: Any, fixed: Mapping[str, object]) -> CellStat:
    """``cell_stat`` with every number it returns finite and positive, else a named error.

    Schema-valid samples can still be extreme (1e-300 s against 1e300 s): their ratio
    underflows to 0 or overflows to infinity and breaks every geomean and plot downstream.
    """
    from tether.errors import RunFileError

    label = key_label(field_of(cell, "key", {}) or {})
    where = field_of(run, "path") or f"run {field_of(run, 'id')}"
    about = f"cell {label} of run {field_of(run, 'id')}"
    try:
        st = cell_stat(cell, fixed)
    except (ArithmeticError, ValueError, KeyError) as exc:
        raise RunFileError(where, f"cells[{index}]", f"{about}: no statistic: {exc!r}") from None
    numbers = (st.a_median, st.b_median, st.ratio, *st.aa)
    if not all(np.isfinite(x) and x > 0 for x in numbers):
        raise RunFileError(
            where,
            f"cells[{index}]",
            f"{about}: samples too extreme for statistics (median A {st.a_median!r} s, "
            f"median B {st.b_median!r} s, ratio {st.ratio!r}, A/A {min(st.aa)!r}..{max(st.aa)!r})",
        )
    return st


def geomean(xs: Iterable[float]) -> float:
    arr = np.asarray(list(xs), dtype=np.float64)
    if arr.size == 0:
        raise ValueError("geomean of no values")
    return float(np.exp(np.mean(np.log(arr))))


@dataclass(frozen=True)
class Aggregate:
    """Cells of one population summarised; ``count == 0`` means nothing to summarise."""

    population: str
    description: str
    count: int
    geomean: float | None
    floor: tuple[float, float] | None
    worst: CellStat | None
    below_one: int  # cells with ratio < 1.00
    losses: int  # cells below their own floor
    wins: int
    levels: int
    flagged: int  # cells carrying any flag (allocation in timed region, fallback, ...)
    cells: tuple[CellStat, ...]


def aggregate(
    stats: Sequence[CellStat], population: Population = WHOLE_MAP, label: str | None = None
) -> Aggregate:
    """Summarise the cells ``population`` admits; ``label`` overrides the population's name."""
    cells = tuple(s for s in stats if population.admits(s.shape, s.entry_points))
    name, desc = label or population.name, population.describe()
    if not cells:
        return Aggregate(name, desc, 0, None, None, None, 0, 0, 0, 0, 0, ())
    gm = geomean(s.ratio for s in cells)
    floor = floor_of(geomean(s.aa[j] for s in cells) for j in range(len(cells[0].aa)))
    return Aggregate(
        population=name,
        description=desc,
        count=len(cells),
        geomean=gm,
        floor=floor,
        worst=min(cells, key=lambda s: (s.ratio, s.label)),
        below_one=sum(s.ratio < 1.0 for s in cells),
        losses=sum(s.verdict == "loss" for s in cells),
        wins=sum(s.verdict == "win" for s in cells),
        levels=sum(s.verdict == "level" for s in cells),
        flagged=sum(bool(s.flags) for s in cells),
        cells=cells,
    )


def curve_axis(stats: Sequence[CellStat]) -> str | None:
    """The first of CURVE_AXES that varies across the cells' keys (a swept axis)."""
    for axis in CURVE_AXES:
        values = {s.key.get(axis) for s in stats if axis in s.key}
        if len(values) > 1:
            return axis
    return None


@dataclass(frozen=True)
class CurvePoint:
    axis: str
    value: object
    aggregate: Aggregate


def curve(
    stats: Sequence[CellStat], axis: str | None = None, population: Population = WHOLE_MAP
) -> tuple[CurvePoint, ...]:
    """Geomean per value of ``axis`` (default: curve_axis), each group with its own floor."""
    axis = axis or curve_axis(stats)
    if axis is None:
        return ()
    values = sorted({s.key[axis] for s in stats if axis in s.key})  # type: ignore[type-var]
    points = []
    for value in values:
        group = [s for s in stats if s.key.get(axis) == value]
        agg = aggregate(group, population, label=f"{axis}={value}")
        if agg.count:
            points.append(CurvePoint(axis, value, agg))
    return tuple(points)


@dataclass(frozen=True)
class Step:
    """One step along a curve, judged against the floor of the group it lands in."""

    before: object
    after: object
    change: float  # geomean(after) / geomean(before)
    floor: tuple[float, float]
    verdict: str  # up | level | break


@dataclass(frozen=True)
class MonotonicClaim:
    """Whether a curve rises (never falls by more than its noise), and the steps that break it."""

    axis: str | None
    holds: bool
    steps: tuple[Step, ...]
    breaks: tuple[Step, ...]


def monotonic(points: Sequence[CurvePoint]) -> MonotonicClaim:
    """A fall inside the landing group's floor is ``level``; only a fall below it breaks."""
    steps = []
    for prev, nxt in itertools.pairwise(points):
        pa, na = prev.aggregate, nxt.aggregate
        assert pa.geomean is not None and na.geomean is not None and na.floor is not None
        change = na.geomean / pa.geomean
        if change >= 1.0:
            v = "up"
        elif change >= na.floor[0]:
            v = "level"
        else:
            v = "break"
        steps.append(Step(prev.value, nxt.value, change, na.floor, v))
    breaks = tuple(s for s in steps if s.verdict == "break")
    axis = points[0].axis if points else None
    return MonotonicClaim(axis, bool(points) and not breaks, tuple(steps), breaks)


def _geomean_win(agg: Aggregate) -> bool:
    return (
        agg.count > 0
        and agg.geomean is not None
        and agg.floor is not None
        and agg.geomean > 1.0
        and agg.geomean > agg.floor[1]
    )


def _no_loss_outside_floor(agg: Aggregate) -> bool:
    return agg.count > 0 and agg.losses == 0


def _geomean_loss_or_level(agg: Aggregate) -> bool:
    return agg.count > 0 and not _geomean_win(agg)


# Keyed by tether.policy.PREDICATE_NAMES; an empty population satisfies none of them.
PREDICATES: dict[str, Callable[[Aggregate], bool]] = {
    "geomean_win": _geomean_win,
    "no_loss_outside_floor": _no_loss_outside_floor,
    "geomean_loss_or_level": _geomean_loss_or_level,
}


def predicate_results(evidence: Evidence, agg: Aggregate) -> dict[str, bool]:
    unknown = [p for p in evidence.predicates if p not in PREDICATES]
    if unknown:
        from tether.errors import UsageError

        raise UsageError(f"unknown evidence predicate(s) {unknown}; known: {sorted(PREDICATES)}")
    return {p: PREDICATES[p](agg) for p in evidence.predicates}


def evaluate(evidence: Evidence, run: Any) -> tuple[bool, str]:
    """Whether every predicate of ``evidence`` holds on ``run``, and a one-line reason."""
    if run is None or field_of(run, "status") != "ok":
        return False, f"sweep {evidence.sweep}: not measured"
    agg = aggregate(cell_stats(run), evidence.population)
    results = predicate_results(evidence, agg)
    if agg.count == 0:
        return False, (
            f"run {field_of(run, 'id')}: population {agg.population} ({agg.description}) is empty"
        )
    assert agg.geomean is not None and agg.floor is not None
    verdicts = ", ".join(f"{p} {'holds' if ok else 'fails'}" for p, ok in results.items())
    why = (
        f"run {field_of(run, 'id')}: {agg.population} ({agg.description}), {agg.count} cells, "
        f"geomean {agg.geomean:.3f}, A/A floor {agg.floor[0]:.3f}-{agg.floor[1]:.3f}: {verdicts}"
    )
    return all(results.values()), why


def measured_tflops(run: Any, shape: Mapping[str, object], role: str = "B") -> float | None:
    """What ``run`` measured for ``shape`` (FLOPs per second over 1e12): a gate run's recorded result, else
    recomputed from the raw samples of ``role`` in the cell matching ``shape``.

    None when the run has no such cell or role. One definition for the check and the docs.
    """
    results = field_of(run, "results", {}) or {}
    value = field_of(results, "measured_tflops")
    if isinstance(value, (int, float)) and role == "B":
        return float(value)
    fixed = field_of(field_of(field_of(run, "config", {}), "grid", {}), "fixed", {}) or {}
    for cell in field_of(run, "cells", ()) or ():
        full = shape_fields(field_of(cell, "key", {}), fixed)
        if all(full.get(k) == v for k, v in shape.items()):
            samples = field_of(field_of(cell, "samples", {}), role)
            if samples:
                return float(field_of(cell, "flops")) / _median(samples) / 1e12
    return None


@dataclass(frozen=True)
class CellAgreement:
    """One cell measured by two runs: does ``other`` reproduce ``base`` within their noise?"""

    label: str
    base_ratio: float
    other_ratio: float
    rel: float  # other_ratio / base_ratio
    low: float  # product of the two runs' A/A floors (each run's own noise, compounded)
    high: float
    inside: bool
    gpu: Any  # the other run's extra.gpu for this cell (sharded runs), else None
    inside_run: bool | None = None  # inside the run-to-run band (None: no control run)


@dataclass(frozen=True)
class Agreement:
    base_id: str
    other_id: str
    cells: tuple[CellAgreement, ...]
    # The run-level A/A control: a second run of the same cells, commit and harness, set up
    # like ``base``. Its largest cell deviation from ``base`` bounds how far two runs of one
    # setup drift apart, which a cell's own A/A floor (noise inside one run) does not cover.
    control_id: str | None = None
    run_band: tuple[float, float] | None = None
    # Cells on which the control and ``base`` (two runs of one setup) agree within the
    # product of their own A/A floors: what that criterion gives when nothing changed.
    control_agree: int | None = None

    @property
    def agree(self) -> int:
        return sum(c.inside for c in self.cells)

    @property
    def agree_run(self) -> int | None:
        """Cells inside their floors or inside the run-to-run band; None without a control."""
        if self.run_band is None:
            return None
        return sum(bool(c.inside or c.inside_run) for c in self.cells)


def _ratios(run: Any) -> dict[str, CellStat]:
    return {s.label: s for s in cell_stats(run)}


def run_band(base: Any, control: Any) -> tuple[float, float] | None:
    """The band two runs of the same setup span: ``exp(+-max |log(control / base)|)`` over
    the cells' ratios; None when the runs do not cover the same cells."""
    a, c = _ratios(base), _ratios(control)
    if not a or set(a) != set(c):
        return None
    worst = max(abs(float(np.log(c[k].ratio / a[k].ratio))) for k in a)
    return (float(np.exp(-worst)), float(np.exp(worst)))


def agreement(base: Any, other: Any, control: Any = None) -> Agreement | None:
    """Cell-by-cell agreement of two runs of the same cells; None when their cells differ.

    Used for a sharded run against an unsharded one of the same cells: the ratio of the
    two speedups must lie inside the product of the two cells' A/A floors. With ``control``
    (another run set up like ``base``), each cell is also judged against the run-to-run band
    of ``base`` and ``control`` (``run_band``): the sharded run reproduces the unsharded one
    when it differs from it no more than two unsharded runs differ from each other.
    """
    a, b = _ratios(base), _ratios(other)
    if not a or set(a) != set(b):
        return None
    band = run_band(base, control) if control is not None else None
    twin = agreement(base, control) if band is not None else None
    gpus = {
        key_label(field_of(c, "key", {})): (field_of(c, "extra", {}) or {}).get("gpu")
        for c in field_of(other, "cells", ())
    }
    rows = []
    for label in sorted(a):
        low = a[label].floor[0] * b[label].floor[0]
        high = a[label].floor[1] * b[label].floor[1]
        rel = b[label].ratio / a[label].ratio
        row = CellAgreement(
            label=label,
            base_ratio=a[label].ratio,
            other_ratio=b[label].ratio,
            rel=rel,
            low=low,
            high=high,
            inside=low <= rel <= high,
            gpu=gpus.get(label),
            inside_run=None if band is None else band[0] <= rel <= band[1],
        )
        rows.append(row)
    return Agreement(
        str(field_of(base, "id")),
        str(field_of(other, "id")),
        tuple(rows),
        control_id=None if band is None else str(field_of(control, "id")),
        run_band=band,
        control_agree=None if twin is None else twin.agree,
    )
