"""Atomic, never-overwriting writes and validated loads of run files.

A run file is written once (``tether.atomic.write_atomic``, exclusive): a temp file is
fsynced, then hard-linked to its final name. ``os.link`` fails if the name exists, so two writers can never replace
each other's file, and a reader never sees a half-written one. The folder is fsynced so the
new name survives a crash.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import stat
import tempfile
import zlib
from collections.abc import Iterable
from pathlib import Path

from tether.atomic import write_atomic
from tether.errors import OSFailure, RunFileError, StoreError, UsageError
from tether.store import layout
from tether.store.history import added_order
from tether.store.model import Run, placed
from tether.store.schema import parse_json_text, run_from_json, validate_run

# A run file larger than this is refused before it is read (the largest real run is a few
# hundred KB; a multi-GB "run" would exhaust memory). The environment variable overrides it.
ENV_MAX_BYTES = "TETHER_MAX_RUN_BYTES"
DEFAULT_MAX_BYTES = 16 * 1024 * 1024


def max_run_bytes() -> int:
    """The size limit for one run file: $TETHER_MAX_RUN_BYTES, else 16 MiB."""
    raw = os.environ.get(ENV_MAX_BYTES)
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"{ENV_MAX_BYTES}={raw!r}: not a whole number of bytes") from None
    if value <= 0:
        raise UsageError(f"{ENV_MAX_BYTES}={raw!r}: must be positive")
    return value


# Room a sweep's run needs in the store, proved before the host is held (the largest real run
# is a few hundred KB; this leaves room for shards and signatures too).
MIN_FREE_BYTES = 64 * 1024 * 1024


def preflight(store: Path, need_bytes: int = MIN_FREE_BYTES) -> None:
    """Prove ``store`` takes a run before anything is measured: the folder exists (or is
    made), a probe file is written, fsynced and removed, and ``need_bytes`` are free.
    OSFailure names the store and the cause (read-only, full, another user's)."""
    store = Path(store)
    try:
        store.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSFailure(store, "create the results store folder", exc) from None
    try:
        fd, probe = tempfile.mkstemp(dir=store, prefix=".preflight.", suffix=layout.TEMP_SUFFIX)
    except OSError as exc:
        raise OSFailure(store, "write to the results store (probe file)", exc) from None
    try:
        os.write(fd, b"tether store preflight\n")
        os.fsync(fd)
    except OSError as exc:
        raise OSFailure(store, "write to the results store (probe file)", exc) from None
    finally:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(probe)
    try:
        st = os.statvfs(store)
    except OSError as exc:
        raise OSFailure(store, "read the free space of the results store", exc) from None
    free = st.f_bavail * st.f_frsize
    if free < need_bytes:
        raise OSFailure(
            store,
            "hold a new run",
            f"only {free // 1024} KiB free, {need_bytes // 1024} KiB needed",
        )


def dumps_run(run: Run) -> str:
    """The canonical file text (``Run.dumps``)."""
    return run.dumps()


def write_bytes_once(target: Path, payload: bytes) -> Path:
    """Create ``target`` with ``payload`` atomically (tether.atomic, exclusive); StoreError if
    it already exists, OSFailure naming it when the system refuses the write."""
    try:
        return write_atomic(Path(target), payload, exclusive=True)
    except FileExistsError:
        raise StoreError(f"{target}: already exists; run files are never overwritten") from None
    except OSError as exc:
        raise OSFailure(target, "write this store file", exc) from None


def run_path(run: Run, store: Path) -> Path:
    """Where a new ``run`` is written in ``store``: ``<store>/<arch>/<id>.json`` (``tether
    store pack`` packs it later)."""
    return Path(store) / run.arch / f"{run.id}{layout.RUN_SUFFIX}"


def write_run(run: Run, store: Path) -> Path:
    """Validate ``run`` and write it to ``store/<arch>/<id>.json``; never overwrites."""
    target = run_path(run, store)
    validate_run(run, source=target)
    return write_bytes_once(target, run.dumps().encode("utf-8"))


def read_run_bytes(path: Path) -> bytes:
    """The bytes of a run file, read safely: a regular file only (never a symlink, FIFO or
    device, which could lead out of the store, hang or never end), no larger than
    ``max_run_bytes()``. Every refusal is a RunFileError naming the file."""
    limit = max_run_bytes()
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise RunFileError(
                path, "file", "is a symlink; run files are read only as regular files"
            ) from None
        raise RunFileError(path, "file", f"cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RunFileError(path, "file", "not a regular file (a FIFO, device or folder)")
        if st.st_size > limit:
            raise RunFileError(
                path,
                "file",
                f"{st.st_size} bytes, over the {limit}-byte limit for a run file "
                f"(set {ENV_MAX_BYTES} to raise it)",
            )
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise RunFileError(path, "file", f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:  # it grew while we read it
        raise RunFileError(path, "file", f"over the {limit}-byte limit for a run file")
    raw = b"".join(chunks)
    return unpack(raw, path, limit) if layout.is_packed(path) else raw


def unpack(raw: bytes, path: Path, limit: int | None = None) -> bytes:
    """The JSON bytes a packed run file holds, never more than ``limit`` of them (a small
    file can inflate to gigabytes); a file that is not whole gzip is a RunFileError."""
    limit = max_run_bytes() if limit is None else limit
    inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflate.decompress(raw, limit + 1)
        whole = inflate.eof and not inflate.unused_data
    except zlib.error as exc:
        raise RunFileError(path, "file", f"not gzip ({exc})") from None
    if len(out) > limit:
        raise RunFileError(path, "file", f"unpacks past the {limit}-byte limit for a run file")
    if not whole:
        raise RunFileError(path, "file", "a gzip stream that is cut off or has trailing bytes")
    return out


def pack_bytes(payload: bytes) -> bytes:
    """A run file's bytes gzipped as ``tether store pack`` writes them: no name, no time in
    the header, so the same run always packs to the same bytes."""
    return gzip.compress(payload, compresslevel=9, mtime=0)


def read_run_data(path: Path) -> dict[str, object]:
    """The parsed JSON of a run file (no schema checks beyond JSON itself), read safely."""
    raw = read_run_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RunFileError(path, "file", f"not UTF-8 (byte {exc.start})") from None
    return parse_json_text(text, path)


def load_run(path: Path) -> Run:
    """Load and validate one run file (either form); the id must be its name's and the arch
    its folder."""
    path = Path(path)
    data = read_run_data(path)
    stem = layout.run_id_of(path) or path.stem
    return run_from_json(data, path, stem=stem, arch_dir=path.parent.name, path=path, parsed=True)


def store_files(store: Path) -> list[Path]:
    """The run files of ``store``: regular ``<store>/<arch>/<id>.json`` files, in path order.

    Anything else found there is a problem that ``load_store`` raises and ``tether store
    validate`` lists (see tether.store.layout); writers' temp files are neither.
    """
    return layout.scan(Path(store)).runs


def duplicate_ids(paths: Iterable[Path]) -> list[tuple[Path, Path]]:
    """Pairs of run files that claim one id (their names') in different folders, or in one
    folder as a packed and an unpacked file."""
    first: dict[str, Path] = {}
    pairs = []
    for path in paths:
        run_id = layout.run_id_of(path) or path.stem
        if run_id in first:
            pairs.append((first[run_id], path))
        else:
            first[run_id] = path
    return pairs


def duplicate_error(pair: tuple[Path, Path]) -> StoreError:
    a, b = pair
    run_id = layout.run_id_of(a) or a.stem
    return StoreError(f"{a} and {b}: both claim run id {run_id}; an id is unique in a store")


def load_store(store: Path) -> list[Run]:
    """Every run in ``store`` sorted by (started, id); a malformed file is an error, never skipped.

    So is anything misplaced in the store (see tether.store.layout) and an id claimed by two
    files. The first problem is raised; ``tether store validate`` lists them all.
    """
    found = layout.scan(Path(store))
    if found.problems:
        more = len(found.problems) - 1
        tail = f" (and {more} more problem(s): tether store validate)" if more else ""
        raise StoreError(f"{found.problems[0]}{tail}")
    for pair in duplicate_ids(found.runs):
        raise duplicate_error(pair)
    runs = with_history([load_run(p) for p in found.runs], Path(store))
    return sorted(runs, key=lambda r: (r.started, r.id))


def with_history(runs: list[Run], store: Path) -> list[Run]:
    """``runs`` with ``added`` set from git history (tether.store.history)."""
    order = added_order(store)
    if not order:
        return runs
    return [placed(r, added=order.get(r.id)) for r in runs]
