"""``tether store`` run in-process on FIXTURE stores; output read from injected streams: ls,
show (the statistics, not only counts), validate, --json on the read verbs."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from tether.cli import main
from tether.stats import cell_stats
from tether.store import Run

from validate.suite.fixture_project import fixture_project, run_cli
from validate.suite.runfactory import make_fixture_store, make_gate_run, make_sweep_run

AXES = {"hq": [16, 32], "seqlen": [256, 512]}


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


# -- store show: the statistics, not only counts ----------------------------------------------


def test_show_gives_medians_ratio_floor_and_verdict(project: Path) -> None:
    run = make_sweep_run(axes=AXES, ratio=0.8, store=project / "results")
    rc, out, _ = run_cli(project, "store", "show", run.id[:-2])  # a unique prefix
    assert rc == 0
    for st in cell_stats(run):
        row = next(ln for ln in out.splitlines() if ln.strip().startswith(st.label))
        assert f"{st.ratio:.4f}" in row and f"{st.noise[0]:.4f}-{st.noise[1]:.4f}" in row
        assert row.endswith(st.word) and f"{st.a_median * 1e6:.4g}" in row
    rc, out, _ = run_cli(project, "store", "show", run.id, "--json")
    doc = json.loads(out)
    by_label = {c["label"]: c for c in doc["cells"]}
    for st in cell_stats(run):
        cell = by_label[st.label]
        assert cell["ratio"] == pytest.approx(st.ratio) and cell["verdict"] == st.verdict
        assert cell["median_s"]["B"] == pytest.approx(st.b_median)
        assert cell["aa_floor"] == pytest.approx(list(st.floor))
    assert doc["id"] == run.id and doc["kind"] == "sweep"


def test_show_of_a_gate_gives_medians_without_a_ratio(project: Path) -> None:
    run = make_gate_run(store=project / "results")
    rc, out, _ = run_cli(project, "store", "show", run.id)
    assert rc == 0 and "B us (n)" in out and "ratio A/B" not in out


# -- --json on the read verbs ---------------------------------------------------------------------


def test_ls_and_validate_json(project: Path, fixture_store: list[Run]) -> None:
    runs = fixture_store
    rc, out, _ = run_cli(project, "store", "ls", "--json")
    listed = json.loads(out)
    assert rc == 0 and {r["id"] for r in listed} == {r.id for r in runs}
    assert {"id", "kind", "name", "arch", "status", "started", "cells", "path"} <= set(listed[0])
    (project / "results" / "sm90" / "bad.json").write_text("{", encoding="utf-8")
    rc, out, _ = run_cli(project, "store", "validate", "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["valid"] == len(runs) and len(doc["problems"]) == 1
    assert doc["problems"][0]["path"].endswith("bad.json")
