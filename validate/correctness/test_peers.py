"""FlashInfer's arms (``flashinfer_fa3``, ``flashinfer_fa2``): honest refusals everywhere, and
the f32 reference on an sm90 GPU where flashinfer is installed."""

from __future__ import annotations

import pytest
import torch
from tether.errors import ArmUnavailableError
from tether.pytest_plugin import current_arch
from tether_kernels import Ragged, Shape, peers
from tether_kernels.arms import ARMS, attention_ref, get_arm

from validate.correctness._helpers import (
    assert_matches_per_request,
    assert_within_baseline,
    fresh_seed,
    make_qkv,
    packed,
    run_arm,
)

PEERS = [pytest.param(name, id=name) for name in ("flashinfer_fa3", "flashinfer_fa2")]
CHUNK = Shape(1, 256, 1024, 8, 2, 128, "bf16", True)


@pytest.mark.parametrize("name", PEERS)
def test_peer_arms_are_registered_for_sm90_only(name: str) -> None:
    arm = ARMS[name]
    assert arm.arches == ("sm90",)
    assert not arm.writes_out and arm.returns_lse
    assert arm.expected_kernels_on("sm90"), "the fidelity check needs the peer's kernel names"
    for arch in ("gfx942", "cpu"):
        assert arm.supports(CHUNK, arch) == f"{name} does not run on {arch}"


@pytest.mark.parametrize("name", PEERS)
def test_peer_arm_refuses_without_flashinfer(name: str) -> None:
    missing = peers.flashinfer_missing()
    if missing is None:
        pytest.skip("flashinfer is importable here; the refusal cannot be seen")
    assert get_arm(name).supports(CHUNK, "sm90") == missing
    q, k, v = (torch.zeros(1) for _ in range(3))
    with pytest.raises(ArmUnavailableError, match="flashinfer is not importable"):
        get_arm(name).prepare(q, k, v, CHUNK, arch="sm90")


@pytest.mark.parametrize(
    ("shape", "why"),
    [
        pytest.param(CHUNK.with_(batch=2), "batch 2 is above 1", id="batch2"),
        pytest.param(CHUNK.with_(dtype="f32"), "dtype f32", id="f32"),
        pytest.param(CHUNK.with_(head_dim=96), "head_dim 96", id="d96"),
        pytest.param(CHUNK.with_(qo_len=2048), "rows that see no key", id="qo-gt-kv"),
    ],
)
@pytest.mark.parametrize("name", PEERS)
def test_peer_arm_declares_what_it_does_not_serve(
    name: str, shape: Shape, why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pretend flashinfer is importable, so the shape rules are what answers.
    monkeypatch.setattr(peers, "flashinfer_missing", lambda: None)
    reason = get_arm(name).supports(shape, "sm90")
    assert reason is not None and why in reason
    assert get_arm(name).supports(CHUNK, "sm90") is None
    assert get_arm(name).supports(CHUNK.with_(qo_len=1024, causal=False), "sm90") is None


def _skip_without_peer() -> None:
    if current_arch() != "sm90":
        pytest.skip(f"FlashInfer's FA3/FA2 arms are declared for sm90; this is {current_arch()}")
    missing = peers.flashinfer_missing()
    if missing is not None:
        pytest.skip(missing)


GPU_SHAPES = [
    pytest.param(CHUNK, id="chunk-256x1024-gqa8/2"),
    pytest.param(Shape(1, 300, 300, 4, 4, 128, "bf16", True), id="sq300-tails-mha"),
    pytest.param(Shape(1, 200, 333, 8, 1, 128, "bf16", False), id="q200-kv333-full-gqa8/1"),
    pytest.param(Shape(1, 2048, 16384, 32, 8, 128, "bf16", True), id="chunk-2k-16k-gqa32/8"),
]


@pytest.mark.gpu(reason="FlashInfer runs on an sm90 GPU only")
@pytest.mark.parametrize("dtype", [pytest.param("bf16", id="bf16"), pytest.param("f16", id="f16")])
@pytest.mark.parametrize("base", GPU_SHAPES)
@pytest.mark.parametrize("name", PEERS)
def test_peer_arm_matches_reference(name: str, base: Shape, dtype: str) -> None:
    _skip_without_peer()
    shape = base.with_(dtype=dtype)
    seed = fresh_seed()
    q, k, v = make_qkv(shape, seed)
    out = run_arm(name, shape, q, k, v)
    assert_within_baseline(name, out, shape, q, k, v, seed)


@pytest.mark.gpu(reason="FlashInfer runs on an sm90 GPU only")
@pytest.mark.parametrize("name", PEERS)
def test_peer_arm_lse_is_natural_log(name: str) -> None:
    _skip_without_peer()
    shape = CHUNK
    q, k, v = make_qkv(shape, fresh_seed())
    lse = torch.full((1, shape.hq, shape.qo_len), float("nan"), device=q.device)
    get_arm(name).prepare(q, k, v, shape, lse=lse, arch="sm90")()
    _, ref_lse = attention_ref(q, k, v, shape.causal, return_lse=True)
    # The LSE is of O(log kv_len); a base-2 value would be off by a factor of 1/ln 2.
    assert (lse - ref_lse).abs().max().item() < 1e-2


@pytest.mark.gpu(reason="FlashInfer runs on an sm90 GPU only")
def test_peer_prepare_records_its_build_time() -> None:
    _skip_without_peer()
    q, k, v = make_qkv(CHUNK, fresh_seed())
    launch = get_arm("flashinfer_fa3").prepare(q, k, v, CHUNK, arch="sm90")
    assert launch.build_s > 0  # type: ignore[attr-defined]


RAGGED = Ragged((64, 300, 1000, 1), (64, 300, 1000, 700), 8, 2, 128, "bf16", True)


def test_the_peers_take_a_ragged_batch_through_the_ragged_wrapper(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(peers, "flashinfer_missing", lambda: None)
    fa3 = get_arm("flashinfer_fa3")
    assert fa3.supports(RAGGED, "sm90") is None
    assert "f32" in (fa3.supports(Ragged((64,), (64,), 8, 2, 128, "f32"), "sm90") or "")
    # A request whose rows see no key is outside FlashInfer's contract: refused by name.
    keyless = Ragged((64, 300), (64, 10), 8, 2, 128, "bf16", True)
    assert "request 1 (300 x 10)" in (fa3.supports(keyless, "sm90") or "")


@pytest.mark.gpu(reason="FlashInfer runs on an sm90 GPU only")
def test_fa3_ragged_wrapper_matches_the_reference_per_request() -> None:
    """As api-ragged-fa3 calls it: planned once in prepare, then run; the LSE in [hq, total]
    natural log, as tether's."""
    _skip_without_peer()
    seed = fresh_seed()
    q, k, v, qo, kv = packed(RAGGED, seed)
    lse = torch.full((RAGGED.hq, RAGGED.total_qo), float("nan"), device=q.device)
    launch = get_arm("flashinfer_fa3").prepare(q, k, v, RAGGED, lse=lse, arch="sm90")
    out = launch()
    assert launch.build_s > 0  # type: ignore[attr-defined]
    assert_matches_per_request("fa3 ragged", RAGGED, q, k, v, qo, kv, out, lse, seed)
