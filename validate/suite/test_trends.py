"""Nightly trends (tether.trends) over FIXTURE histories built with validate/suite/runfactory.py."""

from __future__ import annotations

import pytest
from tether.store import Run
from tether.trends import change_between, trend_context, trend_figures, trend_svg

from validate.suite.runfactory import make_not_measured_run, make_sweep_run

AXES = {"hq": [16, 32], "seqlen": [256, 512]}


def _night(day: int, ratio: float, arch: str = "sm90", seed: int = 0) -> Run:
    # FIXTURE: B's time is A's times ``ratio``, so the headline is about 1/ratio.
    return make_sweep_run(
        axes=AXES,
        arch=arch,
        ratio=ratio,
        noise=0.002,
        seed=seed + day,
        started=f"2026-11-{day:02d}T02:00:00Z",
    )


def test_steady_history_has_no_change() -> None:
    runs = [_night(d, 0.9) for d in (1, 2, 3)]
    ctx = trend_context(runs)
    (trend,) = ctx["trends"]
    assert (trend["arch"], trend["sweep"]) == ("sm90", "prefill-triton-vs-sdpa")
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
    assert change["from_sha"] == old.provenance["git_sha"]
    assert change["to_sha"] == new.provenance["git_sha"]
    assert change["ratio"] < change["floor"][0]


def test_change_inside_the_floor_is_level() -> None:
    old = {"geomean": 1.10, "floor": [0.97, 1.03], "run": "a", "git_sha": "x", "harness": "h"}
    new = dict(old, geomean=1.12, run="b")
    assert change_between(old, new) is None
    assert change_between(old, dict(new, geomean=1.20))["direction"] == "up"


def test_not_measured_night_is_a_gap_not_a_change() -> None:
    runs = [
        _night(1, 0.9),
        make_not_measured_run(started="2026-11-02T02:00:00Z", reason="host busy: fixture"),
        _night(3, 0.9),
    ]
    (trend,) = trend_context(runs)["trends"]
    assert [p["status"] for p in trend["points"]] == ["ok", "not_measured", "ok"]
    assert trend["points"][1]["reason"] == "host busy: fixture"
    assert trend["points"][1]["geomean"] is None
    assert trend["changes"] == []


def test_one_trend_per_arch_and_sweep_and_svg_is_deterministic() -> None:
    runs = [_night(1, 0.9), _night(2, 0.9), _night(1, 0.8, arch="gfx942")]
    ctx = trend_context(runs)
    assert [(t["arch"], t["sweep"]) for t in ctx["trends"]] == [
        ("gfx942", "prefill-triton-vs-sdpa"),
        ("sm90", "prefill-triton-vs-sdpa"),
    ]
    figures = trend_figures(runs)
    assert set(figures) == {t["figure"] for t in ctx["trends"]}
    svg = figures["figures/trend-sm90-prefill-triton-vs-sdpa.svg"]
    assert svg.startswith("<?xml") and "<dc:date>" not in svg
    assert trend_svg(ctx["trends"][1]) == svg


def test_empty_trend_renders_not_measured() -> None:
    (trend,) = trend_context([make_not_measured_run()])["trends"]
    assert "not measured" in trend_svg(trend)
