"""FIXTURE repositories that adopt tether from outside, driven through a `tether` console
script as their maintainer types it (test_adoption, test_adoption_venv).

The console script, not `python -m tether`: its working directory is not on sys.path, so a
plugin import problem is not hidden. Each call runs on the CPU under the guard, with a lock
file beside the repository (the shared CI box's load is not the repository's).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# The tether of the environment running the suite; a fresh venv passes its own.
TETHER = Path(sys.executable).parent / "tether"


def run_tether(repo: Path, *argv: str, tether: Path = TETHER) -> subprocess.CompletedProcess[str]:
    """``tether ARGV...`` in ``repo``: its exit code and what it printed."""
    env = {k: v for k, v in os.environ.items() if k not in ("TETHER_ROOT", "PYTHONPATH")}
    env.update(
        TETHER_GUARD_LOCK=str(repo.parent / "guard.lock"),
        TETHER_GUARD_LOAD_LIMIT="1000",  # the shared CI box's load is not this repository's
        # The CPU on every host: under `tether verify` a GPU is held by the suite itself.
        CUDA_VISIBLE_DEVICES="",
        HIP_VISIBLE_DEVICES="",
    )
    return subprocess.run(
        [str(tether), *argv], cwd=repo, env=env, capture_output=True, text=True, timeout=300,
        check=False,
    )  # fmt: skip


def tether_ok(repo: Path, *argv: str, tether: Path = TETHER) -> str:
    """``tether ARGV...`` in ``repo``, which must exit 0; its stdout."""
    done = run_tether(repo, *argv, tether=tether)
    assert done.returncode == 0, f"tether {' '.join(argv)}:\n{done.stdout}{done.stderr}"
    return done.stdout


def stage(repo: Path) -> None:
    """`tether check` judges the index (what a commit records), so what it is to see is added."""
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)


def git_repo(path: Path, files: dict[str, bytes]) -> Path:
    """A FIXTURE git repository at ``path`` holding ``files``, committed: the repository as it
    was before tether."""
    if shutil.which("git") is None:
        pytest.fail("git is needed for the adoption tests and is not on PATH")
    path.mkdir()
    for rel, data in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_bytes(data)
    subprocess.run(["git", "init", "-q"], cwd=path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(
        ["git", "-c", "user.name=fixture", "-c", "user.email=fixture@example.invalid", "commit",
         "-qm", "FIXTURE: the repository before tether"],
        cwd=path, check=True,
    )  # fmt: skip
    return path
