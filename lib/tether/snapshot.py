"""What ``tether check`` judges: the content being committed, never the working tree.

A pre-commit hook that reads the working tree passes a commit whose docs cite a run file left
untracked: the commit then fails the check everywhere else. So the check judges a snapshot:

- by default the index (what ``git commit`` would record; inside a hook git points
  ``GIT_INDEX_FILE`` at the index being committed, and it is honoured here);
- with ``--rev REV`` that revision's tree;
- with ``--worktree`` the files on disk, asked for by name (the render-then-look loop).

A snapshot is the tracked files written into a fresh temp folder with ``git checkout-index``
(about 0.1 s for this repository), so every part of the check reads it as it reads a checkout.
Outside a git repository there is no commit to judge, and the folder itself is judged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tether import project
from tether.errors import NotAProjectError, UsageError
from tether.store import history

GIT_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Snapshot:
    """The tree to judge: ``root`` (the project inside it) and what it is, for messages."""

    root: Path
    what: str  # "the index", "revision <rev>", "the working tree"
    where: str = "on disk"  # a judged file's place, for diff headers: "in the index", ...

    def moved(self, path: Path, original_root: Path) -> Path:
        """``path`` (under ``original_root``) as it lies in the snapshot; unchanged if outside."""
        try:
            rel = Path(path).resolve().relative_to(original_root.resolve())
        except ValueError:
            return Path(path)
        return self.root / rel


def _git(cwd: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> str:
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            env=env,
        )
    except FileNotFoundError:
        raise UsageError("git is not on PATH; pass --worktree to judge the files on disk") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"git {args[0]} took over {GIT_TIMEOUT_S:.0f}s in {cwd}") from None
    if done.returncode != 0:
        raise UsageError(f"git {' '.join(args)} (in {cwd}): {done.stderr.strip() or 'failed'}")
    return done.stdout


def git_toplevel(root: Path) -> Path | None:
    """The top of the git work tree holding ``root``, or None outside one (or without git)."""
    if shutil.which("git") is None:
        return None
    done = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=GIT_TIMEOUT_S,
    )
    if done.returncode != 0:
        return None
    return Path(done.stdout.strip()).resolve()


def index_env(top: Path) -> dict[str, str]:
    """The environment for git, with a relative GIT_INDEX_FILE (hooks get one) made absolute
    against the work tree's top, where git resolves it."""
    env = dict(os.environ)
    index = env.get("GIT_INDEX_FILE")
    if index and not os.path.isabs(index):
        env["GIT_INDEX_FILE"] = str(top / index)
    return env


def unstaged(root: Path) -> list[str]:
    """The files under ``root`` whose copy on disk is not what the index holds (modified and
    not staged, or untracked and not ignored), as paths from the repository's top, sorted;
    empty outside a git repository. A finding of the index check may be about one of them (a
    plugin module or a template folder that exists on disk only), so the check names them."""
    top = git_toplevel(root)
    if top is None:
        return []
    listed = _git(
        Path(root).resolve(),
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--",
        ".",
        env=index_env(top),
    )
    entries = iter(listed.split("\0"))
    found: list[str] = []
    for entry in entries:
        if len(entry) < 4:
            continue
        state, path = entry[:2], entry[3:]
        if state[0] in "RC":
            next(entries, None)  # -z writes a rename's or copy's source as the next entry
        # The worktree column (state[1]) says whether the file on disk differs from the
        # index; a change staged in full (X set, Y blank) is already what is judged.
        if state == "??" or state[1] not in " !":
            found.append(path)
    return sorted(found)


@contextlib.contextmanager
def snapshot(
    root: Path,
    *,
    rev: str | None = None,
    worktree: bool = False,
    leave_out: tuple[str, ...] = (),
    leave_out_files: frozenset[str] = frozenset(),
) -> Iterator[Snapshot]:
    """The project at ``root`` as committed: the index, ``rev``'s tree, or (``worktree``)
    the folder itself; the temp copy is removed on exit. ``leave_out``: folders, and
    ``leave_out_files``: files (paths from the repository's top), not written into the copy,
    for a check that already knows what they hold by their blob ids (``tether.checkcache``: a
    store of thousands of runs is most of the copy's cost, and each file written costs about
    a millisecond of the file system's time)."""
    root = Path(root).resolve()
    if worktree:
        if rev is not None:
            raise UsageError("--rev and --worktree name two different trees; pass one")
        yield Snapshot(root, "the working tree")
        return
    top = git_toplevel(root)
    if top is None:
        if rev is not None:
            raise UsageError(f"--rev {rev}: {root} is not inside a git repository")
        yield Snapshot(root, "the folder (not a git checkout)")
        return
    prefix = root.relative_to(top)
    with tempfile.TemporaryDirectory(prefix="tether-check-") as tmp:
        tree = Path(tmp) / "tree"
        env = index_env(top)
        if rev is not None:
            try:
                sha = _git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{tree}}").strip()
            except UsageError:
                raise UsageError(f"--rev {rev}: not a revision of {top}") from None
            env = {**env, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
            _git(top, "read-tree", sha, env=env)
            what = f"revision {rev}"
        else:
            what = "the index"
        if leave_out or leave_out_files:
            names = _git(top, "ls-files", "-z", env=env).split("\0")
            skip = tuple(folder.rstrip("/") + "/" for folder in leave_out)
            kept = "".join(
                n + "\0" for n in names if n and not n.startswith(skip) and n not in leave_out_files
            )
            _git(
                top,
                "checkout-index",
                "--force",
                "--stdin",
                "-z",
                f"--prefix={tree}/",
                env=env,
                stdin=kept,
            )
        else:
            _git(top, "checkout-index", "--all", "--force", f"--prefix={tree}/", env=env)
        inside = tree / prefix
        _configured(inside, root, prefix / project.CONFIG_FILE, what, staged=rev is None)
        # The copy has no .git: its runs are ordered by the repository's own history.
        history.register_origin(tree, top, rev)
        try:
            yield Snapshot(inside, what, f"in {what}")
        finally:
            history.forget_origin(tree)


def _configured(inside: Path, root: Path, config: Path, what: str, *, staged: bool) -> None:
    """The judged tree's pyproject.toml configures tether, or a UsageError that says which
    tree is judged and how to judge another, naming the file as the repository does (the
    temp copy's path means nothing to the reader)."""
    hint = (
        "tether check judges what a commit records: stage the changes (git add -A), or pass "
        "--worktree to judge the files on disk"
        if staged
        else "pass another --rev, or --worktree to judge the files on disk"
    )
    if not (inside / project.CONFIG_FILE).is_file():
        raise UsageError(f"{config} is not in {what}; {hint}")
    try:
        project.get(inside)
    except NotAProjectError:
        # Right after `tether init`, before `git add`: the table is on disk only.
        on_disk = " (the file on disk has one, not staged)" if project.is_project(root) else ""
        raise UsageError(
            f"{config} in {what} has no [{project.TABLE}] table{on_disk}; {hint}"
        ) from None
    except UsageError as exc:
        told = str(exc).replace(str(inside / project.CONFIG_FILE), f"{config} (in {what})")
        raise UsageError(f"{told}; {hint}") from None
