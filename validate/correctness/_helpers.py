"""Shared pieces of the correctness suite: fresh inputs, poisoned outputs, the tolerance rule.

The rule (STYLE.md 6): an output's max error against the f32 reference may be at most twice
the error of a same-dtype baseline, plus a tiny eps: ABS_EPS plus the f32 rounding of the
largest score (see ``score_eps``). The baseline's error is the larger of what PyTorch's math
SDPA in that dtype actually made and the rounding bound of an attention that rounds the way
the kernel must (see ``rounding_bound``): on the CPU, math SDPA keeps its intermediates in
f32 and rounds only its output, so on some draws its error was below what rounding the
probabilities to the input dtype alone can cause, and a correct kernel failed.
"""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch
from tether.pytest_plugin import current_arch, device
from tether_kernels import Ragged, Shape
from tether_kernels.arms import attention_ref, get_arm, torch_dtype

# Outputs are O(1); in f32 the baseline's own error is a few ulps, so a ratio alone is noise.
ABS_EPS = 1e-6

BF16_REASON = "bf16 tl.dot is wrong in the Triton interpreter (triton 3.9); checked on GPU only"

# One parametrize axis for dtype; bf16 runs on a GPU only.
DTYPES = [
    pytest.param("f16", id="f16"),
    pytest.param("bf16", id="bf16", marks=pytest.mark.gpu(reason=BF16_REASON)),
    pytest.param("f32", id="f32"),
]


def fresh_seed() -> int:
    """A new seed per test (never fixed inputs); reported in failures so a case can be replayed."""
    return random.SystemRandom().randrange(2**31)


def make_qkv(shape: Shape, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random q [b, qo, hq, d], k/v [b, kv, hkv, d] in the shape's dtype, BSHD contiguous."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dtype = torch_dtype(shape.dtype)

    def rnd(*dims: int) -> torch.Tensor:
        return torch.randn(*dims, generator=gen).to(device=device(), dtype=dtype)

    q = rnd(shape.batch, shape.qo_len, shape.hq, shape.head_dim)
    k = rnd(shape.batch, shape.kv_len, shape.hkv, shape.head_dim)
    v = rnd(shape.batch, shape.kv_len, shape.hkv, shape.head_dim)
    return q, k, v


def poisoned_like(t: torch.Tensor) -> torch.Tensor:
    """NaN everywhere: an element the arm forgets to write fails the finiteness check."""
    return torch.full_like(t, float("nan"))


def run_arm(
    name: str,
    shape: Shape,
    q,
    k,
    v,
    lse: torch.Tensor | None = None,
    sm_scale: float | None = None,
) -> torch.Tensor:
    """Run arm ``name`` with a poisoned preallocated ``out``; return the tensor the call returns.

    An arm that ``writes_out`` must return ``out`` itself (so an element it forgets to write
    stays NaN); one that does not (SDPA) must return its own [b, qo, hq, d] tensor and leave
    ``out`` untouched, all NaN: a copy into ``out`` would be timed work the Triton arms skip.
    """
    arm = get_arm(name)
    out = poisoned_like(q)
    res = arm.prepare(q, k, v, shape, out=out, lse=lse, arch=current_arch(), sm_scale=sm_scale)()
    assert res.shape == q.shape, f"{name} returned shape {tuple(res.shape)}, expected {q.shape}"
    assert res.dtype == q.dtype, f"{name} returned {res.dtype}, inputs are {q.dtype}"
    if arm.writes_out:
        assert res is out, f"{name} writes into out but returned another tensor"
    else:
        assert res.data_ptr() != out.data_ptr(), f"{name} returned the preallocated out"
        assert torch.isnan(out).all(), f"{name} wrote into out (a copy inside the timed call)"
    return res


def score_eps(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float | None = None
) -> float:
    """The output error that f32 rounding of the scores alone can cause.

    The kernel works in log2 units (log2(e) folded into the scale), so its scores round at
    different points than the reference's; a score of magnitude S carries an absolute error
    near S * eps32, which perturbs p by that relative amount and the output by that times
    max|v|. For random inputs this is a few ulps; for a steep score ramp it dominates.
    """
    hq, hkv, d = q.shape[2], k.shape[2], q.shape[3]
    kf = k.float().repeat_interleave(hq // hkv, dim=2)
    scale = d**-0.5 if sm_scale is None else sm_scale
    s_max = (
        (torch.einsum("bmhd,bnhd->bhmn", q.float(), kf).abs().max().item())
        * scale
        * 1.4426950408889634
    )
    return 2 * torch.finfo(torch.float32).eps * s_max * v.float().abs().max().item()


def rounding_bound(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    sm_scale: float | None = None,
    ref: torch.Tensor | None = None,
) -> float:
    """Half the largest error two roundings to the input dtype can cause in the output.

    A flash-attention kernel rounds the probabilities p (f32, frame max near 1) to the input
    dtype before the p @ v product and rounds the output once. Rounding p to relative u/2
    (u the dtype's eps) moves out[i, d] by at most u/2 * sum_j p_ij |v_jd| / l_i, which is
    the attention of ``|v|``; a p below the smallest normal rounds by at most tiny * u / 2
    absolute, at most kv_len of them per row (l_i >= 1 in the frame). The output rounds by
    half an ulp at its magnitude. Returned halved: the rule doubles it like the math error.
    For f32 inputs this is a few f32 ulps and the math SDPA error dominates.
    """
    fi = torch.finfo(q.dtype)
    ref_abs_v = attention_ref(q, k, v.abs(), causal, sm_scale)
    p_term = fi.eps / 2 * ref_abs_v.abs().max().item()
    sub_term = k.shape[1] * fi.tiny * fi.eps / 2 * v.float().abs().max().item()
    if ref is None:
        ref = attention_ref(q, k, v, causal, sm_scale)
    top = ref.abs().max().item() + p_term + sub_term
    half_ulp = fi.eps / 2 * 2.0 ** math.floor(math.log2(max(top, fi.tiny)))
    return (p_term + sub_term + half_ulp) / 2


def max_err(out: torch.Tensor, ref: torch.Tensor) -> float:
    return (out.float() - ref).abs().max().item()


def tolerance(
    shape: Shape, q, k, v, sm_scale: float | None = None, ref: torch.Tensor | None = None
) -> tuple[float, float, float]:
    """(tol, math SDPA's own error, rounding bound) for an output of this call: the rule above.

    ``ref`` is the f32 reference when the caller has it already."""
    if ref is None:
        ref = attention_ref(q, k, v, shape.causal, sm_scale)
    base = run_arm("sdpa_math", shape, q, k, v, sm_scale=sm_scale)
    assert torch.isfinite(base).all(), f"sdpa_math baseline is not finite for {shape.key()}"
    math_err = max_err(base, ref)
    round_err = rounding_bound(q, k, v, shape.causal, sm_scale, ref)
    tol = 2 * max(math_err, round_err) + ABS_EPS + score_eps(q, k, v, sm_scale)
    return tol, math_err, round_err


# A call whose f32 scores would pass this many elements is judged a slice of kv heads (with
# their query heads) at a time: the reference, the math SDPA and the bounds each materialise
# every head's scores, and a long square of many heads (the many-heads square scope starts at
# 8192 queries, 128 heads) would need tens of GiB at once. A slice is a whole attention of its
# own heads, judged by the same rule.
SLICE_ELEMS = 1 << 28


def head_slices(shape: Shape) -> list[tuple[slice, slice, Shape]]:
    """(query-head slice, kv-head slice, the slice's shape) covering ``shape``'s heads, each
    slice's scores within SLICE_ELEMS; one slice, the whole call, when it fits."""
    group = shape.hq // shape.hkv
    per = max(1, SLICE_ELEMS // max(shape.batch * shape.qo_len * shape.kv_len * group, 1))
    if per >= shape.hkv:
        return [(slice(None), slice(None), shape)]
    out = []
    for h in range(0, shape.hkv, per):
        n = min(per, shape.hkv - h)
        part = shape.with_(hq=n * group, hkv=n)
        out.append((slice(h * group, (h + n) * group), slice(h, h + n), part))
    return out


def assert_within_baseline(
    name: str, out: torch.Tensor, shape: Shape, q, k, v, seed: int, sm_scale: float | None = None
) -> None:
    """``out`` is finite and within twice the same-dtype math SDPA's error against the reference."""
    assert torch.isfinite(out).all(), f"{name}: non-finite or unwritten output (seed {seed})"
    slices = head_slices(shape)
    if len(slices) > 1:
        for qh, kh, part in slices:
            assert_within_baseline(
                f"{name} heads {qh.start}-{qh.stop - 1}",
                out[:, :, qh], part, q[:, :, qh], k[:, :, kh], v[:, :, kh], seed, sm_scale,
            )  # fmt: skip
        return
    ref = attention_ref(q, k, v, shape.causal, sm_scale)
    err = max_err(out, ref)
    tol, math_err, round_err = tolerance(shape, q, k, v, sm_scale, ref)
    assert err <= tol, (
        f"{name} {shape.key()}: err {err:.3e} > tol {tol:.3e} "
        f"(math {math_err:.3e}, rounding bound {round_err:.3e}, seed {seed})"
    )


# --- ragged batches (ragged_prefill): packed requests, judged one request at a time ---------


def packed(
    call: Ragged, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[int], list[int]]:
    """Random packed q [total_qo, hq, d], k/v [total_kv, hkv, d] on the test device, and the
    offsets as a caller holds them (host lists)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dtype = torch_dtype(call.dtype)

    def rnd(*dims: int) -> torch.Tensor:
        return torch.randn(*dims, generator=gen).to(device=device(), dtype=dtype)

    q = rnd(call.total_qo, call.hq, call.head_dim)
    k = rnd(call.total_kv, call.hkv, call.head_dim)
    v = rnd(call.total_kv, call.hkv, call.head_dim)
    qo = [0, *itertools.accumulate(call.qo_lens)]
    kv = [0, *itertools.accumulate(call.kv_lens)]
    return q, k, v, qo, kv


def assert_matches_per_request(
    name: str, call: Ragged, q, k, v, qo, kv, out, lse, seed: int
) -> None:
    """Each request's rows of ``out`` within the suite's tolerance of its own reference, and
    its LSE -inf exactly where a row sees no key, else within f32 rounding."""
    assert out.shape == q.shape and out.dtype == q.dtype
    for i, request in enumerate(call.requests()):
        qs, ks, vs = (
            q[qo[i] : qo[i + 1]][None],
            k[kv[i] : kv[i + 1]][None],
            v[kv[i] : kv[i + 1]][None],
        )
        part = out[qo[i] : qo[i + 1]][None]
        assert_within_baseline(f"{name} request {i}", part, request, qs, ks, vs, seed)
        if lse is None:
            continue
        _, ref = attention_ref(qs, ks, vs, call.causal, return_lse=True)
        got = lse[:, qo[i] : qo[i + 1]]
        seen = torch.isfinite(ref[0])
        assert torch.equal(torch.isfinite(got), seen), (
            f"{name} request {i}: -inf rows (seed {seed})"
        )
        assert max_err(got[seen], ref[0][seen]) <= 1e-4 * ref[0][seen].abs().max().item() + 1e-5
