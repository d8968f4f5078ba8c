"""The check's cache (issue 46 item 1) never changes what the check says.

Each test builds a FIXTURE project (as test_check_commit does), warms the cache under
``.git/tether/cache`` with one check, then changes the commit or damages the cache and asserts
that the cached check says exactly what ``--no-cache`` says.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from validate.suite.fixture_project import fixture_project, git, run_cli
from validate.suite.runfactory import make_sweep_run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is needed: the check judges the git index")
    root = fixture_project(tmp_path / "repo")
    shutil.copytree(REPO / "docs_src", root / "docs_src")
    make_sweep_run(started="2026-01-01T00:00:00Z", ratio=0.9, store=root / "results", root=root)
    rc, out, err = run_cli(root, "render")
    assert rc == 0, out + err
    git(root, "init", "--quiet")
    git(root, "add", "-A")
    git(root, "commit", "--quiet", "-m", "FIXTURE: rendered")
    rc, out, err = run_cli(root, "check")  # warms the cache
    assert rc == 0, f"FIXTURE repository is not clean:\n{out}{err}"
    return root


def _cache_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / ".git" / "tether" / "cache").rglob("*") if p.is_file())


def _same_as_uncached(root: Path) -> tuple[int, str]:
    cached = run_cli(root, "check")
    plain = run_cli(root, "check", "--no-cache")
    assert cached[:2] == plain[:2], f"cached:\n{cached[1]}\nuncached:\n{plain[1]}"
    return cached[0], cached[1]


def test_a_warm_check_writes_entries_and_agrees(repo: Path) -> None:
    assert _cache_files(repo), "the first check kept nothing under .git/tether/cache"
    rc, _ = _same_as_uncached(repo)
    assert rc == 0


def test_docs_citing_an_untracked_run_fail_with_a_warm_cache(repo: Path) -> None:
    make_sweep_run(
        started="2026-01-05T00:00:00Z", ratio=0.7, seed=3, store=repo / "results", root=repo
    )
    rc, out, err = run_cli(repo, "render")
    assert rc == 0, out + err
    git(repo, "add", "README.md", "docs")  # the docs, not the run they now cite
    rc, out = _same_as_uncached(repo)
    assert rc == 1 and "README.md" in out, out


def test_a_hand_edited_rendered_doc_fails_with_a_warm_cache(repo: Path) -> None:
    readme = repo / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "\nfaster by 9.99x\n", "utf-8")
    git(repo, "add", "README.md")
    rc, out = _same_as_uncached(repo)
    assert rc == 1, out


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip"])
def test_damaged_entries_are_rebuilt_not_believed(repo: Path, damage: str) -> None:
    for entry in _cache_files(repo):
        data = entry.read_bytes()
        if damage == "truncate":
            entry.write_bytes(data[: len(data) // 2])
        elif damage == "garbage":
            entry.write_bytes(b"not a cache entry\n")
        else:
            entry.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    rc, _ = _same_as_uncached(repo)
    assert rc == 0
    # And a real fault is still found through the rebuilt entries.
    readme = repo / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "\nfaster by 9.99x\n", "utf-8")
    git(repo, "add", "README.md")
    rc, out = _same_as_uncached(repo)
    assert rc == 1, out
