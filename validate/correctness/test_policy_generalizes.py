"""The sm90 policy generalizes: a layout that no sweep names, inside the scopes' ranges, lands
on tether's own arm (issue 43).

The scopes state what the kernels serve (GQA groups 1 to 16, up to 128 query heads, the
head_dims they are instantiated for), not the cells the evidence measured. Each run draws a
fresh sample of layouts inside those ranges (the seed is printed, so a failure replays) and
checks the route on the CPU, then, on an sm90 GPU, that single_prefill returns the right
answer for them (replay a seed with TETHER_LAYOUT_SEED=N). Every per-GPU layout of the model
catalog is routed too.
"""

from __future__ import annotations

import hashlib
import os
import random

import pytest
from tether.policy import holds
from tether_kernels import Shape, route, single_prefill
from tether_kernels.policy import thresholds_for
from tether_kernels_plugin.catalog import TP_DEGREES, load_catalog

from validate.correctness._helpers import assert_within_baseline, fresh_seed, make_qkv


def _run_seed() -> int:
    """A fresh seed per test run, the same in every xdist worker (they must collect the same
    parametrization: xdist names the run in PYTEST_XDIST_TESTRUNUID); TETHER_LAYOUT_SEED
    replays a printed one."""
    if "TETHER_LAYOUT_SEED" in os.environ:
        return int(os.environ["TETHER_LAYOUT_SEED"])
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:
        return int(hashlib.sha256(run.encode()).hexdigest()[:8], 16)
    return fresh_seed()


SEED = _run_seed()
DRAWS = 24


@pytest.fixture(autouse=True)
def _gluon_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # The route as it runs on the H200, whose Triton the Gluon kernel is written for; the
    # installed release's refusal is test_gluon_releases.py's subject, not the router's.
    from tether_kernels.gluon import arm as gluon_arm

    monkeypatch.setattr(gluon_arm, "_triton_reason", lambda: None)


def _layouts(
    rng: random.Random, n: int, lo: int = 1, hi: int = 128, groups: tuple[int, int] = (1, 16)
) -> list[tuple[int, int]]:
    """``n`` layouts (hq, hkv) drawn inside sm90's ranges: a group within ``groups`` (1 to 16)
    and ``lo`` to ``hi`` query heads, uniformly over groups so the wide ones are drawn as often
    as MHA."""
    out = []
    while len(out) < n:
        group = rng.randint(*groups)
        if hi // group < -(-lo // group):
            continue
        hkv = rng.randint(-(-lo // group), hi // group)
        out.append((group * hkv, hkv))
    return out


# (what the call is, its (qo_len, kv_len) drawer, the head_dims, the query heads drawn, the
# arm the policy gives it, and optionally the groups drawn). Long squares outside the square
# scopes are drawn too (few heads at head_dim 64, many heads under 8192 queries, in small
# groups or at head_dim 64): they must take the route order, cuDNN, not a kernel of ours.
_LONG = 8192  # policy.SM90_SQUARE_HEADS_MIN_QO, typed here so a change to it fails a test
_REGIONS: tuple[tuple, ...] = (
    (
        "chunk",
        lambda r: (r.randint(16, 8192), r.randint(8193, 131072)),
        (64, 128),
        (1, 128),
        "gluon",
    ),
    ("long square", lambda r: (n := r.randint(2048, 32768), n), (128,), (1, 32), "gluon"),
    ("long square d64", lambda r: (n := r.randint(2048, 32768), n), (64,), (8, 32), "gluon"),
    (
        "few-head long square d64",
        lambda r: (n := r.randint(2048, 32768), n),
        (64,),
        (1, 7),
        "sdpa_cudnn",
    ),
    ("short square", lambda r: (n := r.randint(128, 2047), n), (128,), (1, 32), "triton"),
    (
        "many-head longest square",
        lambda r: (n := r.randint(_LONG, 32768), n),
        (128,),
        (40, 128),
        "gluon",
        (4, 16),
    ),
    (
        "many-head square under 8192",
        lambda r: (n := r.randint(128, _LONG - 1), n),
        (64, 128),
        (33, 128),
        "sdpa_cudnn",
    ),
    (
        "many-head square d64",
        lambda r: (n := r.randint(128, 32768), n),
        (64,),
        (33, 128),
        "sdpa_cudnn",
    ),
    (
        "many-head square in a small group",
        lambda r: (n := r.randint(128, 32768), n),
        (128,),
        (33, 128),
        "sdpa_cudnn",
        (1, 3),
    ),
    ("wide", lambda r: (r.randint(16, 8192), r.randint(16, 65536)), (256,), (1, 128), "gluon"),
    ("wide 96", lambda r: (r.randint(16, 8192), r.randint(16, 65536)), (96,), (1, 64), "gluon"),
    # Past 64 query heads at head_dim 96 the Gluon kernel's MHA cells lost to the Triton
    # kernel (policy._SM90_WIDE96_SCOPE): those calls take it, whatever the group.
    (
        "many-head wide 96",
        lambda r: (r.randint(16, 8192), r.randint(16, 65536)),
        (96,),
        (65, 128),
        "triton",
    ),
)
# The regions whose draws a set threshold of ours scopes (the others take the route order).
_OURS = (
    "chunk",
    "long square",
    "long square d64",
    "short square",
    "many-head longest square",
    "wide",
    "wide 96",
)


def _draws() -> list[tuple[str, Shape, str]]:
    rng = random.Random(SEED)
    cases = []
    for region, lengths, head_dims, (lo, hi), arm, *groups in _REGIONS:
        for hq, hkv in _layouts(rng, DRAWS, lo, hi, *groups):
            qo, kv = lengths(rng)
            dtype = rng.choice(("f16", "bf16"))
            shape = Shape(1, qo, kv, hq, hkv, rng.choice(head_dims), dtype, True)
            cases.append((region, shape, arm))
    return cases


def test_random_layouts_inside_the_scopes_route_to_tethers_arms() -> None:
    print(f"layout sample seed {SEED}")
    wrong = [
        f"{region} {s.key()}: {got}, not {arm}"
        for region, s, arm in _draws()
        if (got := route("single_prefill", s, "sm90")) != arm
    ]
    assert not wrong, f"seed {SEED}: " + "; ".join(wrong[:5])


def test_the_drawn_layouts_fall_inside_a_scope_that_states_ranges() -> None:
    # The draw is what the scopes say: each drawn call is in some set threshold's scope, and
    # that scope holds it through ranges (a scope enumerating the sweeps' pairs would not).
    for region, shape, _arm in _draws():
        if region not in _OURS:
            continue
        scoped = [th for th in thresholds_for("sm90") if th.is_set and th.applies(shape.key())]
        assert scoped, f"{region} {shape.key()} is in no sm90 scope (seed {SEED})"
        assert any(op == "within" for th in scoped for _, op, _ in th.scope), [
            t.region for t in scoped
        ]


@pytest.mark.parametrize("tp", TP_DEGREES)
def test_every_catalog_layout_takes_the_fastest_arm_measured(tp: int) -> None:
    # The calls a serving engine makes for the catalog's models on one GPU: a tiny and a long
    # chunk and a long square, bf16. Each takes the Gluon kernel, except a square outside the
    # square scopes, which takes cuDNN: at head_dim 64 outside 8 to 32 query heads, at 128
    # over 32 heads unless 40 to 128 in groups of 4 to 16 (the catalog's squares are 8192
    # long, where that scope starts); no catalog layout at head_dim 96 has more than 64 query
    # heads (the wide-96 scope's bound).
    missed = []
    for model in load_catalog():
        layout = model.tp[tp]
        if layout is None:
            continue
        # Every head_dim the catalog has: 64 and 128 by the chunked and square thresholds, 96
        # and 256 by the two wide ones.
        for qo, kv in ((2048, 16384), (8192, 8192), (64, 16384)):
            shape = Shape(1, qo, kv, *layout, model.head_dim, "bf16", True)
            hq, group = layout[0], layout[0] // layout[1]
            heads = 40 <= hq <= 128 and 4 <= group <= 16 and qo >= _LONG
            inside = {64: 8 <= hq <= 32, 128: hq <= 32 or heads}.get(model.head_dim, True)
            off_square = qo == kv and not inside
            want = "sdpa_cudnn" if off_square else "gluon"
            if (got := route("single_prefill", shape, "sm90")) != want:
                missed.append(f"{model.name} tp{tp} {layout} q{qo} kv{kv}: {got}, not {want}")
    assert not missed, "; ".join(missed)


def test_layouts_outside_the_ranges_are_not_in_the_gluon_scopes() -> None:
    # A group over 16 or more than 128 query heads is no scope's: those calls take the route
    # order, not an arm no evidence measured there.
    for hq, hkv in ((32, 1), (64, 2), (256, 16), (256, 256)):
        shape = Shape(1, 2048, 16384, hq, hkv, 128, "bf16", True)
        scoped = [th.region for th in thresholds_for("sm90") if th.applies(shape.key())]
        assert not scoped, (hq, hkv, scoped)
        assert not holds((("hq//hkv", "within", (1, 16)), ("hq", "within", (1, 128))), shape.key())


_GPU_DRAWS = [c for c in _draws() if c[1].qo_len * c[1].kv_len * c[1].hq <= 1 << 29][::4]


@pytest.mark.gpu(reason="the policy's arms are GPU kernels; the layouts' f32 references too")
@pytest.mark.parametrize(
    "case",
    [pytest.param(c, id=f"{c[0]}-{c[1].hq}x{c[1].hkv}-d{c[1].head_dim}") for c in _GPU_DRAWS],
)
def test_random_layouts_are_right_through_the_public_api(case: tuple[str, Shape, str]) -> None:
    region, shape, _ = case
    seed = fresh_seed()
    q, k, v = make_qkv(shape, seed)
    out = single_prefill(q[0], k[0], v[0], causal=True)
    assert_within_baseline(
        f"single_prefill {region} (layout seed {SEED})", out[None], shape, q, k, v, seed
    )
