"""``route`` against the arms' declarations, over generated shapes on every arch (hypothesis).

Pure: no tensor is made and no arm runs. What the declarations say about each backend is
checked by the routed-API suite (test_routed_api.py), which calls the entry points as users do.
"""

from __future__ import annotations

import dataclasses
import os

import pytest
from tether.errors import TetherError, UsageError
from tether_kernels import (
    ARCHES,
    ENTRY_POINTS,
    Ragged,
    Shape,
    reachable_entry_points,
    route,
    routing,
)
from tether_kernels.archs import ARCH_ARMS, PER_REQUEST, ROUTE_ORDER
from tether_kernels.arms import ARMS, get_arm
from tether_kernels.policy import thresholds_for
from tether_kernels.routing import candidates, per_request_refusal, policy_choice
from tether_kernels.serves import (
    HEAD_DIMS_POW2,
    HEAD_DIMS_SDPA,
    HEAD_DIMS_TRITON,
    Serves,
    describe_dims,
    has_keyless_rows,
    tile_head_dim,
)
from tether_kernels.shapes import Call

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ModuleNotFoundError:  # the dev extra; CI installs it, so there a missing one must fail
    if os.environ.get("CI"):
        raise
    pytest.skip(
        "hypothesis (the dev extra) is not installed: pip install -e '.[dev]'",
        allow_module_level=True,
    )

# The lengths the routed-API suite names, so generated shapes hit every boundary often.
NAMED_LENGTHS = (1, 2, 3, 17, 63, 64, 65, 127, 128, 129, 239, 799, 1023, 1024, 1025, 2048, 4096)
lengths = st.one_of(st.sampled_from(NAMED_LENGTHS), st.integers(1, 1 << 20))
head_dims = st.one_of(st.sampled_from(HEAD_DIMS_SDPA), st.integers(1, 512))


@pytest.fixture(autouse=True)
def _gluon_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Routing is tested as it runs on the H200, whose Triton is the release the Gluon kernel
    # is written for; on this host's Triton the gluon arm would step aside (tested in
    # test_gluon.py), which would test the installed Triton, not the router.
    from tether_kernels.gluon import arm as gluon_arm

    monkeypatch.setattr(gluon_arm, "_triton_reason", lambda: None)


@st.composite
def shapes(draw: st.DrawFn) -> Shape:
    hkv = draw(st.sampled_from((1, 2, 8, 32)) | st.integers(1, 128))
    group = draw(st.sampled_from((1, 4, 8)) | st.integers(1, 16))
    return Shape(
        batch=draw(st.sampled_from((1, 2, 4)) | st.integers(1, 4096)),
        qo_len=draw(lengths),
        kv_len=draw(lengths),
        hq=hkv * group,
        hkv=hkv,
        head_dim=draw(head_dims),
        dtype=draw(st.sampled_from(("f16", "bf16", "f32"))),
        causal=draw(st.booleans()),
    )


PROPERTY = settings(
    max_examples=400,
    deadline=None,
    # monkeypatch sets the interpreter variable once for every example; that is the point.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
INTERPRETER = [pytest.param("1", id="interpreter"), pytest.param("", id="no-interpreter")]


@pytest.mark.parametrize("interpret", INTERPRETER)
@PROPERTY
@given(
    shape=shapes(),
    arch=st.sampled_from(ARCHES),
    entry=st.sampled_from(ENTRY_POINTS),
    return_lse=st.booleans(),
)
def test_route_follows_the_declarations(
    shape: Shape, arch: str, entry: str, return_lse: bool, interpret: str, monkeypatch
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    if entry not in reachable_entry_points(shape):
        with pytest.raises(UsageError, match=r"batch 1 only|ragged_prefill takes a Ragged call"):
            route(entry, shape, arch, return_lse=return_lse)
        return
    arm = _routed_or_refused(entry, shape, arch, return_lse)
    if arm is None:
        return
    assert arm in ARCH_ARMS[arch]
    serves = get_arm(arm).serves[arch]
    assert serves.refusal(shape, need_lse=return_lse) is None
    assert not has_keyless_rows(shape) or serves.keyless_rows is None
    assert not return_lse or serves.lse


def _routed_or_refused(entry: str, call: Call, arch: str, return_lse: bool) -> str | None:
    """Route is total over its candidates: it takes the first whose declaration covers the
    call (returned), or refuses with a UsageError naming each one's unmet constraint (None);
    never another error for a valid call."""
    reasons = {
        name: routing.refusal(name, call, arch, need_lse=return_lse)
        for name in candidates(entry, call, arch)
    }
    try:
        arm = route(entry, call, arch, return_lse=return_lse)
    except UsageError as exc:
        assert all(r is not None for r in reasons.values()), (call, arch, reasons)
        for name, reason in reasons.items():
            assert f"{name}: {reason}" in str(exc)
        return None
    except TetherError as exc:  # never ArmUnavailableError or another error for a valid call
        pytest.fail(f"route raised {type(exc).__name__} for {call.key()} on {arch}: {exc}")
    assert arm == next(name for name, r in reasons.items() if r is None)
    return arm


@pytest.mark.parametrize("arch", [pytest.param(a, id=a) for a in ARCHES])
@PROPERTY
@given(shape=shapes(), entry=st.sampled_from(ENTRY_POINTS), return_lse=st.booleans())
def test_every_ordinary_call_gets_an_arm(
    shape: Shape, entry: str, return_lse: bool, arch: str, monkeypatch
) -> None:
    # The space the library promises: head_dims multiples of 8 up to 256 (with the LSE too,
    # which only the Triton kernel returns), within the kernel's grid and 32-bit offsets;
    # bf16 with the LSE is GPU only (the interpreter's bf16 dot).
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if entry not in reachable_entry_points(shape) or shape.batch * shape.hq > 65535:
        return
    dims = HEAD_DIMS_TRITON if return_lse else HEAD_DIMS_SDPA
    elements = shape.batch * max(shape.qo_len * shape.hq, shape.kv_len * shape.hkv)
    if shape.head_dim not in dims or elements * shape.head_dim >= 2**31:
        return
    if return_lse and arch == "cpu" and shape.dtype == "bf16":
        return
    arm = route(entry, shape, arch, return_lse=return_lse)
    assert get_arm(arm).supports(shape, arch, need_lse=return_lse) is None


# --- Ragged batches (ragged_prefill): one launch where an arm takes it, else per_request -----


@st.composite
def raggeds(draw: st.DrawFn) -> Ragged:
    shape = draw(shapes())
    batch = draw(st.integers(1, 6))
    qo = tuple(draw(lengths) for _ in range(batch))
    kv = tuple(draw(st.sampled_from((*qo, *NAMED_LENGTHS))) for _ in range(batch))
    return Ragged(qo, kv, shape.hq, shape.hkv, shape.head_dim, shape.dtype, shape.causal)


@pytest.mark.parametrize("interpret", INTERPRETER)
@PROPERTY
@given(
    call=raggeds(), arch=st.sampled_from(ARCHES), entry=st.sampled_from(ENTRY_POINTS),
    return_lse=st.booleans(),
)  # fmt: skip
def test_ragged_routes_follow_the_declarations(
    call: Ragged, arch: str, entry: str, return_lse: bool, interpret: str, monkeypatch
) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    if entry != "ragged_prefill":
        with pytest.raises(UsageError, match="ragged_prefill's"):
            route(entry, call, arch, return_lse=return_lse)
        return
    assert candidates(entry, call, arch)[-1] == PER_REQUEST
    arm = _routed_or_refused(entry, call, arch, return_lse)
    if arm is None:
        return
    if arm == PER_REQUEST:
        # Every request has a single_prefill route of its own.
        for request in call.requests():
            route("single_prefill", request, arch, return_lse=return_lse)
        return
    # One launch: an arm that takes a ragged batch and serves every request of it.
    serves = get_arm(arm).serves[arch]
    assert serves.ragged
    for request in call.requests():
        assert serves.refusal(request, need_lse=return_lse) is None


def test_sm90_sends_ragged_batches_in_the_policys_scope_to_the_gluon_kernel() -> None:
    lens = (256, 512, 768, 1024)
    call = Ragged(lens, lens, 32, 8, 128, "bf16", True)
    assert route("ragged_prefill", call, "sm90") == "gluon"
    assert route("ragged_prefill", call, "sm90", return_lse=True) == "gluon"
    # The scope's other batches: short requests, serving steps (one-token rows, chunks over a
    # cached prefix), the ends of its head ranges.
    for inside in (
        dataclasses.replace(call, qo_lens=(64, 200), kv_lens=(64, 200)),
        dataclasses.replace(call, qo_lens=(1, 75, 768, 1), kv_lens=(300, 600, 768, 1100)),
        dataclasses.replace(call, hq=4, hkv=1),
        dataclasses.replace(call, hq=64, hkv=8, head_dim=64, dtype="f16"),
    ):
        assert route("ragged_prefill", inside, "sm90") == "gluon", inside
    # Outside the scope or below its bounds: each request as single_prefill routes it.
    for other in (
        dataclasses.replace(call, qo_lens=(100,), kv_lens=(100,)),  # batch 1
        dataclasses.replace(call, qo_lens=(300, 600), kv_lens=(100, 200)),  # keys fewer
        dataclasses.replace(call, hkv=32),  # MHA
        dataclasses.replace(call, hq=128, hkv=8),  # more query heads than the scope
        dataclasses.replace(call, dtype="f32"),
    ):
        assert route("ragged_prefill", other, "sm90") == PER_REQUEST, other
    for arch in ("gfx942", "gfx950", "gfx1151", "cpu"):
        assert route("ragged_prefill", call.__class__(lens, lens, 8, 2, 64, "f16"), arch) == (
            PER_REQUEST
        )


def test_a_ragged_batch_no_arm_serves_names_the_request() -> None:
    call = Ragged((64, 64), (64, 64), 8, 2, 20, "f16", True)
    with pytest.raises(UsageError, match="no arm on sm90 serves") as exc:
        route("ragged_prefill", call, "sm90")
    assert "per_request: request 0 (64 x 64): single_prefill: no arm on sm90" in str(exc.value)
    assert per_request_refusal(call.__class__((64,), (64,), 8, 2, 64, "f16"), "sm90") is None
    with pytest.raises(UsageError, match="takes a Ragged call"):
        route("ragged_prefill", Shape(1, 64, 64, 8, 2, 64, "f16"), "sm90")


# --- What issue 11 found on the H200 (each failed on the router before it) --------------

KEYLESS = [
    pytest.param(Shape(1, 512, 256, 8, 2, 128, "f16", True), id="q512-kv256"),
    pytest.param(Shape(1, 1024, 1023, 8, 8, 64, "bf16", True), id="q1024-kv1023"),
    pytest.param(Shape(2, 799, 3, 8, 1, 128, "f16", True), id="b2-q799-kv3"),
]


@pytest.mark.parametrize("shape", KEYLESS)
def test_sm90_keeps_causal_calls_with_keyless_rows_off_cudnn(shape: Shape) -> None:
    for entry in reachable_entry_points(shape):
        assert route(entry, shape, "sm90") == "triton"
        # The same lengths without the causal mask have no such rows: cuDNN serves them.
        assert route(entry, shape.with_(causal=False), "sm90") == "sdpa_cudnn"


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(Shape(1, 1, 1, 8, 8, 128, "f16", True), id="q1-kv1"),
        pytest.param(Shape(1, 239, 1, 8, 2, 64, "bf16", False), id="q239-kv1-full"),
    ],
)
def test_sm90_sends_kv_len_1_to_the_kernel_that_serves_it(shape: Shape) -> None:
    for entry in reachable_entry_points(shape):
        assert route(entry, shape, "sm90") == "triton"
    assert "kv_len 1 is below 2" in get_arm("sdpa_cudnn").supports(shape, "sm90")


def test_a_call_no_arm_serves_is_a_usage_error_naming_each_constraint() -> None:
    shape = Shape(1, 64, 64, 8, 2, 20, "f16", True)
    with pytest.raises(UsageError, match="no arm on sm90 serves") as exc:
        route("single_prefill", shape, "sm90")
    for name in ROUTE_ORDER["sm90"]:
        assert f"{name}: head_dim 20 is not one of" in str(exc.value)
    # Beyond the Triton kernel's grid (batch x hq over 65535) only the math backend serves,
    # and it returns no LSE.
    wide = Shape(2, 16, 16, 40000, 8, 64, "f16", True)
    with pytest.raises(UsageError, match="sdpa_math: does not return the log-sum-exp"):
        route("batch_prefill", wide, "sm90", return_lse=True)
    assert route("batch_prefill", wide, "sm90") == "sdpa_math"


def test_head_dims_no_sdpa_arm_serves_go_to_the_triton_kernel_even_with_keyless_rows() -> None:
    shape = Shape(1, 300, 100, 8, 2, 96, "f16", True)  # keyless rows too
    # 32 query heads over one KV head: a GQA group of 32, outside the Gluon kernel's scope
    # (groups 1 to 16), so sm90 too takes the route order, whose first arm serving d96 is Triton.
    wide_group = Shape(1, 300, 100, 32, 1, 96, "f16", True)
    assert route("single_prefill", wide_group, "sm90") == "triton"
    assert route("single_prefill", shape, "gfx942") == "triton"


def test_policy_arm_comes_first_and_the_route_order_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chunked = Shape(1, 2048, 16384, 32, 8, 128, "f16", True)
    unset = dataclasses.replace(thresholds_for("sm90")[0], takes=None, scope=())
    is_set = dataclasses.replace(unset, takes=(("qo_len", ">=", 1024),))
    for th, first in ((unset, "sdpa_cudnn"), (is_set, "gluon")):
        monkeypatch.setattr(routing, "thresholds_for", lambda arch, entry, th=th: (th,))
        assert policy_choice("single_prefill", chunked, "sm90") == first
        want = tuple(dict.fromkeys((first, *ROUTE_ORDER["sm90"])))
        assert candidates("single_prefill", chunked, "sm90") == want
    # gluon does not serve f32: the route order answers, the policy's arm first only in name.
    assert route("single_prefill", chunked.with_(dtype="f32"), "sm90") == "triton"
    monkeypatch.undo()
    assert policy_choice("batch_prefill", chunked, "sm90") is None
    assert candidates("batch_prefill", chunked, "sm90") == ROUTE_ORDER["sm90"]
    assert policy_choice("single_prefill", chunked, "cpu") is None


# --- The declarations themselves ---------------------------------------------------------


def test_every_arm_declares_what_it_serves_on_each_arch_it_runs_on() -> None:
    for name, arm in ARMS.items():
        for arch in arm.arches:
            assert arch in ARCHES and name in ARCH_ARMS[arch], (name, arch)
            assert isinstance(arm.serves[arch], Serves)
    for arch, order in ROUTE_ORDER.items():
        for name in order:
            assert arch in ARMS[name].serves, f"{name} is routed on {arch} but not declared"


def test_known_gpu_limits_are_declared_with_their_reason() -> None:
    cudnn = ARMS["sdpa_cudnn"].serves["sm90"]
    assert cudnn.keyless_rows is not None and "wrong values" in cudnn.keyless_rows
    assert cudnn.min_kv_len == 2 and "kv_len 1" in cudnn.why["min_kv_len"]
    for name in ("sdpa_flash", "sdpa_efficient"):
        assert ARMS[name].serves["sm90"].keyless_rows is not None
    # What the CPU suite checks: the CPU flash kernel and math give keyless rows 0.
    assert ARMS["sdpa_flash"].serves["cpu"].keyless_rows is None
    assert ARMS["sdpa_math"].serves["cpu"].keyless_rows is None
    for arch in ARCHES:
        assert ARMS["triton"].serves[arch].keyless_rows is None
        assert ARMS["triton"].serves[arch].lse


def test_a_declaration_refuses_with_the_value_and_the_reason() -> None:
    serves = Serves(
        ("f16",), (64,), "kernel", gqa=False, min_kv_len=2, why={"min_kv_len": "refused there"}
    )
    base = Shape(1, 8, 8, 2, 2, 64, "f16", True)
    assert serves.refusal(base) is None
    assert serves.refusal(base.with_(dtype="f32")) == "dtype f32 is not one of f16"
    assert "head_dim 128 is not one of 64" in serves.refusal(base.with_(head_dim=128))
    assert "GQA (2 query heads on 1 kv heads)" in serves.refusal(base.with_(hkv=1))
    assert serves.refusal(base.with_(kv_len=1)) == "kv_len 1 is below 2 (refused there)"
    assert "log-sum-exp" in serves.refusal(base, need_lse=True)
    assert describe_dims(HEAD_DIMS_SDPA) == "8..256 step 8"
    assert describe_dims(HEAD_DIMS_POW2) == "16, 32, 64, 128, 256"
    with pytest.raises(ValueError, match="why"):
        Serves(("f16",), None, "kernel", why={"typo": "x"})
    with pytest.raises(ValueError, match="bottom_right"):
        Serves(("f16",), None, "upper_left")


# --- Issue 24: every head_dim a model uses gets the LSE, through the Triton kernel ---------


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("head_dim", [pytest.param(d, id=f"d{d}") for d in (8, 40, 96, 200, 248)])
def test_sm90_serves_the_lse_at_head_dims_that_are_not_powers_of_two(
    head_dim: int, dtype: str
) -> None:
    # Phi-3-mini's head_dim 96 with return_lse was refused on sm90 in every dtype and length.
    # Both of tether's kernels return it: the Gluon kernel where the wide threshold takes the
    # call (96 in f16 or bf16, single_prefill, from 16 queries), else the Triton kernel.
    for qo, kv in ((4096, 4096), (2048, 16384), (17, 65), (65, 17), (9, 65)):
        shape = Shape(1, qo, kv, 32, 8, head_dim, dtype, True)
        for entry in reachable_entry_points(shape):
            wide = head_dim == 96 and dtype != "f32" and qo >= 16 and entry == "single_prefill"
            assert route(entry, shape, "sm90", return_lse=True) == ("gluon" if wide else "triton")


@pytest.mark.parametrize("arch", [pytest.param(a, id=a) for a in ARCHES if a != "cpu"])
def test_head_dims_no_sdpa_arm_serves_go_to_the_triton_kernel(arch: str) -> None:
    # Before issue 24 these went to PyTorch's math backend (the Triton tile was a power of
    # two); route order puts the Triton kernel ahead of it. 32 query heads over one KV head
    # (a GQA group of 32) is outside sm90's Gluon scope, so sm90 takes the route order too.
    shape = Shape(1, 512, 512, 32, 1, 96, "f16", True)
    assert get_arm("sdpa_math").supports(shape, arch) is None
    assert route("single_prefill", shape, arch) == "triton"


def test_sm90_head_dim_256_without_a_causal_mask_takes_the_triton_kernel() -> None:
    # Outside the wide threshold's scope (its evidence is causal): the route order, in which
    # cuDNN does not serve 256 and the Triton kernel does.
    shape = Shape(1, 2048, 2048, 32, 8, 256, "bf16", False)
    assert get_arm("sdpa_cudnn").supports(shape, "sm90") is not None
    assert route("single_prefill", shape, "sm90") == "triton"


def test_tile_head_dim() -> None:
    assert [tile_head_dim(d) for d in (8, 16, 24, 96, 128, 136, 256)] == [
        16, 16, 32, 128, 128, 256, 256,
    ]  # fmt: skip
    with pytest.raises(ValueError, match="264"):
        tile_head_dim(264)


@pytest.mark.parametrize(
    ("shape", "arm"),
    [
        # Chunked: Gluon at head_dim 64 and 128, any layout of GQA group 1 to 16 and up to 128
        # query heads, from 16 queries.
        (Shape(1, 128, 4096, 8, 1, 64, "f16", True), "gluon"),
        (Shape(1, 1024, 32768, 32, 32, 64, "bf16", True), "gluon"),
        (Shape(1, 300, 5000, 32, 32, 128, "bf16", True), "gluon"),
        (Shape(1, 16, 16384, 32, 8, 128, "bf16", True), "gluon"),
        # Layouts no sweep names, inside the ranges: Qwen3-30B (32/4), Qwen2.5-14B at TP 8 (5/1),
        # Phi-4 (40/10), Llama-405B (128/8).
        (Shape(1, 1024, 32768, 32, 4, 64, "bf16", True), "gluon"),
        (Shape(1, 2048, 16384, 5, 1, 128, "bf16", True), "gluon"),
        (Shape(1, 2048, 16384, 40, 10, 128, "f16", True), "gluon"),
        (Shape(1, 2048, 16384, 128, 8, 128, "bf16", True), "gluon"),
        # Outside them: a group of 32, 256 query heads, fewer than 16 queries: the route order.
        (Shape(1, 2048, 16384, 32, 1, 128, "bf16", True), "sdpa_cudnn"),
        (Shape(1, 2048, 16384, 256, 16, 128, "bf16", True), "sdpa_cudnn"),
        (Shape(1, 8, 16384, 32, 8, 128, "bf16", True), "sdpa_cudnn"),
        # Short squares: Triton at head_dim 128 for every layout in range; not at 64.
        (Shape(1, 512, 512, 8, 1, 128, "bf16", True), "triton"),
        (Shape(1, 1024, 1024, 32, 32, 128, "f16", True), "triton"),
        (Shape(1, 1024, 1024, 28, 4, 128, "bf16", True), "triton"),
        (Shape(1, 512, 512, 8, 1, 64, "bf16", True), "sdpa_cudnn"),
        # Long squares: Gluon at head_dim 64 and 128, MHA included, from 8 to 32 query heads;
        # outside them the route order (cuDNN led there); short squares up to 32.
        (Shape(1, 4096, 4096, 8, 1, 128, "bf16", True), "gluon"),
        (Shape(1, 2048, 2048, 32, 32, 128, "bf16", True), "gluon"),
        (Shape(1, 4096, 4096, 28, 4, 64, "f16", True), "gluon"),
        (Shape(1, 4096, 4096, 64, 8, 64, "f16", True), "sdpa_cudnn"),
        (Shape(1, 1024, 1024, 40, 8, 128, "bf16", True), "sdpa_cudnn"),
        (Shape(1, 16384, 16384, 1, 1, 64, "f16", True), "sdpa_cudnn"),
        (Shape(1, 1024, 1024, 1, 1, 128, "f16", True), "triton"),
        (Shape(1, 4096, 4096, 64, 2, 128, "f16", True), "sdpa_cudnn"),
        # head_dim 96 and 256 (cuDNN serves neither here): Gluon, chunked and square, every
        # layout in range, from 16 queries; below that the Triton kernel (the threshold's
        # otherwise).
        (Shape(1, 128, 16384, 8, 1, 256, "f16", True), "gluon"),
        (Shape(1, 4096, 4096, 32, 8, 96, "bf16", True), "gluon"),
        (Shape(1, 1000, 8000, 32, 32, 96, "f16", True), "gluon"),
        (Shape(1, 100, 8000, 32, 32, 96, "f16", True), "gluon"),
        (Shape(1, 2048, 2048, 16, 8, 256, "bf16", True), "gluon"),
        (Shape(1, 5000, 5000, 32, 8, 256, "bf16", True), "gluon"),
        (Shape(1, 8, 4096, 32, 8, 256, "bf16", True), "triton"),
    ],
)
def test_sm90_policy_scopes_route_the_heads_and_head_dims_their_evidence_covers(
    shape: Shape, arm: str
) -> None:
    # The first candidate: the policy's arm, or (no threshold in scope) the route order's.
    assert candidates("single_prefill", shape, "sm90")[0] == arm
