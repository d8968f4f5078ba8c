"""Git objects read through one ``git cat-file --batch`` process per repository.

The check asks git for many small things: each run's commit, each kernel file at that commit,
each blob of a judged tree. One ``git show`` per question cost about 2 ms of process start-up
each, 1,485 of them per check of this repository's store; one long-lived ``cat-file --batch``
answers them all over a pipe. ``listing`` names every file of the judged tree (the index or a
revision) with its blob id, the content address the check's cache keys on (``tether.cache``).
"""

from __future__ import annotations

import atexit
import os
import subprocess
from pathlib import Path
from typing import IO

GIT_TIMEOUT_S = 60.0


class GitObjectError(Exception):
    """git could not start, or its batch process stopped answering."""


class CatFile:
    """One ``git cat-file --batch`` process for the repository at ``repo``, started on first use.

    ``read`` returns an object's bytes, or None when git has no such object (a missing
    commit, a path not in that tree); it never guesses. A spec git cannot take on one line
    (a newline in it) is None too: the caller then treats the file as unknown, never as equal.
    """

    def __init__(self, repo: Path):
        self.repo = Path(repo)
        self._proc: subprocess.Popen[bytes] | None = None

    def _start(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            # A process that ended (its repository removed, git killed) is closed before its
            # successor starts: its pipes left open are a ResourceWarning when collected,
            # raised as an error under the suite's warnings filter, in whatever test runs then.
            self.close()
            try:
                self._proc = subprocess.Popen(
                    ["git", "-C", str(self.repo), "cat-file", "--batch"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
            except OSError as exc:
                raise GitObjectError(f"cannot run git cat-file in {self.repo}: {exc}") from None
        return self._proc

    def read(self, spec: str) -> bytes | None:
        """The object ``spec`` names (``<rev>:<path>``, a blob id, ``<sha>^{commit}``)."""
        if "\n" in spec or "\r" in spec or not spec:
            return None
        proc = self._start()
        stdin, stdout = proc.stdin, proc.stdout
        assert stdin is not None and stdout is not None  # both are pipes (Popen above)
        try:
            stdin.write(spec.encode("utf-8") + b"\n")
            stdin.flush()
            header = stdout.readline()
        except (BrokenPipeError, OSError) as exc:
            self.close()
            raise GitObjectError(f"git cat-file stopped in {self.repo}: {exc}") from None
        if not header:
            self.close()
            raise GitObjectError(f"git cat-file stopped answering in {self.repo}")
        parts = header.split()
        # "<spec> missing", "<spec> ambiguous", or "<oid> <type> <size>".
        if len(parts) != 3 or not parts[2].isdigit():
            return None
        return _read_exactly(stdout, int(parts[2]) + 1)[:-1]

    def close(self) -> None:
        if self._proc is not None:
            proc, self._proc = self._proc, None
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _read_exactly(stream: IO[bytes], size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = stream.read(left)
        if not chunk:
            raise GitObjectError("git cat-file ended inside an object")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


# One reader per repository for the process: a check asks the same repository throughout.
_READERS: dict[Path, CatFile] = {}


def reader(repo: Path) -> CatFile:
    """The process's batch reader for ``repo`` (closed at exit)."""
    key = Path(os.path.realpath(repo))
    if key not in _READERS:
        _READERS[key] = CatFile(key)
    return _READERS[key]


@atexit.register
def _close_all() -> None:
    for cat in _READERS.values():
        cat.close()
    _READERS.clear()


def listing(top: Path, rev: str | None = None, env: dict[str, str] | None = None) -> dict[str, str]:
    """Every file of the index (``rev`` None; ``env`` may name GIT_INDEX_FILE, as a hook's
    does) or of ``rev``'s tree: path (from ``top``) -> ``<mode> <blob id>``. Submodules are
    listed by their commit. Raises GitObjectError when git cannot list it."""
    if rev is None:
        args = ["ls-files", "--stage", "-z"]
    else:
        args = ["ls-tree", "-r", "--full-tree", "-z", rev]
    try:
        done = subprocess.run(
            ["git", "-C", str(top), *args],
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            env=env,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitObjectError(f"git {args[0]} in {top}: {exc}") from None
    if done.returncode != 0:
        raise GitObjectError(f"git {args[0]} in {top}: {done.stderr.decode(errors='replace')}")
    out: dict[str, str] = {}
    for entry in done.stdout.split(b"\0"):
        if not entry:
            continue
        meta, _, path = entry.partition(b"\t")
        fields = meta.split()
        if rev is None:  # "<mode> <blob> <stage>"
            mode, blob, stage = fields[0], fields[1], fields[2]
            if stage != b"0":
                # A conflicted path has no single content; its stages make the key unique.
                blob = blob + b"@" + stage
        else:  # "<mode> <type> <blob>"
            mode, blob = fields[0], fields[2]
        key = path.decode("utf-8", errors="surrogateescape")
        value = f"{mode.decode()} {blob.decode()}"
        out[key] = value if key not in out else out[key] + "," + value
    return out
