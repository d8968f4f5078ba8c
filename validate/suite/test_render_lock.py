"""Renders serialize (issue 47 item 4): the output tree's lock (tether.render.outlock), held by
a render from its first read to its last write and, shared, by a check while it reads.

A FIXTURE project (the real templates, one made-up sweep run in its store) whose rendered
documents and figures are made stale; renders and checks then run at once, in threads of this
process and in separate processes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tether import render as render_mod
from tether.check import run_check
from tether.render import write_all
from tether.render.outlock import lock_path, tree_lock

from validate.suite.fixture_project import fixture_project, run_cli
from validate.suite.runfactory import make_sweep_run

REPO = Path(__file__).resolve().parents[2]

pytest.importorskip("matplotlib", reason="rendering figures needs matplotlib")


def _stale_project(tmp_path: Path) -> Path:
    """A rendered FIXTURE project whose documents and figures no longer match its store."""
    root = fixture_project(tmp_path / "repo", plugins=["tether_kernels_plugin"])
    shutil.copytree(REPO / "docs_src", root / "docs_src")
    make_sweep_run(store=root / "results", root=root)
    rc, out, err = run_cli(root, "render")
    assert rc == 0, out + err
    figures = sorted((root / "docs" / "figures").glob("*.svg"))
    assert figures, "the fixture renders no figure"
    for svg in figures:
        svg.write_text("<svg/>\n", encoding="utf-8")  # stale: its digest no longer matches
    (root / "docs" / "figures" / "stale.svg").write_text("<svg/>\n", encoding="utf-8")
    (root / "README.md").unlink()
    (root / "docs" / "backends.md").write_text("stale\n", encoding="utf-8")
    assert run_cli(root, "check", "--worktree")[0] == 1
    return root


def test_a_check_waits_for_a_render_writing_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The render's write phase is slowed, and the check starts once the render has written
    # its first file: without the lock it reads a tree half written (the README new, the
    # figures still stale) and fails a tree the render is about to leave clean.
    root = _stale_project(tmp_path)
    first_written = threading.Event()
    real = render_mod.write_atomic

    def slow_write(path: Path, data: bytes, **kwargs: object) -> Path:
        done = real(path, data, **kwargs)  # type: ignore[arg-type]
        first_written.set()
        time.sleep(0.2)
        return done

    monkeypatch.setattr(render_mod, "write_atomic", slow_write)
    errors: list[BaseException] = []

    def render() -> None:
        try:
            write_all(root, root / "results")
        except BaseException as exc:  # collected: a thread's failure must fail the test
            errors.append(exc)

    renderer = threading.Thread(target=render)
    renderer.start()
    assert first_written.wait(120), "the render wrote nothing"
    findings = run_check(root, root / "results")
    renderer.join()
    assert not errors, errors
    assert findings == [], findings


def test_renders_and_checks_at_once_leave_a_tree_the_check_passes(tmp_path: Path) -> None:
    root = _stale_project(tmp_path)
    env = {**os.environ, "COLUMNS": "80"}
    base = [sys.executable, "-m", "tether", "--root", str(root)]
    procs = [
        subprocess.Popen([*base, *verb], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for verb in (["render"], ["check", "--worktree"], ["render"], ["render"])
    ]
    try:
        said = [p.communicate(timeout=600) for p in procs]
    finally:
        # A failure above leaves no process running and no pipe open (a ResourceWarning,
        # raised as an error in whatever test runs when they are collected).
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
    for proc, (out, err) in zip(procs, said, strict=True):
        # The check may judge the tree before any render or after one, never half of one.
        assert proc.returncode in (0, 1), (out + err).decode()
        assert b"Traceback" not in err, err.decode()
    rc, out, err = run_cli(root, "check", "--worktree")
    assert rc == 0, out + err


def test_the_lock_is_one_per_output_tree_and_ignored_by_git(tmp_path: Path) -> None:
    root = fixture_project(tmp_path / "repo")
    assert lock_path(root) == lock_path(root, root)
    assert lock_path(root, tmp_path / "elsewhere") != lock_path(root)
    with tree_lock(root) as held:
        assert held is not None and held.parent == root / "scratch" / "locks"
        assert (held.parent / ".gitignore").read_text(encoding="utf-8").endswith("*\n")
        # Another tree renders meanwhile: its lock is its own.
        with tree_lock(root, tmp_path / "elsewhere") as other:
            assert other != held
