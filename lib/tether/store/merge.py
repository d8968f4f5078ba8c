"""Merging stores from several hosts: a union of run files, checked before anything is copied.

Ids carry a timestamp, kind, name, arch and random tail, so honest runs never collide; a
different file under an id already taken means one of them is not what it claims, and the
merge stops before writing anything so the destination is never half-merged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from tether.errors import StoreError, UsageError
from tether.store import layout
from tether.store.io import (
    load_run,
    read_run_bytes,
    read_run_data,
    store_files,
    write_bytes_once,
)


@dataclass(frozen=True)
class MergeReport:
    """What a merge did: files copied into ``dest``, identical files skipped."""

    dest: Path
    copied: tuple[Path, ...] = ()
    skipped: int = 0
    sources: tuple[Path, ...] = field(default_factory=tuple)

    @property
    def total(self) -> int:
        return len(self.copied) + self.skipped


def _canonical(path: Path) -> str:
    # Same content, whatever the formatting: two hosts may pretty-print differently.
    return json.dumps(read_run_data(path), sort_keys=True)


def _source_files(source: Path) -> list[Path]:
    if source.is_file() or source.is_symlink():
        return [source]  # load_run refuses anything but a regular file, naming it
    if source.is_dir():
        found = layout.scan(source)
        if found.problems:
            more = len(found.problems) - 1
            tail = f" (and {more} more: tether store validate {source})" if more else ""
            raise StoreError(f"nothing merged: {found.problems[0]}{tail}")
        return found.runs
    raise UsageError(f"{source}: no such store folder or run file")


def _id(path: Path) -> str:
    return layout.run_id_of(path) or path.stem


def _dest_of(
    dest: Path, path: Path, chosen: dict[str, tuple[Path, str, str]], present: dict[str, Path]
) -> Path | None:
    """Where the run file ``path`` lies in ``dest`` after the merge (copied or already there)."""
    run_id = _id(path)
    if run_id in present:
        return present[run_id]
    if run_id in chosen:
        return dest / chosen[run_id][2] / f"{run_id}{layout.RUN_SUFFIX}"
    return None


def merge(sources: list[Path], dest: Path) -> MergeReport:
    """Copy every run file of ``sources`` (store folders or files) into the store ``dest``.

    Every source file is validated first; identical files already present are skipped; a
    different file claiming an id already taken (in any arch folder: an id is unique in a
    store) raises StoreError naming both files, and in that case nothing is written. Files
    are compared by the JSON they hold: a packed run and its JSON are the same run. A copy is
    written as JSON (``tether store pack`` packs it).
    """
    dest = Path(dest)
    chosen: dict[str, tuple[Path, str, str]] = {}  # id -> (file, canonical, arch)
    present = {_id(p): p for p in store_files(dest)}
    skipped = 0
    for source in map(Path, sources):
        for path in _source_files(source):
            run = load_run(path)
            text = _canonical(path)
            if run.id in chosen:
                other, other_text, _arch = chosen[run.id]
                if other_text != text:
                    raise StoreError(f"{other} and {path}: different files claim id {run.id}")
                if other.resolve() != path.resolve():
                    skipped += 1
                continue
            target = present.get(run.id)
            if target is not None:
                load_run(target)  # a malformed destination file is named, not compared blindly
                if _canonical(target) != text:
                    raise StoreError(f"{target} and {path}: different files claim id {run.id}")
                skipped += 1
                continue
            chosen[run.id] = (path, text, run.arch)
    copied = []
    for run_id, (path, _, arch) in sorted(chosen.items(), key=lambda kv: (kv[1][2], kv[0])):
        target = dest / arch / f"{run_id}{layout.RUN_SUFFIX}"
        copied.append(write_bytes_once(target, read_run_bytes(path)))
    # Signatures travel with their runs; one made after a run was merged joins it later. A
    # run already signed in ``dest`` keeps its signature (sidecars are never overwritten).
    for source in map(Path, sources):
        for path in _source_files(source):
            sig = layout.sig_path(path)
            target = _dest_of(dest, path, chosen, present)
            if target is None or not sig.is_file():
                continue
            target_sig = layout.sig_path(target)
            if not target_sig.exists():
                copied.append(write_bytes_once(target_sig, sig.read_bytes()))
    return MergeReport(
        dest=dest, copied=tuple(copied), skipped=skipped, sources=tuple(map(Path, sources))
    )
