"""Public entry points: single_prefill (one request, batch pinned to 1) and batch_prefill.

Both check their arguments (a clear UsageError naming the argument, before anything runs),
ask ``route`` which arm to take, then run that arm; neither falls back when the arm refuses.
``_run_arm`` is the one place an arm is invoked, so tests can record which arm ran.
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING

from tether.errors import UsageError

from tether_kernels.routing import route
from tether_kernels.shapes import Shape

if TYPE_CHECKING:
    import torch

_DTYPE_NAMES = {"torch.float16": "f16", "torch.bfloat16": "bf16", "torch.float32": "f32"}
_NAMES = ("q", "k", "v")


def _check_tensors(entry: str, tensors: tuple[object, ...], layout: str) -> None:
    """Each of q, k, v is a tensor of the entry point's rank with no empty dimension."""
    import torch

    rank = layout.count(",") + 1
    for name, t in zip(_NAMES, tensors, strict=True):
        if not isinstance(t, torch.Tensor):
            raise UsageError(f"{entry}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != rank:
            raise UsageError(
                f"{entry}: {name} must be {rank}-D {layout}, got shape {tuple(t.shape)}"
            )
        if 0 in t.shape:
            raise UsageError(f"{entry}: {name} has an empty dimension, shape {tuple(t.shape)}")


def _shape_of(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, entry: str) -> Shape:
    if k.shape != v.shape:
        raise UsageError(f"{entry}: k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise UsageError(
            f"{entry}: q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch or head_dim"
        )
    if q.shape[2] % k.shape[2]:
        raise UsageError(
            f"{entry}: q has {q.shape[2]} heads, not a multiple of k's {k.shape[2]} (GQA)"
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


def _device_arch(device: torch.device) -> str:
    """The arch of the device the tensors live on (meta tensors hold no data: refused)."""
    from tether_kernels.arch_caps import detect_arch

    if device.type == "meta":
        raise UsageError("meta tensors hold no data; pass tensors on the CPU or a GPU")
    return detect_arch(device)


def _check_device(entry: str, q, k, v, arch: str | None) -> str:
    """The arch to route for: the tensors' own, which ``arch``, when given, must name."""
    from tether_kernels.arch_caps import check_arch

    if q.device != k.device or q.device != v.device:
        raise UsageError(
            f"{entry}: q, k and v must be on one device; got q on {q.device}, "
            f"k on {k.device}, v on {v.device}"
        )
    if arch is not None:
        check_arch(arch)
    found = _device_arch(q.device)
    if arch is not None and arch != found:
        raise UsageError(
            f"{entry}: arch {arch!r} cannot use tensors on {q.device} (a {found} device); "
            f"pass arch=None or {found!r}, or move q, k, v to a {arch} device"
        )
    return found


def _check_flags(entry: str, causal: object, sm_scale: object, return_lse: object) -> float | None:
    for name, flag in (("causal", causal), ("return_lse", return_lse)):
        if not isinstance(flag, bool):
            raise UsageError(f"{entry}: {name} must be a bool, got {flag!r}")
    if sm_scale is None:
        return None
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, numbers.Real):
        raise UsageError(
            f"{entry}: sm_scale must be a positive finite number or None, "
            f"got {type(sm_scale).__name__}"
        )
    # Every arm scales scores by sm_scale; the Triton kernel takes each block's max of the
    # unscaled scores, which is the max of the scaled ones only for a positive scale.
    if not (math.isfinite(sm_scale) and sm_scale > 0):
        raise UsageError(f"{entry}: sm_scale must be a positive finite number, got {sm_scale!r}")
    return float(sm_scale)


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
    scale = _check_flags(entry, causal, sm_scale, return_lse)
    shape = _shape_of(q, k, v, causal, entry)
    arch = _check_device(entry, q, k, v, arch)
    arm = route(entry, shape, arch, return_lse=return_lse)
    q, k, v = (t.contiguous() for t in (q, k, v))
    return _run_arm(arm, q, k, v, shape, arch, return_lse, scale)


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
    natural-log LSE [hq, qo_len] in f32. ``arch`` defaults to the arch of the tensors'
    device; when given it must be that arch. See kernels/API.md for the full contract.
    """
    _check_tensors("single_prefill", (q, k, v), "[len, heads, head_dim] (batch is 1)")
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
    _check_tensors("batch_prefill", (q, k, v), "[batch, len, heads, head_dim]")
    return _call("batch_prefill", q, k, v, causal, sm_scale, return_lse, arch)
