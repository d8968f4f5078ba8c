"""Render follow-ups: sweeps cited from the store, the cpu demo section, trends, why not measured.

Every store here is a FIXTURE built by validate/suite/runfactory.py in a temp folder.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from tether import project
from tether.render import render_all
from tether.stats import cell_stats
from tether.store import Run, write_run

from validate.suite.runfactory import (
    make_not_measured_run,
    make_sweep_run,
    make_verify_run,
    resealed,
)

# Made-up unsigned FIXTURE runs rendered with this repository's templates and config: its
# signing requirement is off for them (what it does is test_signed_evidence's).
pytestmark = pytest.mark.usefixtures("repo_without_signing")


ROOT = Path(__file__).resolve().parents[2]
README = Path("README.md")
BACKENDS = Path("docs/backends.md")
CPU_AXES = {"hq": [2, 4], "seqlen": [64, 128, 256]}
CPU_FIXED = {"batch": 1, "hkv": 2, "head_dim": 64, "dtype": "f32", "causal": True}
HEADLINE = project.get(ROOT).headline  # the [tool.tether] headline sweep


def _text(out: dict[Path, bytes], path: Path) -> str:
    return out[path].decode("utf-8")


def _line(readme: str, arch: str) -> str:
    """The README's section of ``arch``: what lies between its heading and the next one."""
    part = readme.split(f"\n### {arch}\n\n", 1)[1]
    return re.split(r"\n#{2,3} |\nTested: ", part, maxsplit=1)[0].strip()


def test_cpu_demo_store_gets_a_cpu_section_with_its_headline(tmp_path: Path) -> None:
    store = tmp_path / "results"
    run = make_sweep_run(
        name="cpu-demo", arch="cpu", axes=CPU_AXES, fixed=CPU_FIXED, ratio=0.8, store=store
    )
    out = render_all(ROOT, store)
    readme, backends = _text(out, README), _text(out, BACKENDS)
    line = _line(readme, "cpu")
    # Independent recomputation: geomean of median(A)/median(B) over every cell.
    ratios = [np.median(c.samples["A"]) / np.median(c.samples["B"]) for c in run.cells]
    geomean = float(np.exp(np.mean(np.log(ratios))))
    # No configured comparison ran on the cpu: its own headline sweep is its one row, its
    # whole map first (the cpu has no policy, so its region is the whole map too).
    row = f"| cpu-demo | `triton` against `sdpa\\_flash` | {geomean:.3f}, faster"
    assert row in line and f"| {geomean:.3f}, faster" in line.split(row, 1)[1]
    assert "not measured" not in line and run.id not in readme
    assert re.search(r"A/A floor \d\.\d{3}-\d\.\d{3}", backends)
    assert "## cpu" in backends and "### cpu: cpu-demo" in backends
    # The cpu arch lists only what the store holds; the listed arches keep the headline sweep.
    cpu_part = backends.split("## cpu", 1)[1]
    assert HEADLINE is not None and HEADLINE not in cpu_part
    for arch in ("sm90", "gfx942", "gfx950", "gfx1151"):
        assert f"### {arch}: {HEADLINE}\n" in backends
        assert "cpu-demo" not in _line(readme, arch)
    assert Path("docs/figures/cpu-cpu-demo.svg") in out


def test_no_cpu_runs_no_cpu_section(tmp_path: Path) -> None:
    store = tmp_path / "results"
    make_sweep_run(store=store)
    out = render_all(ROOT, store)
    assert "## cpu" not in _text(out, BACKENDS)
    assert "### cpu" not in _text(out, README)


def test_other_sweeps_on_a_gpu_arch_follow_the_headline(tmp_path: Path) -> None:
    store = tmp_path / "results"
    make_sweep_run(name="deferred-rescale-square", arch="gfx942", store=store)
    backends = _text(render_all(ROOT, store), BACKENDS)
    part = backends.split("## gfx942", 1)[1].split("## gfx950", 1)[0]
    order = [m.group(1) for m in re.finditer(r"^### gfx942: (\S+)$", part, re.M)]
    assert order == [HEADLINE, "deferred-rescale-square", "probe", "gates"]
    assert "deferred-rescale-square" not in backends.split("## gfx942", 1)[0]


def test_trend_part_needs_two_runs(tmp_path: Path) -> None:
    store = tmp_path / "results"
    make_sweep_run(ratio=0.9, started="2026-11-01T02:00:00Z", store=store)
    out = render_all(ROOT, store)
    assert "Trend: one guarded run, no trend yet." in _text(out, BACKENDS)
    assert not any(p.name.startswith("trend-") for p in out)
    # A second nightly, far faster: a trend, a flagged change naming both runs, a figure.
    make_sweep_run(ratio=0.5, seed=1, started="2026-11-02T02:00:00Z", git_sha="2" * 40, store=store)
    out = render_all(ROOT, store)
    backends = _text(out, BACKENDS)
    assert "Trend over 2 guarded runs" in backends
    assert re.search(r"- up by \d\.\d{3} \(noise [^)]*\) from `[^`]+` \(git \w+\) to", backends)
    figure = Path("docs/figures/trend-sm90-prefill-vs-sdpa.svg")
    assert figure in out and out[figure].startswith(b"<?xml")
    assert "(figures/trend-sm90-prefill-vs-sdpa.svg)" in backends


def test_steady_trend_says_no_change(tmp_path: Path) -> None:
    store = tmp_path / "results"
    for day in (1, 2, 3):
        # Same seed: the same samples every night, so the headline does not move at all.
        make_sweep_run(ratio=0.9, started=f"2026-11-0{day}T02:00:00Z", store=store)
    backends = _text(render_all(ROOT, store), BACKENDS)
    assert "Trend over 3 guarded runs" in backends
    assert "no change beyond the noise" in backends


def test_not_measured_arch_shows_why(tmp_path: Path) -> None:
    store = tmp_path / "results"
    make_not_measured_run(
        kind="verify",
        name="guard-hold",
        arch="gfx942",
        reason="host busy: 2 foreign GPU processes",
        started="2026-11-03T02:00:00Z",
        store=store,
    )
    make_not_measured_run(
        kind="verify",
        name="verify-rocm",
        arch="gfx942",
        reason="an older refusal",
        started="2026-11-01T02:00:00Z",
        store=store,
    )
    out = render_all(ROOT, store)
    line = _line(_text(out, README), "gfx942")
    assert line.startswith("Not timed: verify `guard-hold` on 2026-11-03, not measured: host busy")
    assert "older refusal" not in line
    assert "Nothing on gfx942 is measured yet" in _text(out, BACKENDS)
    assert _line(_text(out, README), "sm90") == "Not timed."


def test_an_ok_run_on_the_arch_hides_the_why(tmp_path: Path) -> None:
    store = tmp_path / "results"
    make_not_measured_run(kind="verify", name="guard-hold", arch="sm90", store=store)
    make_verify_run(arch="sm90", vendor="cuda", started="2026-01-02T00:00:00Z", store=store)
    out = render_all(ROOT, store)
    assert _line(_text(out, README), "sm90") == "Not timed."
    assert "Nothing on sm90 is measured yet" not in _text(out, BACKENDS)


def test_rejected_run_is_a_reason_too(tmp_path: Path) -> None:
    store = tmp_path / "results"
    run = make_not_measured_run(kind="verify", name="nightly", arch="gfx1151", reason="x")
    write_run(resealed(run, status="rejected", reason="host sent a truncated file"), store)
    line = _line(_text(render_all(ROOT, store), README), "gfx1151")
    assert "verify `nightly` on 2026-01-01, rejected: host sent a truncated file" in line


def test_headline_uses_the_same_stats_as_the_cells(tmp_path: Path) -> None:
    # Guard against the cpu headline drifting from the per-cell table of the same run.
    store = tmp_path / "results"
    run = make_sweep_run(name="cpu-demo", arch="cpu", axes=CPU_AXES, fixed=CPU_FIXED, store=store)
    stats = cell_stats(run)
    backends = _text(render_all(ROOT, store), BACKENDS)
    for cell in stats:
        assert f"| {cell.ratio:.3f} |" in backends


# -- routing regret: B against the fastest of several A arms (issue 43 item 3) ---------------

REGRET_AXIS = "hq/hkv/head_dim/qo_len/kv_len/dtype"
REGRET_CALLS = ["32/8/128/1/4096/bf16", "8/1/64/128/128/f16", "28/4/128/8192/8192/bf16"]
REGRET_FIXED = {"batch": 1, "causal": True}


def _regret_run(
    arm: str, calls: list[str], ratio: float, seed: int, store: Path | None = None
) -> Run:
    return make_sweep_run(
        name=f"api-regret-{arm}",
        axes={REGRET_AXIS: calls},
        fixed=REGRET_FIXED,
        ratio=ratio,
        seed=seed,
        arms={"A": arm, "B": "single_prefill"},
        store=store,
    )


def test_fastest_a_takes_each_calls_lowest_ratio() -> None:
    from tether.stats import fastest_a

    # B's time is A's times ``ratio``: gluon takes less time than the public call on every
    # call (A/B 0.8), triton more (A/B 2), and triton times two of the three calls only.
    gluon = _regret_run("gluon", REGRET_CALLS, 1.25, 0)
    triton = _regret_run("triton", REGRET_CALLS[:2], 0.5, 1)
    got = fastest_a({"gluon": cell_stats(gluon), "triton": cell_stats(triton)})
    assert len(got) == 3 and {c.arm for c in got} == {"gluon"}
    assert sorted(c.arms for c in got) == [1, 2, 2]
    assert all(0.75 < c.stat.ratio < 0.85 and c.stat.verdict == "loss" for c in got)
    # The other way round the lower ratio is triton's where it timed the call.
    got = fastest_a({"gluon": cell_stats(triton), "triton": cell_stats(gluon)})
    assert {c.arm for c in got} == {"triton"}


def test_routing_regret_renders_the_lowest_ratio_per_call(tmp_path: Path) -> None:
    store = tmp_path / "results"
    gluon = _regret_run("gluon", REGRET_CALLS, 0.8, 0, store)  # public: A/B 1.25
    triton = _regret_run("triton", REGRET_CALLS[:2], 1.1, 1, store)  # public: A/B 0.91
    backends = _text(render_all(ROOT, store), BACKENDS)
    section = backends.split("### sm90: routing regret\n", 1)[1].split("\n### ", 1)[0]
    # Independent recomputation: per call the lowest median(A)/median(B) over the runs.
    per_call: dict[str, float] = {}
    for run in (gluon, triton):
        for c in run.cells:
            r = float(np.median(c.samples["A"]) / np.median(c.samples["B"]))
            label = c.key[REGRET_AXIS]
            per_call[label] = min(per_call.get(label, r), r)
    geomean = float(np.exp(np.mean(np.log(list(per_call.values())))))
    assert f"geomean {geomean:.3f} over 3 cells" in section
    assert "`sdpa_cudnn`" not in section and "Not measured on sm90: `api-regret-cudnn`" in section
    assert "`gluon` 1, `triton` 2" in section
