"""tether.render on FIXTURE stores built in tmp_path (never results/): bytes, numbers, marks;
`tether render` never deletes figures it cannot redraw."""

from __future__ import annotations

import dataclasses
import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tether.cli import main
from tether.errors import UnsafeTextError
from tether.render import TemplateError, render_all, write_all
from tether.render.env import make_env, md_cell, render_template
from tether.store import write_run

from validate.suite.fixture_project import run_cli
from validate.suite.runfactory import (
    DEFAULT_FIXED,
    make_not_measured_run,
    make_probe_run,
    make_sweep_run,
    make_verify_run,
    resealed,
    with_b_faster,
)

# Made-up unsigned FIXTURE runs rendered with this repository's templates and config: its
# signing requirement is off for them (what it does is test_signed_evidence's).
pytestmark = pytest.mark.usefixtures("repo_without_signing")


ROOT = Path(__file__).resolve().parents[2]
README = Path("README.md")
BACKENDS = Path("docs/backends.md")
AXES = {"batch": [1, 4], "seqlen": [1024, 2048, 4096]}
# The layout of the sm90 gate region (the first threshold's population: 8 to 32 query heads in
# GQA groups of 1 to 16), so the FIXTURE sweep has cells in it.
FIXED = {**DEFAULT_FIXED, "hq": 32}


def _text(out: dict[Path, bytes], path: Path) -> str:
    return out[path].decode("utf-8")


@pytest.fixture(scope="module")
def sweep_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """FIXTURE store: one sm90 sweep with a gate-region population, a probe and a verify run."""
    store = tmp_path_factory.mktemp("fixture") / "results"
    make_sweep_run(axes=AXES, fixed=FIXED, ratio=0.8, noise=0.02, n=7, store=store)
    make_probe_run(store=store, started="2026-01-01T01:00:00Z")
    make_verify_run(arch="sm90", vendor="cuda", passed=12, skipped=2, store=store)
    return store


def test_empty_store_renders_not_measured(tmp_path: Path) -> None:
    out = render_all(ROOT, tmp_path / "no-results-here")
    readme, backends = _text(out, README), _text(out, BACKENDS)
    for arch in ("sm90", "gfx942", "gfx950", "gfx1151"):
        assert f"### {arch}\n\nNot timed.\n" in readme
        assert f"## {arch}" in backends
    assert "Tested: not measured." in readme
    assert not re.search(r"geomean \d", readme)
    assert not any(p.suffix == ".svg" for p in out)


def test_render_is_deterministic_including_svg(sweep_store: Path) -> None:
    first, second = render_all(ROOT, sweep_store), render_all(ROOT, sweep_store)
    assert first == second
    svgs = [p for p in first if p.suffix == ".svg"]
    assert svgs == [Path("docs/figures/sm90-prefill-vs-sdpa.svg")]
    assert b"<dc:date>" not in first[svgs[0]]


def test_headline_matches_independent_numpy(sweep_store: Path) -> None:
    from tether.store import load_store
    from tether_kernels.policy import thresholds_for

    (run,) = [r for r in load_store(sweep_store) if r.kind == "sweep"]
    # The headline's population is the sm90 policy's first threshold's: batch 1 (reachable from
    # single_prefill), square (seqlen is both lengths) and qo_len from its lower bound on.
    pop = thresholds_for("sm90")[0].evidence.population
    lo = next(v for name, op, v in pop.where if name == "qo_len" and op == ">=")
    gate = [c for c in run.cells if c.key["batch"] == 1 and c.key["seqlen"] >= lo]
    ratios = [np.median(c.samples["A"]) / np.median(c.samples["B"]) for c in gate]
    gm = float(np.exp(np.mean(np.log(ratios))))
    whole = [np.median(c.samples["A"]) / np.median(c.samples["B"]) for c in run.cells]
    out = render_all(ROOT, sweep_store)
    readme, backends = _text(out, README), _text(out, BACKENDS)
    cells = f"{len(gate)} cell" + ("s" if len(gate) != 1 else "")
    gm_whole = float(np.exp(np.mean(np.log(whole))))
    # None of [tool.tether.summary]'s sweeps ran here, so the README's one row is the arch's
    # own headline, its measured sweep: the whole map and the policy's population side by
    # side; the run and the detail are on the backends page (no run id on the front page).
    row = f"| {run.name} | `triton` against `sdpa\\_flash` | {gm_whole:.3f}, "
    assert re.search(re.escape(row) + rf"[^|\n]+ \| {gm:.3f}, [^|\n]+ \|", readme), readme
    assert run.id not in readme
    assert f"geomean {gm:.3f} over {cells} of population {pop.name}" in backends, backends
    assert f"`{run.id}`" in backends and "harness current" in backends
    assert f"geomean {gm_whole:.3f} over {len(whole)} cells of population whole-map" in backends
    assert f"{sum(r < 1 for r in whole)} below 1.00" in backends
    assert "Tested: 12 passed, 0 failed, 2 skipped" in readme
    assert "figures/sm90-prefill-vs-sdpa.svg" in backends
    assert "| seqlen | cells | geomean |" in backends
    assert "\\_attn\\_fwd" in backends  # kernel names pass through md_cell


def test_probe_throughput_against_its_own_bound(sweep_store: Path) -> None:
    from tether.store import load_store

    (probe,) = [r for r in load_store(sweep_store) if r.kind == "probe"]
    backends = _text(render_all(ROOT, sweep_store), BACKENDS)
    for cell in probe.cells:
        dtype = cell.key["dtype"]
        rate = cell.work / float(np.median(cell.samples["B"]))
        b = probe.results["bounds"][dtype]
        bound = b["work"] / float(np.median(b["samples"]))  # its own dtype's bound
        row = (
            f"| dtype={dtype} | {rate / 1e12:.1f} TFLOP/s | {dtype} | {rate / bound * 100:.1f} % |"
        )
        assert row in backends


def test_superseded_run_is_marked(tmp_path: Path) -> None:
    store = tmp_path / "results"
    run = make_sweep_run(axes=AXES)
    write_run(resealed(run, provenance={"harness_fingerprint": "sha256:" + "0" * 64}), store)
    out = render_all(ROOT, store)
    mark = "superseded (harness changed since; re-measure)"
    assert f"| {run.name} ({mark}) |" in _text(out, README)
    assert "harness current" not in _text(out, BACKENDS)
    assert mark in _text(out, BACKENDS)
    assert b"superseded" in out[Path("docs/figures/sm90-prefill-vs-sdpa.svg")]


def test_not_measured_attempt_shows_its_reason(tmp_path: Path) -> None:
    store = tmp_path / "results"
    from tether import project
    from tether.store import GuardRecord

    # An attempt at the project's headline sweep, the first of the README's rows.
    headline = project.get(ROOT).headline
    assert headline is not None
    run = make_not_measured_run(arch="gfx942", name=headline, reason="host busy: lock held")
    record = {"pid": 4242, "user": "ci", "host": "gpu-1"}
    guard = GuardRecord(mode="refused", holder=record, reason="host busy: lock held")
    write_run(resealed(run, guard=guard), store)
    readme = _text(render_all(ROOT, store), README)
    assert "### gfx942\n\nNot timed: the newest attempt, on " in readme
    assert "host busy: lock held; host held by user ci, host gpu-1, pid 4242" in readme


@pytest.mark.devtool("ruff")
def test_policy_regions_render_and_are_ruff_format_fixed_points(tmp_path: Path) -> None:
    from tether_kernels.policy import thresholds_for

    # A FIXTURE run of the sweep the sm90 policy's first threshold cites, over its scope.
    th = thresholds_for("sm90")[0]
    store = tmp_path / "results"
    fixed = {"hq": 32, "hkv": 8, "head_dim": 128, "dtype": "f16", "causal": True}
    arms = {"A": th.otherwise, "B": th.arm}
    make_sweep_run(
        name=th.evidence.sweep, axes=AXES, fixed=fixed, arms=arms, ratio=0.8, store=store
    )
    out = render_all(ROOT, store)
    text = _text(out, Path("kernels/tether_kernels/policy.py"))
    assert f"# sweep {th.evidence.sweep}, population {th.evidence.population.name}" in text
    assert "# sweep prefill-vs-sdpa, population single-prefill-gate" in text
    assert "# cells " in text and " faster, " in text
    assert "# geomean_win: holds" in text or "# geomean_win: does not hold" in text
    assert "# not measured: the store has no guarded ok run of this sweep on gfx942." in text
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", "policy.py", "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    assert formatted == text


@pytest.mark.parametrize(
    "bad", [pytest.param("a|b", id="pipe"), pytest.param("a\nb", id="newline")]
)
def test_md_cell_rejects_table_breakers(bad: str) -> None:
    with pytest.raises(UnsafeTextError):
        md_cell(bad)


def test_md_cell_escapes_markup() -> None:
    assert md_cell("<a>[b]`c`*d*_e_") == "&lt;a&gt;\\[b\\]\\`c\\`\\*d\\*\\_e\\_"


def test_undefined_variable_and_missing_template_are_errors(tmp_path: Path) -> None:
    (tmp_path / "t.md.j2").write_text("{{ nothing_here }}\n", encoding="utf-8")
    env = make_env(tmp_path)
    with pytest.raises(TemplateError, match="nothing_here"):
        render_template(env, "t.md.j2", {})
    with pytest.raises(TemplateError, match=r"absent\.md\.j2"):
        render_template(env, "absent.md.j2", {})


def test_write_all_into_scratch_then_nothing_changes(sweep_store: Path, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    written = write_all(ROOT, sweep_store, out_root=scratch)
    assert README in written and BACKENDS in written
    assert (scratch / README).read_bytes() == render_all(ROOT, sweep_store)[README]
    assert write_all(ROOT, sweep_store, out_root=scratch) == []
    stale = scratch / "docs/figures/gone.svg"
    stale.write_bytes(b"<svg/>")
    assert write_all(ROOT, sweep_store, out_root=scratch) == [Path("docs/figures/gone.svg")]
    assert not stale.exists()


def test_cli_render_out(sweep_store: Path, tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    scratch = tmp_path / "scratch"
    argv = ["--root", str(ROOT), "--store", str(sweep_store), "render", "--out", str(scratch)]
    assert main(argv, out=out, err=err) == 0, err.getvalue()
    assert "rendered" in out.getvalue()
    assert (scratch / "docs/backends.md").is_file()
    out = io.StringIO()
    assert main(argv, out=out, err=err) == 0
    assert "up to date" in out.getvalue()


def test_render_imports_no_torch(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from tether.render import render_all; "
        f"render_all(Path({str(ROOT)!r}), Path({str(tmp_path / 'results')!r})); "
        "sys.exit('torch' in sys.modules or 'triton' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=False).returncode == 0


def test_a_failing_verify_run_is_published_as_failing(tmp_path: Path) -> None:
    store = tmp_path / "results"
    make_verify_run(
        arch="sm90", vendor="cuda", passed=12, started="2026-01-01T00:00:00Z", store=store
    )
    make_verify_run(
        arch="sm90", vendor="cuda", passed=11, failed=1, started="2026-01-02T00:00:00Z", store=store
    )
    readme = _text(render_all(ROOT, store), README)
    # The rejected run's reason beside the verdict: why it failed, in the harness's words.
    assert "Tested: FAILED (FIXTURE: 1 failed, 0 errors), 11 passed, 1 failed" in readme
    assert "Tested: 12 passed" not in readme


def test_the_tested_line_says_when_the_kernels_changed_since(tmp_path: Path) -> None:
    """The Tested line names the verify run's commit and says stale once a kernel file changed
    since it ran (a verify run runs every kernel); a run of the checkout's sources is plain."""
    from tether.store import kernels_fingerprint

    run = make_verify_run(arch="sm90", vendor="cuda", passed=12, root=ROOT)
    current = resealed(
        run, provenance={"git_dirty": False, "kernels_fingerprint": kernels_fingerprint(ROOT)}
    )
    old = resealed(
        run,
        provenance={
            "git_sha": "f" * 40,
            "git_dirty": False,
            "kernels_fingerprint": "sha256:" + "0" * 64,
        },
    )
    for verify, stale in ((current, False), (old, True)):
        store = tmp_path / ("stale" if stale else "fresh") / "results"
        write_run(verify, store)
        line = _text(render_all(ROOT, store), README).split("Tested: ")[1].split("\n")[0]
        assert (
            line.startswith("12 passed")
            and ("(stale: kernel sources changed since)" in line) is stale
        )
        assert (f"git {'f' * 12}" in line) is stale


def test_a_verify_run_cut_off_before_pytest_reported_claims_no_suite(tmp_path: Path) -> None:
    """A verify run whose pytest never reported (killed: no junit xml, recorded as one error)
    is published as failing with its reason, and not as the whole suite having run."""
    store = tmp_path / "results"
    make_verify_run(
        arch="sm90", vendor="cuda", passed=0, errors=1, started="2026-01-02T00:00:00Z",
        store=store,
    )  # fmt: skip
    readme = _text(render_all(ROOT, store), README)
    assert "Tested: FAILED (FIXTURE: 0 failed, 1 errors), no test reported a result, " in readme
    assert "the whole suite" not in readme.split("Tested:")[1].split("\n")[0]


def test_a_sharded_run_is_judged_against_its_unsharded_twin(tmp_path: Path) -> None:

    store = tmp_path / "results"
    make_sweep_run(
        axes=AXES, ratio=0.8, noise=0.0, n=5, started="2026-01-01T00:00:00Z", store=store
    )
    twin = make_sweep_run(axes=AXES, ratio=0.8, noise=0.0, n=5, started="2026-01-01T01:00:00Z")
    sharded = resealed(
        twin,
        cells=tuple(
            dataclasses.replace(c, extra={"gpu": {"index": i % 2, "name": "FIXTURE GPU"}})
            for i, c in enumerate(twin.cells)
        ),
    )
    write_run(sharded, store)
    backends = _text(render_all(ROOT, store), BACKENDS)
    n = len(twin.cells)
    assert (
        f"{n} of {n} cells agree within the product of the two runs' A/A floors and replicate bands."
        in backends
    )


@pytest.mark.parametrize(
    "sharded_started",
    [
        pytest.param("2026-01-01T02:00:00Z", id="sharded-newest"),
        pytest.param("2026-01-01T00:30:00Z", id="sharded-between-the-unsharded-runs"),
    ],
)
def test_a_sharded_run_is_also_judged_against_the_run_to_run_band(
    tmp_path: Path, sharded_started: str
) -> None:

    store = tmp_path / "results"
    first = make_sweep_run(axes=AXES, ratio=0.8, noise=0.0, n=5, started="2026-01-01T00:00:00Z")
    # FIXTURE: the control drifts by a factor 1.03 on one cell, the sharded run by 1.02 on
    # another, so that cell is outside both floors but inside the run-to-run band.
    first = with_b_faster(first, 0, 1.03)
    write_run(first, store)
    twin = make_sweep_run(axes=AXES, ratio=0.8, noise=0.0, n=5, started="2026-01-01T01:00:00Z")
    write_run(twin, store)
    moved = with_b_faster(twin, 1, 1.02)
    sharded = resealed(
        moved,
        provenance={"started": sharded_started, "ended": sharded_started},
        cells=tuple(
            dataclasses.replace(c, extra={"gpu": {"index": i % 2, "name": "FIXTURE GPU"}})
            for i, c in enumerate(moved.cells)
        ),
    )
    write_run(sharded, store)
    backends = _text(render_all(ROOT, store), BACKENDS)
    n = len(twin.cells)
    assert (
        f"{n - 1} of {n} cells agree within the product of the two runs' A/A floors and "
        "replicate bands." in backends
    )
    assert "run-level A/A control" in backends and first.id in backends
    assert (
        f"agree within the product of their own floors and bands on {n - 1} of {n} cells"
        in backends
    )
    assert f"{n} of {n} cells of the sharded run lie inside their floors or that band" in backends
    assert "no more than two unsharded runs differ from each other" in backends
    assert f"Sharded across GPUs: run `{sharded.id}`" in backends


def test_a_raised_gate_does_not_inherit_the_old_runs_pass() -> None:
    from tether.policy import Gate
    from tether.render.context import gate_doc

    from validate.suite.runfactory import make_gate_run

    # FIXTURE: the newest gate run passed a threshold of 100 with 120; the gate now asks 150.
    latest = make_gate_run(name="fixture-gate", threshold=100e12, measured=120e12)
    call = {"seqlen": 4096}
    raised = Gate("fixture-gate", "gate-fixture", "sm90", "triton", "attention", call, 150e12)
    doc = gate_doc([latest], raised, current="sha256:none")
    assert doc.latest_stat is not None and not doc.latest_stat.passed  # judged against today's
    assert doc.latest_threshold == 100e12  # and the threshold of its day is shown
    same = Gate("fixture-gate", "gate-fixture", "sm90", "triton", "attention", call, 100e12)
    doc = gate_doc([latest], same, current="sha256:none")
    assert doc.latest_threshold is None and doc.latest_stat is not None and doc.latest_stat.passed


@pytest.mark.parametrize(
    ("ratio", "verdict"),
    [
        # The FIXTURE's ratio is B's time over A's: below 1 means B is faster.
        pytest.param(0.8, "B faster than A beyond the noise", id="faster"),
        pytest.param(1.25, "B slower than A beyond the noise", id="slower"),
    ],
)
def test_each_sweep_section_states_its_verdict_from_the_data(
    tmp_path: Path, ratio: float, verdict: str
) -> None:
    store = tmp_path / "results"
    make_sweep_run(axes=AXES, ratio=ratio, noise=0.0, n=5, store=store)
    backends = _text(render_all(ROOT, store), BACKENDS)
    assert f"- Verdict over the whole map: {verdict}" in backends


# -- render never deletes what it cannot redraw -------------------------------------------------


def _rendered_project(project: Path) -> Path:
    shutil.copytree(ROOT / "docs_src", project / "docs_src")
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
    shutil.copytree(ROOT / "docs_src", project / "docs_src")
    rc, out, err = run_cli(project, "render")
    assert rc == 0, err
    assert (project / "README.md").is_file() and "rendered" in out


def test_the_policys_region_of_a_sweep_is_the_one_its_cells_answer_for() -> None:
    """A threshold's evidence sweep: that threshold's population; an entry-point sweep (B an
    entry point): the cells the policy sends to tether's kernels; any other: the gate region."""
    from tether.policy import Evidence, Population, Threshold
    from tether.render.context import _region_of

    from validate.suite.runfactory import make_sweep_run

    gate = Population(name="gate", entry="single_prefill", where=(("qo_len", ">=", 2048),))
    chunked = Population(name="chunked", entry="single_prefill", where=(("qo_len", ">=", 128),))
    ths = (
        Threshold("a", "sm90", "single_prefill", "own", "sdpa", Evidence("ev-sq", gate, ()),
                  takes=(("qo_len", ">=", 2048),), scope=(("kv_len", "==", "qo_len"),)),
        Threshold("b", "sm90", "single_prefill", "own", "sdpa", Evidence("ev-ch", chunked, ()),
                  takes=(("qo_len", ">=", 128),), scope=(("kv_len", ">", "qo_len"),)),
    )  # fmt: skip
    runs = [
        make_sweep_run(name="api", arms={"A": "peer", "B": "single_prefill"}),
        make_sweep_run(name="arms", arms={"A": "sdpa", "B": "own"}),
    ]
    assert _region_of(runs, "sm90", "ev-ch", ths, gate) is chunked
    routed = _region_of(runs, "sm90", "api", ths, gate)
    assert routed.name == "routed-single_prefill"
    assert routed.admits({"qo_len": 256, "kv_len": 4096}, ("single_prefill",))
    assert not routed.admits({"qo_len": 1024, "kv_len": 1024}, ("single_prefill",))
    assert _region_of(runs, "sm90", "arms", ths, gate) is gate
    assert _region_of(runs, "sm90", "never-run", ths, gate) is gate
