"""`tether compare`: two runs judged cell by cell against the A/A floors and a run-to-run band,
agreement and differences in text, JSON and Markdown, run ids, prefixes, paths and revisions,
and refusals of runs it cannot judge.

Every project and store is a FIXTURE in tmp_path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from validate.suite.fixture_project import run_cli
from validate.suite.runfactory import (
    make_gate_run,
    make_sweep_run,
)

REPO = Path(__file__).resolve().parents[2]
AXES = {"hq": [16, 32], "seqlen": [256, 512]}


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
