"""The policy vocabulary's fields: pairs such as ``hq/hkv``, and the check's coverage of every
combination a threshold's scope routes. Pure: no GPU, no store."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tether.check import coverage_gaps
from tether.errors import UsageError
from tether.policy import (
    Evidence,
    Population,
    Threshold,
    describe,
    field_value,
    holds,
    shape_fields,
)

PAIRS = ("32/8", "32/32", "8/1")


def test_a_pair_field_is_both_fields_joined() -> None:
    fields = {"hq": 32, "hkv": 8}
    assert field_value(fields, "hq/hkv") == "32/8"
    assert holds((("hq/hkv", "in", PAIRS),), fields)
    assert not holds((("hq/hkv", "in", PAIRS),), {"hq": 32, "hkv": 4})
    assert holds((("hq/hkv", "==", "8/1"),), {"hq": 8, "hkv": 1})
    # A missing part fails the condition, as a missing field does.
    assert not holds((("hq/hkv", "in", PAIRS),), {"hq": 32})


def test_a_pair_axis_sets_both_fields() -> None:
    full = shape_fields({"hq/hkv": "8/1", "qo_len": 128}, {"head_dim": 64})
    assert (full["hq"], full["hkv"], full["head_dim"]) == (8, 1, 64)
    assert field_value(full, "hq/hkv") == "8/1"


@pytest.mark.parametrize(
    ("key", "fixed", "says"),
    [
        ({"hq/hkv": "32"}, {}, "does not give one value per field"),
        ({"hq/hkv": "32/"}, {}, "does not give one value per field"),
        ({"hq/hkv": "32/8"}, {"hq": 16}, "sets hq = 32, but hq is 16 already"),
    ],
)
def test_a_bad_pair_value_is_a_usage_error_naming_it(
    key: dict[str, object], fixed: dict[str, object], says: str
) -> None:
    with pytest.raises(UsageError, match="hq/hkv") as err:
        shape_fields(key, fixed)
    assert says in str(err.value)


def _threshold(*scope: tuple[str, str, object]) -> Threshold:
    return Threshold(
        region="r",
        arch="sm90",
        entry="single_prefill",
        arm="gluon",
        otherwise="sdpa_cudnn",
        evidence=Evidence("s", Population("p"), ("geomean_win",)),
        takes=(("qo_len", ">=", 128),),
        scope=scope,
    )


def _cells(*fields: dict[str, object]) -> list[SimpleNamespace]:
    return [SimpleNamespace(fields={"qo_len": 128, **f}) for f in fields]


def test_coverage_asks_for_every_combination_the_scope_routes() -> None:
    th = _threshold(("head_dim", "in", (64, 128)), ("hq/hkv", "in", ("32/8", "8/1")))
    every_value = _cells(
        {"head_dim": 64, "hq": 32, "hkv": 8},
        {"head_dim": 128, "hq": 8, "hkv": 1},
    )
    gaps = coverage_gaps(th, every_value)  # type: ignore[arg-type]
    assert gaps == [
        "head_dim=64, hq/hkv=8/1; head_dim=128, hq/hkv=32/8 routed but no evidence cell has "
        "that combination"
    ]
    full = every_value + _cells(
        {"head_dim": 64, "hq": 8, "hkv": 1}, {"head_dim": 128, "hq": 32, "hkv": 8}
    )
    assert coverage_gaps(th, full) == []  # type: ignore[arg-type]


def test_coverage_names_a_value_no_cell_has() -> None:
    th = _threshold(("hq/hkv", "in", PAIRS))
    gaps = coverage_gaps(th, _cells({"hq": 32, "hkv": 8}, {"hq": 8, "hkv": 1}))  # type: ignore[arg-type]
    assert gaps == ["hq/hkv 32/32 is routed but no evidence cell has it"]


# --- ranges: a scope stating what a kernel serves (issue 43) -------------------------------


def test_a_ratio_field_is_defined_only_where_it_divides() -> None:
    assert field_value({"hq": 28, "hkv": 4}, "hq//hkv") == 7
    assert field_value({"hq": 32, "hkv": 32}, "hq//hkv") == 1
    for fields in ({"hq": 30, "hkv": 4}, {"hq": 8}, {"hq": 8, "hkv": 0}, {"hq": "8", "hkv": 1}):
        assert not holds((("hq//hkv", ">=", 1),), fields), fields


def test_within_is_an_inclusive_range() -> None:
    group = (("hq//hkv", "within", (1, 16)),)
    assert holds(group, {"hq": 16, "hkv": 1}) and holds(group, {"hq": 8, "hkv": 8})
    assert not holds(group, {"hq": 32, "hkv": 1})
    assert describe(group) == "hq//hkv within 1 to 16"


@pytest.mark.parametrize(
    ("groups", "missing"),
    [
        ((1, 4, 16), None),
        ((1, 16), "hq//hkv strictly between 1 and 16"),
        ((4, 16), "hq//hkv = 1"),
        ((1, 4), "hq//hkv = 16"),
        ((8,), "hq//hkv = 1, hq//hkv = 16"),
        ((32,), "hq//hkv = 1, hq//hkv = 16, hq//hkv strictly between 1 and 16"),
    ],
)
def test_coverage_asks_a_range_for_both_ends_and_a_cell_inside(
    groups: tuple[int, ...], missing: str | None
) -> None:
    th = _threshold(("hq//hkv", "within", (1, 16)))
    gaps = coverage_gaps(th, _cells(*({"hq": g * 2, "hkv": 2} for g in groups)))  # type: ignore[arg-type]
    if missing is None:
        assert gaps == []
    else:
        assert gaps == [
            f"hq//hkv within 1 to 16 is routed but the evidence does not span it: no cell at "
            f"{missing}"
        ]


def test_a_range_is_spanned_only_by_cells_inside_it() -> None:
    # A cell outside the range (group 32) is no evidence for its upper end.
    th = _threshold(("hq//hkv", "within", (1, 16)))
    cells = _cells({"hq": 1, "hkv": 1}, {"hq": 8, "hkv": 2}, {"hq": 32, "hkv": 1})
    assert coverage_gaps(th, cells) != []  # type: ignore[arg-type]


def test_a_malformed_range_is_a_gap_naming_it() -> None:
    th = _threshold(("hq//hkv", "within", (1, 8, 16)))
    gaps = coverage_gaps(th, _cells({"hq": 8, "hkv": 2}))  # type: ignore[arg-type]
    assert gaps == ["hq//hkv within (1, 8, 16) is not a range (lo, hi) of numbers"]
