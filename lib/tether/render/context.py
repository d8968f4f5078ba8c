"""The template context: which runs each document cites, and everything computed from them.

This is a documented, versioned interface (``CONTEXT_VERSION``): an adopting project's
templates may rely on every name listed here, and a change that removes or changes the
meaning of one raises the version. Templates format; this module computes.

Top-level names (version 2):

- ``tether_context_version``: this version.
- ``arches``: one ``ArchDoc`` per arch: the project's ``doc_arches`` (listed whether measured
  or not), then every other arch the store holds runs of. ``ArchDoc.sweep(name)`` finds a
  sweep's ``SweepDoc`` by name (None when absent); ``ArchDoc.fastest_of(names)`` reads
  sweeps of one B against several A arms per call as B against the fastest A (routing
  regret), a ``FastestDoc``.
- ``headline_sweep``: the project's ``[tool.tether] headline`` sweep name (or None).
- ``superseded_mark``: the words a superseded citation carries.
- ``verify`` / ``verify_results``: the newest verify run that ran the whole suite (complete),
  failed or not, as a ``RunRef`` and its results; ``verify_partial``: a newer verify run that
  ran a selection only (never the "Tested" line; shown as what it is); ``verify_stale``: the
  kernel files changed since the ``verify`` run's commit (tether.freshness: a verify run runs
  every kernel, so every changed file counts), or ``("unknown: why",)``; empty when it still
  describes the checkout.
- ``thresholds`` / ``gates``: ``{region: ThresholdDoc | GateDoc}`` from the policy file.
- ``tunes``: ``{region: TuneDoc}``: one per tuning run in the store (region ``tune-<id>``).
- ``tuned``: ``{region: TunedDoc}``: each tuned choice of the policy files (``TUNED``) with a
  region, judged by its rule on the tuning run it cites.

A document cites, for each ``(kind, name, arch)``, the newest evidence-grade run (status ok,
measured under the guard) of the kernels as they are, where one exists (see
``tether.store.cite``). A cited run whose harness fingerprint is
not what the checkout's harness gives it (``tether.store.harness.CurrentHarness``, by the rule
of the format the run recorded) is marked superseded. Every number comes from tether.stats
over raw samples; every verdict is judged by ``tether.stats.judge`` (the A/A floor times the replicate
band over the run's blocks and its replicate runs, each symmetric about 1.0), the one rule
``store show``, ``compare`` and the terminal summaries use too. ``verdict_word(v, provisional)``
prints a verdict as every surface prints it. A sweep's verdicts are *provisional* while it has
one run (``SweepDoc.provisional``), and *stale* when the kernel sources its arms use changed
since it was measured (``SweepDoc.stale``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tether import cache, project
from tether.freshness import KernelDiff
from tether.policy import (
    WHOLE_MAP,
    Gate,
    Population,
    Threshold,
    TunedChoice,
    routed_population,
    shape_fields,
)
from tether.render.compiled import compile_context
from tether.render.policy_file import policy, tuned_choices
from tether.stats import (
    MIN_RUNS,
    VERDICT_WORDS,
    Aggregate,
    BoundStat,
    CellStat,
    CurvePoint,
    Fastest,
    GateStat,
    MonotonicClaim,
    RateStat,
    aggregate,
    agreement,
    cell_stats,
    curve,
    fastest_a,
    gate_stat,
    judge,
    key_label,
    monotonic,
    overall,
    predicate_results,
    probe_bounds,
    rate_of,
    split,
    verdict_word,
)
from tether.store import kernels_fingerprint, load_store
from tether.store.cite import (
    StaleFiles,
    by_id,
    cited,
    latest_ok,
    matching,
    newest_attempt,
    siblings,
)
from tether.store.harness import CurrentHarness, is_superseded
from tether.store.model import Run, content_digest
from tether.store.signing import signature_label
from tether.trends import trend_context

CONTEXT_VERSION = 2
SUPERSEDED = "superseded (harness changed since; re-measure)"


def load_runs(store: Any) -> list[Run]:
    """``store`` as runs: a Path is loaded (and validated) by tether.store; a missing folder is
    an empty store, because a fresh checkout may ship without one."""
    if isinstance(store, Path):
        if not store.exists():
            return []

        return sorted(load_store(store), key=lambda r: r.id)
    return sorted(store, key=lambda r: r.id)


@dataclass(frozen=True)
class RunRef:
    """How a document names a run."""

    id: str
    kind: str
    name: str
    arch: str
    date: str  # YYYY-MM-DD of provenance.started
    started: str
    git_sha: str  # first 12 characters
    git_dirty: bool
    device: str
    superseded: bool
    status: str
    reason: str | None
    holder: str | None  # who held the host (the run's own hold, or the refused attempt's)
    guard: str  # held | nested | unguarded | refused
    evidence: bool  # ok and guarded: citable as evidence
    # The signing key ("ED25519 SHA256:...") of the run's signature sidecar, None if unsigned
    # (tether.store.signing; read from the sidecar alone, so every machine renders the same).
    signature: str | None = None
    # The Triton release the run's process imported (provenance.runtime), None where it had
    # none: a figure holds for the release it was measured under (issue 45), so pages name it.
    triton: str | None = None


def _holder(run: Run) -> str | None:
    holder = run.guard.holder
    if holder is None and run.guard.before is not None:
        holder = (run.guard.before.get("lock") or {}).get("record")
    if not isinstance(holder, Mapping):
        return None
    parts = [f"{k} {holder[k]}" for k in ("user", "host", "pid") if holder.get(k) is not None]
    return ", ".join(parts) or None


def run_ref(run: Run, current: str | CurrentHarness) -> RunRef:
    p = run.provenance
    return RunRef(
        id=run.id,
        kind=run.kind,
        name=run.name,
        arch=p.arch,
        date=p.started[:10],
        started=p.started,
        git_sha=p.git_sha[:12],
        git_dirty=bool(p.git_dirty),
        device=p.device,
        superseded=is_superseded(run, current),
        status=run.status,
        reason=run.reason,
        holder=_holder(run),
        guard=run.guard.mode,
        evidence=run.evidence_grade,
        signature=signature_label(run.path),
        triton=p.runtime.get("triton") if p.runtime else None,
    )


def _attempt(
    runs: Sequence[Run],
    kind: str,
    name: str | None,
    arch: str,
    cite: Run | None,
    current: str | CurrentHarness,
):
    """The newest attempt when it is not ok and newer than the cited run, else None."""
    last = newest_attempt(runs, kind, name, arch)
    if last is None or last.ok or last is cite:
        return None
    if cite is not None and (last.started, last.id) < (cite.started, cite.id):
        return None
    return run_ref(last, current)


@dataclass(frozen=True)
class SweepDoc:
    name: str
    arch: str
    run: RunRef | None
    attempt: RunRef | None
    whole: Aggregate | None
    gate: Aggregate | None
    curve: tuple[CurvePoint, ...]
    claim: MonotonicClaim | None
    cells: tuple[CellStat, ...]
    arms: Mapping[str, str]  # role -> arm name from the run's config
    kernels: Mapping[str, tuple[str, ...]]  # role -> distinct kernel names, sorted
    figure: str | None  # path relative to the repository root
    unit: str = "FLOP"
    replicates: tuple[RunRef, ...] = ()  # sibling runs whose spread widens each cell's band
    blocks: int = 1  # replicate blocks in the cited run
    trend: Mapping[str, Any] | None = None  # tether.trends entry for this sweep and arch
    # A run sharded over several GPUs, judged against an unsharded run of the same cells from
    # the same commit and harness (the newest such), cell by cell.
    shards: Any = None
    shards_against: RunRef | None = None
    shards_control: RunRef | None = None
    shards_run: RunRef | None = None
    runs: int = 0  # the cited run and its replicates: what the band rests on
    stale: tuple[str, ...] = ()  # kernel files its arms use that changed since it was measured
    # The newest evidence-grade run, where it measured kernel files since changed and an older
    # run of the kernels as they are is the one cited (tether.store.cite).
    passed_over: RunRef | None = None
    clocks: Mapping[str, float] | None = None  # SM clock range over its samples (MHz)

    @property
    def provisional(self) -> bool:
        """One run: its band misses run-to-run noise, so its verdicts are provisional."""

        return self.run is not None and self.runs < MIN_RUNS

    @property
    def headline_aggregate(self) -> Aggregate | None:
        """The gate population's aggregate where it has cells, else the whole map's."""
        if self.gate is not None and self.gate.count:
            return self.gate
        return self.whole


def _figures_dir(root: Path) -> str | None:

    return project.get(root).figures


def sweep_doc(
    runs: Sequence[Run],
    arch: str,
    name: str,
    population: Population,
    current: str | CurrentHarness,
    figures: str | None,
    stale: StaleFiles | None = None,
) -> SweepDoc:
    run = cited(runs, "sweep", name, arch, stale)
    attempt = _attempt(runs, "sweep", name, arch, run, current)
    if run is None:
        return SweepDoc(name, arch, None, attempt, None, None, (), None, (), {}, {}, None)
    sibs = siblings(runs, run)
    stats = judge(run, runs)
    points = curve(stats)
    kernels: dict[str, set[str]] = {}
    for cell in run.cells:
        for role, names in cell.kernels.items():
            kernels.setdefault(role, set()).update(names)
    arms = run.arms
    sharded, twin, control = _shard_comparison(runs, run)
    blocks = max((len(c.blocks) or 1 for c in run.cells), default=1)
    newest = cited(runs, "sweep", name, arch)
    return SweepDoc(
        name=name,
        arch=arch,
        run=run_ref(run, current),
        attempt=attempt,
        whole=aggregate(stats, WHOLE_MAP),
        gate=aggregate(stats, population),
        curve=points,
        claim=monotonic(points) if points else None,
        cells=stats,
        arms={k: str(arms[k]) for k in sorted(arms)},
        kernels={k: tuple(sorted(kernels[k])) for k in sorted(kernels)},
        figure=f"{figures}/{arch}-{name}.svg" if points and figures else None,
        unit=run.unit,
        replicates=tuple(run_ref(r, current) for r in sibs),
        blocks=blocks,
        shards=agreement(twin, sharded, control)
        if sharded is not None and twin is not None
        else None,
        shards_against=run_ref(twin, current) if twin is not None else None,
        shards_control=run_ref(control, current) if control is not None else None,
        shards_run=run_ref(sharded, current) if sharded is not None else None,
        runs=1 + len(sibs),
        stale=stale(run) if stale is not None else (),
        passed_over=run_ref(newest, current) if newest is not None and newest is not run else None,
        clocks=clock_range(run),
    )


def clock_range(run: Run) -> dict[str, float] | None:
    """The SM clock over a run's samples as its cells recorded it (MHz): the lowest and
    highest reading, the device's maximum, and the fraction of it below which a sample is
    flagged ``clock_throttled``; None when the run recorded no clock."""
    lows, highs, tops, ratios = [], [], [], []
    for cell in run.cells:
        extra = cell.extra if isinstance(cell.extra, Mapping) else {}
        readings = [b.get("clock_mhz") for b in extra.get("blocks") or () if isinstance(b, Mapping)]
        readings.append(extra.get("clock_mhz"))
        for r in readings:
            if not isinstance(r, Mapping) or r.get("min") is None:
                continue
            lows.append(float(r["min"]))
            highs.append(float(r.get("max", r["min"])))
            if r.get("device_max") is not None:
                tops.append(float(r["device_max"]))
            if r.get("ratio") is not None:
                ratios.append(float(r["ratio"]))
    if not lows:
        return None
    out = {"min": min(lows), "max": max(highs)}
    if tops:
        out["device_max"] = max(tops)
    ratio = ratios[0] if ratios else run.config.get("timing", {}).get("throttle_ratio")
    if ratio is not None:
        out["ratio"] = float(ratio)
    return out


def _shard_comparison(runs: Sequence[Run], run: Run) -> tuple[Run | None, Run | None, Run | None]:
    """(sharded, base, control) among the evidence-grade runs of ``run``'s sweep, arch, commit
    and harness: the newest sharded run, the newest unsharded run it is judged against, and the
    next unsharded run (the run-level control) or None."""
    group = [
        r
        for r in matching(runs, run.kind, run.name, run.arch)
        if r.evidence_grade
        and r.provenance.git_sha == run.provenance.git_sha
        and r.harness_fingerprint == run.harness_fingerprint
    ]
    group.reverse()
    sharded = [r for r in group if r.sharded]
    unsharded = [r for r in group if not r.sharded]
    if not sharded or not unsharded:
        return None, None, None
    return sharded[0], unsharded[0], (unsharded[1] if len(unsharded) > 1 else None)


@dataclass(frozen=True)
class ProbePoint:
    label: str
    rate: float
    bound: str  # the bound's label (the cell's own dtype's)
    fraction: float | None  # of that bound, from the same run; None when the run lacks it


@dataclass(frozen=True)
class ProbeDoc:
    run: RunRef
    unit: str
    bounds: Mapping[str, BoundStat]
    points: tuple[ProbePoint, ...]


def probe_doc(
    runs: Sequence[Run], arch: str, current: str | CurrentHarness, stale: StaleFiles | None = None
) -> ProbeDoc | None:
    run = cited(runs, "probe", None, arch, stale)
    if run is None:
        return None
    bounds = probe_bounds(run)
    field_name = str(run.config.get("bound_field", ""))
    points = []
    for cell in run.cells:
        stat = rate_of(run, dict(cell.key), "B")
        assert stat is not None
        label = str(shape_fields(cell.key, run.fixed, run.aliases).get(field_name, ""))
        b = bounds.get(label)
        points.append(
            ProbePoint(key_label(cell.key), stat.rate, label, stat.rate / b.rate if b else None)
        )
    points.sort(key=lambda p: p.label)
    return ProbeDoc(run_ref(run, current), run.unit, bounds, tuple(points))


@dataclass(frozen=True)
class Measured:
    """A cited run's rate on a gate's call, recomputed from its samples."""

    run: RunRef
    stat: RateStat | None
    role: str
    replicates: int = 0  # other runs of its setup: none means its band is provisional
    timed: str | None = None  # the arm the run timed in ``role``

    @property
    def provisional(self) -> bool:
        return self.replicates == 0


@dataclass(frozen=True)
class GateDoc:
    gate: Gate
    call: str
    before: Measured | None
    after: Measured | None
    latest: RunRef | None  # the newest evidence-grade gate run named after the gate
    latest_stat: GateStat | None  # judged against today's threshold, from its samples
    latest_threshold: float | None = None  # the threshold of its day, when not today's


def _measured(
    runs: Sequence[Run], run_id: str | None, gate: Gate, role: str, current: str | CurrentHarness
):
    run = by_id(runs, run_id)
    if run is None:
        return None
    return Measured(
        run_ref(run, current),
        rate_of(run, gate.call, role),
        role,
        replicates=len(siblings(runs, run)),
        timed=run.arms.get(role),
    )


def gate_doc(
    runs: Sequence[Run], gate: Gate, current: str | CurrentHarness, stale: StaleFiles | None = None
) -> GateDoc:
    latest = cited(runs, "gate", gate.id, gate.arch, stale)
    stat = None
    then = None
    if latest is not None and gate.threshold is not None:
        stat = gate_stat(latest, float(gate.threshold))
        recorded = latest.results.get("threshold")
        then = float(recorded) if recorded is not None and recorded != gate.threshold else None
    return GateDoc(
        gate=gate,
        call=" ".join(f"{k}={gate.call[k]}" for k in sorted(gate.call)),
        before=_measured(runs, gate.before_run, gate, gate.before_role, current),
        after=_measured(runs, gate.after_run, gate, gate.after_role, current),
        latest=run_ref(latest, current) if latest is not None else None,
        latest_stat=stat,
        latest_threshold=then,
    )


@dataclass(frozen=True)
class ThresholdDoc:
    """A threshold's evidence: its sweep, the cells of its population that count (flagged
    cells left out, ``evidence.untrusted``), its predicates, and whether the cited run timed
    the threshold's own arm as B and its ``otherwise`` as A (``arms_match``)."""

    threshold: Threshold
    sweep: SweepDoc
    evidence: Aggregate | None
    predicates: Mapping[str, bool]
    arms_match: bool = True


def threshold_doc(
    runs: Sequence[Run],
    th: Threshold,
    current: str | CurrentHarness,
    figures: str | None,
    stale: StaleFiles | None = None,
) -> ThresholdDoc:
    doc = sweep_doc(
        runs, th.arch, th.evidence.sweep, th.evidence.population, current, figures, stale
    )
    evidence = (
        aggregate(doc.cells, th.evidence.population, trusted_only=True)
        if doc.run is not None
        else None
    )
    preds = predicate_results(th.evidence, evidence) if evidence is not None else {}
    arms = doc.arms
    match = doc.run is None or (arms.get("B") == th.arm and arms.get("A") == th.otherwise)
    return ThresholdDoc(th, doc, evidence, preds, match)


@dataclass(frozen=True)
class TuneRow:
    """One candidate of a tuning run: how it fared against the run's reference arm."""

    config: str
    cells: int
    faster: int  # B faster than A outside the floor and band
    level: int
    slower: int
    geomean: float
    worst: CellStat
    # The upper end of its cells' noise (A/A floor times replicate band), None where unknown.
    noise_hi: float | None = None


@dataclass(frozen=True)
class TuneDoc:
    run: RunRef
    arms: Mapping[str, str]
    rows: tuple[TuneRow, ...]


@dataclass(frozen=True)
class TunedDoc:
    """A tuned choice judged on the tuning run it cites: ``tune`` None when the store lacks
    it; ``newest`` the id of the newest ok tuning run of its sweep on its arch that describes
    the checkout's kernels (a newer run of other kernels, a variant tried and reverted, is
    history: it cannot overrule a choice it did not measure)."""

    choice: TunedChoice
    tune: TuneDoc | None
    newest: str | None
    best: str | None
    holds: bool

    def row(self, config: str | None) -> TuneRow | None:
        rows = self.tune.rows if self.tune is not None else ()
        return next((r for r in rows if r.config == config), None)


def tuned_doc(
    runs: Sequence[Run],
    choice: TunedChoice,
    current: str | CurrentHarness,
    stale: StaleFiles,
) -> TunedDoc:
    """``choice`` judged by its rule (``TunedChoice.judge``) on the run it cites; ``stale``
    (``kernel_staleness``) says which tuning runs measured other kernels than the checkout's."""
    run = by_id(runs, choice.run)
    fresh = [r for r in runs if not stale(r)]
    newest = latest_ok(fresh, "tune", choice.sweep, choice.arch)
    newest_id = newest.id if newest is not None else None
    if run is None or run.kind != "tune" or not run.ok:
        return TunedDoc(choice, None, newest_id, None, False)
    doc = tune_doc(run, current, siblings(runs, run), axis=choice.axis)
    best, holds = choice.judge((r.config, r.geomean, r.noise_hi) for r in doc.rows)
    return TunedDoc(choice, doc, newest_id, best, holds)


def tune_doc(
    run: Run, current: str | CurrentHarness, siblings_: Iterable[Run] = (), axis: str = "config"
) -> TuneDoc:
    stats = cell_stats(run, list(siblings_))
    rows = []
    for config in sorted({str(s.key.get(axis)) for s in stats}):
        group = [s for s in stats if str(s.key.get(axis)) == config]
        agg = aggregate(group)
        assert agg.geomean is not None and agg.worst is not None
        noise = agg.floor[1] * agg.band[1] if agg.floor and agg.band else None
        rows.append(
            TuneRow(
                config, agg.count, agg.wins, agg.levels, agg.losses, agg.geomean, agg.worst, noise
            )
        )
    return TuneDoc(run_ref(run, current), run.arms, tuple(rows))


@dataclass(frozen=True)
class FastestDoc:
    """ArchDoc.fastest_of's answer: the sweeps asked for, those measured on the arch, the
    ones not, and per call B against the fastest A (tether.stats.fastest_a), aggregated."""

    names: tuple[str, ...]
    sweeps: tuple[SweepDoc, ...]
    missing: tuple[str, ...]
    cells: tuple[Fastest, ...]
    whole: Aggregate | None

    @property
    def fastest_counts(self) -> dict[str, int]:
        """How many calls each A arm ran fastest."""
        counts: dict[str, int] = {}
        for c in self.cells:
            counts[c.arm] = counts.get(c.arm, 0) + 1
        return dict(sorted(counts.items()))

    @property
    def stale(self) -> bool:
        return any(s.stale for s in self.sweeps)


@dataclass(frozen=True)
class ArchDoc:
    arch: str
    description: str
    thresholds: tuple[Threshold, ...]
    population: Population  # the gate region: the arch's first threshold's evidence population
    sweeps: tuple[SweepDoc, ...]
    probe: ProbeDoc | None
    gates: tuple[GateDoc, ...]
    why: RunRef | None = None  # newest not_measured or rejected run when nothing here is ok
    extra: Mapping[str, Any] = field(default_factory=dict)  # project additions (compile, ...)

    @property
    def threshold(self) -> Threshold | None:
        return self.thresholds[0] if self.thresholds else None

    def sweep(self, name: str) -> SweepDoc | None:
        return next((s for s in self.sweeps if s.name == name), None)

    def fastest_of(self, names: Sequence[str]) -> FastestDoc:
        """The sweeps ``names`` (one B against several A arms, on one grid axis) read per
        call as B against the fastest A: routing regret when B is a public entry point."""
        docs = tuple(self.sweep(n) for n in names)
        measured = tuple(d for d in docs if d is not None and d.run is not None)
        cells = fastest_a({d.arms.get("A", d.name): d.cells for d in measured})
        agg = aggregate(tuple(c.stat for c in cells)) if cells else None
        missing = tuple(n for n, d in zip(names, docs, strict=True) if d not in measured)
        return FastestDoc(tuple(names), measured, missing, cells, agg)

    def headline(self, name: str | None) -> SweepDoc | None:
        """The named sweep where the arch lists it, else its first measured sweep."""
        found = self.sweep(name) if name else None
        if found is not None:
            return found
        return next((s for s in self.sweeps if s.run is not None), None) or next(
            iter(self.sweeps), None
        )


def arch_sweeps(
    runs: Sequence[Run], arch: str, headline: str | None, listed: bool
) -> tuple[str, ...]:
    """Sweeps cited for ``arch``: the headline sweep on listed arches, then every other sweep
    the store holds a run of (any status) on that arch, sorted."""
    held = {r.name for r in runs if r.kind == "sweep" and r.arch == arch}
    main = (headline,) if headline and listed else ()
    return (*main, *sorted(held - set(main)))


def why_not_measured(
    runs: Sequence[Run], arch: str, current: str | CurrentHarness
) -> RunRef | None:
    """When ``arch`` has no ok run of any kind: its newest not ok run."""
    mine = [r for r in runs if r.arch == arch]
    if any(r.ok for r in mine):
        return None
    bad = sorted((r for r in mine if not r.ok), key=lambda r: (r.started, r.id))
    return run_ref(bad[-1], current) if bad else None


def _verify_runs(runs: Sequence[Run]) -> tuple[Run | None, Run | None]:
    """(newest complete verify run, newer partial one or None): a verify run that ran a
    selection of the suite never becomes the Tested line."""
    ran = sorted(
        (
            r
            for r in runs
            if r.kind == "verify" and r.status in ("ok", "rejected") and "passed" in r.results
        ),
        key=lambda r: (r.started, r.id),
    )
    complete = [r for r in ran if r.results.get("complete")]
    newest = complete[-1] if complete else None
    partial = [r for r in ran if not r.results.get("complete")]
    newer = (
        partial[-1]
        if partial and (newest is None or partial[-1].started > newest.started)
        else None
    )
    return newest, newer


def _region_of(
    runs: Sequence[Run],
    arch: str,
    sweep: str,
    thresholds: tuple[Threshold, ...],
    fallback: Population,
    stale: StaleFiles | None = None,
) -> Population:
    """The policy's region of one sweep's cells: the population of the threshold it is the
    evidence of; for a sweep that times an entry point (its B arm), the cells the policy
    sends to tether's kernels (every set threshold of that entry); else ``fallback``, the
    arch's gate region."""
    for th in thresholds:
        if th.evidence.sweep == sweep:
            return th.evidence.population
    run = cited(runs, "sweep", sweep, arch, stale)
    entry = run.arms.get("B") if run is not None else None
    if entry is not None and any(th.entry == entry for th in thresholds):
        return routed_population(str(entry), thresholds)
    return fallback


TRENDS = "trends"  # the kind of entry _trends keeps (tether.cache)


def _trends(runs: Sequence[Run]) -> dict[str, Any]:
    """``trend_context(runs)``, kept by the content digests of ``runs`` in their order
    (``tether.cache.kept``): it reads nothing else, so a commit that leaves the store as it
    was (a kernel edit) reads it back rather than judging every replicate of every series
    again. Kept here, not in tether.trends, whose source is an input of every trend figure."""
    pool = tuple(runs)
    return cache.kept(
        TRENDS,
        lambda: cache.digest(*(content_digest(r) for r in pool)),
        lambda: trend_context(pool),
        lambda value: isinstance(value, dict) and isinstance(value.get("trends"), list),
    )


def build_context(root: Path, runs: Sequence[Run]) -> dict[str, Any]:
    """Everything the templates see, computed once per render."""

    proj = project.get(root)
    figures = proj.figures
    current = CurrentHarness(root)
    pol = policy(root)
    thresholds, gates = pol if pol is not None else ((), ())
    arches = list(proj.doc_arches)
    arches += sorted({r.arch for r in runs} - set(arches))
    trends = {(t["arch"], t["sweep"]): t for t in _trends(runs)["trends"] if not t["sharded"]}
    stale = kernel_staleness(root, runs)
    docs = []
    for arch in arches:
        ths = tuple(t for t in thresholds if t.arch == arch)
        pop = ths[0].evidence.population if ths else WHOLE_MAP
        listed = arch in proj.doc_arches
        sweeps = []
        for s in arch_sweeps(runs, arch, proj.headline, listed):
            region = _region_of(runs, arch, s, ths, pop, stale)
            doc = sweep_doc(runs, arch, s, region, current, figures, stale)
            trend = _trend_with_figure(trends.get((arch, s)), figures)
            sweeps.append(replace(doc, trend=trend))
        docs.append(
            ArchDoc(
                arch=arch,
                description="",
                thresholds=ths,
                population=pop,
                sweeps=tuple(sweeps),
                probe=probe_doc(runs, arch, current, stale),
                gates=tuple(gate_doc(runs, g, current, stale) for g in gates if g.arch == arch),
                why=why_not_measured(runs, arch, current),
            )
        )
    verify_run, partial = _verify_runs(runs)
    tunes = {}
    for run in runs:
        if run.kind == "tune" and run.evidence_grade:
            tunes[f"tune-{run.id}"] = tune_doc(run, current, siblings(runs, run))
    return {
        **compile_context(root, runs, arches),
        "tether_context_version": CONTEXT_VERSION,
        "arches": docs,
        "superseded_mark": SUPERSEDED,
        "headline_sweep": proj.headline,
        "verify": run_ref(verify_run, current) if verify_run is not None else None,
        "verify_results": dict(verify_run.results) if verify_run else None,
        "verify_partial": run_ref(partial, current) if partial is not None else None,
        "verify_stale": stale(verify_run),
        "thresholds": {
            t.region: threshold_doc(runs, t, current, figures, stale) for t in thresholds
        },
        "gates": {g.region: gate_doc(runs, g, current, stale) for g in gates},
        "tunes": tunes,
        "tuned": {
            c.region: tuned_doc(runs, c, current, stale) for c in tuned_choices(root) if c.region
        },
        "verdict_word": verdict_word,
        "overall": overall,
        "split": split,
        # The column heading of a verdict split, in the words every surface uses.
        "split_header": " / ".join(VERDICT_WORDS[k] for k in ("win", "level", "loss")),
    }


# How kernel_staleness's answer begins when git cannot tell which files changed.
UNKNOWN = "unknown: "


def kernel_staleness(root: Path, runs: Sequence[Run]) -> StaleFiles:
    """A function from a cited run (or None) to the kernel files its arms use that changed
    since it was measured (tether.freshness); ("unknown: why",) when git cannot tell."""

    current = kernels_fingerprint(root)
    proj = project.get(root)
    diff = KernelDiff(root, proj.kernel_files(), proj.arch_scoped, proj.routing)

    def stale(run: Run | None) -> tuple[str, ...]:
        if run is None:
            return ()
        found = diff.staleness(run, current)
        if found.unknown is not None:
            return (f"{UNKNOWN}{found.unknown}",)
        return found.used

    return stale


def _trend_with_figure(
    trend: Mapping[str, Any] | None, figures: str | None
) -> Mapping[str, Any] | None:
    if trend is None:
        return None
    return {**trend, "figure_path": f"{figures}/{trend['figure']}" if figures else None}
