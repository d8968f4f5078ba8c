"""One verdict everywhere: the same cell with the same evidence gets the same word on every
surface (the sweep and demo summaries, ``store show``, ``compare``, the README, docs/backends.md,
the policy regions and the trends), for several runs, judged by one symmetric rule.

Every store here is a FIXTURE in tmp_path: replicate runs of one commit, and a sweep with one
run (its verdicts provisional).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tether.bench.demo import summary_lines
from tether.cli.compare import compare_runs
from tether.cli.store import describe
from tether.render import render_all
from tether.render.context import load_runs
from tether.stats import WHOLE_MAP, aggregate, judge, verdict, verdict_word
from tether.store import harness_fingerprint
from tether.trends import trend_context
from tether_kernels import policy

from validate.suite.runfactory import DEFAULT_FIXED, grid_cells, make_sweep_run

ROOT = Path(__file__).resolve().parents[2]
AXES = {"batch": [1, 4], "seqlen": [1024, 2048, 4096]}
# B's time over A's per cell: below 1 B is faster. One of each word, and one a hair off 1.0.
PER_CELL = {(1, 1024): 0.8, (1, 2048): 1.25, (1, 4096): 0.999, (4, 1024): 1.0, (4, 4096): 0.7}
# The sm90 square threshold and the sweep it cites: the replicated FIXTURE sweep is named for
# it, so its policy region judges the same runs.
SQUARE = next(t for t in policy.POLICY if t.region == "policy-single-prefill-sm90")
REPLICATED = SQUARE.evidence.sweep
# The layout the square threshold's evidence names (its population holds 8 to 32 query heads
# in GQA groups of 1 to 16): without one, no cell of the FIXTURE sweep is in its region.
FIXED = {**DEFAULT_FIXED, "hq": 32}


def test_the_rule_is_symmetric() -> None:
    # A one-sided floor must not make a hair above 1.0 a win (nor below it a loss).
    assert verdict(1.0010, (0.987, 1.000)) == "level"
    assert verdict(0.9990, (1.000, 1.013)) == "level"
    assert verdict(1.02, (0.987, 1.000)) == "win"
    assert verdict(1 / 1.02, (1.000, 1.013)) == "loss"
    # Floor and band compound: inside their product the verdict reads level.
    assert verdict(1.015, (0.99, 1.01), (0.99, 1.01)) == "level"
    assert verdict(1.025, (0.99, 1.01), (0.99, 1.01)) == "win"
    assert verdict_word("win", True) == "faster (provisional)"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    store = tmp_path / "results"
    for seed, started in ((1, "2026-01-01T00:00:00Z"), (2, "2026-01-01T01:00:00Z")):
        cells = grid_cells(
            AXES, FIXED, ratio=0.9, noise=0.004, n=7, seed=seed, per_cell_ratio=PER_CELL
        )
        make_sweep_run(
            name=REPLICATED, axes=AXES, fixed=FIXED, cells=cells, started=started, store=store
        )
    # A sweep of another name with one run: every verdict of it is provisional.
    make_sweep_run(
        name="chunked-prefill",
        axes={"seqlen": [1024, 2048]},
        ratio=0.8,
        noise=0.004,
        seed=3,
        started="2026-01-01T02:00:00Z",
        store=store,
    )
    return store


def _cell_word_in_table(doc: str, heading: str, label: str) -> str:
    section = doc.split(heading, 1)[1].split("\n### ", 1)[0]
    row = next(ln for ln in section.splitlines() if ln.startswith(f"| {label} |"))
    return row.split(" | ")[-2].strip()


@pytest.mark.usefixtures("repo_without_signing")  # renders unsigned FIXTURE runs
def test_every_surface_prints_the_same_word(store: Path) -> None:
    runs = load_runs(store)
    cited = {r.name: max((r for r in runs if r.name == n), key=lambda r: r.started) for n in (REPLICATED, "chunked-prefill") for r in runs if r.name == n}  # fmt: skip
    out = render_all(ROOT, store)
    readme = out[Path("README.md")].decode()
    backends = out[Path("docs/backends.md")].decode()
    policy_file = out[Path("kernels/tether_kernels/policy.py")].decode()
    trends = {p["run"]: p for t in trend_context(runs)["trends"] for p in t["points"]}
    current = harness_fingerprint(ROOT)
    seen_words: set[str] = set()
    readme_rows = 0
    for run in runs:
        stats = judge(run, runs)
        whole = aggregate(stats, WHOLE_MAP)
        summary = "\n".join(summary_lines(run, runs))
        shown = describe(run, current, runs)
        other = next(r for r in runs if r.name == run.name and r.id != run.id) if run.name == REPLICATED else run  # fmt: skip
        compared = {c["cell"]: c for c in compare_runs(run, other, runs=runs)["cells"]}
        # the run-level word: summaries, trends
        assert f"(above 1: B faster): {whole.word}; noise" in summary
        assert trends[run.id]["word"] == whole.word
        for st in stats:
            seen_words.add(st.word)
            line = next(ln for ln in summary.splitlines() if ln.strip().startswith(st.label))
            assert line.rstrip().endswith(st.word), (line, st.word)
            row = next(ln for ln in shown if ln.strip().startswith(st.label))
            assert row.rstrip().endswith(st.word), (row, st.word)
            assert compared[st.label]["verdict_a"] == st.word
            if run is cited[run.name]:
                heading = f"### sm90: {run.name}\n"
                assert _cell_word_in_table(backends, heading, st.label) == st.word
        if run is cited[run.name]:
            assert f"geomean {whole.geomean:.3f} over {whole.count} cells of population whole-map (whole map): {whole.word}, noise {whole.noise[0]:.3f}-{whole.noise[1]:.3f}" in backends  # fmt: skip
            # the README's small table: a row of this sweep shows its whole map's word
            for row in (ln for ln in readme.splitlines() if ln.startswith(f"| {run.name} |")):
                assert row.split(" | ")[2] == f"{whole.geomean:.3f}, {whole.word}", row
                readme_rows += 1
    assert readme_rows == 1  # no configured row ran: sm90's own headline is its one row
    # the words differ between cells, so the equalities above say something
    assert {"faster", "slower", "level", "faster (provisional)"} <= seen_words
    # the policy region judges its own population with the same rule, flagged cells left out
    ev = aggregate(judge(cited[REPLICATED], runs), SQUARE.evidence.population, trusted_only=True)
    region = policy_file.split("BEGIN GENERATED" + ": policy-single-prefill-sm90", 1)[1]
    region = region.split("END GENERATED", 1)[0]
    assert ev.count and f"): {ev.word};" in region
    # and the floor printed is the interval the verdict used
    st = judge(cited[REPLICATED], runs)[0]
    assert st.noise == (st.floor[0] * st.band[0], st.floor[1] * st.band[1])
    assert re.search(r"provisional verdicts: one run", readme + backends)


def test_a_replicate_of_an_h200_sweep_compares_without_differences() -> None:
    # Two prefill-vs-sdpa runs of one commit on the H200, in the project's own store.
    runs = load_runs(ROOT / "results")
    by_id = {r.id: r for r in runs}
    a = by_id.get("20261130T223125Z-sweep-prefill-vs-sdpa-sm90-10a5a170ec73")
    b = by_id.get("20261130T223503Z-sweep-prefill-vs-sdpa-sm90-e6c6dd3275a2")
    if a is None or b is None:
        pytest.skip("the store no longer holds the two H200 replicate runs this test reads")
    doc = compare_runs(a, b, runs=runs)
    assert doc["differs"] == 0 and doc["failing"] == 0
    assert doc["agree"] + doc["too_noisy"] == doc["common"]
