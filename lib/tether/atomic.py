"""One atomic writer for every file tether writes, and one UTC timestamp.

``write_atomic(target, data)``: the bytes go to a temp file, which is fsynced, then renamed over
``target`` (or, with ``exclusive``, hard-linked to it, which fails if the name exists: two
writers can never replace each other's file), and the folder is fsynced so the new name
survives a crash. A reader never sees half a file. Used by the store (runs, signatures), the
renderer, the guard's holder record and the pytest plugin.

Where temp files go: one place per project, ``<scratch>/tmp/`` (made with a ``.gitignore``
of its own, so ``git status`` never shows a temp file whatever the project ignores), when the
target lies in the project on the same filesystem; otherwise (a store elsewhere, the guard's
lock folder) beside the target as ``.<name>.<pid>-<random>.tmp``, a dot-file that the store's
layout and tether's own ``.gitignore`` treat as a temp file. Names carry the PID and a random
part and are created exclusively, so they cannot collide across processes (a PID reused after
a killed writer included). The temp file is flock'ed while it lives, so ``tether store clean``
can tell a live writer's temp file from one a killed writer left behind.

Modes: a new file gets the process umask (0644 under umask 022, readable by a second account
sharing the store); a replaced file keeps its mode.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
from datetime import datetime, timezone
from pathlib import Path

from tether import project
from tether.errors import TetherError

TEMP_SUFFIX = ".tmp"
TEMP_FOLDER = "tmp"  # under the project's scratch folder
STAMP_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

_UMASK_LOCK = threading.Lock()
_TEMP_DIRS: dict[Path, Path] = {}


def utc_stamp(when: datetime | str | float | None = None) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` for ``when``: a datetime, seconds since the epoch, or now if
    None; strings are checked and kept. The one timestamp format of runs and records."""
    if isinstance(when, str):
        datetime.strptime(when, STAMP_FORMAT)
        return when
    if isinstance(when, (int, float)):
        return datetime.fromtimestamp(when, tz=timezone.utc).strftime(STAMP_FORMAT)
    moment = when or datetime.now(timezone.utc)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime(STAMP_FORMAT)


def process_umask() -> int:
    """The process umask, read without changing it where Linux says it (/proc), else by the
    set-and-restore idiom under a lock."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _project_temp_dir(folder: Path) -> Path | None:
    """The project's temp folder when ``folder`` lies in a configured project, else None."""

    try:
        proj = project.get(project.find_root(folder))
    except (TetherError, OSError):
        return None
    root = proj.root
    if folder != root and root not in folder.parents:
        return None
    return proj.scratch / TEMP_FOLDER


def temp_dir_for(target: Path) -> Path:
    """Where the temp file for ``target`` goes (see the module doc)."""
    folder = Path(target).parent.resolve()
    if folder in _TEMP_DIRS:
        return _TEMP_DIRS[folder]
    chosen = folder
    found = _project_temp_dir(folder)
    if found is not None:
        try:
            found.mkdir(parents=True, exist_ok=True)
            ignore = found / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# tether's temp files: never committed\n*\n", encoding="utf-8")
            if found.stat().st_dev == folder.stat().st_dev:
                chosen = found  # a rename across filesystems would fail
        except OSError:
            pass  # an unwritable scratch folder: beside the target, as outside a project
    _TEMP_DIRS[folder] = chosen
    return chosen


def is_temp_name(name: str) -> bool:
    """A writer's temp file: a dot-file ending in .tmp."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX) and len(name) > 5


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    target: Path, data: bytes, *, exclusive: bool = False, temp_dir: Path | None = None
) -> Path:
    """Write ``data`` to ``target`` atomically; returns ``target``.

    ``exclusive``: never replace an existing file (FileExistsError names it). ``temp_dir``:
    where the temp file goes (default ``temp_dir_for(target)``; it must be on the target's
    filesystem). OSError (no space, read-only, no permission) propagates for the caller to
    name; the temp file is removed either way.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    where = temp_dir if temp_dir is not None else temp_dir_for(target)
    fd, tmp = tempfile.mkstemp(
        dir=where, prefix=f".{target.name}.{os.getpid()}-", suffix=TEMP_SUFFIX
    )
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            mode = os.stat(target, follow_symlinks=False).st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o666 & ~process_umask()
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        if exclusive:
            os.link(tmp, target)
        else:
            os.replace(tmp, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.close(fd)
    _fsync_dir(target.parent)
    return target


__all__ = [
    "STAMP_FORMAT",
    "TEMP_SUFFIX",
    "is_temp_name",
    "process_umask",
    "temp_dir_for",
    "utc_stamp",
    "write_atomic",
]
