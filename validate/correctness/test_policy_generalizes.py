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


def _layouts(rng: random.Random, n: int, lo: int = 1, hi: int = 128) -> list[tuple[int, int]]:
    """``n`` layouts (hq, hkv) drawn inside sm90's ranges: a group of 1 to 16 and ``lo`` to
    ``hi`` query heads, uniformly over groups so the wide ones are drawn as often as MHA."""
    out = []
    while len(out) < n:
        group = rng.randint(1, 16)
        if hi // group < -(-lo // group):
            continue
        hkv = rng.randint(-(-lo // group), hi // group)
        out.append((group * hkv, hkv))
    return out


# (what the call is, its (qo_len, kv_len) drawer, the head_dims, the query heads drawn, the
# arm the policy gives it). Squares from 33 query heads, and long ones under 8, are drawn too:
# they are outside the square scopes (cuDNN led there) and must take the route order, cuDNN,
# not a kernel of ours.
_REGIONS = (
    (
        "chunk",
        lambda r: (r.randint(16, 8192), r.randint(8193, 131072)),
        (64, 128),
        (1, 128),
        "gluon",
    ),
    ("long square", lambda r: (n := r.randint(2048, 32768), n), (64, 128), (8, 32), "gluon"),
    (
        "few-head long square",
        lambda r: (n := r.randint(2048, 32768), n),
        (64, 128),
        (1, 7),
        "sdpa_cudnn",
    ),
    ("short square", lambda r: (n := r.randint(128, 2047), n), (128,), (1, 32), "triton"),
    (
        "many-head square",
        lambda r: (n := r.randint(128, 32768), n),
        (64, 128),
        (33, 128),
        "sdpa_cudnn",
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
_OURS = ("chunk", "long square", "short square", "wide", "wide 96")


def _draws() -> list[tuple[str, Shape, str]]:
    rng = random.Random(SEED)
    cases = []
    for region, lengths, head_dims, (lo, hi), arm in _REGIONS:
        for hq, hkv in _layouts(rng, DRAWS, lo, hi):
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
    # chunk and a long square, bf16. Each takes the Gluon kernel, except a square outside 8 to
    # 32 query heads at head_dim 64 or 128, which takes cuDNN (the square scopes' bounds); no
    # catalog layout at head_dim 96 has more than 64 query heads (the wide-96 scope's bound).
    missed = []
    for model in load_catalog():
        layout = model.tp[tp]
        if layout is None:
            continue
        # Every head_dim the catalog has: 64 and 128 by the chunked and square thresholds, 96
        # and 256 by the two wide ones.
        for qo, kv in ((2048, 16384), (8192, 8192), (64, 16384)):
            shape = Shape(1, qo, kv, *layout, model.head_dim, "bf16", True)
            off_square = qo == kv and not 8 <= layout[0] <= 32 and model.head_dim in (64, 128)
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
