"""The check's content-addressed cache, kept where git keeps per-clone state.

Run files are immutable and named by content (git's blob id), so what the check learned of a
blob (that it validates, what it parsed to) holds for as long as the blob exists. The cache
keeps such facts under ``<git common dir>/tether/cache``: never committed, shared by the
clone's worktrees, gone with the clone.

Rules that keep a cache from ever turning a finding into a pass:

- every key is a content address (blob ids, text digests), never an mtime or a path alone;
- every entry names the tool that wrote it (``tool_digest``: the tether sources themselves,
  the Python and the libraries whose output a check compares), the entry's kind and its full
  key, and carries a SHA-256 of its payload. An entry whose header or checksum does not match,
  that does not unpickle, or whose value is not of the expected type, is deleted and treated
  as absent: the caller recomputes it. A cache written by another tool version is never read;
- writes go to a temp file renamed into place, so a reader sees a whole entry or none.

Entries lie flat in one folder per kind, and are written by one thread beside the caller
(``flush`` waits for them): creating a file or a folder costs about a millisecond on the file
systems these checks run on, and a first check of a store writes a couple of thousand
entries, so they are made while the check goes on computing, in as few folders as can hold
them (a folder per entry's first two hex digits made up to 256 of them per kind).

The cache is a local accelerator: CI checks a fresh clone, so it judges without one, and
``TETHER_NO_CACHE=1`` (or ``tether check --no-cache``) judges without it anywhere. The
payload is pickled: the folder lives inside the clone's own ``.git``, which only its owner
writes, like the hooks git already runs from there.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import importlib.metadata
import os
import pickle
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

FORMAT = "tether-cache/2"  # 2: flat folders per kind
NO_CACHE_ENV = "TETHER_NO_CACHE"
GIT_TIMEOUT_S = 10.0
# Libraries whose output a cached result holds: the templates' engine, the figures' drawer.
_LIBRARIES = ("jinja2", "matplotlib")

T = TypeVar("T")


@functools.cache
def tool_digest() -> str:
    """What wrote an entry: every file of the tether package (its code and templates), the
    Python, and the versions of the libraries a check's output depends on. An edit to tether
    itself, an editable install included, changes it and so retires every entry."""
    package = Path(__file__).resolve().parent
    h = hashlib.sha256(FORMAT.encode())
    h.update(sys.version.encode())
    for name in _LIBRARIES:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"
        h.update(f"\0{name}={version}".encode())
    for path in sorted(package.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".j2", ".toml", ".json", ".typed"):
            h.update(b"\0" + path.relative_to(package).as_posix().encode() + b"\0")
            h.update(path.read_bytes())
    return h.hexdigest()


def digest(*parts: object) -> str:
    """A key made of ``parts`` (strings, bytes or anything with a stable repr)."""
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else str(part).encode("utf-8", "surrogateescape")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _folder_for(top: Path) -> Path | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(top), "rev-parse", "--git-common-dir"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    common = Path(done.stdout.strip())
    if not common.is_absolute():
        common = top / common
    return common / "tether" / "cache"


class Cache:
    """Entries by (kind, key) under ``folder``; a Cache with no folder keeps nothing."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        self.hits = 0
        self.misses = 0
        self._made: set[Path] = set()  # folders known to exist
        # Entries put and not yet written (path -> bytes): read back from here meanwhile.
        self._pending: dict[Path, bytes] = {}
        self._writer: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    @classmethod
    def for_repository(cls, top: Path | None) -> Cache:
        """The cache of the clone at ``top`` (None: outside git), or an empty one when
        ``TETHER_NO_CACHE`` is set or git cannot say where the clone keeps its state."""
        if top is None or os.environ.get(NO_CACHE_ENV, "") not in ("", "0"):
            return cls(None)
        return cls(_folder_for(top))

    @property
    def enabled(self) -> bool:
        return self.folder is not None

    def _path(self, kind: str, key: str) -> Path:
        assert self.folder is not None
        name = digest(FORMAT, tool_digest(), kind, key)
        return self.folder / kind / name

    def _header(self, kind: str, key: str) -> bytes:
        return f"{FORMAT}\n{tool_digest()}\n{kind}\n{key}\n".encode("utf-8", "surrogateescape")

    def get(self, kind: str, key: str, expect: type[T]) -> T | None:
        """The value stored under (kind, key) if it is whole, written by this tool and a
        ``expect``; otherwise None (and a damaged entry is removed)."""
        if self.folder is None:
            return None
        path = self._path(kind, key)
        raw = self._pending.get(path)
        try:
            raw = path.read_bytes() if raw is None else raw
        except OSError:
            self.misses += 1
            return None
        value = self._decode(raw, kind, key, expect)
        if value is None:
            self.misses += 1
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        self.hits += 1
        return value

    def _decode(self, raw: bytes, kind: str, key: str, expect: type[T]) -> T | None:
        header = self._header(kind, key)
        if not raw.startswith(header):
            return None
        rest = raw[len(header) :]
        checksum, sep, payload = rest.partition(b"\n")
        if not sep or hashlib.sha256(payload).hexdigest().encode() != checksum:
            return None
        try:
            value = pickle.loads(payload)
        except Exception:
            return None
        return value if isinstance(value, expect) else None

    def put(self, kind: str, key: str, value: Any) -> None:
        """Store ``value`` (written by the writer thread; ``flush`` waits for it); a cache that
        cannot be written is skipped, never an error. The value is pickled here, as it is now."""
        if self.folder is None:
            return
        path = self._path(kind, key)
        payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        data = self._header(kind, key) + hashlib.sha256(payload).hexdigest().encode() + b"\n"
        data += payload
        with self._lock:
            # An entry put again before it is written (one that grows as a check goes on,
            # tether.freshness's per-file comparisons) is written once, as it is last.
            queued = path in self._pending
            self._pending[path] = data
            if self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="tether-cache")
            if not queued:
                self._writer.submit(self._write, path)

    def _write(self, path: Path) -> None:
        while True:
            with self._lock:
                data = self._pending.get(path)
            if data is None:
                return
            try:
                self._write_bytes(path, data)
            finally:
                with self._lock:
                    done = self._pending.get(path) is data
                    if done:
                        del self._pending[path]
            if done:
                return  # else it was put again while being written: write the newer value

    def _write_bytes(self, path: Path, data: bytes) -> None:
        with contextlib.suppress(OSError):
            if path.parent not in self._made:
                path.parent.mkdir(parents=True, exist_ok=True)
                self._made.add(path.parent)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

    def flush(self) -> None:
        """Wait until every entry put so far is written (or given up)."""
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is not None:
            writer.shutdown(wait=True)


# The cache that pure functions deep in a check consult (``current``): a source text's digest,
# a run's statistics. They are keyed by content, so a wrong entry needs a hash collision.
_ACTIVE: contextvars.ContextVar[Cache | None] = contextvars.ContextVar("tether_cache", default=None)


@contextlib.contextmanager
def active(cache: Cache) -> Iterator[None]:
    """Within the block, ``current()`` is ``cache`` (None when it keeps nothing); its entries
    are written when the block ends (``Cache.flush``)."""
    token = _ACTIVE.set(cache if cache.enabled else None)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        cache.flush()


def current() -> Cache | None:
    """The cache made active by the caller (``active``), or None."""
    return _ACTIVE.get()


def kept(
    kind: str,
    key: Callable[[], str],
    compute: Callable[[], T],
    valid: Callable[[object], bool],
) -> T:
    """``compute()``, kept in the active cache (``active``) under (``kind``, ``key()``).

    Without an active cache it is just ``compute()``: ``key`` is only called when there is
    one (a run's content digest is a dump of every sample). An entry whose value fails
    ``valid`` is computed again, and a computed value that fails ``valid`` is not kept (a
    "git cannot tell" may be told next time). ``compute`` must be a pure function of what
    ``key`` names and of tether's own code, which every entry's header names."""
    cache = current()
    if cache is None:
        return compute()
    name = key()
    found = cache.get(kind, name, tuple)
    if found is not None and len(found) == 1 and valid(found[0]):
        return found[0]  # type: ignore[no-any-return]  # checked by valid
    value = compute()
    if valid(value):
        cache.put(kind, name, (value,))
    return value


def kept_by_text(kind: str, text: str, compute: Callable[[str], T], expect: tuple[type, ...]) -> T:
    """``compute(text)`` kept by the text's SHA-256 (``kept``), valid when one of ``expect``:
    the kernel files' versions at every commit a run names are parsed once per clone, not
    once per check."""
    return kept(
        kind,
        lambda: hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
        lambda: compute(text),
        lambda value: isinstance(value, expect),
    )


def kept_entry(kind: str, key: str, valid: Callable[[object], bool]) -> dict[str, Any]:
    """A copy of the dict the active cache (``active``) holds under (``kind``, ``key``), or an
    empty one: without an active cache, or where the entry is absent, damaged, of another
    tool version or fails ``valid``. For values that grow by content-addressed parts (each
    commit's comparison with a file's text); the caller adds parts and ``keep_entry``s it."""
    cache = current()
    if cache is None:
        return {}
    found = cache.get(kind, key, dict)
    return dict(found) if found is not None and valid(found) else {}


def keep_entry(kind: str, key: str, value: dict[str, Any]) -> None:
    """``value`` kept in the active cache under (``kind``, ``key``), as it is now (nothing
    without an active cache). Puts before it is written coalesce into one write."""
    cache = current()
    if cache is not None:
        cache.put(kind, key, value)
