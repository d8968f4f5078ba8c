"""The store's layout under hostile input: FIFOs, devices, links, huge and deeply nested files,
runs in the wrong place, ids claimed twice, orphan temp files, extreme samples; what load,
``store validate``, ``store clean`` and the check say about each (merge: test_store_merge).

Every store here is a FIXTURE written into tmp_path (validate/suite/runfactory.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tether.errors import RunFileError, StoreError
from tether.store import load_run, load_store
from tether.store.audit import audit, orphan_temps
from tether.store.io import ENV_MAX_BYTES, store_files

from validate.suite.fixture_project import run_cli
from validate.suite.runfactory import make_cell, make_sweep_run

REPO = Path(__file__).resolve().parents[2]


# -- only regular files are read -------------------------------------------------------------


def test_fifo_named_like_a_run_is_refused_not_waited_on(project: Path) -> None:
    store = project / "results"
    make_sweep_run(store=store)
    fifo = store / "sm90" / "20260101T000000Z-sweep-x-sm90-00000000.json"
    os.mkfifo(fifo)
    # in a child with a deadline: a reader that opens the FIFO blocks until someone writes
    base = [sys.executable, "-m", "tether", "--root", str(project)]
    for verb in (["store", "validate"], ["store", "ls"]):
        done = subprocess.run(
            [*base, *verb], capture_output=True, text=True, timeout=60, cwd=project
        )
        assert done.returncode != 0, done.stdout + done.stderr
        assert fifo.name in done.stdout + done.stderr and "FIFO" in done.stdout + done.stderr
    with pytest.raises(RunFileError, match="not a regular file"):
        load_run(fifo)  # opened non-blocking, refused after fstat


def test_symlink_out_of_the_store_is_refused(project: Path, tmp_path: Path) -> None:
    store = project / "results"
    run = make_sweep_run(store=store)
    outside = tmp_path / "elsewhere.json"
    assert run.path is not None
    shutil.copy(run.path, outside)
    (store / "cpu").mkdir()
    link = store / "sm90" / "20260102T000000Z-sweep-link-sm90-00000000.json"
    link.symlink_to(outside)
    zero = store / "cpu" / "20260102T000000Z-sweep-zero-cpu-00000000.json"
    zero.symlink_to("/dev/zero")
    with pytest.raises(StoreError, match="symlink"):
        load_store(store)
    with pytest.raises(RunFileError, match="symlink"):
        load_run(zero)  # O_NOFOLLOW: /dev/zero is never read
    found = audit(store)
    whats = {p.path.name: p.what for p in found.problems}
    assert "outside the store" in whats[link.name] and "outside the store" in whats[zero.name]
    assert len(found.runs) == 1


def test_size_limit_is_clear_and_overridable(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = make_sweep_run(store=project / "results")
    assert run.path is not None
    size = run.path.stat().st_size
    monkeypatch.setenv(ENV_MAX_BYTES, str(size - 1))
    with pytest.raises(RunFileError) as info:
        load_run(run.path)
    assert run.path.name in str(info.value) and ENV_MAX_BYTES in str(info.value)
    assert f"{size} bytes" in str(info.value)
    monkeypatch.setenv(ENV_MAX_BYTES, str(size))
    assert load_run(run.path).id == run.id


def test_default_size_limit_admits_every_real_run() -> None:
    from tether.store.io import DEFAULT_MAX_BYTES, read_run_bytes, store_files

    real = store_files(REPO / "results")
    if not real:
        pytest.skip("this checkout has no results/ runs to measure the limit against")
    # The limit holds for what a file holds: a packed run's JSON, unpacked.
    biggest = max(len(read_run_bytes(p)) for p in real)

    assert biggest * 8 < DEFAULT_MAX_BYTES, "the limit must sit far above any real run"


def test_deep_nesting_is_refused_naming_the_file(project: Path) -> None:
    run = make_sweep_run(store=project / "results")
    assert run.path is not None
    data = json.loads(run.path.read_text(encoding="utf-8"))
    data["cells"][0]["extra"] = {"x": "DEEP"}
    deep = "[" * 50_000 + "1" + "]" * 50_000  # json.loads would hit the recursion limit
    run.path.write_text(json.dumps(data).replace('"DEEP"', deep), encoding="utf-8")
    with pytest.raises(RunFileError) as info:
        load_run(run.path)
    assert run.path.name in str(info.value) and "nested" in str(info.value)


# -- a run's folder, id and arch agree; ids are unique in the store ----------------------------


def test_same_id_in_two_arch_folders_names_both(project: Path) -> None:
    store = project / "results"
    sm90 = make_sweep_run(store=store)
    assert sm90.path is not None
    second = store / "cpu" / sm90.path.name  # the same run copied under another arch
    second.parent.mkdir()
    shutil.copy(sm90.path, second)
    with pytest.raises(StoreError) as info:
        load_store(store)
    assert str(sm90.path) in str(info.value) and str(second) in str(info.value)
    rc, out, _ = run_cli(project, "store", "validate")
    assert rc == 1 and f"claims run id {sm90.id}" in out
    from tether.check import load_checked_store

    loaded, findings = load_checked_store(store, project)
    assert loaded is None and any("claims run id" in f.what for f in findings)
    # The other claimant is named from the store's folder on, never by an absolute path
    # (under tether check that is the index's temp copy, a new one every check).
    claim = next(f.what for f in findings if "claims run id" in f.what)
    assert any(f"which results/{a}/{sm90.path.name} claims too" in claim for a in ("cpu", "sm90"))
    assert str(project) not in claim


def test_folder_and_provenance_arch_must_agree(project: Path) -> None:
    store = project / "results"
    run = make_sweep_run(store=store)
    assert run.path is not None
    (store / "gfx942").mkdir()
    moved = store / "gfx942" / run.path.name
    run.path.rename(moved)
    with pytest.raises(RunFileError, match="differs from its folder 'gfx942'"):
        load_store(store)


# -- runs in the wrong place are reported, not ignored ----------------------------------------


def test_misplaced_and_misnamed_files_are_reported(project: Path) -> None:
    store = project / "results"
    run = make_sweep_run(store=store)
    assert run.path is not None
    body = run.path.read_bytes()
    (store / "at-root.json").write_bytes(body)
    (store / "sm90" / "old").mkdir()
    (store / "sm90" / "old" / run.path.name).write_bytes(body)
    (store / "sm90" / "UPPER.JSON").write_bytes(body)
    (store / "sm90" / f"{run.path.name}.bak").write_bytes(body)
    (store / "sm90" / "notes.txt").write_text("hand notes\n", encoding="utf-8")
    (store / "misc").mkdir()
    with pytest.raises(StoreError, match="problem"):
        load_store(store)
    rc, out, err = run_cli(project, "store", "validate")
    assert rc == 1, out + err
    for name in ("at-root.json", "old/", "UPPER.JSON", ".bak", "notes.txt", "misc"):
        assert name.rstrip("/") in out, f"{name} not reported:\n{out}"
    assert len([ln for ln in out.splitlines() if ln.startswith("bad: ")]) == 6
    assert store_files(store) == [run.path], "only the run in its place is a run file"


def test_validate_a_path_validates_what_it_holds(project: Path) -> None:
    store = project / "results"
    runs = [make_sweep_run(store=store, seed=s) for s in range(3)]
    rc, _, err = run_cli(project, "store", "validate", str(store / "sm90"))
    assert rc == 0 and err.startswith(f"{len(runs)} valid, 0 bad"), err
    (store / "sm90" / "broken.json").write_text("{", encoding="utf-8")
    rc, out, err = run_cli(project, "store", "validate", str(store / "sm90"))
    assert rc == 1 and "broken.json: json" in out and "3 valid, 1 bad" in err
    (store / "sm90" / "deeper" / "still").mkdir(parents=True)
    (store / "sm90" / "deeper" / "still" / "x.json").write_text("{}", encoding="utf-8")
    rc, out, _ = run_cli(project, "store", "validate", str(store / "sm90" / "deeper"))
    assert rc == 1 and "x.json: misplaced" in out
    rc, out, _ = run_cli(project, "store", "validate", str(store / "sm90" / "broken.json"))
    assert rc == 1 and "broken.json" in out and runs[0].id not in out


def test_check_reports_every_bad_file(project: Path) -> None:
    from tether.check import load_checked_store

    store = project / "results"
    make_sweep_run(store=store)
    (store / "sm90" / "one.json").write_text("{", encoding="utf-8")
    (store / "sm90" / "two.json").write_text("[]", encoding="utf-8")
    (store / "stray.json").write_text("{}", encoding="utf-8")
    loaded, findings = load_checked_store(store, project)
    assert loaded is None
    named = sorted(Path(f.path).name for f in findings)
    assert named == ["one.json", "stray.json", "two.json"], findings


# -- orphan temp files: reported, cleaned, ignored by git -------------------------------------


def _temp(folder: Path, name: str, age_s: float) -> Path:
    path = folder / name
    path.write_bytes(b"{" * 100)
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    return path


def test_store_clean_removes_only_old_unlocked_temp_files(project: Path) -> None:
    store = project / "results"
    make_sweep_run(store=store)
    folder = store / "sm90"
    orphan = _temp(folder, ".20260101T000000Z-sweep-x.abc123.tmp", 600)
    young = _temp(folder, ".20260101T000000Z-sweep-y.def456.tmp", 0)
    locked = _temp(folder, ".20260101T000000Z-sweep-z.ghi789.tmp", 600)
    fd = os.open(locked, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a writer still working on it
    try:
        rc, out, err = run_cli(project, "store", "validate")
        assert rc == 0 and "3 writer temp file(s), 1 orphaned" in err
        rc, out, err = run_cli(project, "store", "clean")
        assert rc == 0 and f"would remove {orphan}" in out and "--yes" in err
        assert orphan.exists(), "clean without --yes deletes nothing"
        rc, out, err = run_cli(project, "store", "clean", "--yes")
        assert rc == 0 and f"removed {orphan}" in out
        assert not orphan.exists() and young.exists() and locked.exists()
    finally:
        os.close(fd)
    assert len(load_store(store)) == 1, "temp files never stop a load"


def test_a_writer_locks_its_temp_file_while_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[Path]] = []
    real_link = os.link

    def link(src: str, dst: str) -> None:
        seen.append(orphan_temps([Path(src)], min_age_s=0))  # mid-write: must look busy
        real_link(src, dst)

    monkeypatch.setattr(os, "link", link)
    make_sweep_run(store=tmp_path / "results")
    assert seen == [[]], "a live writer's temp file must not look orphaned"


def test_gitignore_covers_temp_files() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: .gitignore cannot be asked")
    probe = "results/sm90/.20260101T000000Z-sweep-x-sm90-0.abc123.tmp"
    done = subprocess.run(
        ["git", "check-ignore", "-q", "--no-index", probe], cwd=REPO, capture_output=True
    )
    assert done.returncode == 0, f"{probe} would be committed"


# -- render and check errors name the run and the cell ----------------------------------------


def test_extreme_samples_raise_naming_run_and_cell(project: Path) -> None:
    from tether.stats import cell_stats

    cells = (
        make_cell({"seqlen": 256}, means={"A": 1e-300, "A2": 1e-300, "B": 1e300}),
        make_cell({"seqlen": 512}),
    )
    run = make_sweep_run(axes={"seqlen": [256, 512]}, cells=cells, store=project / "results")
    loaded = load_run(run.path)  # valid: every sample is a positive finite number
    with pytest.raises(RunFileError) as info:
        cell_stats(loaded)
    assert run.id in str(info.value) and "seqlen=256" in str(info.value)
    shutil.copytree(REPO / "docs_src", project / "docs_src")
    rc, _, err = run_cli(project, "render")
    assert rc == 1 and run.id in err and "seqlen=256" in err
    assert not (project / "README.md").exists(), "nothing is written when a render fails"


# -- a store listed, not walked (tether.checkcache leaves known runs unwritten) -----------------

RUN_A = "20260101T000000Z-sweep-x-sm90-0123456789ab"
RUN_B = "20260102T000000Z-sweep-x-sm90-ba9876543210"
PLAIN = [
    pytest.param([f"sm90/{RUN_A}.json", f"sm90/{RUN_A}.sig"], id="run-and-signature"),
    pytest.param([f"sm90/{RUN_A}.json", f"gfx942/{RUN_B}.json"], id="two-arches"),
    pytest.param([f"sm90/{RUN_B}.sig", f"sm90/{RUN_A}.json"], id="signature-alone"),
    pytest.param([f"sm90/{RUN_A}.json", f"sm90/{RUN_A}.json.gz"], id="packed-and-not"),
    pytest.param([], id="empty"),
]
WALKED = [
    pytest.param([f"sm90/{RUN_A}.json", f"sm90/{RUN_A}.JSON"], id="upper-case"),
    pytest.param([f"sm90/{RUN_A}.json", "sm90/notes.txt"], id="misnamed"),
    pytest.param([f"sm90/.{RUN_A}.abc.tmp"], id="temp"),
    pytest.param([f"sm90/deep/{RUN_A}.json"], id="nested"),
    pytest.param([f"{RUN_A}.json"], id="at-the-root"),
    pytest.param([f"hopper/{RUN_A}.json"], id="not-an-arch"),
]


def _written(tmp_path: Path, names: list[str]) -> Path:
    store = tmp_path / "results"
    store.mkdir()
    for name in names:
        (store / name).parent.mkdir(parents=True, exist_ok=True)
        (store / name).write_bytes(b"")
    return store


@pytest.mark.parametrize("names", PLAIN)
def test_a_listed_store_is_what_its_walk_finds(tmp_path: Path, names: list[str]) -> None:
    # scan_listed gives the walk's own Scan of a folder holding exactly those files, pair
    # problems (a signature alone, a run packed and not) included.
    from tether.store import layout

    store = _written(tmp_path, names)
    assert layout.scan_listed(store, names) == layout.scan(store)


@pytest.mark.parametrize("names", WALKED)
def test_a_store_with_an_odd_file_is_left_to_the_walk(tmp_path: Path, names: list[str]) -> None:
    # Where the walk names a file's own problem (misnamed, misplaced, a temp file), the list
    # gives None: such a store is written into the snapshot and walked.
    from tether.store import layout

    store = _written(tmp_path, names)
    walked = layout.scan(store)
    assert walked.problems or walked.temps
    assert layout.scan_listed(store, names) is None
