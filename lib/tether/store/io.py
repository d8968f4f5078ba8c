"""Atomic, never-overwriting writes and validated loads of run files.

A run file is written once: a temp file in the target folder is fsynced, then hard-linked
to its final name. ``os.link`` fails if the name exists, so two writers can never replace
each other's file, and a reader never sees a half-written one. The folder is fsynced so the
new name survives a crash.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from tether.errors import RunFileError, StoreError
from tether.store.model import Run
from tether.store.schema import parse_json_text, run_from_json, validate_run


def dumps_run(run: Run) -> str:
    """The canonical file text (``Run.dumps``)."""
    return run.dumps()


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_once(target: Path, payload: bytes) -> Path:
    """Create ``target`` with ``payload`` atomically; StoreError if it already exists."""
    folder = target.parent
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{target.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, target)
        except FileExistsError:
            raise StoreError(f"{target}: already exists; run files are never overwritten") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _fsync_dir(folder)
    return target


def run_path(run: Run, store: Path) -> Path:
    """Where ``run`` lives in ``store``: ``<store>/<arch>/<id>.json``."""
    return Path(store) / run.arch / f"{run.id}.json"


def write_run(run: Run, store: Path) -> Path:
    """Validate ``run`` and write it to ``store/<arch>/<id>.json``; never overwrites."""
    target = run_path(run, store)
    validate_run(run, source=target)
    return write_bytes_once(target, run.dumps().encode("utf-8"))


def read_run_data(path: Path) -> dict[str, object]:
    """The parsed JSON of a run file (no schema checks beyond JSON itself)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise RunFileError(path, "file", f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RunFileError(path, "file", f"not UTF-8 (byte {exc.start})") from None
    return parse_json_text(text, path)


def load_run(path: Path) -> Run:
    """Load and validate one run file; the id must be its stem and the arch its folder."""
    path = Path(path)
    data = read_run_data(path)
    return run_from_json(data, path, stem=path.stem, arch_dir=path.parent.name, path=path)


def store_files(store: Path) -> list[Path]:
    """Every ``*.json`` under ``store/<folder>/``, in path order (temp files are dot-files)."""
    store = Path(store)
    if not store.exists():
        return []
    if not store.is_dir():
        raise StoreError(f"{store}: the store is not a folder")
    return sorted(
        p
        for folder in store.iterdir()
        if folder.is_dir() and not folder.name.startswith(".")
        for p in folder.glob("*.json")
        if not p.name.startswith(".")
    )


def load_store(store: Path) -> list[Run]:
    """Every run in ``store`` sorted by (started, id); a malformed file is an error, never skipped."""
    runs = [load_run(p) for p in store_files(store)]
    return sorted(runs, key=lambda r: (r.started, r.id))


def is_superseded(run: Run, current_fingerprint: str) -> bool:
    """True when ``run`` was measured by a harness other than the current one."""
    return run.harness_fingerprint != current_fingerprint
