"""Which run a document, a policy or a gate cites: one rule, in one place.

- ``cited(runs, kind, name, arch, stale)``: the newest run that is evidence grade: status
  ``ok`` and measured while holding the guard. An unguarded run is never cited as a headline,
  a trend point, policy evidence or a gate's before or after; it still loads and shows in
  ``tether store ls``. Given ``stale`` (the kernel files a run's arms use that changed since
  it was measured: ``tether.freshness``), the newest evidence-grade run that describes the
  current kernels is cited wherever one exists: a newer run of kernels since reverted or
  replaced (an exploration measured, then undone) never hides one of the code as it is, and
  only where no run describes it is the newest cited, which every surface marks stale.
- ``siblings(runs, run)``: the other evidence-grade runs of the same setup (kind, name, arch,
  device, commit, harness and kernel fingerprints, sharded or not): replicate runs, whose
  spread is the run-to-run band of the cited run's cells. The device model counts: an H100's
  and an H200's runs of one sm90 commit differ by what the cards are, not by run-to-run noise.
- ``newest_attempt``: the newest attempt of any status, to show that a newer attempt was not
  measured (a busy host) beside what is cited.
- ``latest_ok``: the newest ok run, guarded or not: for compile runs, which hold no host (the
  compiler's output does not depend on who else uses it) and are never timing evidence.

"Newest" orders by git history first (the commit that added the run's file; runs not yet
committed after every committed one), then by ``provenance.started``, then id: never by a
host's clock alone (see tether.store.history).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from tether.store.model import Run

# A run (or None) to the kernel files its arms use that changed since it was measured; empty
# when it describes the current kernels (tether.render.context.kernel_staleness, over
# tether.freshness.KernelDiff).
StaleFiles = Callable[[Run | None], tuple[str, ...]]


def _rank(run: Run) -> tuple[bool, int, str, str]:
    return (run.added is None, run.added or 0, run.started, run.id)


def matching(runs: Iterable[Run], kind: str, name: str | None, arch: str) -> list[Run]:
    """Runs of ``kind`` (and ``name``, unless None) on ``arch``, oldest first."""
    out = [
        r for r in runs if r.kind == kind and r.arch == arch and (name is None or r.name == name)
    ]
    return sorted(out, key=_rank)


def cited(
    runs: Iterable[Run], kind: str, name: str | None, arch: str, stale: StaleFiles | None = None
) -> Run | None:
    """The newest evidence-grade run of ``kind``/``name`` on ``arch``; with ``stale``, the
    newest of those that describes the current kernels where one does (see the module doc)."""
    pool = [r for r in matching(runs, kind, name, arch) if r.evidence_grade]
    if stale is not None:
        fresh = next((r for r in reversed(pool) if not stale(r)), None)
        if fresh is not None:
            return fresh
    return pool[-1] if pool else None


def latest_ok(runs: Iterable[Run], kind: str, name: str | None, arch: str) -> Run | None:
    """The newest ok run of ``kind``/``name`` on ``arch``, guarded or not (compile runs)."""
    pool = [r for r in matching(runs, kind, name, arch) if r.ok]
    return pool[-1] if pool else None


def newest_attempt(runs: Iterable[Run], kind: str, name: str | None, arch: str) -> Run | None:
    pool = matching(runs, kind, name, arch)
    return pool[-1] if pool else None


def setup_of(run: Run) -> tuple[object, ...]:
    """What makes two runs replicates of one setup (``same_setup``), as one hashable value."""
    p = run.provenance
    return (
        run.kind,
        run.name,
        p.arch,
        p.device,
        p.git_sha,
        p.git_dirty,
        p.harness_fingerprint,
        p.kernels_fingerprint,
        run.sharded,
    )


def same_setup(a: Run, b: Run) -> bool:
    return setup_of(a) == setup_of(b)


# The evidence-grade runs of a tuple of runs by setup, oldest first, for the last tuple asked
# about: every headline, threshold and gate asks for its run's siblings, and scanning the whole
# store for each made a check's cost grow with the square of the store. Only a tuple is
# indexed: it cannot change after the index is made, so the index is never stale.
_INDEXED: list[tuple[tuple[Run, ...], dict[tuple[object, ...], list[Run]]]] = []


def _by_setup(runs: Iterable[Run]) -> dict[tuple[object, ...], list[Run]]:
    if type(runs) is tuple and _INDEXED and _INDEXED[0][0] is runs:
        return _INDEXED[0][1]
    index: dict[tuple[object, ...], list[Run]] = {}
    for run in runs:
        if run.evidence_grade:
            index.setdefault(setup_of(run), []).append(run)
    for group in index.values():
        group.sort(key=_rank)  # stable: equal ranks keep the store's order, as before
    if type(runs) is tuple:
        _INDEXED[:] = [(runs, index)]
    return index


def siblings(runs: Iterable[Run], run: Run) -> list[Run]:
    """Other evidence-grade runs of ``run``'s setup (replicates), oldest first."""
    return [r for r in _by_setup(runs).get(setup_of(run), ()) if r.id != run.id]


def by_id(runs: Iterable[Run], run_id: str | None) -> Run | None:
    if run_id is None:
        return None
    return next((r for r in runs if r.id == run_id), None)
