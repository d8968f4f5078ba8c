"""Public entry points: single_prefill (one request, batch pinned to 1) and batch_prefill.

Both ask ``route`` which arm to take, then run that arm; neither falls back when the arm
refuses. ``_run_arm`` is the one place an arm is invoked, so tests can record which arm ran.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.errors import UsageError

from tether_kernels.routing import route
from tether_kernels.shapes import Shape

if TYPE_CHECKING:
    import torch

_DTYPE_NAMES = {"torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float32": "f32"}


def _shape_of(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, entry: str) -> Shape:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise UsageError(f"{entry}: q, k, v must be [batch, len, heads, head_dim]")
    if k.shape != v.shape:
        raise UsageError(f"{entry}: k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise UsageError(
            f"{entry}: q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch or head_dim"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise UsageError(f"{entry}: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    dtype = _DTYPE_NAMES.get(str(q.dtype))
    if dtype is None:
        raise UsageError(f"{entry}: dtype {q.dtype} is not one of f16, bf16, f32")
    return Shape(
        batch=q.shape[0],
        qo_len=q.shape[1],
        kv_len=k.shape[1],
        hq=q.shape[2],
        hkv=k.shape[2],
        head_dim=q.shape[3],
        dtype=dtype,
        causal=causal,
    )


def _run_arm(
    arm_name: str, q, k, v, shape: Shape, arch: str, return_lse: bool, sm_scale: float | None
):
    import torch

    from tether_kernels.arms import get_arm

    arm = get_arm(arm_name)
    out = torch.empty_like(q) if arm.writes_out else None
    lse = None
    if return_lse:
        lse = torch.empty(shape.batch, shape.hq, shape.qo_len, dtype=torch.float32, device=q.device)
    res = arm.prepare(q, k, v, shape, out=out, lse=lse, arch=arch, sm_scale=sm_scale)()
    return (res, lse) if return_lse else res


def _call(entry: str, q, k, v, causal, sm_scale, return_lse, arch):
    shape = _shape_of(q, k, v, causal, entry)
    if arch is None:
        from tether_kernels.arch_caps import detect_arch

        arch = detect_arch()
    arm = route(entry, shape, arch, return_lse=return_lse)
    q, k, v = (t.contiguous() for t in (q, k, v))
    return _run_arm(arm, q, k, v, shape, arch, return_lse, sm_scale)


def single_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = True,
    sm_scale: float | None = None,
    return_lse: bool = False,
    arch: str | None = None,
):
    """Attention for one request: q [qo_len, hq, d], k/v [kv_len, hkv, d] -> [qo_len, hq, d].

    Causal is bottom-right aligned (chunked prefill). With ``return_lse`` also returns the
    natural-log LSE [hq, qo_len] in f32. ``arch`` defaults to the detected one.
    """
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise UsageError("single_prefill: q, k, v must be [len, heads, head_dim] (batch is 1)")
    res = _call("single_prefill", q[None], k[None], v[None], causal, sm_scale, return_lse, arch)
    if return_lse:
        return res[0][0], res[1][0]
    return res[0]


def batch_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = True,
    sm_scale: float | None = None,
    return_lse: bool = False,
    arch: str | None = None,
):
    """Attention for a batch: q [b, qo_len, hq, d], k/v [b, kv_len, hkv, d] -> [b, qo_len, hq, d].

    Every request shares qo_len and kv_len. With ``return_lse`` also returns [b, hq, qo_len].
    """
    return _call("batch_prefill", q, k, v, causal, sm_scale, return_lse, arch)
