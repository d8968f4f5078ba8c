"""``tether check`` at the cost of what a commit changes, not of the store's size.

The check is a pure function of the judged tree (the index or a revision), git's immutable
history and a few facts of the machine. So its parts are kept in ``tether.cache`` by the
content of exactly what they read:

- a run file's validated, parsed run, by its blob id (``BlobRuns``): a new run is parsed
  once, by the first check that sees it;
- a scanned file's findings, by its text and the [tool.tether.scan] table (``TextScans``);
- the whole evidence judgement (``tether.check.Evidence``: store, rendered targets, policy,
  gates, tuned choices, compile and timing freshness), by the blob id of every file of the
  tree except the hand-written prose it never reads (``prose_files``), every path's
  presence, the store's history order, the check's options, the ``TETHER_*`` settings and the
  ssh-keygen that verifies signatures.

A commit that touches only prose therefore re-scans the files it touched and reads the rest
of its verdict from the cache, without writing the store into the snapshot at all. Any other
commit re-judges the evidence, with each unchanged run read from the cache rather than parsed
and validated again. What is judged on every check regardless: runs started in the future of
this machine's clock, the scan baseline, the configuration's plugins (the environment's).

The cached verdict is the same verdict: ``tether check --no-cache`` judges from nothing, and
the suite asserts the two agree on every finding and diff, and that a tampered run, a damaged
entry or an entry of another tool version never turns a finding into a pass.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import os
import shutil
from array import array
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TextIO

from tether import project
from tether._scan import Finding
from tether.cache import NO_CACHE_ENV, Cache, active, digest
from tether.check import Evidence, finish_check, judge_evidence, run_check
from tether.errors import TetherError
from tether.gitobjects import GitObjectError, listing
from tether.render.outlock import tree_lock
from tether.snapshot import Snapshot, git_toplevel, index_env, snapshot
from tether.store import history, layout
from tether.store.io import max_run_bytes
from tether.store.model import Cell, Run, content_digest, placed, remember_digest
from tether.store.signing import time_bound

# Kinds of entry (tether.cache): what each maps from, see the module's docstring.
RUN = "run"
SCAN = "scan"
INPUTS = "inputs"
EVIDENCE = "evidence"


@dataclasses.dataclass(frozen=True)
class Inputs:
    """How a tree's files split for the evidence, read from its configuration: ``store``
    the store folder and ``prose`` the hand-written files the evidence never reads (paths
    from the repository's top)."""

    store: str
    prose: frozenset[str]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one check found, with the diffs of its rendered targets and the tree judged."""

    findings: list[Finding]
    diffs: list[str]
    judged: str  # "the index", "revision <rev>", ...
    cached: bool  # the evidence came from the cache


def prose_files(proj: project.Project, paths: Iterable[str], prefix: str) -> frozenset[str]:
    """The Markdown files among ``paths`` (from the top; the project lies at ``prefix``) that
    nothing but the scan reads: not a rendered target, not a file holding rendered regions,
    not a template, a render data file, a figure or anything in the store, the scratch folder,
    the kernels or the harness. A prose file the judgement did read would give a stale cache
    hit, so the suite records every file the judgement opens and asserts none is on this list
    (validate/suite/test_check_cache.py)."""
    read = set(proj.render_files) | set(proj.region_files) | set(proj.region_templates)
    read |= set(proj.render_data.values())
    folders = [proj.rel(p) for p in (proj.store, proj.scratch, proj.templates)]
    if proj.figures:
        folders.append(proj.figures)
    folders = [f.rstrip("/") + "/" for f in folders if f not in ("", ".")]
    globbed = {proj.rel(p) for p in proj.glob(proj.kernel_globs + proj.harness_globs)}
    out = set()
    for path in paths:
        if not path.startswith(prefix) or not path.endswith(".md"):
            continue
        rel = path[len(prefix) :]
        if rel in read or rel in globbed or rel.startswith(tuple(folders)):
            continue
        out.add(path)
    return frozenset(out)


class PackedSamples(Mapping[str, tuple[float, ...]]):
    """A cell's samples as a kept run holds them: each role's floats packed as the bytes of
    an ``array("d")``, opened into a tuple only when a role is read. A warm check reads
    every run of the store from the cache but the samples of few (the statistics of the
    others are kept by content digest, ``tether.stats``), and unpickling a float costs an
    object each where a packed role is one bytes object. The doubles round-trip exactly, so
    the run, its ``to_json`` and its digest are the file's."""

    __slots__ = ("_open", "_packed")

    def __init__(self, packed: Mapping[str, bytes]):
        self._packed = dict(packed)
        self._open: dict[str, tuple[float, ...]] = {}

    @staticmethod
    def of(samples: Mapping[str, tuple[float, ...]]) -> Mapping[str, tuple[float, ...]]:
        """``samples`` packed, or unchanged when a value is not a tuple of floats (an int in
        a file dumps as an int, and packing would make it a float and change the digest)."""
        if isinstance(samples, PackedSamples):
            return samples
        values = list(samples.values())
        if not all(type(v) is tuple and all(type(x) is float for x in v) for v in values):
            return samples
        return PackedSamples({role: array("d", v).tobytes() for role, v in samples.items()})

    def __getitem__(self, role: str) -> tuple[float, ...]:
        found = self._open.get(role)
        if found is None:
            found = tuple(array("d", self._packed[role]))
            self._open[role] = found
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self._packed)

    def __len__(self) -> int:
        return len(self._packed)

    def __repr__(self) -> str:
        return repr(dict(self))

    def __reduce__(self) -> tuple[type[PackedSamples], tuple[dict[str, bytes]]]:
        return PackedSamples, (self._packed,)


def _packed(run: Run) -> Run:
    """``run`` with every cell's samples packed (``PackedSamples``), for keeping."""
    cells = tuple(_packed_cell(c) for c in run.cells)
    return dataclasses.replace(run, cells=cells)


def _packed_cell(cell: Cell) -> Cell:
    return dataclasses.replace(cell, samples=PackedSamples.of(cell.samples))


class BlobRuns:
    """The runs of a snapshot's store by their files' blob ids (``tether.store.audit``'s
    RunCache). ``blobs`` maps a run file's path in the snapshot to its blob id.

    ``hold`` reads a run's entry before the snapshot is written, so that a run the cache
    knows need not be written into it: the audit then lists the store as git does
    (``listed``, set once the snapshot's store folder is known) and gets each held run here.
    """

    def __init__(self, cache: Cache, blobs: Mapping[str, str] | None = None):
        self.cache = cache
        self.blobs: Mapping[str, str] = blobs or {}
        self.limit = max_run_bytes()
        self.scan: layout.Scan | None = None  # what ``listed`` gives, for the snapshot's store
        self.store: Path | None = None
        self._held: dict[str, tuple[Run, str]] = {}  # key -> (the kept run, its digest)

    def _key_of(self, blob: str, name: str, folder: str) -> str:
        # The name and folder are validated against the run (its id, its arch), so they are
        # part of what a blob's verdict means.
        return digest(blob, name, folder, self.limit)

    def _key(self, path: Path) -> str | None:
        blob = self.blobs.get(str(path))
        return None if blob is None else self._key_of(blob, path.name, path.parent.name)

    def _entry(self, key: str) -> tuple[Run, str] | None:
        found = self._held.get(key)
        if found is not None:
            return found
        entry = self.cache.get(RUN, key, tuple)
        if entry is None or len(entry) != 2:
            return None
        kept, sealed = entry
        if not isinstance(kept, Run) or not isinstance(sealed, str):
            return None
        return kept, sealed

    def hold(self, blob: str, name: str, folder: str) -> bool:
        """Read the entry of the run file ``folder/name`` of blob ``blob`` now; whether the
        cache has a whole one (then ``get`` gives it without reading the file)."""
        key = self._key_of(blob, name, folder)
        entry = self._entry(key)
        if entry is not None:
            self._held[key] = entry
        return entry is not None

    def get(self, path: Path) -> Run | None:
        key = self._key(path)
        entry = None if key is None else self._entry(key)
        if entry is None:
            return None
        kept, sealed = entry
        run = placed(kept, path=path)
        remember_digest(run, sealed)  # the digest the file was verified against when kept
        return run

    def put(self, path: Path, run: Run) -> None:
        key = self._key(path)
        if key is not None:
            sealed = content_digest(run)
            self.cache.put(RUN, key, (_packed(placed(run, path=None, added=None)), sealed))

    def listed(self, store: Path) -> layout.Scan | None:
        return self.scan if self.store is not None and store == self.store else None


class TextScans:
    """Scan findings by file, text and vocabulary (``tether._scan``'s ScanCache)."""

    def __init__(self, cache: Cache):
        self.cache = cache

    def get(self, rel: str, text: str, vocabulary: str) -> list[Finding] | None:
        found = self.cache.get(SCAN, digest(rel, vocabulary, text), list)
        if found is None or not all(isinstance(f, Finding) and f.path == rel for f in found):
            return None
        return found

    def put(self, rel: str, text: str, vocabulary: str, findings: list[Finding]) -> None:
        self.cache.put(SCAN, digest(rel, vocabulary, text), list(findings))


def _settings() -> str:
    """The machine facts the evidence depends on: TETHER_* settings (the run-size limit,
    signing) and which ssh-keygen verifies signatures."""
    env = sorted((k, v) for k, v in os.environ.items() if k.startswith("TETHER_"))
    env = [(k, v) for k, v in env if k != NO_CACHE_ENV]
    return repr((env, shutil.which("ssh-keygen")))


def _history(top: Path, store: str, rev: str | None, files: Iterable[str]) -> str:
    """The store's runs in the order "newest" reads them by (``tether.store.history``),
    as dense ranks: committing staged runs keeps their place (after every committed one), so
    it keeps the key."""
    order = history.order_in(top, store, rev)
    ids = sorted({i for i in (layout.run_id_of(Path(f).name) for f in files) if i is not None})
    positions = sorted({order[i] for i in ids if i in order})
    rank = {p: n for n, p in enumerate(positions)}
    return repr([(i, rank[order[i]] if i in order else len(positions)) for i in ids])


def _inputs_key(files: Mapping[str, str], prefix: str) -> str:
    return digest(prefix, files.get(prefix + project.CONFIG_FILE, "-"), "\0".join(sorted(files)))


def _evidence_key(
    files: Mapping[str, str], inputs: Inputs, prefix: str, full: bool, where: str, order: str
) -> str:
    lines = (f"{p}\t{'-' if p in inputs.prose else files[p]}" for p in sorted(files))
    return digest(prefix, full, where, _settings(), order, "\n".join(lines))


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off for the block. A check builds a few hundred
    thousand objects that live until it ends (every run's cells, read from the cache or
    parsed) and makes almost no cycles; the collector would walk the growing heap again and
    again as they are made, a third of a warm check's time on this repository's store. The
    check is one pass, so what it leaves is freed when it returns (or the process ends)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def check(
    root: Path,
    store: Path,
    *,
    rev: str | None = None,
    worktree: bool = False,
    full: bool = False,
    err: TextIO | None = None,
    use_cache: bool = True,
) -> Outcome:
    """The findings of ``tether check`` for the project at ``root`` and its ``store``, judged
    on the index, ``rev`` or (``worktree``) the files on disk, with the cache where it can be
    used: a tree git lists (not the working tree, nor a folder outside git) and a store inside
    the repository."""
    root = Path(root).resolve()
    top = git_toplevel(root)
    cache = Cache.for_repository(top) if use_cache else Cache(None)
    try:
        with _collector_paused(), history.steady():
            return _check(root, top, cache, store, rev, worktree, full, err)
    finally:
        cache.flush()  # every entry written before the command may end (tether.cli.run)


def _check(
    root: Path,
    top: Path | None,
    cache: Cache,
    store: Path,
    rev: str | None,
    worktree: bool,
    full: bool,
    err: TextIO | None,
) -> Outcome:
    scans = TextScans(cache)
    store_rel = _inside(store, top)
    if worktree or top is None or not cache.enabled or store_rel is None:
        diffs: list[str] = []
        with snapshot(root, rev=rev, worktree=worktree) as snap:
            found = run_check(
                snap.root,
                snap.moved(store, root),
                diffs,
                full=full,
                where=snap.where,
                err=err,
                scan_cache=scans if cache.enabled else None,
            )
        return Outcome(found, diffs, snap.what, cached=False)
    prefix = "" if root == top else root.relative_to(top).as_posix() + "/"
    try:
        files = listing(top, rev, env=None if rev is not None else index_env(top))
    except GitObjectError:
        files = None  # the snapshot below names the problem as it always has
    order = None  # the store's history order (_history), asked of git once per check
    if files is not None:
        inputs = cache.get(INPUTS, _inputs_key(files, prefix), Inputs)
        if inputs is not None and inputs.store == store_rel:
            order = _history(top, store_rel, rev, _under(files, store_rel))
            key = _evidence_key(files, inputs, prefix, full, _where(rev), order)
            evidence = cache.get(EVIDENCE, key, Evidence)
            if evidence is not None:
                with (
                    snapshot(root, rev=rev, leave_out=(store_rel,)) as snap,
                    tree_lock(snap.root, shared=True, err=err),
                ):
                    found = finish_check(snap.root, evidence, scan_cache=scans)
                return Outcome(found, list(evidence.diffs), snap.what, cached=True)
    runs = BlobRuns(cache)
    held, names = _held_runs(runs, files or {}, prefix, store_rel)
    with snapshot(root, rev=rev, leave_out_files=held) as snap, active(cache):
        moved = snap.moved(store, root)
        runs.blobs = _snapshot_blobs(snap, files or {}, prefix, store_rel)
        if held:
            runs.store, runs.scan = moved, layout.scan_listed(moved, names)
            assert runs.scan is not None, "_held_runs holds runs of a plain store only"
        with tree_lock(snap.root, shared=True, err=err):
            evidence = judge_evidence(snap.root, moved, full, snap.where, runs_cache=runs)
            found = finish_check(snap.root, evidence, scan_cache=scans)
        if files is not None:
            _keep(cache, snap, files, prefix, store_rel, full, rev, evidence, order)
    return Outcome(found, list(evidence.diffs), snap.what, cached=False)


def _keep(
    cache: Cache,
    snap: Snapshot,
    files: Mapping[str, str],
    prefix: str,
    store_rel: str,
    full: bool,
    rev: str | None,
    evidence: Evidence,
    order: str | None,
) -> None:
    """Record the tree's inputs and its evidence verdict for the next check (``order``: the
    store's history order, when the check has asked git already)."""
    try:
        proj = project.get(snap.root)
    except TetherError:
        return  # a tree whose configuration fails is judged (the finding says so), not kept
    inputs = Inputs(store_rel, prose_files(proj, files, prefix))
    cache.put(INPUTS, _inputs_key(files, prefix), inputs)
    if _clock_bound(proj):
        return  # its signature verdicts read the clock, so the judgement does too
    if order is None:
        order = _history(_repo_top(snap), store_rel, rev, _under(files, store_rel))
    key = _evidence_key(files, inputs, prefix, full, _where(rev), order)
    cache.put(EVIDENCE, key, evidence)


def _clock_bound(proj: project.Project) -> bool:
    """Whether the project requires signed evidence from an allowed-signers file under which
    a verdict depends on when it is asked (``signing.time_bound``): a kept judgement could
    then pass a run whose key has since expired."""
    allowed = proj.allowed_signers
    if not proj.require_signed or allowed is None:
        return False
    try:
        return time_bound(allowed.read_bytes())
    except OSError:
        return False  # no file: the judgement says so, whenever it is asked


def _where(rev: str | None) -> str:
    """The judged tree's place in diff headers, as ``tether.snapshot`` names it."""
    return f"in revision {rev}" if rev is not None else "in the index"


def _repo_top(snap: Snapshot) -> Path:
    found = history.origin(snap.root)
    assert found is not None, "a snapshot of the index or a revision has a registered origin"
    return found[0]


def _under(files: Iterable[str], folder: str) -> list[str]:
    start = folder.rstrip("/") + "/"
    return [f for f in files if f.startswith(start)]


def _inside(store: Path, top: Path | None) -> str | None:
    """The store's folder from the repository's top, or None when it lies outside it."""
    if top is None:
        return None
    try:
        return Path(store).resolve().relative_to(top).as_posix()
    except ValueError:
        return None


def _held_runs(
    runs: BlobRuns, files: Mapping[str, str], prefix: str, store_rel: str
) -> tuple[frozenset[str], list[str]]:
    """(the store's run files, from the top, that need not be written into the snapshot,
    the store's files from its folder). A run is held when the cache has its entry (``hold``),
    and only in a store that is a folder inside the project whose every file is a regular
    file git holds one version of, each a run or a signature in an arch folder
    (``layout.plain_listing``): anything else is written and walked, so the audit names it."""
    start = store_rel.rstrip("/") + "/"
    under = _under(files, store_rel)
    names = [path[len(start) :] for path in under]
    if store_rel in files or not store_rel.startswith(prefix) or not under:
        return frozenset(), names
    plain = all(_plain_entry(files[path]) for path in under)
    if not plain or not layout.plain_listing(names):
        return frozenset(), names
    held = set()
    for path, name in zip(under, names, strict=True):
        folder, _, file = name.rpartition("/")
        mode, _, blob = files[path].partition(" ")
        if layout.run_id_of(file) is None or mode != "100644":
            continue  # a signature, or a file _snapshot_blobs does not key: written and read
        if runs.hold(blob, file, folder):
            held.add(path)
    return frozenset(held), names


def _plain_entry(entry: str) -> bool:
    """A listing's entry (``gitobjects.listing``) of one regular, merged file."""
    mode, _, blob = entry.partition(" ")
    return mode in ("100644", "100755") and "," not in blob and "@" not in blob


def _snapshot_blobs(
    snap: Snapshot, files: Mapping[str, str], prefix: str, store_rel: str
) -> dict[str, str]:
    """Each store file's path in the snapshot -> its blob id (from the listing)."""
    out = {}
    for path in _under(files, store_rel):
        mode, _, blob = files[path].partition(" ")
        if mode != "100644" or "," in blob or "@" in blob:
            continue  # an odd entry is loaded from its file, never assumed
        out[str(snap.root / path[len(prefix) :])] = blob
    return out
