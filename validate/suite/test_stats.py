"""tether.stats against independent numpy computations on FIXTURE samples (never results)."""

from __future__ import annotations

import dataclasses
import statistics

import numpy as np
import pytest
from tether.errors import RunFileError
from tether.policy import WHOLE_MAP, Evidence, Population, Threshold, routed_population
from tether.stats import (
    PREDICATES,
    aa_statistics,
    aggregate,
    cell_stats,
    curve,
    evaluate,
    gate_stat,
    monotonic,
    probe_bounds,
    rate_of,
)
from tether.store.model import Cell, Run

from validate.suite.runfactory import make_cell, make_sweep_run

GATE = Population(name="gate", entry="single_prefill", where=(("qo_len", ">=", 2048),))


def _cell(
    key: dict,
    a: list[float],
    a2: list[float],
    b: list[float],
    batch1: bool = True,
    blocks: tuple[int, ...] = (),
    flags: tuple[str, ...] = (),
) -> Cell:
    """A FIXTURE cell with exact samples (one block unless ``blocks`` splits them)."""
    eps = ["batch_prefill", "single_prefill"] if batch1 else ["batch_prefill"]
    return Cell(
        key=key,
        work=1.0e9,
        samples={"A": tuple(a), "A2": tuple(a2), "B": tuple(b)},
        blocks=blocks,
        reach={"entry_points": eps},
        flags=flags,
    )


_PROTO = make_sweep_run()


def _run(cells: list[Cell], fixed: dict | None = None) -> Run:
    """A FIXTURE run around ``cells`` (built directly: the stats read runs, not files)."""
    return dataclasses.replace(
        _PROTO, id="fixture", config={"grid": {"fixed": fixed or {}}}, cells=tuple(cells)
    )


def test_ratio_is_speedup_of_b_over_a() -> None:
    run = _run([_cell({"seqlen": 256}, [2.0, 2.0, 2.0], [2.0, 2.0, 2.0], [1.0, 1.0, 1.0])])
    (stat,) = cell_stats(run)
    assert stat.ratio == pytest.approx(2.0)
    assert stat.verdict == "win"
    assert stat.floor == (1.0, 1.0)


def test_floor_is_range_of_half_medians_and_includes_one() -> None:
    a, a2 = [1.0, 1.2, 1.1, 1.3], [1.0, 1.0, 1.0, 1.0]
    stats = aa_statistics(a, a2)
    expect = [np.median(a) / 1.0] + [
        np.median(x) / np.median(y) for x in (a[0::2], a[1::2]) for y in (a2[0::2], a2[1::2])
    ]
    assert stats == pytest.approx(expect)
    (stat,) = cell_stats(_run([_cell({"seqlen": 1}, a, a2, [1.1] * 4)]))
    # Symmetric about 1.0: noise seen on one side may fall on the other in the next pass.
    assert stat.floor == pytest.approx((1.0 / max(expect), max(expect)))


def test_floor_tightens_with_more_samples() -> None:
    rng = np.random.default_rng(7)

    def width(n: int) -> float:
        a = list(1.0 + rng.uniform(-0.05, 0.05, n))
        a2 = list(1.0 + rng.uniform(-0.05, 0.05, n))
        (stat,) = cell_stats(_run([_cell({"seqlen": 1}, a, a2, a)]))
        return stat.floor[1] - stat.floor[0]

    assert width(2000) < width(6) / 3


@pytest.mark.parametrize(
    ("b", "verdict"),
    [
        pytest.param(0.5, "win", id="above-floor"),
        pytest.param(1.0, "level", id="inside-floor"),
        pytest.param(2.0, "loss", id="below-floor"),
    ],
)
def test_verdict_against_own_floor(b: float, verdict: str) -> None:
    a, a2 = [1.0, 1.02, 0.98, 1.0], [1.0, 0.99, 1.01, 1.0]
    (stat,) = cell_stats(_run([_cell({"seqlen": 1}, a, a2, [b] * 4)]))
    assert stat.verdict == verdict


def test_aggregate_matches_numpy_and_names_population() -> None:
    run = make_sweep_run(
        axes={"batch": [1, 4], "seqlen": [1024, 2048, 4096]},
        ratio=0.8,
        noise=0.02,
        n=7,
    )
    stats = cell_stats(run)
    agg = aggregate(stats, GATE)
    cells = [
        c for c in run.cells if c.key["batch"] == 1 and c.key["seqlen"] >= 2048
    ]  # the gate population, computed independently
    ratios = [np.median(c.samples["A"]) / np.median(c.samples["B"]) for c in cells]
    assert agg.count == len(cells) == 2
    assert agg.population == "gate"
    assert "single_prefill" in agg.description
    assert agg.geomean == pytest.approx(float(np.exp(np.mean(np.log(ratios)))))
    assert agg.worst is not None and agg.worst.ratio == pytest.approx(min(ratios))
    assert agg.below_one == sum(r < 1 for r in ratios)
    whole = aggregate(stats, WHOLE_MAP)
    assert whole.count == 6


def test_empty_population_has_no_geomean_and_fails_predicates() -> None:
    run = make_sweep_run(axes={"batch": [4], "seqlen": [256]})
    agg = aggregate(cell_stats(run), GATE)
    assert agg.count == 0 and agg.geomean is None
    assert not any(pred(agg) for pred in PREDICATES.values())


def _curve_run(group_ratios: dict[int, float], noise: float) -> Run:
    """Per-group B/A time ratios with A/A noise of +-``noise`` alternating by repetition."""
    cells = []
    for seqlen, r in group_ratios.items():
        a = [1.0 + noise, 1.0 - noise] * 4
        a2 = [1.0 - noise, 1.0 + noise] * 4
        cells.append(_cell({"seqlen": seqlen}, a, a2, [x / r for x in a]))
    return _run(cells)


def test_monotonic_holds_when_a_dip_is_inside_the_floor() -> None:
    # A/A halves differ by about 2*noise, so a dip of 1% lands inside a floor of about 4%.
    run = _curve_run({256: 1.0, 512: 1.2, 1024: 1.188}, noise=0.02)
    claim = monotonic(curve(cell_stats(run)))
    assert claim.axis == "seqlen"
    assert [s.verdict for s in claim.steps] == ["up", "level"]
    assert claim.holds and not claim.breaks


def test_monotonic_breaks_when_a_dip_is_outside_the_floor() -> None:
    run = _curve_run({256: 1.0, 512: 1.2, 1024: 1.0}, noise=0.02)
    claim = monotonic(curve(cell_stats(run)))
    assert not claim.holds
    assert [(b.before, b.after) for b in claim.breaks] == [(512, 1024)]
    assert claim.breaks[0].change == pytest.approx(1.0 / 1.2)


def test_evaluate_reports_each_predicate() -> None:
    run = make_sweep_run(axes={"batch": [1], "seqlen": [2048, 4096]}, ratio=0.5, noise=0.01)
    ev = Evidence(sweep="x", population=GATE, predicates=("geomean_win", "no_loss_outside_floor"))
    alone, why = evaluate(ev, run)
    assert not alone and "provisional: the band rests on 1 run" in why  # one run backs nothing
    twin = make_sweep_run(
        axes={"batch": [1], "seqlen": [2048, 4096]},
        ratio=0.5,
        noise=0.01,
        seed=1,
        started="2025-12-31T00:00:00Z",
    )
    ok, why = evaluate(ev, run, [twin])
    assert ok, why
    assert "geomean_win holds" in why and "2 cells" in why
    slow = make_sweep_run(axes={"batch": [1], "seqlen": [2048, 4096]}, ratio=2.0, noise=0.01)
    ok, why = evaluate(ev, slow)
    assert not ok and "fails" in why
    assert evaluate(ev, None) == (False, "sweep x: not measured")


def test_flagged_cells_are_counted() -> None:
    cells = [
        _cell({"seqlen": 1}, [1.0], [1.0], [1.0]),
        _cell({"seqlen": 2}, [1.0], [1.0], [1.0], flags=("alloc_in_timed_region",)),
    ]
    agg = aggregate(cell_stats(_run(cells)))
    assert agg.flagged == 1
    assert agg.cells[1].flags == ("alloc_in_timed_region",)


def test_cells_come_back_sorted_by_key() -> None:
    cells = [make_cell({"seqlen": s}) for s in (512, 256)]
    assert [s.key["seqlen"] for s in cell_stats(_run(cells))] == [256, 512]


def test_population_compares_two_fields() -> None:
    chunked = Population(name="chunked", where=(("kv_len", ">", "qo_len"),))
    assert chunked.admits({"qo_len": 2048, "kv_len": 4096}, ())
    assert not chunked.admits({"qo_len": 2048, "kv_len": 2048}, ())
    # A string value that is no field name stays a literal.
    bf16 = Population(name="bf16", where=(("dtype", "==", "bf16"),))
    assert bf16.admits({"dtype": "bf16"}, ())
    assert not bf16.admits({"dtype": "f16"}, ())


def test_routed_population_is_the_union_of_the_set_thresholds_regions() -> None:
    ev = Evidence("s", GATE, ("geomean_win",))

    def th(entry: str, scope, takes) -> Threshold:
        return Threshold("r", "sm90", entry, "own", "sdpa", ev, takes=takes, scope=scope)

    square = (("kv_len", "==", "qo_len"),)
    chunked = (("kv_len", ">", "qo_len"),)
    ths = (
        th("single_prefill", square, (("qo_len", ">=", 2048),)),
        th("single_prefill", chunked, (("qo_len", ">=", 128),)),
        th("single_prefill", square, None),  # not set: sends no call anywhere
        th("batch_prefill", square, (("qo_len", ">=", 1),)),  # another entry's
    )
    pop = routed_population("single_prefill", ths)
    one = ("single_prefill",)
    assert pop.admits({"qo_len": 4096, "kv_len": 4096}, one)
    assert pop.admits({"qo_len": 128, "kv_len": 8192}, one)
    assert not pop.admits({"qo_len": 1024, "kv_len": 1024}, one)  # square below its threshold
    assert not pop.admits({"qo_len": 4096, "kv_len": 4096}, ("batch_prefill",))
    assert "or" in pop.describe() and "reachable from single_prefill" in pop.describe()
    # An entry no set threshold speaks for: its region admits no cell.
    none = routed_population("batch_prefill", ths[:3])
    assert not none.admits({"qo_len": 4096, "kv_len": 4096}, ("batch_prefill",))
    assert none.describe().endswith("where none")


def test_rate_of_reads_the_named_role_from_raw_samples() -> None:
    run = make_sweep_run()
    cell = run.cells[0]
    call = dict(cell.key)
    b = rate_of(run, call)
    a = rate_of(run, call, "A")
    assert b is not None and a is not None
    assert b.rate == pytest.approx(cell.work / statistics.median(cell.samples["B"]))
    assert a.rate == pytest.approx(cell.work / statistics.median(cell.samples["A"]))
    blocks = [cell.work / statistics.median(x) for x in cell.block_samples("B")]
    assert b.band == (min(*blocks, b.rate), max(*blocks, b.rate))
    assert rate_of(run, call, "Z") is None
    assert rate_of(run, {**call, "no_such_axis": 1}) is None


def test_a_cell_outside_its_floor_but_inside_its_band_is_level() -> None:
    # Tight A/A (a floor of one) and B a little faster overall, but the two replicate blocks
    # disagree by more than that: the band, not the floor, decides.
    a = [1.0] * 8
    b = [1.0 / 1.07] * 4 + [1.0 / 0.99] * 4  # block 1 at 1.07, block 2 at 0.99
    (level,) = cell_stats(_run([_cell({"seqlen": 1}, a, a, b, blocks=(4, 4))]))
    assert level.floor == (1.0, 1.0) and level.ratio != 1.0
    assert level.band[0] < 1.0 < level.band[1]
    assert level.verdict == "level"
    steady = [1.0 / 1.03] * 8
    (win,) = cell_stats(_run([_cell({"seqlen": 1}, a, a, steady, blocks=(4, 4))]))
    assert win.verdict == "win" and win.band == (1.0, 1.0)


def test_sibling_runs_widen_the_band() -> None:
    base = make_sweep_run(ratio=0.8, noise=0.0005, n=9, seed=1)
    twin = _scaled_b(base, 0, 1.04)  # a replicate run where one cell moved 4 percent
    (first, *_rest) = cell_stats(base, [twin])
    # The replicate's whole-cell ratio and its blocks' (which scatter by the noise) count.
    assert first.band[1] == pytest.approx(1.04, rel=2e-3)
    alone = cell_stats(base)[0]
    assert alone.band[1] < 1.01


def test_a_run_on_another_device_model_is_no_replicate() -> None:
    # Same commit, arch and fingerprints on an H100 and an H200: their spread is the cards'
    # difference, not run-to-run noise, so neither widens the other's band.
    from tether.store.cite import siblings

    base = make_sweep_run(ratio=0.8, noise=0.0005, n=9, seed=1, started="2026-01-01T00:00:00Z")
    twin = make_sweep_run(ratio=0.8, noise=0.0005, n=9, seed=2, started="2026-01-01T01:00:00Z")
    other = make_sweep_run(
        ratio=0.8, noise=0.0005, n=9, seed=3, started="2026-01-01T02:00:00Z", device="other card"
    )
    assert [r.id for r in siblings([base, twin, other], base)] == [twin.id]
    assert siblings([base, other], other) == []


def test_an_unsummarisable_cell_names_the_run_and_the_cell() -> None:
    broken = Cell(key={"seqlen": 7}, work=1.0, samples={"A": (1.0,), "B": (1.0,)})
    with pytest.raises(RunFileError, match=r"cells\[0\]: cell seqlen=7 of run fixture"):
        cell_stats(_run([broken]))


def test_gate_stat_is_recomputed_with_its_band() -> None:
    from validate.suite.runfactory import make_gate_run

    run = make_gate_run(threshold=100e12, measured=120e12)
    stat = gate_stat(run, 100e12)
    assert stat.passed and stat.clear and stat.rate == pytest.approx(120e12)
    assert not gate_stat(run, 130e12).passed


def test_probe_bounds_are_recomputed_per_label() -> None:
    from validate.suite.runfactory import make_probe_run

    bounds = probe_bounds(make_probe_run(bounds={"f16": 700e12, "bf16": 650e12}))
    assert bounds["f16"].rate == pytest.approx(700e12) and bounds["bf16"].rate == pytest.approx(
        650e12
    )


def test_agreement_judges_each_cell_within_both_floors() -> None:
    import dataclasses

    from tether.stats import agreement

    base = make_sweep_run(ratio=0.8, noise=0.001, n=9, seed=1)
    same = make_sweep_run(ratio=0.8, noise=0.001, n=9, seed=1)  # the same samples
    found = agreement(base, same)
    assert found is not None and found.agree == len(found.cells) == len(base.cells)
    # One cell of the other run has B scaled by 1/1.1: that cell, and only it, disagrees.
    first = same.cells[0]
    faster = dataclasses.replace(
        first, samples={**first.samples, "B": tuple(x / 1.1 for x in first.samples["B"])}
    )
    moved = dataclasses.replace(same, cells=(faster, *same.cells[1:]))
    found = agreement(base, moved)
    assert found is not None and found.agree == len(found.cells) - 1
    assert [c.inside for c in found.cells].count(False) == 1
    # Different cells: no verdict at all.
    assert agreement(base, dataclasses.replace(same, cells=same.cells[1:])) is None


def _scaled_b(run, index: int, factor: float):
    """``run`` with cell ``index``'s B samples made ``factor`` times faster (a FIXTURE edit)."""
    import dataclasses

    cell = run.cells[index]
    faster = dataclasses.replace(
        cell, samples={**cell.samples, "B": tuple(x / factor for x in cell.samples["B"])}
    )
    cells = list(run.cells)
    cells[index] = faster
    return dataclasses.replace(run, cells=tuple(cells))


def test_the_run_level_control_widens_each_cell_to_the_run_to_run_band() -> None:
    import math

    from tether.stats import agreement, run_band

    base = make_sweep_run(ratio=0.8, noise=0.001, n=9, seed=1)
    # The control run drifted by a factor 1.02 on its second cell: the band is 1/1.02..1.02.
    control = _scaled_b(base, 1, 1.02)
    band = run_band(base, control)
    assert band is not None and math.isclose(band[1], 1.02) and math.isclose(band[0], 1 / 1.02)
    # The other run moved one cell by a factor 1.01 (outside the floors, inside the band) and
    # another by 1.05 (outside both).
    other = _scaled_b(_scaled_b(base, 0, 1.01), 2, 1.05)
    found = agreement(base, other, control)
    assert found is not None and found.run_band == band and found.control_id == control.id
    assert [c.inside for c in found.cells[:3]] == [False, True, False]
    assert [c.inside_run for c in found.cells[:3]] == [True, True, False]
    assert found.agree_run == len(found.cells) - 1
    # The control itself is outside the floors on the cell it drifted on.
    assert found.control_agree == len(found.cells) - 1
    # Without a control there is no band and no verdict on it.
    plain = agreement(base, other)
    assert plain is not None and plain.run_band is None and plain.agree_run is None
    assert all(c.inside_run is None for c in plain.cells)
    # A control over other cells gives no band.
    import dataclasses

    assert run_band(base, dataclasses.replace(control, cells=control.cells[1:])) is None


def test_a_cells_verdict_is_the_same_whichever_replicate_is_cited() -> None:
    # Seen on the H200: two runs of one commit, a cell at 1.007 in one and 1.014 in the other;
    # judged with the cited run's own floor and blocks it was "level" one way round and "win"
    # the other. Floor and band are now the union over the replicates.
    base = make_sweep_run(ratio=1 / 1.004, noise=0.0005, n=9, seed=1)
    twin = _scaled_b(base, 0, 1 / 1.006)  # the same cell a little faster in the replicate
    for first, second in ((base, twin), (twin, base)):
        assert cell_stats(first, [second])[0].verdict == cell_stats(second, [first])[0].verdict
    assert cell_stats(base, [twin])[0].floor == cell_stats(twin, [base])[0].floor
