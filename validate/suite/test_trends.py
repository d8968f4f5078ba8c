"""Nightly trends (tether.trends) over FIXTURE histories built with validate/suite/runfactory.py."""

from __future__ import annotations

import pytest
from tether.store import Run
from tether.trends import change_between, trend_context, trend_figures, trend_svg

from validate.suite.runfactory import make_not_measured_run, make_sweep_run

AXES = {"hq": [16, 32], "seqlen": [256, 512]}


def _night(day: int, ratio: float, arch: str = "sm90", seed: int = 0) -> Run:
    # FIXTURE: B's time is A's times ``ratio``, so the headline is about 1/ratio; each night
    # is its own commit (a nightly of the day's main), so consecutive nights are not replicates.
    return make_sweep_run(
        axes=AXES,
        arch=arch,
        ratio=ratio,
        noise=0.002,
        seed=seed + day,
        started=f"2026-11-{day:02d}T02:00:00Z",
        git_sha=f"{day:040x}",
    )


def test_steady_history_has_no_change() -> None:
    runs = [_night(d, 0.9) for d in (1, 2, 3)]
    ctx = trend_context(runs)
    (trend,) = ctx["trends"]
    assert (trend["arch"], trend["sweep"]) == ("sm90", "prefill-vs-sdpa")
    assert trend["measured"] == 3
    assert [p["started"] for p in trend["points"]] == sorted(p["started"] for p in trend["points"])
    assert trend["changes"] == []
    assert trend["latest"]["geomean"] == pytest.approx(1 / 0.9, rel=0.02)


def test_a_drop_beyond_the_floor_names_both_commits() -> None:
    old, new = _night(1, 0.9), _night(2, 1.2)
    (trend,) = trend_context([new, old])["trends"]  # input order must not matter
    (change,) = trend["changes"]
    assert change["direction"] == "down"
    assert (change["from_run"], change["to_run"]) == (old.id, new.id)
    assert change["from_sha"] == old.provenance.git_sha
    assert change["to_sha"] == new.provenance.git_sha
    assert change["ratio"] < change["noise"][0]


def test_change_inside_the_floor_and_band_is_level() -> None:
    old = {
        "geomean": 1.10, "floor": [0.99, 1.01], "band": [0.97, 1.03], "run": "a",
        "git_sha": "x", "harness": "h",
    }  # fmt: skip
    new = dict(old, geomean=1.13, run="b")  # outside the floor, inside floor x band
    assert change_between(old, new) is None
    assert change_between(old, dict(new, geomean=1.20))["direction"] == "up"
    # The sweep's run-to-run band widens the noise further.
    assert change_between(old, dict(new, geomean=1.20), band=(0.9, 1.1)) is None


def test_only_guarded_runs_are_points_and_not_measured_nights_are_gaps() -> None:
    from validate.suite.runfactory import UNGUARDED

    runs = [
        _night(1, 0.9),
        make_not_measured_run(started="2026-11-02T02:00:00Z", reason="host busy: fixture"),
        make_sweep_run(axes=AXES, ratio=2.0, started="2026-11-02T03:00:00Z", guard=UNGUARDED),
        _night(3, 0.9),
    ]
    (trend,) = trend_context(runs)["trends"]
    assert len(trend["points"]) == 2  # the refusal and the unguarded run are no points
    assert trend["changes"] == []


def test_sharded_and_unsharded_runs_trend_apart() -> None:
    import dataclasses

    plain = _night(1, 0.9)
    cells = tuple(
        dataclasses.replace(c, extra={"gpu": {"index": i % 2}}) for i, c in enumerate(plain.cells)
    )
    sharded = make_sweep_run(axes=AXES, cells=cells, started="2026-11-02T02:00:00Z")
    trends = trend_context([plain, sharded, _night(3, 0.9)])["trends"]
    assert [(t["sharded"], len(t["points"])) for t in trends] == [(False, 2), (True, 1)]


def test_two_replicate_runs_of_one_setup_report_no_change() -> None:
    # The same commit and harness twice, with independent noise: no change, cell or headline.
    from tether.stats import agreement

    a = make_sweep_run(
        axes=AXES, ratio=0.9, noise=0.004, n=7, seed=11, started="2026-11-01T02:00:00Z"
    )
    b = make_sweep_run(
        axes=AXES, ratio=0.9, noise=0.004, n=7, seed=12, started="2026-11-01T03:00:00Z"
    )
    (trend,) = trend_context([a, b])["trends"]
    assert trend["changes"] == []
    found = agreement(a, b)
    assert found is not None and found.agree == len(found.cells)


def test_one_trend_per_arch_and_sweep_and_svg_is_deterministic() -> None:
    runs = [_night(1, 0.9), _night(2, 0.9), _night(1, 0.8, arch="gfx942")]
    ctx = trend_context(runs)
    assert [(t["arch"], t["sweep"]) for t in ctx["trends"]] == [
        ("gfx942", "prefill-vs-sdpa"),
        ("sm90", "prefill-vs-sdpa"),
    ]
    figures = trend_figures(runs)
    assert set(figures) == {t["figure"] for t in ctx["trends"]}
    svg = figures["trend-sm90-prefill-vs-sdpa.svg"]
    assert svg.startswith("<?xml") and "<dc:date>" not in svg
    assert trend_svg(ctx["trends"][1]) == svg


def test_a_store_without_guarded_sweeps_has_no_trend() -> None:
    assert trend_context([make_not_measured_run()])["trends"] == []


def test_consecutive_replicates_are_never_a_change() -> None:
    # Seen on the H200: two runs of one commit whose whole-map geomeans differ by 2.5 percent
    # (load on the host's other GPU) were reported as a change. Replicates of one setup are the
    # run-to-run band itself.
    a = make_sweep_run(axes=AXES, ratio=0.9, noise=0.0005, n=7, seed=11,
                       started="2026-11-01T02:00:00Z")  # fmt: skip
    b = make_sweep_run(axes=AXES, ratio=0.9 / 1.025, noise=0.0005, n=7, seed=12,
                       started="2026-11-01T03:00:00Z")  # fmt: skip
    (trend,) = trend_context([a, b])["trends"]
    assert trend["changes"] == []


@pytest.mark.parametrize("differs", ["device", "grid"])
def test_runs_of_another_grid_or_device_are_not_compared(differs: str) -> None:
    # A whole-map geomean over another grid, or from another GPU, describes another population:
    # the move between them (here far beyond the noise) is a break in the series, not a change.
    old = _night(1, 0.9)
    kwargs = {"device": "NVIDIA H100 80GB HBM3"} if differs == "device" else {}
    axes = AXES if differs == "device" else {"hq": [16, 32, 64], "seqlen": [256, 512]}
    new = make_sweep_run(
        axes=axes, ratio=1.2, noise=0.002, seed=2, started="2026-11-02T02:00:00Z",
        git_sha=f"{2:040x}", **kwargs,
    )  # fmt: skip
    (trend,) = trend_context([old, new])["trends"]
    assert trend["changes"] == []
    (gap,) = trend["breaks"]
    assert (gap["from_run"], gap["to_run"]) == (old.id, new.id)
    assert ("device" in gap["why"]) == (differs == "device")
    # The same pair on one device and grid is a change: the break is what hid it.
    same = make_sweep_run(
        axes=AXES, ratio=1.2, noise=0.002, seed=2, started="2026-11-02T02:00:00Z",
        git_sha=f"{2:040x}",
    )  # fmt: skip
    (trend,) = trend_context([old, same])["trends"]
    assert trend["breaks"] == [] and len(trend["changes"]) == 1
