"""The template context: which runs each document cites, and everything computed from them.

A document cites, for each ``(kind, name, arch)``, the newest run by ``provenance.started``
whose status is ``ok`` (SCHEMA.md). Each GPU arch lists the main sweeps (SWEEPS) whether or not
they were measured, then any other sweep the store holds for it; the cpu arch appears only
when the store holds cpu runs (the demo's scratch store) and lists what it holds. A cited run whose harness fingerprint is not the current
one is marked superseded. When the newest attempt is ``not_measured`` its reason and the lock
holder are shown beside whatever is cited. All numbers come from tether.stats over raw samples.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tether.policy import WHOLE_MAP, Gate, Population, Threshold
from tether.render.env import TemplateError
from tether.stats import (
    Aggregate,
    CellStat,
    CurvePoint,
    MonotonicClaim,
    aggregate,
    agreement,
    cell_stats,
    curve,
    field_of,
    measured_tflops,
    monotonic,
    predicate_results,
)
from tether.trends import trend_context

# The arches every document covers; cpu joins only when the store holds cpu runs (the demo).
DOC_ARCHES: tuple[str, ...] = ("sm90", "gfx942", "gfx950", "gfx1151")
SWEEPS: tuple[str, ...] = ("prefill-triton-vs-sdpa", "chunked-prefill", "deferred-rescale")
HEADLINE_SWEEP = "prefill-triton-vs-sdpa"
DEFAULT_GATE_QO_LEN = 2048
SUPERSEDED = "superseded (harness changed since; re-measure)"


def all_runs(store: Any) -> list[Any]:
    """Runs of a loaded store (an object with ``runs``, a mapping, or an iterable of runs)."""
    runs = field_of(store, "runs", None)
    if runs is None and isinstance(store, Iterable) and not isinstance(store, (str, bytes)):
        runs = store
    if isinstance(runs, Mapping):
        runs = runs.values()
    return sorted(runs or (), key=lambda r: str(field_of(r, "id")))


def load_runs(store: Any) -> list[Any]:
    """``store`` as runs: a Path is loaded (and validated) by tether.store; a missing folder is
    an empty store, because a fresh checkout ships without results/."""
    if isinstance(store, Path):
        if not store.exists():
            return []
        from tether.store import load_store

        return all_runs(load_store(store))
    return all_runs(store)


def _prov(run: Any, name: str) -> Any:
    return field_of(field_of(run, "provenance", {}), name)


def newest(runs: Iterable[Any], kind: str, name: str | None, arch: str, ok: bool = True) -> Any:
    """The newest run of ``kind``/``name`` (None: any name) on ``arch``; ``ok``: status ok only."""
    if name is not None:
        from tether.store import latest

        return latest(runs, kind, name, arch, status="ok" if ok else None)
    best = None
    for run in runs:
        if field_of(run, "kind") != kind or _prov(run, "arch") != arch:
            continue
        if name is not None and field_of(run, "name") != name:
            continue
        if ok and field_of(run, "status") != "ok":
            continue
        rank = (str(_prov(run, "started")), str(field_of(run, "id")))
        if best is None or rank > best[0]:
            best = (rank, run)
    return best[1] if best else None


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
    holder: str | None  # who held the host, for a not_measured run


def _holder(run: Any) -> str | None:
    """Who held the host: the guard's own record, or the lock record of a refused attempt."""
    guard = field_of(run, "guard", {}) or {}
    holder = field_of(guard, "holder")
    if holder is None:
        holder = field_of(field_of(guard, "lock", {}) or {}, "record")
    if holder is None:
        return None
    if isinstance(holder, Mapping):
        parts = [f"{k} {holder[k]}" for k in ("user", "host", "pid") if holder.get(k) is not None]
        return ", ".join(parts) or None
    return str(holder)


def run_ref(run: Any, current: str) -> RunRef:
    started = str(_prov(run, "started"))
    return RunRef(
        id=str(field_of(run, "id")),
        kind=str(field_of(run, "kind")),
        name=str(field_of(run, "name")),
        arch=str(_prov(run, "arch")),
        date=started[:10],
        started=started,
        git_sha=str(_prov(run, "git_sha"))[:12],
        git_dirty=bool(_prov(run, "git_dirty")),
        device=str(_prov(run, "device")),
        superseded=_prov(run, "harness_fingerprint") != current,
        status=str(field_of(run, "status")),
        reason=field_of(run, "reason"),
        holder=_holder(run),
    )


def _attempt(runs: list[Any], kind: str, name: str | None, arch: str, cited: Any, current: str):
    """The newest attempt when it is not_measured and newer than the cited run, else None."""
    last = newest(runs, kind, name, arch, ok=False)
    if last is None or field_of(last, "status") != "not_measured" or last is cited:
        return None
    return run_ref(last, current)


def gate_population(arch: str, threshold: Threshold | None) -> Population:
    qo = threshold.min_qo_len if threshold and threshold.min_qo_len else DEFAULT_GATE_QO_LEN
    return Population(
        name="single-prefill-gate", entry="single_prefill", where=(("qo_len", ">=", qo),)
    )


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
    trend: Mapping[str, Any] | None = None  # tether.trends entry for this sweep and arch
    # A run sharded over several GPUs, judged against an unsharded run of the same cells from
    # the same commit and harness (the newest such), cell by cell within both A/A floors.
    shards: Any = None
    shards_against: RunRef | None = None
    shards_control: RunRef | None = None  # the second unsharded run (run-level A/A control)
    shards_run: RunRef | None = None  # the sharded run judged (the newest of its commit)

    @property
    def headline_aggregate(self) -> Aggregate | None:
        """The main sweep's headline is the gate population; any other sweep's is the whole map."""
        return self.gate if self.name == HEADLINE_SWEEP else self.whole


def figure_path(arch: str, sweep: str) -> str:
    return f"docs/figures/{arch}-{sweep}.svg"


def sweep_doc(runs: list[Any], arch: str, name: str, population: Population, current: str):
    run = newest(runs, "sweep", name, arch)
    attempt = _attempt(runs, "sweep", name, arch, run, current)
    if run is None:
        return SweepDoc(name, arch, None, attempt, None, None, (), None, (), {}, {}, None)
    stats = cell_stats(run)
    points = curve(stats)
    kernels: dict[str, set[str]] = {}
    for cell in field_of(run, "cells", ()):
        for role, names in (field_of(cell, "kernels", {}) or {}).items():
            kernels.setdefault(role, set()).update(names)
    arms = field_of(field_of(run, "config", {}), "arms", {}) or {}
    sharded, twin, control = _shard_comparison(runs, run)
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
        figure=figure_path(arch, name) if points else None,
        shards=agreement(twin, sharded, control) if sharded is not None else None,
        shards_against=run_ref(twin, current) if sharded is not None else None,
        shards_control=run_ref(control, current) if control is not None else None,
        shards_run=run_ref(sharded, current) if sharded is not None else None,
    )


def _sharded(run: Any) -> bool:
    return any((field_of(c, "extra", {}) or {}).get("gpu") for c in field_of(run, "cells", ()))


def _shard_comparison(runs: list[Any], run: Any) -> tuple[Any, Any, Any]:
    """(sharded, base, control) among the ok runs of ``run``'s sweep, arch, commit and
    harness: the newest sharded run, the newest unsharded run it is judged against, and the
    next unsharded run (the run-level A/A control) or None. (None, None, None) unless the
    commit has both a sharded and an unsharded run."""
    same = ("kind", "name", "status")
    prov = ("arch", "git_sha", "harness_fingerprint")
    group = sorted(
        (
            r
            for r in runs
            if all(field_of(r, k) == field_of(run, k) for k in same)
            and all(_prov(r, k) == _prov(run, k) for k in prov)
        ),
        key=lambda r: (str(_prov(r, "started")), str(field_of(r, "id"))),
        reverse=True,
    )
    sharded = [r for r in group if _sharded(r)]
    unsharded = [r for r in group if not _sharded(r)]
    if not sharded or not unsharded:
        return None, None, None
    return sharded[0], unsharded[0], (unsharded[1] if len(unsharded) > 1 else None)


@dataclass(frozen=True)
class ProbePoint:
    label: str
    tflops: float
    fraction: float  # of the dense matmul bound from the same run


@dataclass(frozen=True)
class ProbeDoc:
    run: RunRef
    bound: str
    bound_tflops: float
    points: tuple[ProbePoint, ...]


def probe_doc(runs: list[Any], arch: str, current: str) -> ProbeDoc | None:
    from tether.stats import _median, key_label

    run = newest(runs, "probe", None, arch)
    if run is None:
        return None
    results = field_of(run, "results", {}) or {}
    bound = float(results["bound_tflops"])
    points = []
    for cell in field_of(run, "cells", ()):
        tf = float(field_of(cell, "flops")) / _median(field_of(cell, "samples")["B"]) / 1e12
        points.append(ProbePoint(key_label(field_of(cell, "key")), tf, tf / bound))
    points.sort(key=lambda p: p.label)
    return ProbeDoc(run_ref(run, current), str(results["bound"]), bound, tuple(points))


@dataclass(frozen=True)
class GateDoc:
    gate: Gate
    shape: str
    before: RunRef | None
    before_tflops: float | None
    after: RunRef | None
    after_tflops: float | None
    latest: RunRef | None  # the newest ok gate run named after the gate
    latest_tflops: float | None
    latest_passed: bool | None
    # The threshold the newest gate run was judged against, when it is not today's (a raised
    # gate): its pass then says nothing about today's threshold, so both verdicts are shown.
    latest_threshold: float | None = None
    latest_passes_now: bool | None = None


def _by_id(runs: list[Any], run_id: str | None) -> Any:
    return next((r for r in runs if field_of(r, "id") == run_id), None) if run_id else None


def gate_doc(runs: list[Any], gate: Gate, current: str) -> GateDoc:
    before, after = _by_id(runs, gate.before_run), _by_id(runs, gate.after_run)
    latest = newest(runs, "gate", gate.id, gate.arch)
    results = (field_of(latest, "results", {}) or {}) if latest else {}
    passed = field_of(results, "passed")
    then = field_of(results, "threshold_tflops")
    latest_tflops = measured_tflops(latest, gate.shape) if latest else None
    stale = then is not None and gate.threshold_tflops is not None and then != gate.threshold_tflops
    return GateDoc(
        gate=gate,
        shape=" ".join(f"{k}={gate.shape[k]}" for k in sorted(gate.shape)),
        before=run_ref(before, current) if before else None,
        before_tflops=measured_tflops(before, gate.shape, gate.before_role) if before else None,
        after=run_ref(after, current) if after else None,
        after_tflops=measured_tflops(after, gate.shape, gate.after_role) if after else None,
        latest=run_ref(latest, current) if latest else None,
        latest_tflops=latest_tflops,
        latest_passed=bool(passed) if passed is not None else None,
        latest_threshold=float(then) if stale else None,
        latest_passes_now=(
            latest_tflops >= gate.threshold_tflops if stale and latest_tflops is not None else None
        ),
    )


@dataclass(frozen=True)
class ThresholdDoc:
    threshold: Threshold
    sweep: SweepDoc
    evidence: Aggregate | None
    predicates: Mapping[str, bool]


def threshold_doc(runs: list[Any], th: Threshold, current: str) -> ThresholdDoc:
    doc = sweep_doc(runs, th.arch, th.evidence.sweep, th.evidence.population, current)
    preds = predicate_results(th.evidence, doc.gate) if doc.gate is not None else {}
    return ThresholdDoc(th, doc, doc.gate, preds)


@dataclass(frozen=True)
class ArchDoc:
    arch: str
    threshold: Threshold | None
    population: Population
    sweeps: tuple[SweepDoc, ...]
    probe: ProbeDoc | None
    gates: tuple[GateDoc, ...]
    why: RunRef | None = None  # newest not_measured or rejected run when nothing here is ok

    @property
    def headline(self) -> SweepDoc | None:
        """The main sweep where the arch lists it, else its first measured sweep (the demo's)."""
        main = next((s for s in self.sweeps if s.name == HEADLINE_SWEEP), None)
        if main is not None:
            return main
        return next((s for s in self.sweeps if s.run is not None), None) or next(
            iter(self.sweeps), None
        )


def arch_sweeps(runs: list[Any], arch: str) -> tuple[str, ...]:
    """Sweeps cited for ``arch``: the main ones always on the GPU arches, then every other sweep
    the store holds a run of (any status) on that arch, sorted."""
    held = {
        str(field_of(r, "name"))
        for r in runs
        if field_of(r, "kind") == "sweep" and _prov(r, "arch") == arch
    }
    main = SWEEPS if arch in DOC_ARCHES else ()
    return (*main, *sorted(held - set(main)))


def why_not_measured(runs: list[Any], arch: str, current: str) -> RunRef | None:
    """When ``arch`` has no ok run of any kind: its newest not_measured or rejected run."""
    best = None
    for run in runs:
        if _prov(run, "arch") != arch:
            continue
        status = field_of(run, "status")
        if status == "ok":
            return None
        if status not in ("not_measured", "rejected"):
            continue
        rank = (str(_prov(run, "started")), str(field_of(run, "id")))
        if best is None or rank > best[0]:
            best = (rank, run)
    return run_ref(best[1], current) if best else None


_POLICY_CACHE: dict[tuple[str, bytes], tuple[tuple[Threshold, ...], tuple[Gate, ...]]] = {}


def _same_code(a: bytes, b: bytes) -> bool:
    from tether.store.provenance import source_digest

    return source_digest(a.decode("utf-8", "replace")) == source_digest(
        b.decode("utf-8", "replace")
    )


def policy(root: Path) -> tuple[tuple[Threshold, ...], tuple[Gate, ...]] | None:
    """POLICY and GATES of the project at ``root`` (its [tool.tether] policy file); None
    when it declares none.

    The project's own file, not whatever module this interpreter imported under that name:
    ``tether check --root OTHER`` must judge OTHER's policy against OTHER's store. A module
    already imported from this very file is used as is (with whatever a test patched into
    it), as is one whose code equals the file's (generated comments aside); any other is
    loaded from the file (data and pure dataclasses, no torch at import), cached by content.
    """
    from tether import project

    path = project.get(root).policy
    if path is None:
        return None
    if not path.is_file():
        raise TemplateError(f"{path}: the project's policy file is missing")
    raw = path.read_bytes()
    for module in list(sys.modules.values()):
        own = getattr(module, "__file__", None)
        if not own or not hasattr(module, "POLICY") or not hasattr(module, "GATES"):
            continue
        own_path = Path(own).resolve()
        if own_path == path.resolve() or (
            own_path.name == path.name and _same_code(own_path.read_bytes(), raw)
        ):
            return tuple(module.POLICY), tuple(module.GATES)
    key = (str(path.resolve()), hashlib.sha256(raw).digest())
    if key not in _POLICY_CACHE:
        name = "_tether_policy_" + key[1].hex()[:16]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise TemplateError(f"{path}: cannot load the policy module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses resolve their module through sys.modules
        spec.loader.exec_module(module)
        _POLICY_CACHE[key] = (tuple(module.POLICY), tuple(module.GATES))
    return _POLICY_CACHE[key]


def build_context(root: Path, runs: list[Any]) -> dict[str, Any]:
    """Everything the templates see, computed once per render."""
    from tether.store import harness_fingerprint

    current = harness_fingerprint(root)
    pol = policy(root)
    thresholds, gates = pol if pol is not None else ((), ())
    arches = list(DOC_ARCHES)
    if any(_prov(r, "arch") == "cpu" for r in runs):
        arches.append("cpu")
    trends = {(t["arch"], t["sweep"]): t for t in trend_context(runs)["trends"]}
    docs = []
    for arch in arches:
        th = next((t for t in thresholds if t.arch == arch), None)
        pop = gate_population(arch, th)
        sweeps = tuple(
            replace(sweep_doc(runs, arch, s, pop, current), trend=trends.get((arch, s)))
            for s in arch_sweeps(runs, arch)
        )
        docs.append(
            ArchDoc(
                arch=arch,
                threshold=th,
                population=pop,
                sweeps=sweeps,
                probe=probe_doc(runs, arch, current),
                gates=tuple(gate_doc(runs, g, current) for g in gates if g.arch == arch),
                why=why_not_measured(runs, arch, current),
            )
        )
    # The newest verify run that ran the suite, passed or not: a failing suite is published
    # as failing, never hidden behind an older pass. Refusals (not_measured) ran nothing.
    verify_run = max(
        (
            r
            for r in runs
            if field_of(r, "kind") == "verify"
            and field_of(r, "status") in ("ok", "rejected")
            and "passed" in (field_of(r, "results", {}) or {})
        ),
        key=lambda r: (str(_prov(r, "started")), str(field_of(r, "id"))),
        default=None,
    )
    from tether.render.compiled import compile_context

    return {
        **compile_context(root, runs, arches),
        "arches": docs,
        "superseded_mark": SUPERSEDED,
        "headline_sweep": HEADLINE_SWEEP,
        "verify": run_ref(verify_run, current) if verify_run is not None else None,
        "verify_results": dict(field_of(verify_run, "results", {})) if verify_run else None,
        "thresholds": {t.region: threshold_doc(runs, t, current) for t in thresholds},
        "gates": {g.region: gate_doc(runs, g, current) for g in gates},
    }
