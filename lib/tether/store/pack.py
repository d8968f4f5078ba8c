"""Packing a store: each run file gzipped in place, the JSON it holds unchanged.

A store grows by every session's runs and travels whole with a working tree (to a lent GPU
host that takes a bounded tree, to every clone). Gzipped, a run file takes a fraction of its
room (`du -sh results` before and after says how much); every reader reads ``<id>.json.gz`` as the JSON it holds (``tether.store.io``), a
signature signs the run's digest whatever its file's form, and ``tether check``'s
append-only rule takes a run packed for the run it was (``tether.freshness``): the packed
file must hold exactly the bytes the JSON file held.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

from tether.errors import OSFailure, StoreError
from tether.store import layout
from tether.store.io import load_run, pack_bytes, read_run_bytes, write_bytes_once


@dataclass(frozen=True)
class PackReport:
    """What a pack did: each ``<id>.json`` replaced by its ``<id>.json.gz``."""

    store: Path
    packed: tuple[Path, ...]
    already: int  # run files that were packed before


def pack_store(store: Path) -> PackReport:
    """Pack every run file of ``store`` that is not packed yet.

    Each run is read and validated first; its packed file is written beside it (atomic,
    never over an existing file) and read back through the store's reader, which must give
    the very bytes of the JSON file; only then is the JSON file removed. A store with a
    problem (tether store validate) is refused before anything is written.
    """
    store = Path(store)
    found = layout.scan(store)
    if found.problems:
        more = len(found.problems) - 1
        tail = f" (and {more} more: tether store validate)" if more else ""
        raise StoreError(f"nothing packed: {found.problems[0]}{tail}")
    packed: list[Path] = []
    already = 0
    for path in found.runs:
        if layout.is_packed(path):
            already += 1
            continue
        load_run(path)  # a malformed run is named, never packed
        raw = read_run_bytes(path)
        target = path.with_name(f"{layout.run_id_of(path)}{layout.PACKED_SUFFIX}")
        write_bytes_once(target, pack_bytes(raw))
        if read_run_bytes(target) != raw:
            with contextlib.suppress(OSError):
                os.unlink(target)
            raise StoreError(f"{target}: does not read back as {path} did; {path} kept")
        try:
            os.unlink(path)
        except OSError as exc:
            raise OSFailure(path, "remove the run file its packed copy replaces", exc) from None
        packed.append(target)
    return PackReport(store=store, packed=tuple(packed), already=already)
