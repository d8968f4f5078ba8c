"""``tether check`` judges what is committed (the index, or ``--rev``), never the working tree.

Each test builds a FIXTURE project in a fresh git repository in tmp_path (the real templates, a
made-up store, the docs rendered from it, all committed), then stages or leaves unstaged one
change and asserts what the check says about the commit it would make.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

from validate.suite.fixture_project import fixture_project, git, run_cli
from validate.suite.runfactory import make_sweep_run

REPO = Path(__file__).resolve().parents[2]


def _render(root: Path) -> None:
    rc, out, err = run_cli(root, "render")
    assert rc == 0, out + err


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is needed: the check judges the git index")
    root = fixture_project(tmp_path / "repo")
    shutil.copytree(REPO / "docs_src", root / "docs_src")
    make_sweep_run(started="2026-01-01T00:00:00Z", ratio=0.9, store=root / "results", root=root)
    _render(root)
    git(root, "init", "--quiet")
    git(root, "add", "-A")
    git(root, "commit", "--quiet", "-m", "FIXTURE: rendered")
    rc, out, err = run_cli(root, "check")
    assert rc == 0, f"FIXTURE repository is not clean:\n{out}{err}"
    return root


def _new_run_rendered(root: Path) -> Path:
    """A newer run written into the store and the docs re-rendered from it; returns its file."""
    run = make_sweep_run(
        started="2026-01-05T00:00:00Z", ratio=0.7, seed=3, store=root / "results", root=root
    )
    _render(root)
    assert run.path is not None
    return run.path


def test_docs_citing_an_untracked_run_fail(repo: Path) -> None:
    run_file = _new_run_rendered(repo)
    git(repo, "add", "README.md", "docs")  # the docs, not the run they now cite
    rc, out, _ = run_cli(repo, "check")
    assert rc == 1
    assert "README.md" in out
    # The files on disk agree with each other: only the commit is wrong.
    assert run_cli(repo, "check", "--worktree")[0] == 0
    git(repo, "add", str(run_file))
    rc, out, err = run_cli(repo, "check")
    assert rc == 0, out + err


def test_unstaged_edit_is_not_what_is_judged(repo: Path) -> None:
    readme = repo / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "\nhand edit\n", encoding="utf-8")
    assert run_cli(repo, "check")[0] == 0  # the index is unchanged
    assert run_cli(repo, "check", "--worktree")[0] == 1
    git(repo, "add", "README.md")
    rc, out, _ = run_cli(repo, "check")
    assert rc == 1
    assert "README.md" in out


def test_rev_judges_that_revision(repo: Path) -> None:
    _new_run_rendered(repo)
    git(repo, "add", "README.md", "docs")
    git(repo, "commit", "--quiet", "-m", "FIXTURE: docs without their run")
    assert run_cli(repo, "check", "--rev", "HEAD")[0] == 1
    assert run_cli(repo, "check", "--rev", "HEAD~1")[0] == 0


def test_bad_rev_is_a_usage_error(repo: Path) -> None:
    rc, _, err = run_cli(repo, "check", "--rev", "no-such-rev")
    assert rc == 2
    assert "no-such-rev" in err


def test_rev_and_worktree_exclude_each_other(repo: Path) -> None:
    assert run_cli(repo, "check", "--rev", "HEAD", "--worktree")[0] == 2


def _no_temp_path(text: str) -> None:
    """The index is judged in a temp copy (tether.snapshot), whose path means nothing to the
    reader: messages name files as the repository does."""
    assert "tether-check-" not in text and "/tree/" not in text, text


def test_untracked_config_is_named(repo: Path) -> None:
    git(repo, "rm", "--cached", "--quiet", "pyproject.toml")
    rc, _, err = run_cli(repo, "check")
    assert rc == 2
    assert "pyproject.toml is not in the index" in err and "git add -A" in err, err
    assert "--worktree" in err
    _no_temp_path(err)


def _committed_repo(tmp_path: Path, name: str, text: str) -> Path:
    """A git repository of one committed file, as an outside repository is before tether."""
    root = tmp_path / "repo"
    root.mkdir()
    (root / name).write_text(text, encoding="utf-8")
    git(root, "init", "--quiet")
    git(root, "add", "-A")
    git(root, "commit", "--quiet", "-m", "FIXTURE: before tether")
    return root


def test_a_check_before_staging_explains_itself(tmp_path: Path) -> None:
    """Right after `tether init` the [tool.tether] table is on disk and the index holds the
    repository's pyproject.toml without it."""
    root = _committed_repo(tmp_path, "pyproject.toml", '[project]\nname = "x"\n')
    fixture_project(root, files={}, headline=None, doc_arches=())
    (root / "docs_src").mkdir()
    (root / "docs_src" / "notes.md.j2").write_text("FIXTURE: a template\n", encoding="utf-8")
    rc, _, err = run_cli(root, "check")
    assert rc == 2, err
    assert "pyproject.toml in the index has no [tool.tether] table" in err, err
    assert "not staged" in err and "git add -A" in err and "--worktree" in err, err
    _no_temp_path(err)
    git(root, "add", "-A")
    rc, out, err = run_cli(root, "check")
    assert rc == 0, out + err


def test_a_partly_staged_adoption_names_what_is_not_staged(tmp_path: Path) -> None:
    """After `tether init`, staging only the files it changed: the index holds a plugin name and
    a template folder whose files lie on disk, untracked, and its findings ("module not found
    (a typo?)") would mislead without the files the index lacks, named as the repository does."""
    root = _committed_repo(tmp_path, "README.md", "# FIXTURE\n")
    rc, out, err = run_cli(root, "init")
    assert rc == 0, out + err
    git(root, "add", "pyproject.toml", "README.md")
    rc, out, err = run_cli(root, "check")
    assert rc == 1 and "module 'tether_bench' not found" in out, out + err
    said = [line for line in err.splitlines() if "not staged" in line]
    assert len(said) == 1, err
    assert "tether_bench.py" in said[0] and "docs_src/results.md.j2" in said[0], said
    assert "README.md" not in said[0]  # staged: it is what was judged
    assert "git add -A" in said[0] and "--worktree" in said[0], said
    _no_temp_path(err)
    # The files on disk are whole; judged as such, or once staged, they pass.
    assert run_cli(root, "check", "--worktree")[0] == 0
    git(root, "add", "-A")
    rc, out, err = run_cli(root, "check")
    assert rc == 0, out + err


def test_findings_of_a_fully_staged_index_name_no_unstaged_files(repo: Path) -> None:
    readme = repo / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "\nhand edit\n", encoding="utf-8")
    git(repo, "add", "README.md")
    rc, _, err = run_cli(repo, "check")
    assert rc == 1 and "not staged" not in err, err
    # Judging the files on disk, nothing is unstaged in the sense the hint means.
    (repo / "notes.txt").write_text("FIXTURE: untracked\n", encoding="utf-8")
    rc, _, err = run_cli(repo, "check", "--worktree")
    assert rc == 1 and "not staged" not in err, err


def test_unstaged_lists_what_the_index_lacks(repo: Path) -> None:
    """Untracked and modified-unstaged files, a staged rename's new name when it is edited
    again on disk, never a file staged in full or an ignored one."""
    from tether.snapshot import unstaged

    assert unstaged(repo) == []
    (repo / ".gitignore").write_text("ignored.txt\n", encoding="utf-8")
    (repo / "ignored.txt").write_text("FIXTURE\n", encoding="utf-8")
    (repo / "staged.txt").write_text("FIXTURE\n", encoding="utf-8")
    git(repo, "add", "staged.txt", ".gitignore")
    (repo / "new dir").mkdir()
    (repo / "new dir" / "untracked file.md").write_text("FIXTURE\n", encoding="utf-8")
    git(repo, "mv", "README.md", "FRONT.md")
    (repo / "FRONT.md").write_text("FIXTURE: edited after the move\n", encoding="utf-8")
    assert unstaged(repo) == ["FRONT.md", "new dir/untracked file.md"]


def test_a_broken_staged_config_is_named_as_staged(repo: Path) -> None:
    (repo / "pyproject.toml").write_text("[tool.tether\n", encoding="utf-8")
    git(repo, "add", "pyproject.toml")
    (repo / "pyproject.toml").write_text('[tool.tether]\nstore = "results"\n', "utf-8")
    rc, _, err = run_cli(repo, "check")
    assert rc == 2 and "pyproject.toml (in the index): not valid TOML" in err, err
    _no_temp_path(err)


def test_the_diff_names_the_index_when_the_index_is_judged(repo: Path) -> None:
    readme = repo / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8") + "\nhand edit\n", encoding="utf-8")
    git(repo, "add", "README.md")
    rc, out, _ = run_cli(repo, "check")
    assert rc == 1 and "--- README.md (in the index)" in out, out
    assert "(on disk)" not in out
    rc, out, _ = run_cli(repo, "check", "--worktree")
    assert rc == 1 and "--- README.md (on disk)" in out, out


def test_the_snapshot_is_quick(repo: Path) -> None:
    """Materialising the index must not dominate the check (it runs on every commit)."""
    from tether.snapshot import snapshot

    began = time.monotonic()
    with snapshot(repo) as snap:
        assert (snap.root / "pyproject.toml").is_file()
        assert snap.what == "the index"
    assert time.monotonic() - began < 5.0


def _install_hook(repo: Path) -> None:
    import sys

    hook = repo / ".git" / "hooks" / "pre-commit"
    hook.write_text(f"#!/bin/sh\nexec {sys.executable} -m tether check --quiet\n", encoding="utf-8")
    hook.chmod(0o755)


def _commit(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "user.name=fixture", "-c", "user.email=fixture@example.invalid", "commit",
         "--quiet", "-m", "FIXTURE", *args],
        cwd=repo, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_a_real_hook_refuses_docs_without_their_run(repo: Path) -> None:
    """git runs the hook with GIT_INDEX_FILE naming the index being committed: a plain
    commit, and a commit of named paths (git builds a temporary index for it)."""
    _install_hook(repo)
    run_file = _new_run_rendered(repo)
    git(repo, "add", "README.md", "docs")
    refused = _commit(repo)
    assert refused.returncode != 0, refused.stdout + refused.stderr
    assert "README.md" in refused.stdout + refused.stderr
    # Naming the paths: the run is still left out of what is committed.
    refused = _commit(repo, "--", "README.md", "docs")
    assert refused.returncode != 0, refused.stdout + refused.stderr
    git(repo, "add", str(run_file))
    done = _commit(repo)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_tether_checkout_is_judged_by_its_own_timing_engine(tmp_path: Path) -> None:
    """A check of the index runs on a copy of the tree: for tether's own repository the
    harness it judges runs by is the copy's lib/tether/bench, not the installed one."""
    from tether.store.provenance import BENCH_DIR, bench_dir, harness_fingerprint

    root = fixture_project(tmp_path / "repo")
    assert bench_dir(root) == BENCH_DIR  # not a tether checkout: the installed engine
    shutil.copytree(BENCH_DIR, root / "lib" / "tether" / "bench")
    (root / "lib" / "tether" / "store").mkdir(parents=True)
    shutil.copy2(BENCH_DIR.parent / "store" / "provenance.py", root / "lib/tether/store")
    assert bench_dir(root) == (root / "lib" / "tether" / "bench").resolve()
    installed = harness_fingerprint(fixture_project(tmp_path / "other"))
    assert harness_fingerprint(root) == installed  # the same engine, the same fingerprint
    engine = root / "lib" / "tether" / "bench" / "engine.py"
    engine.write_text(engine.read_text(encoding="utf-8") + "\nCHANGED = 1\n", encoding="utf-8")
    assert harness_fingerprint(root) != installed
