"""One atomic writer (issue 25 item 6, issue 23): modes from the umask, temp files in one
ignored place with names that cannot collide, nothing left behind, concurrent renders safe,
and a file's own line endings kept.

FIXTURE projects and stores are made in tmp_path; nothing here touches the real store.
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from tether.atomic import temp_dir_for, utc_stamp, write_atomic
from tether.store.io import write_bytes_once

from validate.suite.fixture_project import fixture_project, run_cli
from validate.suite.runfactory import make_sweep_run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def umask() -> object:
    old = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(old)


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_new_files_get_the_process_umask(
    tmp_path: Path, umask: object, mask: int, mode: int
) -> None:
    umask(mask)  # type: ignore[operator]
    run = make_sweep_run(store=tmp_path / "store")
    assert run.path is not None
    assert run.path.stat().st_mode & 0o777 == mode


def test_a_replaced_file_keeps_its_mode(tmp_path: Path) -> None:
    target = tmp_path / "doc.md"
    target.write_text("old\n", encoding="utf-8")
    target.chmod(0o640)
    write_atomic(target, b"new\n")
    assert target.read_bytes() == b"new\n" and target.stat().st_mode & 0o777 == 0o640


def test_temp_files_of_a_project_go_to_its_ignored_temp_folder(
    project: Path, tmp_path: Path
) -> None:
    where = temp_dir_for(project / "README.md")
    assert where == (project / "scratch" / "tmp").resolve()
    assert (where / ".gitignore").read_text(encoding="utf-8").strip().endswith("*")
    # Outside a project (a store elsewhere): beside the target.
    assert temp_dir_for(tmp_path / "elsewhere" / "x.json") == (tmp_path / "elsewhere").resolve()


def test_a_failed_write_leaves_nothing(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = project / "README.md"

    def full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError):
        write_atomic(target, b"x\n")
    monkeypatch.undo()
    assert not target.exists()
    assert [p.name for p in (project / "scratch" / "tmp").iterdir()] == [".gitignore"]
    assert not [p for p in project.iterdir() if p.name.startswith(".README")]


def test_a_leftover_with_this_pid_in_its_name_blocks_nothing(tmp_path: Path) -> None:
    target = tmp_path / "holder.json"
    # What a killed guard of an earlier process with this PID left, under the old naming.
    (tmp_path / f".{target.name}.{os.getpid()}.tmp").write_text("stale", encoding="utf-8")
    write_atomic(target, b"{}\n", temp_dir=tmp_path)
    write_atomic(target, b"{}\n", temp_dir=tmp_path)
    assert target.read_bytes() == b"{}\n"


def test_never_overwrites_when_exclusive(tmp_path: Path) -> None:
    from tether.errors import StoreError

    target = tmp_path / "sm90" / "x.json"
    write_bytes_once(target, b"one\n")
    with pytest.raises(StoreError, match="never overwritten"):
        write_bytes_once(target, b"two\n")
    assert target.read_bytes() == b"one\n"


def test_store_clean_reports_the_project_temp_folder(project: Path) -> None:
    shared = temp_dir_for(project / "README.md")
    orphan = shared / ".README.md.999999-abcdef.tmp"
    orphan.write_text("left by a killed render", encoding="utf-8")
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    rc, out, _ = run_cli(project, "store", "clean")
    assert rc == 0 and str(orphan) in out and "would remove" in out
    rc, out, _ = run_cli(project, "store", "clean", "--yes")
    assert rc == 0 and not orphan.exists()


def test_concurrent_renders_are_safe(project: Path) -> None:
    pytest.importorskip("matplotlib", reason="rendering figures needs matplotlib")
    from tether.render import write_all

    shutil.copytree(REPO / "docs_src", project / "docs_src")
    make_sweep_run(store=project / "results", root=project)
    figures = project / "docs" / "figures"
    figures.mkdir(parents=True)
    (figures / "stale.svg").write_text("<svg/>", encoding="utf-8")
    errors: list[BaseException] = []

    def render() -> None:
        try:
            write_all(project, project / "results")
        except BaseException as exc:  # collected: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=render) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert not (figures / "stale.svg").exists()
    assert run_cli(project, "check", "--worktree")[0] == 0


def test_a_crlf_region_file_keeps_its_line_endings(tmp_path: Path) -> None:
    root = fixture_project(tmp_path / "repo", regions=["NOTES.md"])
    shutil.copytree(REPO / "docs_src", root / "docs_src")
    (root / "docs_src" / "notes.md.j2").write_text("rendered {{ 1 + 1 }}\n", encoding="utf-8")
    notes = root / "NOTES.md"
    notes.write_bytes(
        b"# Notes\r\n<!-- BEGIN GENERATED: tune-x (tether render) -->\r\nold\r\n"
        b"<!-- END GENERATED: tune-x -->\r\nhand\r\n"
    )
    before = notes.read_bytes()
    rc, out, err = run_cli(root, "render")
    assert rc == 0, out + err
    after = notes.read_bytes()
    assert after.count(b"\r\n") == after.count(b"\n")  # every line still ends CRLF
    assert after.startswith(b"# Notes\r\n") and after.endswith(b"hand\r\n")
    assert after != before  # the region was rewritten


def test_one_timestamp() -> None:
    assert utc_stamp(0) == "1970-01-01T00:00:00Z"
    assert utc_stamp("2026-01-01T00:00:00Z") == "2026-01-01T00:00:00Z"
