"""pre-commit on a clone of this repository: the clean tree passes, a drifted README fails.

The clone is a FIXTURE made in tmp_path: ``git clone`` of HEAD, then the working tree's tracked
files copied over it (so uncommitted edits are what is tested), docs rendered into it, and the
project's .venv linked in because the hooks are ``language: system`` and run ``.venv/bin/python``.
PRE_COMMIT_HOME points into tmp_path and every hook is local, so nothing is fetched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV = REPO / ".venv"

pytestmark = pytest.mark.slow


def _git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def _pre_commit(clone: Path, home: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(home),
        "TETHER_ROOT": str(clone),
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--all-files", "--show-diff-on-failure"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is needed to test the pre-commit hooks and is not on PATH")
    if not (VENV / "bin" / "python").exists():
        pytest.fail(f"{VENV}/bin/python missing: the system hooks run it (make setup)")
    target = tmp_path / "clone"
    _git(tmp_path, "clone", "--quiet", "--no-hardlinks", str(REPO), str(target))
    for rel in _git(REPO, "ls-files", "-z").split("\0"):
        src = REPO / rel
        if rel and src.is_file():
            dst = target / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    (target / ".venv").symlink_to(VENV, target_is_directory=True)
    render = subprocess.run(
        [str(VENV / "bin" / "python"), "-m", "tether", "--root", str(target), "render"],
        cwd=target,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert render.returncode == 0, f"FIXTURE clone did not render:\n{render.stdout}{render.stderr}"
    _git(target, "add", "-A")
    _git(
        target,
        "-c",
        "user.name=fixture",
        "-c",
        "user.email=fixture@example.invalid",
        "commit",
        "--quiet",
        "--allow-empty",
        "--no-verify",
        "-m",
        "FIXTURE: working tree",
    )
    return target


@pytest.mark.devtool("pre_commit", "ruff", "repo-venv")
def test_clean_tree_passes_every_hook(clone: Path, tmp_path: Path) -> None:
    done = _pre_commit(clone, tmp_path / "pre-commit-home")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tether check" in done.stdout


@pytest.mark.devtool("pre_commit", "ruff", "repo-venv")
def test_figure_edited_in_readme_fails_tether_check(clone: Path, tmp_path: Path) -> None:
    readme = clone / "README.md"
    text = readme.read_text(encoding="utf-8")
    readme.write_text(
        text + "\nTriton is now 1.21x faster.\n", encoding="utf-8"
    )  # tether: allow-figure
    # The check judges the index (what the commit records), so the edit is staged.
    _git(clone, "add", "README.md")
    done = _pre_commit(clone, tmp_path / "pre-commit-home")
    assert done.returncode != 0
    assert "README.md" in done.stdout
    # The hook that failed is the drift check, not a formatter tripping on the edit.
    check_line = next(line for line in done.stdout.splitlines() if line.startswith("tether check"))
    assert check_line.rstrip().endswith("Failed"), done.stdout
