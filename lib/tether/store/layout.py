"""Where run files may be, and everything else found in a store, reported instead of ignored.

A store is ``<store>/<arch>/<id>.json`` and nothing else: regular files, one level of arch
folders named after known arches, ``.json`` in lower case, or ``.json.gz``: the same file
gzipped (``tether store pack``), which every reader reads as the JSON it holds. Packing keeps
a store that grows by every session's runs small enough to travel with a working tree. One id has one file: both forms at once are
a problem. A run saved at the store root, in a
sub-folder, as ``.JSON`` or ``.bak``, a symlink (which could lead out of the store), a FIFO
(which would hang a reader) or a device (``/dev/zero`` never ends) is a *problem* with a
sentence saying what is wrong; it is never read and never silently skipped.

Writers' temp files (``.<name>.tmp``, see ``io.write_bytes_once``) are listed apart: a live
writer has one for a moment, a killed writer leaves one behind; ``tether store clean`` removes
those that are old and unlocked.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tether.arch import ARCH_RE
from tether.errors import StoreError

RUN_SUFFIX = ".json"
# A run file gzipped (``tether store pack``): the same JSON, read as it is by every reader.
PACKED_SUFFIX = ".json.gz"
TEMP_SUFFIX = ".tmp"
# A run's signature: <store>/<arch>/<id>.sig beside <id>.json (see tether.store.signing).
SIG_SUFFIX = ".sig"
LAYOUT = "runs live in <store>/<arch>/<id>.json (or <id>.json.gz)"


def run_id_of(path: Path | str) -> str | None:
    """The run id a run file's name gives (``<id>.json`` or ``<id>.json.gz``), else None."""
    name = Path(path).name
    for suffix in (PACKED_SUFFIX, RUN_SUFFIX):
        if name.endswith(suffix) and len(name) > len(suffix) and not name.startswith("."):
            return name[: -len(suffix)]
    return None


def is_packed(path: Path | str) -> bool:
    """Whether a run file is the gzipped form."""
    return Path(path).name.endswith(PACKED_SUFFIX)


def sig_path(run_path: Path) -> Path:
    """Where the signature of the run file ``run_path`` lives: ``<id>.sig`` beside it, in
    either form."""
    path = Path(run_path)
    return path.with_name(f"{run_id_of(path) or path.stem}{SIG_SUFFIX}")


@dataclass(frozen=True)
class Problem:
    """A path in a store that is not a readable run file where one belongs, and why."""

    path: Path
    what: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


@dataclass
class Scan:
    """What a walk of a store (or of a part of it) found."""

    root: Path
    runs: list[Path] = field(default_factory=list)  # <root>/<arch>/<id>.json, regular files
    temps: list[Path] = field(default_factory=list)  # writers' temp files
    sigs: list[Path] = field(default_factory=list)  # signature sidecars beside their runs
    problems: list[Problem] = field(default_factory=list)


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _symlink_problem(path: Path, root: Path) -> Problem:
    target = os.readlink(path)
    real = Path(os.path.realpath(path))
    inside = real == root or root in real.parents
    where = "inside the store" if inside else "outside the store"
    return Problem(
        path, f"a symlink (to {target}, {where}); a store holds regular files only, never links"
    )


def is_temp_name(name: str) -> bool:
    """A writer's temp file: a dot-file ending in .tmp (``.<stem>.<random>.tmp``)."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX) and len(name) > 5


# What a regular file of a store is (``_kind_of``), when it is not a problem.
TEMP, SIG, RUN = "temp", "signature", "run"


def _kind_of(name: str, depth: int) -> str:
    """What a regular file named ``name``, ``depth`` folders below a store's root, is: TEMP,
    SIG or RUN, or else the problem with it (a sentence)."""
    if depth == 1 and is_temp_name(name):
        return TEMP
    if depth == 0:
        return f"a file at the store root; {LAYOUT}"
    if depth > 1:
        return f"misplaced in a sub-folder of an arch folder; {LAYOUT}"
    if not name.startswith(".") and name.endswith(SIG_SUFFIX) and name != SIG_SUFFIX:
        return SIG
    if run_id_of(name) is None:
        return f"not a run file name (a run is <id>.json or <id>.json.gz, lower case); {LAYOUT}"
    return RUN


def _file(path: Path, depth: int, st: os.stat_result, scan: Scan) -> None:
    if stat.S_ISLNK(st.st_mode):
        scan.problems.append(_symlink_problem(path, scan.root))
        return
    if not stat.S_ISREG(st.st_mode):
        scan.problems.append(
            Problem(path, f"{_kind(st.st_mode)}; a store holds regular files only")
        )
        return
    kind = _kind_of(path.name, depth)
    if kind == TEMP:
        scan.temps.append(path)
    elif kind == SIG:
        scan.sigs.append(path)
    elif kind == RUN:
        scan.runs.append(path)
    else:
        scan.problems.append(Problem(path, kind))


def _walk(folder: Path, depth: int, scan: Scan) -> None:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        scan.problems.append(Problem(folder, f"cannot list this folder: {exc.strerror}"))
        return
    for entry in entries:
        path = Path(entry.path)
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError as exc:
            scan.problems.append(Problem(path, f"cannot inspect it: {exc.strerror}"))
            continue
        if stat.S_ISDIR(st.st_mode):
            if depth == 0 and not ARCH_RE.fullmatch(entry.name):
                scan.problems.append(
                    Problem(
                        path,
                        f"a folder that is not an arch name (sm<major><minor>, gfx<target> or cpu); {LAYOUT}",
                    )
                )
            _walk(path, depth + 1, scan)
        else:
            _file(path, depth, st, scan)


def store_depth(root: Path, path: Path) -> int:
    """How deep ``path`` lies under the store ``root`` (0 for the root itself); ValueError if
    it is not under it."""
    return len(path.resolve().relative_to(root.resolve()).parts)


def scan(root: Path, under: Path | None = None) -> Scan:
    """Walk the store ``root`` (or only ``under``, a folder inside it) without following links.

    A missing root is an empty store (a fresh checkout may have none); a root that is a file
    is a StoreError.
    """
    root = Path(root)
    found = Scan(root=Path(os.path.realpath(root)))
    if not root.exists():
        return found
    if not root.is_dir():
        raise StoreError(f"{root}: the store is not a folder")
    start = root if under is None else Path(under)
    if under is not None and (start.is_symlink() or not start.is_dir()):
        # one file: judged by the same rules as in a walk of its folder
        try:
            st = start.lstat()
        except OSError as exc:
            raise StoreError(f"{start}: cannot inspect it: {exc.strerror}") from None
        _file(start, store_depth(root, start.parent), st, found)
        return found
    depth = 0 if under is None else store_depth(root, start)
    if depth == 1 and not ARCH_RE.fullmatch(start.name):
        found.problems.append(
            Problem(
                start,
                f"a folder that is not an arch name (sm<major><minor>, gfx<target> or cpu); {LAYOUT}",
            )
        )
    _walk(start, depth, found)
    return _paired(found)


def plain_listing(names: Iterable[str]) -> bool:
    """Whether a store holding exactly the regular files ``names`` (paths under its root) is
    plain: each file a run or a signature in an arch folder, so that ``scan_listed`` can
    judge it from the names alone."""
    for name in names:
        folder, sep, file = name.partition("/")
        if not sep or "/" in file or not ARCH_RE.fullmatch(folder):
            return False
        if _kind_of(file, 1) not in (RUN, SIG):
            return False
    return True


def scan_listed(root: Path, names: Iterable[str]) -> Scan | None:
    """What ``scan(root)`` finds in a folder holding exactly the regular files ``names``
    (paths under ``root``, as git lists a store's files), without the folder being written:
    a check that knows each run by its blob id need not check a thousand files out to learn
    that they are there. Only for a plain store (``plain_listing``): None for anything else
    (a misplaced or misnamed file, a temp file), which the walk of a written copy judges, so
    the problems named are always the walk's own."""
    names = list(names)
    if not plain_listing(names):
        return None
    found = Scan(root=Path(os.path.realpath(root)))
    for name in names:
        folder, _, file = name.partition("/")
        kind = _kind_of(file, 1)
        (found.runs if kind == RUN else found.sigs).append(Path(root, folder, file))
    return _paired(found)


def _paired(found: Scan) -> Scan:
    """``found`` sorted, with the problems of its files as pairs: a run both packed and not,
    a signature without its run."""
    found.runs.sort()
    found.sigs.sort()
    runs = set(found.runs)
    for path in found.runs:
        if is_packed(path) and path.with_name(f"{run_id_of(path)}{RUN_SUFFIX}") in runs:
            found.problems.append(
                Problem(
                    path,
                    f"run {run_id_of(path)} is here twice, packed and not; one id has one "
                    "file (tether store pack removes the JSON once its packed copy reads back "
                    "the same)",
                )
            )
    beside = {sig_path(p) for p in runs}
    for sig in found.sigs:
        if sig not in beside:
            found.problems.append(
                Problem(
                    sig,
                    f"a signature without its run ({sig.stem}{RUN_SUFFIX} is not beside it); "
                    "a signature is kept only beside the run it signs",
                )
            )
    return found
