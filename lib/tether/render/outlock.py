"""The output tree's lock: renders serialize, and a check never reads a tree a render is
writing (issue 47 item 4).

``write_all`` holds it exclusively from its first read of the inputs to its last write, and
``run_check`` holds it shared while it reads the rendered outputs, so N concurrent renders and
checks leave the tree one render leaves, and each check judges a whole tree: before a render
or after it, never half of one. It is an ``fcntl.flock`` on a file of the project's scratch
folder (``<scratch>/locks/``, ignored by git through its own ``.gitignore``), one per output
tree (the checkout, or a ``tether render --out`` folder), so renders into different folders do
not wait for each other. The lock goes with its holder's file descriptor: a render that is
killed holds nothing.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from tether import project
from tether.errors import OSFailure

LOCK_FOLDER = "locks"  # under the project's scratch folder


def lock_path(root: Path, dest: Path | None = None) -> Path:
    """The lock file of the output tree ``dest`` (default: the project at ``root`` itself)."""
    tree = Path(dest if dest is not None else root).resolve()
    key = hashlib.sha256(str(tree).encode("utf-8")).hexdigest()[:16]
    return project.get(root).scratch / LOCK_FOLDER / f"render-{key}.lock"


def _open(path: Path) -> int:
    folder = path.parent
    folder.mkdir(parents=True, exist_ok=True)
    ignore = folder / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# tether's lock files: never committed\n*\n", encoding="utf-8")
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)


@contextlib.contextmanager
def tree_lock(
    root: Path, dest: Path | None = None, *, shared: bool = False, err: TextIO | None = None
) -> Iterator[Path | None]:
    """Hold the lock of the output tree ``dest`` (default ``root``): exclusively to render
    into it, ``shared`` to read it. Waits for the holder, saying so on ``err``. Yields the lock
    file, or None for a reader that cannot make one (a read-only checkout, which no render
    writes into either); a render that cannot is an OSFailure naming it."""
    path = lock_path(root, dest)
    try:
        fd = _open(path)
    except OSError as exc:
        if not shared:
            raise OSFailure(path, "create the render lock", exc) from None
        fd = -1
    if fd < 0:
        yield None
        return
    try:
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
        except BlockingIOError:
            if err is not None:
                doing = "to finish" if shared else "or check to finish"
                print(f"tether: waiting for a render {doing} ({path})", file=err)
            fcntl.flock(fd, mode)
        yield path
    finally:
        os.close(fd)  # closing the descriptor releases the lock


__all__ = ["LOCK_FOLDER", "lock_path", "tree_lock"]
