"""The CLI a kernel engineer expects: a --store typo is an error, render never wipes figures it
cannot redraw, --json on the read verbs, `tether compare`, `store show` with the statistics,
global options anywhere, every option with help.

Every project and store is a FIXTURE in tmp_path.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
from pathlib import Path

import pytest
from tether.cli import build_parser, main
from tether.stats import cell_stats

from validate.suite.fixture_project import fixture_project, run_cli
from validate.suite.runfactory import (
    make_fixture_store,
    make_gate_run,
    make_sweep_run,
)

REPO = Path(__file__).resolve().parents[2]
AXES = {"hq": [16, 32], "seqlen": [256, 512]}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return fixture_project(tmp_path / "repo")


# -- a --store that does not exist is an error for every verb that reads ----------------------


@pytest.mark.parametrize(
    "verb",
    [
        pytest.param(["store", "ls"], id="store-ls"),
        pytest.param(["store", "show", "x"], id="store-show"),
        pytest.param(["store", "validate"], id="store-validate"),
        pytest.param(["render"], id="render"),
        pytest.param(["check"], id="check"),
        pytest.param(["compare", "a", "b"], id="compare"),
    ],
)
def test_missing_store_is_a_usage_error(project: Path, tmp_path: Path, verb: list[str]) -> None:
    typo = tmp_path / "resluts"
    rc, _, err = run_cli(project, "--store", str(typo), *verb)
    assert rc == 2 and f"--store {typo}: does not exist" in err
    assert not typo.exists()


def test_global_options_work_after_the_verb(project: Path, tmp_path: Path) -> None:
    runs = make_fixture_store(tmp_path / "elsewhere")
    before = run_cli(project, "--store", str(tmp_path / "elsewhere"), "store", "ls")
    after = main(
        ["store", "ls", "--root", str(project), "--store", str(tmp_path / "elsewhere")],
        out=(out := io.StringIO()),
        err=io.StringIO(),
    )
    assert before[0] == after == 0 and before[1] == out.getvalue()
    assert all(r.id in out.getvalue() for r in runs)


# -- render never deletes what it cannot redraw -------------------------------------------------


def _rendered_project(project: Path) -> Path:
    shutil.copytree(REPO / "docs_src", project / "docs_src")
    figures = project / "docs" / "figures"
    figures.mkdir(parents=True)
    (figures / "sm90-prefill.svg").write_text("<svg/>\n", encoding="utf-8")  # FIXTURE figure
    return figures / "sm90-prefill.svg"


def test_render_refuses_an_empty_store_that_would_delete_figures(
    project: Path, tmp_path: Path
) -> None:
    figure = _rendered_project(project)
    rc, _, err = run_cli(project, "render")  # the project's store is missing
    assert rc == 2 and "holds no runs" in err and "1 figure" in err
    (tmp_path / "empty").mkdir()
    rc, _, err = run_cli(project, "--store", str(tmp_path / "empty"), "render")
    assert rc == 2 and "holds no runs" in err
    assert figure.read_text(encoding="utf-8") == "<svg/>\n"
    assert not (project / "README.md").exists(), "nothing is written before the refusal"


def test_render_of_a_new_project_with_no_runs_and_no_figures_is_allowed(project: Path) -> None:
    shutil.copytree(REPO / "docs_src", project / "docs_src")
    rc, out, err = run_cli(project, "render")
    assert rc == 0, err
    assert (project / "README.md").is_file() and "rendered" in out


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


def test_ls_and_validate_json(project: Path) -> None:
    runs = make_fixture_store(project / "results")
    rc, out, _ = run_cli(project, "store", "ls", "--json")
    listed = json.loads(out)
    assert rc == 0 and {r["id"] for r in listed} == {r.id for r in runs}
    assert {"id", "kind", "name", "arch", "status", "started", "cells", "path"} <= set(listed[0])
    (project / "results" / "sm90" / "bad.json").write_text("{", encoding="utf-8")
    rc, out, _ = run_cli(project, "store", "validate", "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["valid"] == len(runs) and len(doc["problems"]) == 1
    assert doc["problems"][0]["path"].endswith("bad.json")


def test_check_json_lists_findings(project: Path) -> None:
    (project / "results" / "sm90").mkdir(parents=True)
    (project / "results" / "sm90" / "bad.json").write_text("{", encoding="utf-8")
    (project / "results" / "sm90" / "worse.json").write_text("[", encoding="utf-8")
    rc, out, _ = run_cli(project, "check", "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["clean"] is False
    paths = {f["path"] for f in doc["findings"]}
    assert {"results/sm90/bad.json", "results/sm90/worse.json"} <= paths


# -- tether compare ----------------------------------------------------------------------------


def test_compare_agrees_within_floors_and_exits_0(project: Path) -> None:
    store = project / "results"
    a = make_sweep_run(axes=AXES, ratio=0.9, noise=0.0005, seed=1, store=store)
    b = make_sweep_run(axes=AXES, ratio=0.9, noise=0.0005, seed=2, store=store)
    assert a.path is not None
    rc, out, _ = run_cli(project, "compare", str(a.path), b.id[:-2])  # a path and a prefix
    assert rc == 0, out
    assert "4 common cells" in out and "4 of 4 common cells agree" in out
    assert "DIFFERS" not in out


def test_compare_flags_cells_outside_both_floors_and_exits_1(project: Path) -> None:
    store = project / "results"
    a = make_sweep_run(axes=AXES, ratio=0.9, noise=0.002, seed=1, store=store)
    per_cell = {(16, 256): 0.6}  # one cell of B got much faster: outside any floor
    from validate.suite.runfactory import DEFAULT_FIXED, grid_cells

    cells = grid_cells(AXES, DEFAULT_FIXED, ratio=0.9, noise=0.002, seed=2, per_cell_ratio=per_cell)
    # Another commit's run: a change between two setups can differ.
    b = make_sweep_run(axes=AXES, cells=cells, git_sha="b" * 40, store=store)
    rc, out, _ = run_cli(project, "compare", a.id, b.id, "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["common"] == 4 and doc["agree"] == 3 and not doc["all_agree"]
    (bad,) = [c for c in doc["cells"] if not c["agree"]]
    assert bad["cell"] == "hq=16 seqlen=256" and bad["change"] == pytest.approx(0.9 / 0.6, rel=0.02)
    assert bad["noise"][0] <= 1.0 <= bad["noise"][1] and bad["verdict"] == "DIFFERS"
    # A regression threshold: B's run gained there, so nothing counts against it; exit 0.
    rc, out, _ = run_cli(project, "compare", a.id, b.id, "--threshold", "5%", "--json")
    assert rc == 0 and json.loads(out)["failing"] == 0
    rc, out, _ = run_cli(project, "compare", b.id, a.id, "--threshold", "5%")
    assert rc == 1 and "1 regress by more than 5.0%" in out
    rc, out, _ = run_cli(project, "compare", b.id, a.id, "--threshold", "60%")
    assert rc == 0


def test_two_runs_of_one_commit_never_differ(project: Path) -> None:
    # Replicates of one setup: what separates them is the noise being measured.
    store = project / "results"
    a = make_sweep_run(axes=AXES, ratio=0.9, noise=0.002, seed=1, store=store)
    from validate.suite.runfactory import DEFAULT_FIXED, grid_cells

    cells = grid_cells(
        AXES, DEFAULT_FIXED, ratio=0.9, noise=0.002, seed=2, per_cell_ratio={(16, 256): 0.6}
    )
    b = make_sweep_run(axes=AXES, cells=cells, started="2026-01-01T00:05:00Z", store=store)
    rc, out, _ = run_cli(project, "compare", a.id, b.id)
    assert rc == 0, out
    assert "DIFFERS" not in out and "too noisy to judge" in out
    assert "the runs are replicates of one setup" in out


def test_compare_control_must_be_a_replicate(project: Path) -> None:
    store = project / "results"
    a = make_sweep_run(axes=AXES, noise=0.0005, store=store)
    b = make_sweep_run(axes=AXES, noise=0.0005, seed=3, git_sha="b" * 40, store=store)
    other = make_sweep_run(axes=AXES, noise=0.0005, seed=4, git_sha="c" * 40, store=store)
    rc, _, err = run_cli(project, "compare", a.id, b.id, "--control", other.id)
    assert rc == 2 and "is not a replicate of RUN_A" in err and "git_sha" in err
    rc, _, err = run_cli(project, "compare", a.id, b.id, "--control", a.id)
    assert rc == 2 and "RUN_A itself" in err


def test_compare_latest_revision_and_markdown(project: Path) -> None:
    import subprocess

    store = project / "results"
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    subprocess.run(
        ["git", "-C", str(project), "-c", "user.name=f", "-c", "user.email=f@example.invalid",
         "commit", "-q", "--allow-empty", "-m", "FIXTURE"],
        check=True,
    )  # fmt: skip
    head = subprocess.run(
        ["git", "-C", str(project), "rev-parse", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    old = make_sweep_run(axes=AXES, noise=0.0005, git_sha=head, store=store)
    new = make_sweep_run(
        axes=AXES, noise=0.0005, seed=2, git_sha="d" * 40, started="2026-01-02T00:00:00Z",
        store=store,
    )  # fmt: skip
    rc, out, _ = run_cli(project, "compare", "@HEAD", new.id, "--json")
    assert rc == 0 and json.loads(out)["a"] == old.id
    rc, out, _ = run_cli(project, "compare", old.id, "latest", "--json")
    assert rc == 0 and json.loads(out)["b"] == new.id
    rc, out, _ = run_cli(project, "compare", old.id, "latest", "--markdown")
    assert rc == 0 and out.startswith("**tether compare**") and "| cell |" in out
    rc, _, err = run_cli(project, "compare", "latest", "latest")
    assert rc == 2 and "run id or a run file" in err


def test_compare_uses_common_cells_and_a_control_band(project: Path) -> None:
    store = project / "results"
    a = make_sweep_run(axes={"hq": [16], "seqlen": [256, 512]}, noise=0.0005, store=store)
    b = make_sweep_run(axes=AXES, noise=0.0005, seed=3, store=store)
    c = make_sweep_run(axes={"hq": [16], "seqlen": [256, 512]}, noise=0.0005, seed=4, store=store)
    rc, out, _ = run_cli(project, "compare", a.id, b.id, "--control", c.id)
    assert rc == 0, out
    assert "2 common cells (2 only in B)" in out and "run-to-run band (control)" in out


def test_compare_refuses_runs_it_cannot_judge(project: Path) -> None:
    store = project / "results"
    a = make_sweep_run(axes={"hq": [16], "seqlen": [256]}, store=store)
    b = make_sweep_run(axes={"hq": [32], "seqlen": [512]}, seed=5, store=store)
    gate = make_gate_run(store=store)
    rc, _, err = run_cli(project, "compare", a.id, b.id)
    assert rc == 2 and "share no cell" in err
    rc, _, err = run_cli(project, "compare", a.id, gate.id)
    assert rc == 2 and "A, A2 and B" in err


def test_compare_judges_cells_against_floors_and_replicate_bands(project: Path) -> None:
    from tether.cli.compare import compare_runs

    from validate.suite.runfactory import with_b_faster

    a = make_sweep_run(ratio=0.8, noise=0.001, n=9, seed=1)
    doc = compare_runs(a, with_b_faster(a, 0, 1.2))
    (moved,) = [c for c in doc["cells"] if not c["agree"]]
    assert moved["change"] > moved["noise"][1]
    assert doc["agree"] == len(doc["cells"]) - 1 and not doc["all_agree"]


# -- help written for users --------------------------------------------------------------------

MY_VERBS = ("guard", "verify", "store", "compare", "render", "check", "demo")


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_option_of_these_verbs_has_help() -> None:
    missing = []
    for path, parser in _parsers(build_parser()):
        if not path or path[0] not in MY_VERBS:
            continue
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                continue
            if not action.help or action.help == argparse.SUPPRESS:
                missing.append(
                    f"tether {' '.join(path)} {'/'.join(action.option_strings) or action.dest}"
                )
    assert not missing, f"options without help: {missing}"
