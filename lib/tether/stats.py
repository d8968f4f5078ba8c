"""Statistics recomputed from raw samples: ratios, A/A floors, replicate bands, verdicts,
aggregates, claims, gate and probe rates.

Conventions, fixed here and nowhere else:

- A cell's *ratio* is ``median(A) / median(B)`` over seconds-per-call samples: the speedup of
  arm B over arm A. Above 1 means B took less time per call.
- A cell's *A/A floor* is the range of the same statistic taken between the A arm and its own
  A/A control (``A2``). Samples are split by repetition index into even and odd halves, and the
  floor is ``[min, max]`` of ``median(A_h) / median(A2_g)`` over the full sets and the four
  half pairings, widened to include 1.0 (two instances of one arm do not differ by definition).
  It is the noise between two instances of one arm inside one pass.
- A cell's *replicate band* is the range of its ratio across replicate blocks (the grid
  measured again later in the run, with fresh inputs and fresh graphs), relative to the
  cell's ratio and widened to include 1.0; and, where the store holds other runs of the same
  sweep, commit and harness, across those runs too. It is the run-to-run noise a within-pass
  floor misses (clocks, power, placement).
- Floor and band are *symmetric* in log space: each is widened to ``[1/w, w]`` with ``w`` its
  wider side, because noise that was seen on one side of 1.0 can fall on the other in the
  next pass. A one-sided floor would call 1.001 a win against 0.987-1.000.
- A cell's *noise* is the product of the two, ``[floor_lo * band_lo, floor_hi * band_hi]``,
  and its *verdict* (``verdict``, the one function every surface calls) is ``win`` when the
  ratio lies above the noise, ``loss`` below it, ``level`` inside. The interval printed as a
  cell's noise is the interval its verdict used.
- A verdict is *provisional* when its band rests on one run: within-run replicate blocks miss
  what changes between processes (clocks, power, placement), so a provisional verdict backs
  neither a policy nor a gate (``tether.check``).
- Cells flagged ``kernel_mismatch`` or ``alloc_in_timed_region`` did not time what their arm
  names (``UNTRUSTED_FLAGS``); they are shown but never counted toward a predicate.
- An aggregate applies the same constructions to the geomean over its cells.

Every surface (the sweep and demo summaries, ``store show``, ``compare``, the documents,
policy regions and trends) judges a run through ``judge(run, runs)``, which takes the
replicate runs from the store: the same cell with the same evidence gets the same word.

Pure Python and numpy, no torch. Runs are ``tether.store.Run`` objects.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether import cache
from tether.errors import RunFileError, TetherError, UsageError
from tether.policy import WHOLE_MAP, Evidence, Population, shape_fields
from tether.store.cite import same_setup, siblings
from tether.store.model import CONTROL, Cell, Run, content_digest

# The axes a curve may be drawn over, in order of preference; then any other numeric axis.
CURVE_AXES = ("seqlen", "kv_len", "qo_len")
THROTTLED = "clock_throttled"
# Flags that say a cell did not time what its arm names: another kernel ran, or the device
# allocated inside the timed call. Such a cell never counts toward an evidence predicate.
UNTRUSTED_FLAGS = frozenset({"kernel_mismatch", "alloc_in_timed_region"})
# The words every surface prints for a verdict.
VERDICT_WORDS = {"win": "faster", "loss": "slower", "level": "level"}
PROVISIONAL = "provisional"
# Runs a band must rest on before its verdict is more than provisional.
MIN_RUNS = 2


class StatsError(TetherError):
    """A run's samples cannot be summarised (names the run and the cell)."""


def median(xs: Sequence[float]) -> float:
    """``statistics.median`` of the samples as floats, the same arithmetic without its
    generic dispatch: a check takes half a million medians."""
    data = sorted(map(float, xs))
    n = len(data)
    if not n:
        raise ValueError("median of no samples")
    mid = n // 2
    return data[mid] if n % 2 else (data[mid - 1] + data[mid]) / 2


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
    out = [median(a) / median(a2)]
    out += [median(x) / median(y) for x in a_halves for y in a2_halves]
    return tuple(out)


def floor_of(stats: Iterable[float]) -> tuple[float, float]:
    vals = list(stats)
    return symmetric((min(*vals, 1.0), max(*vals, 1.0)))


def symmetric(band: tuple[float, float]) -> tuple[float, float]:
    """``band`` widened to ``[1/w, w]``, ``w`` its wider side in log space."""
    half = max(-math.log(band[0]), math.log(band[1]), 0.0)
    return (math.exp(-half), math.exp(half))


def noise_of(floor: tuple[float, float], band: tuple[float, float]) -> tuple[float, float]:
    """The interval a verdict judges against: the floor and band compounded."""
    return (floor[0] * band[0], floor[1] * band[1])


def widen(*bands: tuple[float, float] | None) -> tuple[float, float]:
    """The union of relative bands, always including 1.0, made symmetric."""
    lo, hi = 1.0, 1.0
    for b in bands:
        if b is not None:
            lo, hi = min(lo, b[0]), max(hi, b[1])
    return symmetric((lo, hi))


def verdict(
    ratio: float, floor: tuple[float, float], band: tuple[float, float] = (1.0, 1.0)
) -> str:
    """The one verdict rule: ``win`` above the noise (floor and band made symmetric, then
    compounded), ``loss`` below it, ``level`` inside; symmetric on both sides of 1.0."""
    lo, hi = noise_of(symmetric(floor), symmetric(band))
    if ratio > hi:
        return "win"
    if ratio < lo:
        return "loss"
    return "level"


def verdict_word(verdict_: str | None, provisional: bool = False) -> str:
    """What every surface prints for a verdict: faster, slower or level, marked provisional
    when its band rests on a single run."""
    if verdict_ is None:
        return "not judged"
    word = VERDICT_WORDS.get(verdict_, verdict_)
    return f"{word} ({PROVISIONAL})" if provisional else word


def key_label(key: Mapping[str, object]) -> str:
    return " ".join(f"{k}={key[k]}" for k in sorted(key))


def block_ratios(cell: Cell) -> list[float]:
    """The cell's ratio in each replicate block (one value when it has one block)."""
    a = cell.block_samples("A")
    b = cell.block_samples("B")
    return [median(x) / median(y) for x, y in zip(a, b, strict=True)]


def block_band(cell: Cell, ratio: float) -> tuple[float, float]:
    """How far the cell's ratio moves between replicate blocks, relative to ``ratio``."""
    return widen(
        (min(r / ratio for r in block_ratios(cell)), max(r / ratio for r in block_ratios(cell)))
    )


@dataclass(frozen=True)
class CellStat:
    """One cell judged against its own A/A control and its replicate band."""

    key: Mapping[str, object]
    label: str  # the key as ``axis=value`` pairs, sorted by axis
    a_median: float  # seconds per call
    b_median: float
    ratio: float  # median(A) / median(B): above 1 means B is faster
    aa: tuple[float, ...]
    floor: tuple[float, float]
    band: tuple[float, float]  # replicate band (blocks, and sibling runs when given)
    blocks: tuple[float, ...]  # the ratio in each replicate block
    verdict: str  # win | loss | level
    flags: tuple[str, ...]
    fields: Mapping[str, object]  # shape_fields(key, grid.fixed)
    entry_points: tuple[str, ...]
    work: float
    runs: int = 1  # runs the floor and band rest on: this one and its replicates

    @property
    def throttled(self) -> bool:
        return THROTTLED in self.flags

    @property
    def noise(self) -> tuple[float, float]:
        """The interval the verdict used (floor and band compounded)."""
        return noise_of(self.floor, self.band)

    @property
    def provisional(self) -> bool:
        return self.runs < MIN_RUNS

    @property
    def trusted(self) -> bool:
        """False for a cell that did not time what its arm names (UNTRUSTED_FLAGS)."""
        return not UNTRUSTED_FLAGS & set(self.flags)

    @property
    def word(self) -> str:
        return verdict_word(self.verdict, self.provisional)


def cell_stat(
    cell: Cell,
    fixed: Mapping[str, object],
    siblings: Sequence[float] = (),
    aliases: Mapping[str, Iterable[str]] | None = None,
    sibling_floors: Sequence[tuple[float, float]] = (),
    runs: int = 1,
) -> CellStat:
    """One cell judged; ``siblings`` are this cell's ratios (whole and per replicate block) in
    other runs of the same setup, ``sibling_floors`` their A/A floors. Floor and band are the
    union over the replicate runs, so the verdict is the same whichever of them is cited."""
    a, a2, b = cell.samples["A"], cell.samples[CONTROL], cell.samples["B"]
    aa = aa_statistics(a, a2)
    floor = widen(floor_of(aa), *sibling_floors)
    a_med, b_med = median(a), median(b)
    ratio = a_med / b_med
    blocks = tuple(block_ratios(cell))
    band = widen(
        (min(r / ratio for r in blocks), max(r / ratio for r in blocks)),
        (min(r / ratio for r in siblings), max(r / ratio for r in siblings)) if siblings else None,
    )
    key = dict(cell.key)
    return CellStat(
        key=key,
        label=key_label(key),
        a_median=a_med,
        b_median=b_med,
        ratio=ratio,
        aa=aa,
        floor=floor,
        band=band,
        blocks=blocks,
        verdict=verdict(ratio, floor, band),
        flags=tuple(sorted(cell.flags)),
        fields=shape_fields(key, fixed, aliases),
        entry_points=tuple(cell.reach.get("entry_points", ()) or ()),
        work=cell.work,
        runs=runs,
    )


def _ratio(cell: Cell) -> float:
    return median(cell.samples["A"]) / median(cell.samples["B"])


# (id(run), ids of its siblings) -> (the run, the siblings, its stats): a render and a check
# judge each run several times over (its section, its trend, the policy, the tuned choices).
# Identity, not equality, keys it (runs are compared by value, slowly); the entry holds the
# objects so an id cannot be reused while it is kept.
_JUDGED: dict[tuple[int, tuple[int, ...]], tuple[Run, tuple[Run, ...], tuple[CellStat, ...]]]
_JUDGED = {}
_JUDGED_MAX = 65536


def cell_stats(run: Run, siblings: Sequence[Run] = ()) -> tuple[CellStat, ...]:
    """The cells of a run with roles A, A2 and B, judged and sorted by key (``_cell_stats``),
    remembered for the same run and siblings."""
    sibs = tuple(siblings)
    key = (id(run), tuple(map(id, sibs)))
    hit = _JUDGED.get(key)
    if hit is not None and hit[0] is run:
        return hit[2]
    stats = _kept_cell_stats(run, sibs)
    if len(_JUDGED) >= _JUDGED_MAX:
        _JUDGED.clear()
    _JUDGED[key] = (run, sibs, stats)
    return stats


CELL_STATS = "cell-stats"  # the kind of entry _kept_cell_stats keeps


def _kept_cell_stats(run: Run, siblings: tuple[Run, ...]) -> tuple[CellStat, ...]:
    """``_cell_stats``, kept by the content digests of the run and its siblings
    (``tether.cache.kept``): a check after a kernel edit re-renders every document and so
    judged every cell of the store again. A run that yields no statistic raises, and nothing
    is kept."""
    return cache.kept(
        CELL_STATS,
        lambda: cache.digest(content_digest(run), *(content_digest(s) for s in siblings)),
        lambda: _cell_stats(run, siblings),
        lambda value: isinstance(value, tuple) and all(isinstance(s, CellStat) for s in value),
    )


def _cell_stats(run: Run, siblings: Sequence[Run] = ()) -> tuple[CellStat, ...]:
    """The cells of a run with roles A, A2 and B, judged and sorted by key.

    ``siblings``: other runs of the same sweep, commit and harness; each cell's band then also
    covers how far its ratio moved between those runs (whole and per block), and its floor
    their A/A floors: a cell's verdict does not depend on which replicate is cited. A cell whose samples give no usable
    statistic raises RunFileError naming the run's file (or id) and the cell, never a bare
    arithmetic error deep inside a render or a check.
    """
    others: dict[str, list[float]] = {}
    floors: dict[str, list[tuple[float, float]]] = {}
    counts: dict[str, int] = {}
    for sib in siblings:
        for c in sib.cells:
            seen = _as_sibling(c)
            if seen is not None:
                label, ratios, floor = seen
                others.setdefault(label, []).extend(ratios)
                counts[label] = counts.get(label, 0) + 1
                if floor is not None:
                    floors.setdefault(label, []).append(floor)
    stats = [
        _judged(
            run,
            i,
            c,
            others.get(key_label(c.key), ()),
            floors.get(key_label(c.key), ()),
            1 + counts.get(key_label(c.key), 0),
        )
        for i, c in enumerate(run.cells)
    ]
    return tuple(sorted(stats, key=lambda s: tuple(sorted((k, str(v)) for k, v in s.key.items()))))


# id(cell) -> (the cell, what it gives as a sibling): every run of a setup is judged with
# all its replicates, so each cell is another run's sibling as many times as its setup has
# replicates; its ratios and A/A floor (medians of every sample) are computed once. The entry
# holds the cell so its id cannot be reused while it is kept.
_SIBLING: dict[int, tuple[Cell, tuple[str, tuple[float, ...], tuple[float, float] | None] | None]]
_SIBLING = {}


def _as_sibling(cell: Cell) -> tuple[str, tuple[float, ...], tuple[float, float] | None] | None:
    """(its key's label, its ratios whole and per block, its A/A floor or None) of a cell
    with roles A and B, for the runs it is a replicate of; None for another cell."""
    hit = _SIBLING.get(id(cell))
    if hit is not None and hit[0] is cell:
        return hit[1]
    seen = None
    if {"A", "B"} <= set(cell.samples):
        floor = None
        if CONTROL in cell.samples:
            floor = floor_of(aa_statistics(cell.samples["A"], cell.samples[CONTROL]))
        seen = (key_label(cell.key), (_ratio(cell), *block_ratios(cell)), floor)
    if len(_SIBLING) >= _JUDGED_MAX * 16:  # cells, not runs: a run holds a few dozen
        _SIBLING.clear()
    _SIBLING[id(cell)] = (cell, seen)
    return seen


def _judged(
    run: Run,
    index: int,
    cell: Cell,
    siblings: Sequence[float],
    sibling_floors: Sequence[tuple[float, float]] = (),
    runs: int = 1,
) -> CellStat:
    """``cell_stat`` with every number it returns finite and positive, else a named error.

    Schema-valid samples can still be extreme (1e-300 s against 1e300 s): their ratio
    underflows to 0 or overflows to infinity and breaks every geomean and plot downstream.
    """

    label = key_label(cell.key)
    where = run.path or f"run {run.id}"
    about = f"cell {label} of run {run.id}"
    try:
        st = cell_stat(cell, run.fixed, siblings, run.aliases, sibling_floors, runs)
    except (ArithmeticError, ValueError, KeyError) as exc:
        raise RunFileError(where, f"cells[{index}]", f"{about}: no statistic: {exc!r}") from None
    numbers = (st.a_median, st.b_median, st.ratio, *st.aa, *st.band, *st.blocks)
    if not all(math.isfinite(x) and x > 0 for x in numbers):
        raise RunFileError(
            where,
            f"cells[{index}]",
            f"{about}: samples too extreme for statistics (median A {st.a_median!r} s, "
            f"median B {st.b_median!r} s, ratio {st.ratio!r}, A/A {min(st.aa)!r}..{max(st.aa)!r})",
        )
    return st


def geomean(xs: Iterable[float]) -> float:
    vals = [float(x) for x in xs]
    if not vals:
        raise ValueError("geomean of no values")
    return math.exp(math.fsum(math.log(x) for x in vals) / len(vals))


@dataclass(frozen=True)
class Aggregate:
    """Cells of one population summarised; ``count == 0`` means nothing to summarise."""

    population: str
    description: str
    count: int
    geomean: float | None
    floor: tuple[float, float] | None
    band: tuple[float, float] | None
    worst: CellStat | None
    below_one: int  # cells with ratio < 1.00
    losses: int  # cells slower outside their floor and band
    wins: int  # cells faster outside their floor and band
    levels: int
    flagged: int  # cells carrying any flag (allocation in timed region, throttle, ...)
    cells: tuple[CellStat, ...]
    runs: int = 0  # the fewest runs any of its cells' bands rest on
    untrusted: int = 0  # cells left out because they did not time their arm (evidence only)

    @property
    def verdict(self) -> str | None:
        if self.geomean is None or self.floor is None or self.band is None:
            return None
        return verdict(self.geomean, self.floor, self.band)

    @property
    def noise(self) -> tuple[float, float] | None:
        """The interval the geomean's verdict used."""
        if self.floor is None or self.band is None:
            return None
        return noise_of(self.floor, self.band)

    @property
    def provisional(self) -> bool:
        return self.runs < MIN_RUNS

    @property
    def word(self) -> str:
        return verdict_word(self.verdict, self.provisional)


def aggregate(
    stats: Sequence[CellStat],
    population: Population = WHOLE_MAP,
    label: str | None = None,
    trusted_only: bool = False,
) -> Aggregate:
    """Summarise the cells ``population`` admits; ``label`` overrides the population's name.

    ``trusted_only`` (evidence for a predicate): leave out cells flagged UNTRUSTED_FLAGS,
    counting them in ``untrusted``.
    """
    admitted = tuple(s for s in stats if population.admits(s.fields, s.entry_points))
    cells = tuple(s for s in admitted if s.trusted) if trusted_only else admitted
    untrusted = len(admitted) - len(cells)
    name, desc = label or population.name, population.describe()
    if not cells:
        return Aggregate(
            name, desc, 0, None, None, None, None, 0, 0, 0, 0, 0, (), untrusted=untrusted
        )
    gm = geomean(s.ratio for s in cells)
    floor = floor_of(geomean(s.aa[j] for s in cells) for j in range(len(cells[0].aa)))
    # The geomean's band: the geomean in each block relative to the whole (cells with fewer
    # blocks contribute their last), joined with each cell's band scaled by its weight.
    n_blocks = max(len(s.blocks) for s in cells)
    per_block = [
        geomean(s.blocks[min(i, len(s.blocks) - 1)] for s in cells) / gm for i in range(n_blocks)
    ]
    sib_lo = geomean(s.band[0] for s in cells)
    sib_hi = geomean(s.band[1] for s in cells)
    band = widen((min(per_block), max(per_block)), (sib_lo, sib_hi))
    return Aggregate(
        runs=min(s.runs for s in cells),
        untrusted=untrusted,
        population=name,
        description=desc,
        count=len(cells),
        geomean=gm,
        floor=floor,
        band=band,
        worst=min(cells, key=lambda s: (s.ratio, s.label)),
        below_one=sum(s.ratio < 1.0 for s in cells),
        losses=sum(s.verdict == "loss" for s in cells),
        wins=sum(s.verdict == "win" for s in cells),
        levels=sum(s.verdict == "level" for s in cells),
        flagged=sum(bool(s.flags) for s in cells),
        cells=cells,
    )


@dataclass(frozen=True)
class Fastest:
    """One call that several runs time, each its B against another A arm: B against the
    fastest A that served the call (``stat``, that arm's cell), and how many arms did."""

    stat: CellStat
    arm: str
    arms: int


def fastest_a(stats_by_arm: Mapping[str, Sequence[CellStat]]) -> tuple[Fastest, ...]:
    """Per call (a cell label, the same in every run of one grid axis), the cell of the arm
    with the lowest ratio median(A)/median(B): the A that ran the call fastest. Routing
    regret reads it with B the public entry point and each A an arm it could route to; the
    cell keeps its own run's noise, so its verdict is the one rule's."""
    by_label: dict[str, list[tuple[CellStat, str]]] = {}
    for arm, stats in stats_by_arm.items():
        for stat in stats:
            by_label.setdefault(stat.label, []).append((stat, arm))
    out = []
    for label in sorted(by_label):
        pairs = by_label[label]
        stat, arm = min(pairs, key=lambda p: (p[0].ratio, p[1]))
        out.append(Fastest(stat, arm, len(pairs)))
    return tuple(out)


def curve_axis(stats: Sequence[CellStat]) -> str | None:
    """The first of CURVE_AXES that varies across the cells' keys, else the first numeric
    axis that varies (free-form sweeps name their own axes)."""
    names = list(CURVE_AXES) + sorted({k for s in stats for k in s.key} - set(CURVE_AXES))
    for axis in names:
        values = {s.key.get(axis) for s in stats if axis in s.key}
        numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
        if len(values) > 1 and numeric:
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
    """Geomean per value of ``axis`` (default: curve_axis), each group with its own noise."""
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
    """One step along a curve, judged against the noise of the group it lands in."""

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
    """A fall inside the landing group's floor and band is ``level``; only a fall below breaks."""
    steps = []
    for prev, nxt in itertools.pairwise(points):
        pa, na = prev.aggregate, nxt.aggregate
        assert pa.geomean is not None and na.geomean is not None
        assert na.floor is not None and na.band is not None
        change = na.geomean / pa.geomean
        noise = (na.floor[0] * na.band[0], na.floor[1] * na.band[1])
        if change >= 1.0:
            v = "up"
        elif change >= noise[0]:
            v = "level"
        else:
            v = "break"
        steps.append(Step(prev.value, nxt.value, change, noise, v))
    breaks = tuple(s for s in steps if s.verdict == "break")
    axis = points[0].axis if points else None
    return MonotonicClaim(axis, bool(points) and not breaks, tuple(steps), breaks)


def _geomean_win(agg: Aggregate) -> bool:
    return agg.count > 0 and agg.verdict == "win"


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
        raise UsageError(f"unknown evidence predicate(s) {unknown}; known: {sorted(PREDICATES)}")
    return {p: PREDICATES[p](agg) for p in evidence.predicates}


def evaluate(evidence: Evidence, run: Run | None, siblings: Sequence[Run] = ()) -> tuple[bool, str]:
    """Whether every predicate of ``evidence`` holds on ``run``, and a one-line reason."""
    if run is None or not run.ok:
        return False, f"sweep {evidence.sweep}: not measured"
    agg = aggregate(cell_stats(run, siblings), evidence.population, trusted_only=True)
    results = predicate_results(evidence, agg)
    if agg.count == 0:
        return False, f"run {run.id}: population {agg.population} ({agg.description}) is empty"
    assert agg.geomean is not None and agg.noise is not None
    verdicts = ", ".join(f"{p} {'holds' if ok else 'fails'}" for p, ok in results.items())
    left_out = f", {agg.untrusted} flagged cells not counted" if agg.untrusted else ""
    why = (
        f"run {run.id}: {agg.population} ({agg.description}), {agg.count} cells{left_out}, "
        f"geomean {agg.geomean:.3f}, noise {agg.noise[0]:.3f}-{agg.noise[1]:.3f}: {verdicts}"
    )
    if agg.provisional:
        return False, f"{why}; provisional: the band rests on {agg.runs} run, not {MIN_RUNS}"
    return all(results.values()), why


def judge(run: Run, runs: Iterable[Run] = ()) -> tuple[CellStat, ...]:
    """The cells of ``run`` judged with its replicate runs from ``runs`` (the store): what
    every surface prints, so one cell gets one word wherever it is shown."""

    return cell_stats(run, siblings(runs, run))


# -- rates: gates and probes ------------------------------------------------------------------


def find_cell(run: Run, call: Mapping[str, object]) -> Cell | None:
    """The cell of ``run`` whose fields (key over fixed) match every item of ``call``."""
    for cell in run.cells:
        full = shape_fields(cell.key, run.fixed, run.aliases)
        if all(full.get(k) == v for k, v in call.items()):
            return cell
    return None


@dataclass(frozen=True)
class RateStat:
    """What one role of one cell did per second, with its replicate band."""

    rate: float  # work per second (the run's unit)
    band: tuple[float, float]  # absolute rates: the lowest and highest block's
    throttled: bool
    run_id: str
    unit: str


def rate_of(run: Run, call: Mapping[str, object], role: str = "B") -> RateStat | None:
    """``role``'s rate on the cell matching ``call``, recomputed from its raw samples; None when
    the run has no such cell or role."""
    cell = find_cell(run, call)
    if cell is None or role not in cell.samples:
        return None
    rate = cell.work / median(cell.samples[role])
    blocks = [cell.work / median(b) for b in cell.block_samples(role)]
    return RateStat(
        rate, (min(*blocks, rate), max(*blocks, rate)), THROTTLED in cell.flags, run.id, run.unit
    )


@dataclass(frozen=True)
class GateStat:
    rate: float
    band: tuple[float, float]
    threshold: float
    passed: bool  # the median rate is at or above the threshold
    clear: bool  # the whole band is on the same side of the threshold
    throttled: bool

    @property
    def verdict(self) -> str:
        side = "at or above" if self.passed else "below"
        how = (
            "with its whole replicate band" if self.clear else "but its replicate band straddles it"
        )
        return f"{side} threshold, {how}" + (" (clock throttled)" if self.throttled else "")


def gate_stat(run: Run, threshold: float) -> GateStat:
    """A gate run judged from its samples (its only cell, role B) against ``threshold``."""
    if len(run.cells) != 1 or "B" not in run.cells[0].samples:
        raise StatsError(f"run {run.id}: a gate run has exactly one cell with role B samples")
    cell = run.cells[0]
    stat = rate_of(run, dict(cell.key), "B")
    assert stat is not None
    passed = stat.rate >= threshold
    clear = stat.band[0] >= threshold if passed else stat.band[1] < threshold
    return GateStat(stat.rate, stat.band, threshold, passed, clear, stat.throttled)


@dataclass(frozen=True)
class BoundStat:
    label: str
    what: str
    rate: float


def probe_bounds(run: Run) -> dict[str, BoundStat]:
    """Each bound of a probe run, its rate recomputed from its raw samples."""
    out = {}
    for label, b in (run.results.get("bounds") or {}).items():
        out[label] = BoundStat(label, str(b["what"]), float(b["work"]) / median(b["samples"]))
    return out


# -- agreement between runs ---------------------------------------------------------------------


AGREE, DIFFERS, TOO_NOISY = "agree", "DIFFERS", "too noisy to judge"


@dataclass(frozen=True)
class CellAgreement:
    """One cell measured by two runs: does ``other`` reproduce ``base`` within their noise?"""

    label: str
    base_ratio: float
    other_ratio: float
    rel: float  # other_ratio / base_ratio
    low: float  # the two runs' floors and bands, compounded
    high: float
    inside: bool
    gpu: Any  # the other run's extra.gpu for this cell (sharded runs), else None
    inside_run: bool | None = None  # inside the run-to-run band (None: no control run)
    replicate: bool = False  # the two runs are one setup: their spread is itself noise

    @property
    def verdict(self) -> str:
        """``agree`` inside the noise or the run-to-run band; outside, ``too noisy to judge``
        when the two runs are replicates of one setup (what separates them is the noise being
        measured, not a change), else ``DIFFERS``."""
        if self.inside or self.inside_run:
            return AGREE
        return TOO_NOISY if self.replicate else DIFFERS


@dataclass(frozen=True)
class Agreement:
    base_id: str
    other_id: str
    cells: tuple[CellAgreement, ...]
    # The run-level control: a second run of the same cells, commit and harness, set up like
    # ``base``. Its largest cell deviation from ``base`` bounds how far two runs of one setup
    # drift apart, which a cell's own A/A floor (noise inside one run) does not cover.
    control_id: str | None = None
    run_band: tuple[float, float] | None = None
    control_agree: int | None = None

    @property
    def agree(self) -> int:
        return sum(c.inside for c in self.cells)

    @property
    def differs(self) -> int:
        return sum(c.verdict == DIFFERS for c in self.cells)

    @property
    def agree_run(self) -> int | None:
        """Cells inside their noise or inside the run-to-run band; None without a control."""
        if self.run_band is None:
            return None
        return sum(bool(c.inside or c.inside_run) for c in self.cells)


def _by_label(run: Run) -> dict[str, CellStat]:
    return {s.label: s for s in cell_stats(run)}


def run_band(base: Run, control: Run) -> tuple[float, float] | None:
    """The band two runs of the same setup span: ``exp(+-max |log(control / base)|)`` over
    the cells' ratios; None when the runs do not cover the same cells."""
    a, c = _by_label(base), _by_label(control)
    if not a or set(a) != set(c):
        return None
    worst = max(abs(math.log(c[k].ratio / a[k].ratio)) for k in a)
    return (math.exp(-worst), math.exp(worst))


def agreement(
    base: Run, other: Run, control: Run | None = None, replicate: bool | None = None
) -> Agreement | None:
    """Cell-by-cell agreement of two runs of the same cells; None when their cells differ.

    A cell agrees when the ratio of the two speedups lies inside the product of the two cells'
    A/A floors widened by their replicate bands. With ``control`` (another run set up like
    ``base``), each cell is also judged against the run-to-run band of ``base`` and
    ``control``: a run reproduces another when it differs no more than two runs of one setup.
    ``replicate`` (default: whether the two runs are one setup, ``same_setup``): a cell
    outside both is then too noisy to judge, never a difference.
    """

    if replicate is None:
        replicate = same_setup(base, other)
    a, b = _by_label(base), _by_label(other)
    if not a or set(a) != set(b):
        return None
    band = run_band(base, control) if control is not None else None
    twin = agreement(base, control) if band is not None and control is not None else None
    gpus = {key_label(c.key): c.extra.get("gpu") for c in other.cells}
    rows = []
    for label in sorted(a):
        low = a[label].floor[0] * b[label].floor[0] * a[label].band[0] * b[label].band[0]
        high = a[label].floor[1] * b[label].floor[1] * a[label].band[1] * b[label].band[1]
        rel = b[label].ratio / a[label].ratio
        rows.append(
            CellAgreement(
                label=label,
                base_ratio=a[label].ratio,
                other_ratio=b[label].ratio,
                rel=rel,
                low=low,
                high=high,
                inside=low <= rel <= high,
                gpu=gpus.get(label),
                inside_run=None if band is None else band[0] <= rel <= band[1],
                replicate=replicate,
            )
        )
    return Agreement(
        base.id,
        other.id,
        tuple(rows),
        control_id=None if band is None else control.id if control is not None else None,
        run_band=band,
        control_agree=None if twin is None else twin.agree,
    )


# -- the words a document prints for an aggregate (templates format; this decides) ----------


def overall(agg: Aggregate) -> str:
    """One aggregate's verdict as a document states it: the geomean's word, and how the cells
    split when they disagree with it. Provisional when its band rests on one run."""
    if agg.count == 0 or agg.geomean is None:
        return "no cells"
    mark = f" ({PROVISIONAL}: one run)" if agg.provisional else ""
    v = agg.verdict
    if v == "win" and agg.losses == 0:
        text = "B faster than A beyond the noise, no cell slower beyond its own"
    elif v == "loss" and agg.wins == 0:
        text = "B slower than A beyond the noise, no cell faster beyond its own"
    elif v == "win":
        text = f"mixed: B faster overall, {agg.losses} cell(s) slower beyond their noise"
    elif v == "loss":
        text = f"mixed: B slower overall, {agg.wins} cell(s) faster beyond their noise"
    else:
        text = (
            f"level overall (the geomean lies inside its noise); {agg.wins} cell(s) faster "
            f"and {agg.losses} slower beyond their own"
        )
    return text + mark


def split(agg: Aggregate) -> str:
    """How an aggregate's cells were judged, in the words every surface uses."""
    return (
        f"{agg.wins} {VERDICT_WORDS['win']}, {agg.losses} {VERDICT_WORDS['loss']}, "
        f"{agg.levels} {VERDICT_WORDS['level']}"
    )
