"""Every problem of a store at once: for ``tether store validate`` and ``tether check``.

``load_store`` stops at the first problem (a reader must not go on with half a store); an audit
goes on and lists them all, so one run of validate or check names every file to fix: bad run
files, misplaced or misnamed files, links and FIFOs, and ids claimed twice.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tether.arch import ARCH_RE
from tether.errors import RunFileError, SigningError, StoreError
from tether.store import layout
from tether.store.io import duplicate_ids, load_run, with_history
from tether.store.layout import Problem
from tether.store.model import Run
from tether.store.signing import parse_signature, read_signature_text

# A temp file younger than this may belong to a writer that is still running.
ORPHAN_AGE_S = 60.0


@dataclass
class Audit:
    """The runs that loaded, every problem found, and the writers' temp files seen."""

    root: Path
    runs: list[Run] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    temps: list[Path] = field(default_factory=list)
    run_files: set[Path] = field(default_factory=set)  # files read as runs (good and bad)
    malformed: set[Path] = field(default_factory=set)  # run files that failed validation

    @property
    def checked(self) -> int:
        return len(self.run_files)

    @property
    def ok(self) -> bool:
        return not self.problems


def store_root_for(path: Path, store: Path) -> Path:
    """The store ``path`` belongs to: ``store`` when it lies inside it, else the folder that
    is a store by the layout (an arch folder's parent, a run file's grandparent)."""
    real, base = Path(os.path.realpath(path)), Path(os.path.realpath(store))
    if real == base or base in real.parents:
        return Path(store)
    if path.is_dir() and not path.is_symlink():
        return path.parent if ARCH_RE.fullmatch(path.name) else path
    return path.parent.parent


class RunCache(Protocol):
    """Runs already validated, by their file's content (``tether.checkcache``): ``get`` gives
    the run a file holds, or None to load it; ``put`` records one that loaded; ``listed``
    gives the files of the store at ``store`` as its source lists them (``layout.scan_listed``:
    a snapshot that leaves the runs it knows unwritten), or None to walk the folder."""

    def get(self, path: Path) -> Run | None: ...

    def put(self, path: Path, run: Run) -> None: ...

    def listed(self, store: Path) -> layout.Scan | None: ...


def audit(store: Path, under: Path | None = None, runs_cache: RunCache | None = None) -> Audit:
    """Audit the store ``store``, or only ``under`` (a folder or file inside it).

    Ids must be unique over the whole store, so duplicates are looked for in all of it and
    reported when one of the pair lies in the part audited.
    """
    store = Path(store)
    listed = runs_cache.listed(store) if runs_cache is not None and under is None else None
    part = listed if listed is not None else layout.scan(store, under)
    found = Audit(root=store, problems=list(part.problems), temps=list(part.temps))
    for path in part.runs:
        found.run_files.add(path)
        known = runs_cache.get(path) if runs_cache is not None else None
        if known is not None:
            found.runs.append(known)
            continue
        try:
            run = load_run(path)
        except RunFileError as exc:
            found.malformed.add(path)
            found.problems.append(Problem(path, f"{exc.field}: {exc.problem}"))
        else:
            found.runs.append(run)
            if runs_cache is not None:
                runs_cache.put(path, run)
    loaded = {layout.sig_path(r.path) for r in found.runs if r.path is not None}
    for sig in part.sigs:
        if sig not in loaded:
            continue  # no run beside it (a problem already) or a malformed run (named already)
        try:
            parse_signature(read_signature_text(sig), sig)
        except SigningError as exc:
            found.problems.append(Problem(sig, str(exc).removeprefix(f"{sig}: ")))
    found.runs = with_history(found.runs, store)
    everything = part if under is None else layout.scan(store)
    scope = set(part.runs)
    for first, second in duplicate_ids(everything.runs):
        if first in scope or second in scope:
            found.problems.append(
                Problem(
                    second,
                    f"claims run id {layout.run_id_of(second)}, which "
                    f"{_in_store(first, store)} claims too",
                )
            )
    return found


def _in_store(path: Path, store: Path) -> str:
    """``path`` as a finding names it: from the store's folder on (``results/sm90/…``), never
    the absolute path, which under ``tether check`` is the index's temp copy and differs on
    every check."""
    try:
        return path.relative_to(store.parent).as_posix()
    except ValueError:
        return str(path)


def orphan_temps(temps: list[Path], min_age_s: float = ORPHAN_AGE_S) -> list[Path]:
    """The temp files no writer is using: older than ``min_age_s`` and not flock'ed (a live
    writer holds a lock on its temp file until it is renamed away)."""
    import fcntl

    now = time.time()
    orphans = []
    for path in temps:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue  # gone already, or not ours to open
        try:
            if now - os.fstat(fd).st_mtime < min_age_s:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a writer holds it
            orphans.append(path)
        finally:
            os.close(fd)
    return orphans


def load_store_checked(store: Path, runs_cache: RunCache | None = None) -> Audit:
    """The whole store audited; a store that is a file (not a folder) is one problem."""
    try:
        return audit(store, runs_cache=runs_cache)
    except StoreError:
        return Audit(root=Path(store), problems=[Problem(Path(store), "not a folder")])
