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
from tether.store.io import load_run, read_run_data, store_files, write_bytes_once


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
    if source.is_file():
        return [source]
    if source.is_dir():
        return store_files(source)
    raise UsageError(f"{source}: no such store folder or run file")


def merge(sources: list[Path], dest: Path) -> MergeReport:
    """Copy every run file of ``sources`` (store folders or files) into the store ``dest``.

    Every source file is validated first; identical files already present are skipped; a
    different file claiming an id already taken raises StoreError naming both files, and in
    that case nothing is written.
    """
    dest = Path(dest)
    chosen: dict[tuple[str, str], tuple[Path, str]] = {}  # (arch, id) -> (file, canonical)
    skipped = 0
    for source in map(Path, sources):
        for path in _source_files(source):
            run = load_run(path)
            slot = (run.arch, run.id)
            text = _canonical(path)
            if slot in chosen:
                other, other_text = chosen[slot]
                if other_text != text:
                    raise StoreError(f"{other} and {path}: different files claim id {run.id}")
                if other.resolve() != path.resolve():
                    skipped += 1
                continue
            target = dest / run.arch / f"{run.id}.json"
            if target.exists():
                load_run(target)  # a malformed destination file is named, not compared blindly
                if _canonical(target) != text:
                    raise StoreError(f"{target} and {path}: different files claim id {run.id}")
                skipped += 1
                continue
            chosen[slot] = (path, text)
    copied = []
    for (arch, run_id), (path, _) in sorted(chosen.items()):
        copied.append(write_bytes_once(dest / arch / f"{run_id}.json", path.read_bytes()))
    return MergeReport(
        dest=dest, copied=tuple(copied), skipped=skipped, sources=tuple(map(Path, sources))
    )
