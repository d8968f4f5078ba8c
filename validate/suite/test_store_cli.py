"""``tether store`` run in-process on FIXTURE stores; output read from injected streams."""

from __future__ import annotations

import io
from pathlib import Path

from tether.cli import main

from validate.suite.fixture_project import fixture_project
from validate.suite.runfactory import make_fixture_store, make_sweep_run


def _run(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    if not (tmp_path / "pyproject.toml").exists():
        fixture_project(tmp_path)
    out, err = io.StringIO(), io.StringIO()
    code = main(["--root", str(tmp_path), "--store", str(tmp_path / "results"), *argv], out, err)
    return code, out.getvalue(), err.getvalue()


def test_ls_lists_and_filters(tmp_path: Path) -> None:
    runs = make_fixture_store(tmp_path / "results")
    code, out, _ = _run(tmp_path, "store", "ls")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == [
        "id",
        "kind",
        "name",
        "arch",
        "status",
        "started",
        "cells",
    ]
    assert [line.split()[0] for line in lines[1:]] == [r.id for r in runs]
    code, out, _ = _run(tmp_path, "store", "ls", "--kind", "sweep", "--arch", "gfx942")
    assert code == 0 and len(out.splitlines()) == 2 and "not_measured" in out


def test_ls_empty_store(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    code, out, err = _run(tmp_path, "store", "ls")
    assert code == 0 and out == "" and "no runs" in err


def test_show_by_id_prefix_and_path(tmp_path: Path) -> None:
    run = make_sweep_run(store=tmp_path / "results")
    code, out, _ = _run(tmp_path, "store", "show", run.id[:20])
    assert code == 0 and run.id in out and "A2" in out
    assert "superseded" in out  # tmp_path's harness is not the fixture's
    assert run.path is not None
    code, out2, _ = _run(tmp_path, "store", "show", str(run.path))
    assert code == 0 and out2 == out


def test_show_unknown_is_usage_error(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    code, _, err = _run(tmp_path, "store", "show", "nope")
    assert code == 2 and "no run 'nope'" in err


def test_validate_lists_every_bad_file(tmp_path: Path) -> None:
    make_fixture_store(tmp_path / "results")
    code, out, _ = _run(tmp_path, "store", "validate")
    assert code == 0 and out == ""
    (tmp_path / "results" / "sm90" / "one.json").write_text("{", encoding="utf-8")
    (tmp_path / "results" / "cpu" / "two.json").write_text('{"schema": 1}', encoding="utf-8")
    code, out, err = _run(tmp_path, "store", "validate")
    assert code == 1
    assert "one.json: json" in out and "two.json: schema" in out
    assert "2 bad" in err
    code, out, _ = _run(
        tmp_path, "store", "validate", str(tmp_path / "results" / "cpu" / "two.json")
    )
    assert code == 1 and "one.json" not in out


def test_merge_into_store(tmp_path: Path) -> None:
    runs = make_fixture_store(tmp_path / "other")
    code, out, err = _run(tmp_path, "store", "merge", str(tmp_path / "other"))
    assert code == 0 and len(out.splitlines()) == len(runs) and "identical skipped" in err
    code, out, err = _run(tmp_path, "store", "merge", str(tmp_path / "other"))
    assert code == 0 and out == "" and f"0 copied, {len(runs)} identical skipped" in err
