"""Merging FIXTURE stores: union, identical files skipped, conflicting ids refused whole, and what
the loader refuses (links, one id under two arches) refused too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from tether.errors import RunFileError, StoreError
from tether.store import load_store, merge
from tether.store.io import store_files

from validate.suite.runfactory import make_gate_run, make_sweep_run, make_verify_run


def test_merge_is_a_union_and_idempotent(tmp_path: Path) -> None:
    a = [make_sweep_run(store=tmp_path / "a"), make_gate_run(store=tmp_path / "a")]
    b = [make_verify_run(store=tmp_path / "b")]
    dest = tmp_path / "dest"
    report = merge([tmp_path / "a", tmp_path / "b"], dest)
    assert len(report.copied) == 3 and report.skipped == 0
    assert {r.id for r in load_store(dest)} == {r.id for r in a + b}
    for run in a + b:
        assert (dest / run.arch / f"{run.id}.json").read_bytes() == run.path.read_bytes()
    again = merge([tmp_path / "a", tmp_path / "b"], dest)
    assert again.copied == () and again.skipped == 3


def _forged_twin(run: Any, path: Path) -> Path:
    """FIXTURE: another file under ``run``'s id with other content, digest recomputed: what
    a forger or a broken merge would produce."""
    from tether.store.model import digest_of

    data = run.to_json()
    data["provenance"]["host"] = "other-host"
    data["digest"] = digest_of(data)
    target = path / run.arch / f"{run.id}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return target


def test_conflicting_id_writes_nothing(tmp_path: Path) -> None:
    # Ids are content-addressed: a different file under a taken id cannot load at all, so the
    # merge stops on it, naming it, before anything is copied.
    run = make_sweep_run(store=tmp_path / "a")
    forged = _forged_twin(run, tmp_path / "b")
    fresh = make_gate_run(store=tmp_path / "b")
    dest = tmp_path / "dest"
    with pytest.raises(RunFileError, match="ids are content-addressed") as info:
        merge([tmp_path / "a", tmp_path / "b"], dest)
    assert str(forged) in str(info.value)
    assert store_files(dest) == []  # not even the unrelated gate run
    assert fresh.path is not None and fresh.path.exists()


def test_conflict_with_destination(tmp_path: Path) -> None:
    run = make_sweep_run(store=tmp_path / "dest")
    _forged_twin(run, tmp_path / "src")
    before = run.path.read_bytes() if run.path else b""
    with pytest.raises(RunFileError, match="ids are content-addressed"):
        merge([tmp_path / "src"], tmp_path / "dest")
    assert run.path is not None and run.path.read_bytes() == before


def test_bad_source_file_is_named_before_copying(tmp_path: Path) -> None:
    make_sweep_run(store=tmp_path / "a")
    bad = tmp_path / "a" / "sm90" / "bad.json"
    bad.write_text("[]", encoding="utf-8")
    with pytest.raises(RunFileError, match=r"bad\.json"):
        merge([tmp_path / "a"], tmp_path / "dest")
    assert store_files(tmp_path / "dest") == []


# -- merge refuses what the loader refuses ---------------------------------------------------


def test_merge_refuses_links_and_ids_in_two_arches(tmp_path: Path) -> None:
    a = make_sweep_run(store=tmp_path / "a")
    assert a.path is not None
    (tmp_path / "b" / "gfx942").mkdir(parents=True)
    shutil.copy(a.path, tmp_path / "b" / "gfx942" / a.path.name)
    # The copy under another arch cannot load (its folder and its arch disagree); nothing merges.
    with pytest.raises(RunFileError, match="differs from its folder 'gfx942'"):
        merge([tmp_path / "a", tmp_path / "b"], tmp_path / "dest")
    assert store_files(tmp_path / "dest") == []
    (tmp_path / "c" / "sm90").mkdir(parents=True)
    (tmp_path / "c" / "sm90" / "x.json").symlink_to(a.path)
    with pytest.raises(StoreError, match="symlink"):
        merge([tmp_path / "c"], tmp_path / "dest")
