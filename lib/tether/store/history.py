"""When each run joined the repository: git history orders "newest", not a host's clock.

A run's ``provenance.started`` is whatever the measuring host's clock said. A host whose
clock is a year ahead would otherwise have its run cited as current over every later real
run. So "newest" (``tether.store.cite``) orders runs first by the position of the commit that
added their file, then by the stamp: runs added in one commit by their stamps, runs not yet
committed (staged or only on disk) after every committed one. Outside git, or for a store
outside the repository, every run is uncommitted and the stamp alone decides, as before.

One ``git log`` over the store folder answers for all runs (tens of milliseconds). A check of
the index or of ``--rev`` runs on a temp copy without ``.git``; ``tether.snapshot`` registers
the copy's origin here (``register_origin``) so its runs are ordered by the real history.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tether.store.layout import run_id_of

GIT_TIMEOUT_S = 10.0
# snapshot tree -> (the repository's top, the revision whose history counts, or None for HEAD)
_ORIGINS: dict[Path, tuple[Path, str | None]] = {}


def register_origin(tree: Path, top: Path, rev: str | None) -> None:
    """``tree`` is a copy of the repository at ``top`` (its index, or ``rev``)."""
    _ORIGINS[Path(tree).resolve()] = (Path(top).resolve(), rev)


def forget_origin(tree: Path) -> None:
    _ORIGINS.pop(Path(tree).resolve(), None)


def origin(path: Path) -> tuple[Path, Path] | None:
    """For a path inside a registered snapshot: (the repository's top, the path's place in
    it); None for a path in no snapshot (a real checkout answers git itself)."""
    real = Path(os.path.realpath(path))
    for tree, (top, _rev) in _ORIGINS.items():
        if real == tree or tree in real.parents:
            return top, real.relative_to(tree)
    return None


def _git(cwd: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=GIT_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _locate(store: Path) -> tuple[Path, str, str | None] | None:
    """(repository top, the store's path in it, revision) or None outside git."""
    real = Path(os.path.realpath(store))
    for tree, (top, rev) in _ORIGINS.items():
        if real == tree or tree in real.parents:
            inside = real.relative_to(tree)
            # The copy's tree is the repository's top or a project folder below it.
            return top, inside.as_posix(), rev
    if shutil.which("git") is None or not real.is_dir():
        return None
    found = _git(real, "rev-parse", "--show-toplevel")
    if found is None:
        return None
    top = Path(found.strip()).resolve()
    return top, real.relative_to(top).as_posix(), None


def added_order(store: Path) -> dict[str, int]:
    """Run id -> position (0 = oldest) of the commit that first added ``<id>.json`` (or its
    packed ``<id>.json.gz``) under ``store``; runs in no commit are absent. Packing a run later
    adds its ``.json.gz`` in a later commit: the first addition is the one that counts."""
    where = _locate(Path(store))
    if where is None:
        return {}
    top, rel, rev = where
    return order_in(top, rel, rev)


# The answers of order_in within a ``steady`` block: one judgement asks it of the same store
# twice (the loader's "newest" order, the check cache's key), and git's history does not move
# under a check that only reads.
_STEADY: contextvars.ContextVar[dict[tuple[Path, str, str | None], dict[str, int]] | None]
_STEADY = contextvars.ContextVar("tether_history", default=None)


@contextlib.contextmanager
def steady() -> Iterator[None]:
    """Within the block, ``order_in`` asks git once per store and revision."""
    token = _STEADY.set({})
    try:
        yield
    finally:
        _STEADY.reset(token)


def order_in(top: Path, rel: str, rev: str | None = None) -> dict[str, int]:
    """``added_order`` for the store at ``rel`` (from ``top``) in ``rev``'s history (HEAD's
    when None); {} when git cannot tell."""
    memo = _STEADY.get()
    key = (Path(top), rel or ".", rev)
    if memo is not None and key in memo:
        return dict(memo[key])
    order = _order_in(top, rel, rev)
    if memo is not None:
        memo[key] = dict(order)
    return order


def _order_in(top: Path, rel: str, rev: str | None) -> dict[str, int]:
    log = _git(
        top,
        "log",
        "--reverse",
        "--format=%x00",
        "--name-only",
        "--diff-filter=A",
        "--no-renames",
        rev or "HEAD",
        "--",
        rel or ".",
    )
    if log is None:
        return {}
    order: dict[str, int] = {}
    for position, chunk in enumerate(log.split("\0")[1:]):
        for line in chunk.splitlines():
            run_id = run_id_of(line.strip())
            if run_id is not None:
                order.setdefault(run_id, position)
    return order
