"""single_prefill and batch_prefill: results, input checks, and agreement with route()."""

from __future__ import annotations

import pytest
import torch
from tether.errors import UnknownArchError, UsageError
from tether.policy import Threshold
from tether.pytest_plugin import current_arch, interpreter_on
from tether_kernels import (
    ARCHES,
    ENTRY_POINTS,
    Ragged,
    Shape,
    archs,
    batch_prefill,
    policy,
    prefill,
    reachable_entry_points,
    route,
    single_prefill,
)
from tether_kernels.arms import attention_ref

from validate.correctness._helpers import assert_within_baseline, fresh_seed, make_qkv

CAUSAL = [pytest.param(True, id="causal"), pytest.param(False, id="full")]
BATCH = [pytest.param(1, id="b1"), pytest.param(4, id="b4")]


@pytest.fixture(autouse=True)
def _gluon_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # Routing is tested as it runs on the H200, whose Triton is the release the Gluon kernel
    # is written for; on this host's Triton the gluon arm would step aside (tested in
    # test_gluon.py), which would test the installed Triton, not the router.
    from tether_kernels.gluon import arm as gluon_arm

    monkeypatch.setattr(gluon_arm, "_triton_reason", lambda: None)


@pytest.mark.parametrize("causal", CAUSAL)
def test_single_prefill_matches_reference(causal: bool) -> None:
    shape = Shape(1, 24, 56, 4, 2, 64, "f32", causal)
    seed = fresh_seed()
    q, k, v = make_qkv(shape, seed)
    out = single_prefill(q[0], k[0], v[0], causal=causal)
    assert out.shape == q[0].shape
    assert_within_baseline("single_prefill", out[None], shape, q, k, v, seed)


@pytest.mark.parametrize("batch", BATCH)
@pytest.mark.parametrize("causal", CAUSAL)
def test_batch_prefill_matches_reference(batch: int, causal: bool) -> None:
    shape = Shape(batch, 20, 44, 4, 2, 64, "f32", causal)
    seed = fresh_seed()
    q, k, v = make_qkv(shape, seed)
    out = batch_prefill(q, k, v, causal=causal)
    assert_within_baseline("batch_prefill", out, shape, q, k, v, seed)


def test_custom_scale_reaches_the_arm() -> None:
    shape = Shape(1, 16, 32, 2, 2, 64, "f32", True)
    q, k, v = make_qkv(shape, fresh_seed())
    out = single_prefill(q[0], k[0], v[0], sm_scale=0.05)
    ref = attention_ref(q, k, v, True, sm_scale=0.05)[0]
    assert (out - ref).abs().max().item() <= 1e-5


@pytest.mark.triton
def test_single_prefill_returns_lse() -> None:
    shape = Shape(1, 16, 48, 4, 2, 64, "f32", True)
    q, k, v = make_qkv(shape, fresh_seed())
    out, lse = single_prefill(q[0], k[0], v[0], return_lse=True)
    ref, ref_lse = attention_ref(q, k, v, True, return_lse=True)
    assert lse.shape == (4, 16)
    assert (lse - ref_lse[0]).abs().max().item() <= 1e-5
    assert (out - ref[0]).abs().max().item() <= 1e-5


def test_single_prefill_rejects_batched_input() -> None:
    q = torch.randn(2, 8, 2, 64)
    with pytest.raises(UsageError, match="batch is 1"):
        single_prefill(q, q, q)


def test_mismatched_dtypes_are_a_usage_error() -> None:
    q = torch.randn(8, 2, 64)
    with pytest.raises(UsageError, match="dtypes differ"):
        single_prefill(q, q.half(), q.half())


def test_route_rejects_unknown_arch_and_batched_single_prefill() -> None:
    with pytest.raises(UnknownArchError, match="sm80"):
        route("single_prefill", Shape(1, 8, 8, 2, 2, 64), "sm80")
    with pytest.raises(UsageError, match="batch 1 only"):
        route("single_prefill", Shape(4, 8, 8, 2, 2, 64), "sm90")
    with pytest.raises(UsageError, match="unknown entry point"):
        route("decode", Shape(1, 8, 8, 2, 2, 64), "sm90")


def test_reachable_entry_points() -> None:
    assert reachable_entry_points(Shape(1, 8, 8, 2, 2, 64)) == ("single_prefill", "batch_prefill")
    assert reachable_entry_points(Shape(4, 8, 8, 2, 2, 64)) == ("batch_prefill",)
    assert reachable_entry_points(Ragged((8, 3), (8, 3), 2, 2, 64)) == ("ragged_prefill",)
    assert set(ENTRY_POINTS) == {"single_prefill", "batch_prefill", "ragged_prefill"}


ROUTE_SHAPES = [
    pytest.param(Shape(1, 2048, 16384, 32, 8, 128, "f16", True), id="chunk-2k-16k-f16"),
    pytest.param(Shape(1, 256, 256, 32, 32, 64, "bf16", True), id="sq256-mha-bf16"),
    pytest.param(Shape(1, 64, 64, 8, 2, 64, "f32", False), id="sq64-gqa-f32"),
]


@pytest.mark.parametrize("shape", ROUTE_SHAPES)
@pytest.mark.parametrize("arch", [pytest.param(a, id=a) for a in ARCHES])
def test_single_prefill_calls_the_routed_arm(arch: str, shape: Shape, monkeypatch) -> None:
    called: list[str] = []

    def record(plan, q, k, v):
        called.append(plan.arm)
        return q

    monkeypatch.setattr(prefill, "_run_plan", record)
    # Meta tensors: the shapes are full size, but nothing is allocated or computed; they
    # stand for tensors on a device of ``arch`` (the entry points refuse meta tensors).
    monkeypatch.setattr(prefill, "_device_arch", lambda device: arch)
    dtype = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}[shape.dtype]
    q = torch.empty(shape.qo_len, shape.hq, shape.head_dim, dtype=dtype, device="meta")
    kv = torch.empty(shape.kv_len, shape.hkv, shape.head_dim, dtype=dtype, device="meta")
    single_prefill(q, kv, kv, causal=shape.causal, arch=arch)
    assert called == [route("single_prefill", shape, arch)]
    batch_prefill(q[None], kv[None], kv[None], causal=shape.causal, arch=arch)
    assert called[1] == route("batch_prefill", shape, arch)


def test_conservative_policy_routes_to_the_sdpa_arm(monkeypatch) -> None:
    # The policy every arch starts from before the store holds evidence for it.
    unset = tuple(_set(th, takes=None) for th in policy.POLICY)
    monkeypatch.setattr(policy, "POLICY", unset)
    shape = Shape(1, 2048, 16384, 32, 8, 128, "f16", True)
    assert route("single_prefill", shape, "sm90") == "sdpa_cudnn"
    for arch in archs.AMD_ARCHES:
        assert route("single_prefill", shape, arch) == "sdpa_flash"
    assert route("single_prefill", shape.with_(dtype="f32"), "cpu") == "sdpa_flash"


def test_threshold_switches_at_min_qo_len(monkeypatch) -> None:
    base = policy.threshold_for("sm90")
    assert base is not None
    held = _set(base, takes=(("qo_len", ">=", 2048),), scope=())
    monkeypatch.setattr(policy, "POLICY", (held,))
    shape = Shape(1, 2048, 16384, 32, 8, 128, "f16", True)
    assert route("single_prefill", shape, "sm90") == held.arm
    assert route("single_prefill", shape.with_(qo_len=1024), "sm90") == "sdpa_cudnn"
    # batch_prefill is its own path: the threshold is for single_prefill only.
    assert route("batch_prefill", shape, "sm90") == "sdpa_cudnn"


def test_lse_routes_to_triton_or_refuses(monkeypatch) -> None:
    shape = Shape(1, 64, 64, 4, 2, 64, "f32", True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(UsageError, match="TRITON_INTERPRET"):
        route("single_prefill", shape, "cpu", return_lse=True)
    assert route("single_prefill", shape, "sm90", return_lse=True) == "triton"


def test_current_arch_is_known() -> None:
    assert current_arch() in ARCHES
    assert isinstance(interpreter_on(), bool)


CHUNKED = Shape(1, 2048, 16384, 32, 8, 128, "f16", True)
SQUARE = Shape(1, 2048, 2048, 32, 8, 128, "f16", True)
GPU_ARCHES = [pytest.param(a, id=a) for a in archs.GPU_ARCHES]


def _set(th: Threshold, **changes) -> Threshold:
    return Threshold(**{**th.__dict__, **changes})


def _is_chunked(th: Threshold) -> bool:
    return th.region.endswith("-single-prefill-chunked")


def _chunked_policy_set(min_qo_len: int) -> tuple[Threshold, ...]:
    # The chunked thresholds set at min_qo_len, the general ones unset: chunked shapes only.
    return tuple(
        _set(th, takes=(("qo_len", ">=", min_qo_len),) if _is_chunked(th) else None)
        for th in policy.POLICY
    )


def test_every_gpu_arch_has_a_conservative_chunked_threshold() -> None:
    for arch in archs.GPU_ARCHES:
        found = policy.thresholds_for(arch)
        chunked = [th for th in found if _is_chunked(th)]
        assert len(chunked) == 1, f"{arch}: {found}"
        (th,) = chunked
        assert th.region == f"policy-{arch}-single-prefill-chunked"
        assert th.arm == archs.OWN_ARM.get(arch, "triton")
        assert th.otherwise == archs.ROUTE_ORDER[arch][0]
        assert ("kv_len", ">", "qo_len") in th.scope
        if arch != "sm90":  # the only arch with runs in the store so far
            assert th.takes is None
            assert th.evidence.sweep == "chunked-prefill"
            assert th.scope == (("kv_len", ">", "qo_len"),)
        else:
            # sm90's chunked threshold speaks only for the calls its evidence sweep covers.
            assert th.evidence.sweep == "policy-chunked-sm90"
            assert ("causal", "==", True) in th.scope
        # The general threshold stays first: the renderer's per-arch docs cite it.
        assert found[0].region == f"policy-single-prefill-{arch}"
    assert policy.thresholds_for("cpu") == ()


def test_chunked_scope_applies_when_kv_len_exceeds_qo_len() -> None:
    th = _set(policy.POLICY[0], scope=(("kv_len", ">", "qo_len"),), takes=(("qo_len", ">=", 2048),))

    def f(qo: int, kv: int) -> dict[str, int]:
        return {"qo_len": qo, "kv_len": kv}

    assert th.applies(f(2048, 2049)) and th.takes_arm(f(2048, 16384))
    assert not th.applies(f(2048, 2048)) and not th.takes_arm(f(2048, 2048))
    assert not th.takes_arm(f(1024, 16384))  # in scope, but below its lower bound
    assert not _set(th, takes=None).takes_arm(f(2048, 16384))


@pytest.mark.parametrize(
    "shape", [pytest.param(CHUNKED, id="chunked"), pytest.param(SQUARE, id="square")]
)
@pytest.mark.parametrize("arch", GPU_ARCHES)
def test_chunked_threshold_routes_chunked_shapes_only(arch: str, shape: Shape, monkeypatch) -> None:
    monkeypatch.setattr(policy, "POLICY", _chunked_policy_set(2048))
    sdpa = archs.ROUTE_ORDER[arch][0]
    want = archs.OWN_ARM.get(arch, "triton") if shape.kv_len > shape.qo_len else sdpa
    assert route("single_prefill", shape, arch) == want
    assert route("single_prefill", shape.with_(qo_len=1024), arch) == sdpa
    assert route("batch_prefill", shape, arch) == sdpa
    # single_prefill takes exactly the arm route names (meta tensors: nothing runs).
    called: list[str] = []

    def record(plan, q, k, v):
        called.append(plan.arm)
        return q

    monkeypatch.setattr(prefill, "_run_plan", record)
    monkeypatch.setattr(prefill, "_device_arch", lambda device: arch)
    q = torch.empty(shape.qo_len, shape.hq, shape.head_dim, dtype=torch.float16, device="meta")
    kv = torch.empty(shape.kv_len, shape.hkv, shape.head_dim, dtype=torch.float16, device="meta")
    single_prefill(q, kv, kv, causal=shape.causal, arch=arch)
    assert called == [want]


def test_first_threshold_that_takes_its_arm_wins(monkeypatch) -> None:
    by_region = {th.region: th for th in policy.thresholds_for("sm90")}
    general = by_region["policy-single-prefill-sm90"]
    chunked = by_region["policy-sm90-single-prefill-chunked"]
    general = _set(general, scope=())  # speaks for every call, as on the arches without runs
    # An unset chunked threshold does not veto the general one.
    unset_chunked = _set(chunked, takes=None)
    at_1k = (("qo_len", ">=", 1024),)
    at_4k = (("qo_len", ">=", 4096),)  # above CHUNKED's queries: the general one does not take
    monkeypatch.setattr(policy, "POLICY", (_set(general, takes=at_1k), unset_chunked))
    assert route("single_prefill", CHUNKED, "sm90") == general.arm
    # Both set: order decides between their arms.
    both = (_set(chunked, takes=at_1k, arm="triton_eager"), _set(general, takes=at_1k))
    monkeypatch.setattr(policy, "POLICY", both)
    assert route("single_prefill", CHUNKED, "sm90") == "triton_eager"
    assert route("single_prefill", SQUARE, "sm90") == general.arm
    # None takes its arm: the first threshold that applies names the other arm.
    idle = (_set(chunked, otherwise="sdpa_flash", takes=None), _set(general, takes=at_4k))
    monkeypatch.setattr(policy, "POLICY", idle)
    assert route("single_prefill", CHUNKED, "sm90") == "sdpa_flash"
    assert route("single_prefill", SQUARE, "sm90") == "sdpa_cudnn"


def test_sm90_policy_routes_as_its_thresholds_say() -> None:
    # Whatever the policy holds today (set from the store's guarded sm90 sweeps, or unset):
    # a call goes to a threshold's arm exactly where that threshold takes it.
    found = policy.thresholds_for("sm90")
    shapes = (CHUNKED, CHUNKED.with_(qo_len=1024), SQUARE, SQUARE.with_(qo_len=8192, kv_len=8192))
    for shape in shapes:
        taking = [th for th in found if th.takes_arm(shape.key())]
        want = taking[0].arm if taking else "sdpa_cudnn"
        assert route("single_prefill", shape, "sm90") == want
