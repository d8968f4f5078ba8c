"""The per-call path: one checked plan per key, and a cache that never serves another call.

Each test calls the public entry points as a user does (on the CPU, in the Triton interpreter
or through PyTorch's CPU SDPA) and checks the answer against the f32 reference, so a plan
served to a call it does not fit shows as a wrong answer or a missing error.
"""

from __future__ import annotations

import pytest
import torch
from tether.errors import UsageError
from tether_kernels import prefill, routing, single_prefill
from tether_kernels.arms import attention_ref


def _qkv(dtype: torch.dtype = torch.float32, qo: int = 24, kv: int = 40, d: int = 64):
    gen = torch.Generator().manual_seed(qo * 1000 + kv)
    q = torch.randn(qo, 4, d, generator=gen).to(dtype)
    k = torch.randn(kv, 2, d, generator=gen).to(dtype)
    v = torch.randn(kv, 2, d, generator=gen).to(dtype)
    return q, k, v


def _close(out: torch.Tensor, q, k, v, causal: bool = True) -> None:
    ref = attention_ref(q[None], k[None], v[None], causal)[0]
    tol = 2e-2 if q.dtype == torch.float16 else 1e-4
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


def test_a_key_is_checked_and_routed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    routed: list[str] = []
    real = prefill.route

    def count(*args, **kwargs):
        routed.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(prefill, "route", count)
    q, k, v = _qkv()
    for _ in range(3):
        _close(single_prefill(q, k, v), q, k, v)
    assert routed == ["single_prefill"]


def test_the_sdpa_arm_runs_attention_once_per_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """No probe call per call: the key's first call is the checked one, later calls launch."""
    import torch.nn.functional as F

    calls = []
    real = F.scaled_dot_product_attention

    def count(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", count)
    # A square call (is_causal): a chunked call's CausalBias dispatches through
    # F.scaled_dot_product_attention itself, which this count would see twice.
    q, k, v = _qkv(qo=32, kv=32)
    assert routing.route("single_prefill", prefill._shape_of(q[None], k[None], v[None], True,
                         "single_prefill"), "cpu").startswith("sdpa")  # fmt: skip
    for n in range(1, 4):
        _close(single_prefill(q, k, v), q, k, v)
        assert len(calls) == n


def test_f32_then_f16_get_their_own_plans() -> None:
    q, k, v = _qkv(torch.float32)
    _close(single_prefill(q, k, v), q, k, v)
    h = tuple(t.half() for t in (q, k, v))
    out = single_prefill(*h)
    assert out.dtype == torch.float16
    _close(out, *h)


def test_contiguous_then_strided_views() -> None:
    q, k, v = _qkv()
    _close(single_prefill(q, k, v), q, k, v)
    # A packed qkv's views: the same shapes, other strides.
    packed = torch.randn(40, 8, 64)
    qs, ks, vs = packed[:24, :4], packed[:, 4:6], packed[:, 6:8]
    assert not qs.is_contiguous()
    _close(single_prefill(qs, ks, vs), qs, ks, vs)


def test_another_device_is_checked_in_full() -> None:
    q, k, v = _qkv()
    single_prefill(q, k, v)
    with pytest.raises(UsageError, match="meta tensors"):
        single_prefill(*(t.to("meta") for t in (q, k, v)))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        pytest.param({"causal": 1}, "causal must be a bool", id="causal-int"),
        pytest.param({"return_lse": 0}, "return_lse must be a bool", id="lse-int"),
        pytest.param({"sm_scale": True}, "sm_scale", id="scale-bool"),
        pytest.param({"sm_scale": float("nan")}, "sm_scale", id="scale-nan"),
        pytest.param({"arch": "sm90"}, "cannot use tensors", id="arch-mismatch"),
    ],
)
def test_a_cached_key_never_admits_bad_flags(kwargs: dict, match: str) -> None:
    q, k, v = _qkv()
    single_prefill(q, k, v, causal=True, sm_scale=1.0, return_lse=False)
    with pytest.raises(UsageError, match=match):
        single_prefill(q, k, v, **{"causal": True, **kwargs})


def test_a_cached_shape_with_another_dtype_of_k_is_refused() -> None:
    q, k, v = _qkv()
    single_prefill(q, k, v)
    with pytest.raises(UsageError, match="dtypes differ"):
        single_prefill(q, k.half(), v)


@pytest.mark.gpu
def test_the_same_shape_on_cpu_and_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a GPU: the same shape on two devices")
    q, k, v = _qkv(torch.float16, qo=256, kv=512)
    cpu = single_prefill(q, k, v)
    gpu = single_prefill(*(t.cuda() for t in (q, k, v)))
    assert gpu.device.type == "cuda" and cpu.device.type == "cpu"
    torch.testing.assert_close(gpu.cpu().float(), cpu.float(), atol=2e-2, rtol=2e-2)
