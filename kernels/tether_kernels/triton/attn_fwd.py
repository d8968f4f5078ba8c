"""Flash-attention forward in Triton: causal (bottom-right) or not, GQA, deferred rescale.

Layout BSHD, contiguous: q [batch, qo_len, hq, d], k/v [batch, kv_len, hkv, d].
Grid: (cdiv(qo_len, BLOCK_M), batch * hq / HEADS); one program owns BLOCK_M query rows of
HEADS query heads (1, or 2 heads that share one kv head); ``longest_first`` swaps the grid's
axes and reverses the query blocks (see the kernel).

Deferred rescale. A row keeps acc and l in the frame ``f`` of the last max it rescaled to.
For each key block with block max ``m_blk``: if ``m_blk > f + MARGIN`` the row moves to the
new frame (``alpha = exp2(f - m_blk)`` applied to acc and l); otherwise ``p = exp2(s - f)``
is used as is. MARGIN = 0 is the eager kernel (rescale whenever the max grows).

Bound on P: scores are in log2 units (log2(e) is folded into the scale), so without a
rescale ``s - f <= MARGIN`` and ``p <= 2**MARGIN``; MARGIN = 8 gives p <= 256. p is cast to
the input dtype for the PV dot, so the bound must stay far inside f16's max (65504); with
MARGIN = 8 it does by a factor of 256. acc and l are f32, so a row sum over kv_len keys of
values <= 256 stays far inside f32 range for any kv_len a prefill sees.

Causal loop in two stages: key blocks fully visible to every row of the program run with no
mask at all; only the diagonal blocks (and the kv tail) are masked per element.

Hopper options, each a LaunchConfig field and off by default: ``use_tma`` loads Q, K and V
through tensor descriptors (``tl.make_tensor_descriptor``, one per program and head; rows past
the end read as zero, and the key tail is still masked in the scores); ``warp_specialize``
asks the compiler to split the unmasked key loop into producer and consumer warps;
``heads_per_program`` 2 runs two query heads of one kv head per program, sharing each K/V
load and issuing both score MMAs before either softmax (two independent chains that the
scheduler can overlap); ``longest_first`` launches the query blocks with the most keys first;
``skip_rescale`` multiplies the accumulator only when some row of the tile changed frame.

Head dims that are not a power of two (any multiple of 8 up to 256): the tile's head
dimension is ``HEAD_DIM_PAD``, the next power of two (at least 16, the smallest ``tl.dot``
reduction), and the columns past the head dim are masked (``PADDED``) in every load of Q, K
and V (read as 0, so they add nothing to Q K^T and give 0 columns of P V) and in the store of
O. Where the head dim is the tile's width the masks are not emitted at all, and the kernel is
the one it was before padded head dims (the same code for those variants). The head dim is a
run-time argument in units of 8 (``head_dim_8``), and a padded tile's strides are derived
from it (contiguous BSHD) rather than passed: the compiler then knows the masks are constant
over runs of 8 columns (16-byte loads of halves), and one compiled kernel serves every head
dim padded onto the same tile, as one serves every sequence length.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import triton
import triton.language as tl

from tether_kernels.direct import DirectKernel

if TYPE_CHECKING:
    import torch

    from tether_kernels.launch_tables import LaunchConfig

LOG2E = 1.4426950408889634
DEFAULT_MARGIN = 8  # log2 units; see the bound on P in the module docstring


def head_dim_pad(head_dim: int) -> int:
    """The tile width for ``head_dim``: the next power of two, at least ``tl.dot``'s 16."""
    return max(16, triton.next_power_of_2(head_dim))


@triton.jit
def _load(
    ptrs, rows_ok, d_ok, ROWS: tl.constexpr, PADDED: tl.constexpr, AGAIN: tl.constexpr = False
):
    """``tl.load`` with the masks this tile needs and no other: rows past a length
    (``ROWS``) and head-dim columns past the head dim (``PADDED``); masked elements read 0.
    ``AGAIN``: a load the compiler must issue where it stands (volatile: never hoisted out of
    a loop nor merged with an equal load), for a tile reloaded per key block."""
    if ROWS and PADDED:
        x = tl.load(ptrs, mask=rows_ok & d_ok, other=0.0, volatile=AGAIN)
    elif ROWS:
        x = tl.load(ptrs, mask=rows_ok, other=0.0, volatile=AGAIN)
    elif PADDED:
        x = tl.load(ptrs, mask=d_ok, other=0.0, volatile=AGAIN)
    else:
        x = tl.load(ptrs, volatile=AGAIN)
    return x


@triton.jit
def _scores(q, kt, IEEE_DOT: tl.constexpr):
    """Raw Q K^T of one block (unscaled, f32)."""
    if IEEE_DOT:
        return tl.dot(q, kt, input_precision="ieee")
    return tl.dot(q, kt)


@triton.jit
def _scores_chunked(
    q_rows, k_cols, row_ok, col_ok, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    head_dim, CHUNK: tl.constexpr, CHUNKS: tl.constexpr, MASK_KEYS: tl.constexpr,
    PADDED: tl.constexpr, IEEE_DOT: tl.constexpr,
):  # fmt: skip
    """Raw Q K^T of one block, reduced over head-dim chunks of ``CHUNK`` columns, each chunk of
    Q and of K read here: neither tile is held whole in registers. The Q reads are volatile,
    or the compiler would hoist them out of the key loop and hold Q whole again.

    The chunks run as a loop, not unrolled (``tl.range``, unroll factor 1): unrolled, the
    compiler may schedule every chunk's loads ahead of the dots and hold all of them at once,
    which is what the chunking exists to avoid (issue 24: unrolled, gfx1151's f32 tiles at
    head_dim 256 spilled under triton 3.6; looped, they do not, kernels/NOTES.md).

    ``q_rows`` [BLOCK_M] and ``k_cols`` [BLOCK_N] point at the first element of each row."""
    raw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for c in tl.range(0, CHUNKS, loop_unroll_factor=1):
        offs_c = c * CHUNK + tl.arange(0, CHUNK)
        c_ok = offs_c < head_dim
        qc = _load(q_rows[:, None] + offs_c[None, :], row_ok[:, None], c_ok[None, :], True,
                   PADDED, True)  # fmt: skip
        kc = _load(k_cols[None, :] + offs_c[:, None], col_ok[None, :], c_ok[:, None], MASK_KEYS,
                   PADDED)  # fmt: skip
        raw += _scores(qc, kc, IEEE_DOT)
    return raw


@triton.jit
def _update(
    raw,
    v,
    f,
    l_i,
    acc,
    n_rescale,
    qk_scale,
    cols,
    offs_m,
    shift,
    kv_len,
    MASKED: tl.constexpr,
    CAUSAL: tl.constexpr,
    MARGIN: tl.constexpr,
    IEEE_DOT: tl.constexpr,
    COUNT_RESCALES: tl.constexpr,
    SKIP_RESCALE: tl.constexpr = False,
    ONE_COMPARE: tl.constexpr = False,
):
    """One key block's online-softmax step for one query tile; returns (f, l, acc, count).

    ``SKIP_RESCALE`` (unmasked blocks only): the accumulator is multiplied by alpha only when
    some row of the tile moved to a new frame; with the deferred margin most blocks after the
    first few move none, so the ``BLOCK_M x HEAD_DIM_PAD`` multiply is skipped for the whole tile.

    Unmasked blocks take the block max of the raw scores and fold the scale into the
    exponent's argument (one FMA per score instead of a multiply and a subtract); the scale is
    positive (the launcher checks), so ``max(raw) * scale == max(raw * scale)``.

    ``ONE_COMPARE`` (causal masked blocks): a key is visible when it is at most the row's last
    visible key, ``min(row + shift, kv_len - 1)``: one compare per score where the key-tail
    and causal tests take two and an AND. On wave64 each of those holds a lane mask in a pair
    of SGPRs; with the head-dim masks of a padded tile, CDNA's causal variants went past their
    106 SGPRs (issue 24). The tiles as wide as their head dim keep the two tests, so they
    compile to the code they did before padded head dims.
    """
    if MASKED:
        if CAUSAL and ONE_COMPARE:
            last = tl.minimum(offs_m + shift, kv_len - 1)  # < 0: a row that sees no key
            visible = cols[None, :] <= last[:, None]
        else:
            visible = cols[None, :] < kv_len
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None] + shift)
        s = tl.where(visible, raw * qk_scale, float("-inf"))
        m_blk = tl.max(s, 1)
        need = m_blk > f + MARGIN
        f_new = tl.where(need, m_blk, f)
        # A row that has seen no visible key yet keeps f = -inf; subtract 0 so p is 0, not NaN.
        f_sub = tl.where(f_new == float("-inf"), 0.0, f_new)
        alpha = tl.where(need, tl.math.exp2(f - f_sub), 1.0)
        p = tl.math.exp2(s - f_sub[:, None])
    else:
        m_blk = tl.max(raw, 1) * qk_scale
        need = m_blk > f + MARGIN
        f_new = tl.where(need, m_blk, f)
        alpha = tl.where(need, tl.math.exp2(f - f_new), 1.0)
        p = tl.math.exp2(raw * qk_scale - f_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    if SKIP_RESCALE and not MASKED:
        if tl.max(need.to(tl.int32), 0) > 0:
            acc = acc * alpha[:, None]
    else:
        acc = acc * alpha[:, None]
    if IEEE_DOT:
        acc += tl.dot(p.to(v.dtype), v, input_precision="ieee")
    else:
        acc += tl.dot(p.to(v.dtype), v)
    if COUNT_RESCALES:
        n_rescale += need.to(tl.int32)
    return f_new, l_i, acc, n_rescale


@triton.jit
def _finish(
    acc,
    l_i,
    f,
    n_rescale,
    Out,
    Lse,
    Counter,
    b,
    h,
    offs_m,
    offs_d,
    row_ok,
    qo_len,
    stride_ob,
    stride_om,
    stride_oh,
    HQ: tl.constexpr,
    STORE_LSE: tl.constexpr,
    COUNT_RESCALES: tl.constexpr,
    d_ok,
    PADDED: tl.constexpr,
):
    """Normalise and store one query tile's output (and LSE and rescale counts); ``d_ok``
    (``PADDED`` only) masks the head-dim columns past the head dim."""
    # Rows with no visible key (causal, kv_len < qo_len) produce 0 and lse -inf.
    empty = l_i == 0.0
    inv_l = tl.where(empty, 0.0, 1.0 / tl.where(empty, 1.0, l_i))
    out = acc * inv_l[:, None]
    o_ptrs = Out + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    o_mask = row_ok[:, None]
    if PADDED:
        o_mask = o_mask & d_ok[None, :]
    tl.store(o_ptrs, out.to(Out.dtype.element_ty), mask=o_mask)
    row_index = (b * HQ + h) * qo_len + offs_m
    if STORE_LSE:
        # Natural-log LSE of the scaled scores: (f + log2 l) / log2(e).
        lse = tl.where(
            empty, float("-inf"), (f + tl.math.log2(tl.where(empty, 1.0, l_i))) / 1.4426950408889634
        )
        tl.store(Lse + row_index, lse, mask=row_ok)
    if COUNT_RESCALES:
        tl.store(Counter + row_index, n_rescale, mask=row_ok)


@triton.jit
def _attn_fwd(
    Q,
    K,
    V,
    Out,
    Lse,
    Counter,
    qk_scale,
    qo_len,
    kv_len,
    head_dim_8,
    stride_qb,
    stride_qm,
    stride_qh,
    stride_kb,
    stride_kn,
    stride_kh,
    stride_vb,
    stride_vn,
    stride_vh,
    stride_ob,
    stride_om,
    stride_oh,
    HQ: tl.constexpr,
    GROUP: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    PADDED: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    MARGIN: tl.constexpr,
    STORE_LSE: tl.constexpr,
    COUNT_RESCALES: tl.constexpr,
    IEEE_DOT: tl.constexpr,
    USE_TMA: tl.constexpr = False,
    WARP_SPEC: tl.constexpr = False,
    HEADS: tl.constexpr = 1,
    LONGEST_FIRST: tl.constexpr = False,
    SKIP_RESCALE: tl.constexpr = False,
    Q_CHUNK: tl.constexpr = 0,
    SPLIT_D: tl.constexpr = 1,
):
    # Where the head dim is the tile's width (not PADDED, head_dim_8 None), no Q_CHUNK and no
    # SPLIT_D, every branch below takes the form the kernel had before padded head dims: those
    # variants compile to the code they did (on CDNA their causal variants use all but one or
    # two of the 106 SGPRs, so any extra scalar state spills there).
    if LONGEST_FIRST:
        # Grid (batch * hq / HEADS, m blocks): heads vary fastest and the query blocks with the
        # most keys (the last ones of a causal call) are launched first, so the programs
        # left for the tail of the grid are the shortest.
        if SPLIT_D == 1:
            off_bh = tl.program_id(0)
        else:
            # SPLIT_D programs share one query tile: each computes the whole softmax but only
            # its 1 / SPLIT_D of the output's head dim (its slice of V, of acc and of O).
            off_bh = tl.program_id(0) // SPLIT_D
            part = tl.program_id(0) % SPLIT_D
        start_m = tl.num_programs(1) - 1 - tl.program_id(1)
    else:
        if SPLIT_D == 1:
            start_m = tl.program_id(0)
        else:
            start_m = tl.program_id(0) // SPLIT_D
            part = tl.program_id(0) % SPLIT_D
        off_bh = tl.program_id(1)
    HP: tl.constexpr = HQ // HEADS  # programs per batch row along the heads
    b = off_bh // HP
    h = (off_bh % HP) * HEADS  # first query head of the program; HEADS heads share one kv head
    hk = h // GROUP

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    row_ok = offs_m < qo_len
    if PADDED:
        # The launcher passes no strides (None): they are those of contiguous BSHD, derived
        # here from the head dim, which it passes in units of 8. The compiler then knows every
        # stride is a multiple of 8 (16-byte accesses of halves) where Triton's specialisation
        # would only say whether it divides by 16 (not at head dims 24, 40, 136, ...), sees
        # that K and V (and Q and O) share their strides, and keeps no stride in a register
        # of its own; one compile serves every head dim padded onto the tile.
        head_dim = head_dim_8 * 8
        HKV: tl.constexpr = HQ // GROUP
        stride_qh = head_dim
        stride_qm = HQ * head_dim
        stride_qb = qo_len * stride_qm
        stride_kh = head_dim
        stride_kn = HKV * head_dim
        stride_kb = kv_len * stride_kn
        stride_vh = stride_kh
        stride_vn = stride_kn
        stride_vb = stride_kb
        stride_oh = stride_qh
        stride_om = stride_qm
        stride_ob = stride_qb
    else:
        head_dim = HEAD_DIM_PAD
    d_ok = offs_d < head_dim  # emitted only where a load or store below uses it (PADDED)
    DV: tl.constexpr = HEAD_DIM_PAD // SPLIT_D
    if SPLIT_D == 1:
        offs_dv = offs_d
        dv_ok = d_ok
    else:
        offs_dv = part * DV + tl.arange(0, DV)  # this program's columns of V, acc and O
        dv_ok = offs_dv < head_dim

    k_base = K + b * stride_kb + hk * stride_kh
    v_base = V + b * stride_vb + hk * stride_vh
    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    if Q_CHUNK > 0:
        q_rows = Q + b * stride_qb + h * stride_qh + offs_m * stride_qm
    QK_CHUNKS: tl.constexpr = HEAD_DIM_PAD // Q_CHUNK if Q_CHUNK > 0 else 1
    if USE_TMA:
        q_desc = tl.make_tensor_descriptor(
            Q + b * stride_qb + h * stride_qh,
            shape=[qo_len, head_dim],
            strides=[stride_qm, 1],
            block_shape=[BLOCK_M, HEAD_DIM_PAD],
        )
        k_desc = tl.make_tensor_descriptor(
            k_base,
            shape=[kv_len, head_dim],
            strides=[stride_kn, 1],
            block_shape=[BLOCK_N, HEAD_DIM_PAD],
        )
        v_desc = tl.make_tensor_descriptor(
            v_base,
            shape=[kv_len, head_dim],
            strides=[stride_vn, 1],
            block_shape=[BLOCK_N, DV],
        )
        q0 = q_desc.load([start_m * BLOCK_M, 0])  # columns past head_dim read as zero
    elif Q_CHUNK == 0:
        q0 = _load(q_ptrs, row_ok[:, None], d_ok[None, :], True, PADDED)

    f0 = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l0 = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc0 = tl.zeros([BLOCK_M, DV], dtype=tl.float32)
    cnt0 = tl.zeros([BLOCK_M], dtype=tl.int32)
    if HEADS == 2:
        # The second head's tile: same rows, same keys, so the same loop bounds and masks.
        q1 = _load(q_ptrs + stride_qh, row_ok[:, None], d_ok[None, :], True, PADDED)
        f1 = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l1 = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc1 = tl.zeros([BLOCK_M, DV], dtype=tl.float32)
        cnt1 = tl.zeros([BLOCK_M], dtype=tl.int32)

    # Bottom-right alignment: query i sees keys j <= i + shift.
    shift = kv_len - qo_len
    full_end = (kv_len // BLOCK_N) * BLOCK_N  # blocks before this need no tail mask
    if CAUSAL:
        # Blocks past the last row's diagonal are never visited: the loop bound skips them.
        hi = tl.minimum(kv_len, tl.maximum(0, (start_m + 1) * BLOCK_M + shift))
        # A block is unmasked when its last key is visible to the block's first row.
        lo = tl.maximum(0, start_m * BLOCK_M + shift + 1) // BLOCK_N * BLOCK_N
        lo = tl.minimum(lo, full_end)
        lo = tl.minimum(lo, hi // BLOCK_N * BLOCK_N)
    else:
        hi = kv_len
        lo = full_end

    # Stage 1: blocks fully visible to every row of this program, no masks at all.
    for start_n in tl.range(0, lo, BLOCK_N, warp_specialize=WARP_SPEC):
        cols = start_n + offs_n
        if USE_TMA:
            kt = tl.trans(k_desc.load([start_n, 0]))
            v = v_desc.load([start_n, 0] if SPLIT_D == 1 else [start_n, part * DV])
        else:
            if Q_CHUNK == 0:
                kt = _load(
                    k_base + cols[None, :] * stride_kn + offs_d[:, None], None, d_ok[:, None],
                    False, PADDED,
                )  # fmt: skip
            v = _load(
                v_base + cols[:, None] * stride_vn + offs_dv[None, :], None, dv_ok[None, :],
                False, PADDED,
            )  # fmt: skip
        if Q_CHUNK > 0:
            raw0 = _scores_chunked(
                q_rows, k_base + cols * stride_kn, row_ok, cols < kv_len, BLOCK_M, BLOCK_N,
                head_dim, Q_CHUNK, QK_CHUNKS, False, PADDED, IEEE_DOT,
            )  # fmt: skip
        else:
            raw0 = _scores(q0, kt, IEEE_DOT)
        if HEADS == 2:
            # Both score MMAs are issued before either softmax, so the second head's MMA runs
            # on the tensor cores while the first head's softmax runs on the CUDA cores.
            raw1 = _scores(q1, kt, IEEE_DOT)
        f0, l0, acc0, cnt0 = _update(
            raw0, v, f0, l0, acc0, cnt0, qk_scale, cols, offs_m, shift, kv_len,
            False, CAUSAL, MARGIN, IEEE_DOT, COUNT_RESCALES, SKIP_RESCALE,
        )  # fmt: skip
        if HEADS == 2:
            f1, l1, acc1, cnt1 = _update(
                raw1, v, f1, l1, acc1, cnt1, qk_scale, cols, offs_m, shift, kv_len,
                False, CAUSAL, MARGIN, IEEE_DOT, COUNT_RESCALES, SKIP_RESCALE,
            )  # fmt: skip

    # Stage 2: diagonal and tail blocks, masked per element.
    for start_n in range(lo, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < kv_len
        if USE_TMA:
            kt = tl.trans(k_desc.load([start_n, 0]))  # rows past kv_len read as zero
            v = v_desc.load([start_n, 0] if SPLIT_D == 1 else [start_n, part * DV])
        else:
            if Q_CHUNK == 0:
                kt = _load(
                    k_base + cols[None, :] * stride_kn + offs_d[:, None], col_ok[None, :],
                    d_ok[:, None], True, PADDED,
                )  # fmt: skip
            v = _load(
                v_base + cols[:, None] * stride_vn + offs_dv[None, :], col_ok[:, None],
                dv_ok[None, :], True, PADDED,
            )  # fmt: skip
        if Q_CHUNK > 0:
            raw0 = _scores_chunked(
                q_rows, k_base + cols * stride_kn, row_ok, col_ok, BLOCK_M, BLOCK_N, head_dim,
                Q_CHUNK, QK_CHUNKS, True, PADDED, IEEE_DOT,
            )  # fmt: skip
        else:
            raw0 = _scores(q0, kt, IEEE_DOT)
        if HEADS == 2:
            raw1 = _scores(q1, kt, IEEE_DOT)
        f0, l0, acc0, cnt0 = _update(
            raw0, v, f0, l0, acc0, cnt0, qk_scale, cols, offs_m, shift, kv_len,
            True, CAUSAL, MARGIN, IEEE_DOT, COUNT_RESCALES, False, PADDED,
        )  # fmt: skip
        if HEADS == 2:
            f1, l1, acc1, cnt1 = _update(
                raw1, v, f1, l1, acc1, cnt1, qk_scale, cols, offs_m, shift, kv_len,
                True, CAUSAL, MARGIN, IEEE_DOT, COUNT_RESCALES, False, PADDED,
            )  # fmt: skip

    _finish(
        acc0, l0, f0, cnt0, Out, Lse, Counter, b, h, offs_m, offs_dv, row_ok, qo_len,
        stride_ob, stride_om, stride_oh, HQ, STORE_LSE, COUNT_RESCALES, dv_ok, PADDED,
    )  # fmt: skip
    if HEADS == 2:
        _finish(
            acc1, l1, f1, cnt1, Out, Lse, Counter, b, h + 1, offs_m, offs_dv, row_ok, qo_len,
            stride_ob, stride_om, stride_oh, HQ, STORE_LSE, COUNT_RESCALES, dv_ok, PADDED,
        )  # fmt: skip


def tma_unsupported_reason(device: torch.device) -> str | None:
    """None when tensor-descriptor loads can run on ``device``, else why not."""

    if not hasattr(tl, "make_tensor_descriptor"):
        return f"triton {triton.__version__} has no tl.make_tensor_descriptor"
    if os.environ.get("TRITON_INTERPRET", "") not in ("", "0"):
        return None
    import torch

    if device.type != "cuda" or getattr(torch.version, "hip", None):
        return f"tensor descriptors are used on NVIDIA GPUs only, not {device}"
    if torch.cuda.get_device_capability(device)[0] < 9:
        return "TMA needs sm90 or newer"
    return None


def _set_descriptor_allocator(device: torch.device) -> None:
    """Device-side descriptors need a global scratch buffer from the caller's allocator."""
    import torch

    def alloc(size: int, alignment: int, stream: int | None) -> torch.Tensor:
        return torch.empty(size, device=device, dtype=torch.int8)

    triton.set_allocator(alloc)


def attn_fwd_plan(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    config: LaunchConfig,
    causal: bool = True,
    sm_scale: float | None = None,
    margin: int = DEFAULT_MARGIN,
    lse: torch.Tensor | None = None,
    counter: torch.Tensor | None = None,
):
    """A launcher for every call shaped like these tensors: ``run(q, k, v, out, lse=None,
    counter=None)`` launches on the call's own tensors and returns ``out``. The checks, the
    grid and the constants are worked out here, once, from these; the first launch goes
    through the JIT and later ones call the compiled kernel directly (``direct.py``), so every
    call must match these tensors' shapes, strides, dtypes and device, and give ``lse`` and
    ``counter`` exactly where these do.

    q [b, qo_len, hq, d], k/v [b, kv_len, hkv, d], out like q; lse f32 [b, hq, qo_len];
    counter int32 [b, hq, qo_len] receives each row's number of rescales (debug only).
    ``config.use_tma`` falls back to pointer loads where descriptors are unsupported; the
    returned callable's ``use_tma`` (bool) and ``tma_fallback`` (reason or None) say which.
    ``config.heads_per_program`` 2 falls back to 1 when the query heads per kv head are odd
    (``heads_per_program`` and ``heads_fallback`` on the callable say which ran).
    """

    batch, qo_len, hq, d = q.shape
    kv_len, hkv = k.shape[1], k.shape[2]
    if d % 8 or not 8 <= d <= 256:
        raise ValueError(f"attn_fwd: head_dim {d} is not a multiple of 8 from 8 to 256")
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if not t.is_contiguous():
            raise ValueError(f"attn_fwd: {name} must be contiguous BSHD")
    if sm_scale is not None and not sm_scale > 0:
        # The kernel takes the block max of the unscaled scores (see _update).
        raise ValueError(f"attn_fwd: sm_scale must be positive, got {sm_scale!r}")
    scale = (d**-0.5 if sm_scale is None else sm_scale) * LOG2E
    heads, heads_fallback = config.heads_per_program, None
    if heads not in (1, 2):
        raise ValueError(f"attn_fwd: heads_per_program must be 1 or 2, got {heads}")
    if heads == 2 and (hq // hkv) % 2:
        # Two query heads of one program must share their kv head.
        heads, heads_fallback = 1, f"{hq // hkv} query heads per kv head is odd"
    m_blocks = triton.cdiv(qo_len, config.block_m)
    longest_first = config.longest_first and causal
    programs = batch * hq // heads
    split = config.split_head_dim
    if split not in (1, 2, 4, 8) or head_dim_pad(d) // split < 16:
        raise ValueError(f"attn_fwd: split_head_dim {split} does not divide head_dim {d}'s tile")
    grid = (programs * split, m_blocks) if longest_first else (m_blocks * split, programs)
    import torch

    ieee = q.dtype == torch.float32
    extra = {}
    if config.waves_per_eu is not None:
        extra["waves_per_eu"] = config.waves_per_eu
    tma_fallback = tma_unsupported_reason(q.device) if config.use_tma else None
    use_tma = config.use_tma and tma_fallback is None
    if use_tma:
        # Descriptor tiles need 16-byte aligned strides and bases (BSHD rows of d halves are).
        if (d * q.element_size()) % 16:
            use_tma, tma_fallback = False, f"head_dim {d} rows are not 16-byte aligned"
        elif q.device.type == "cuda":
            _set_descriptor_allocator(q.device)
    if config.q_chunk and (heads != 1 or use_tma or head_dim_pad(d) % config.q_chunk
                           or config.q_chunk < 16):  # fmt: skip
        raise ValueError(
            f"attn_fwd: q_chunk {config.q_chunk} needs one head per program, pointer loads and "
            f"a power of two of at least 16 that divides head_dim {d}'s tile"
        )
    padded = d != head_dim_pad(d)
    strides = (*q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *out.stride()[:3])
    if padded:
        strides = (None,) * len(strides)  # the kernel derives them (contiguous BSHD)
    meta = dict(
        HQ=hq,
        GROUP=hq // hkv,
        HEAD_DIM_PAD=head_dim_pad(d),
        PADDED=padded,
        BLOCK_M=config.block_m,
        BLOCK_N=config.block_n,
        CAUSAL=causal,
        MARGIN=margin,
        STORE_LSE=lse is not None,
        COUNT_RESCALES=counter is not None,
        IEEE_DOT=ieee,
        USE_TMA=use_tma,
        WARP_SPEC=config.warp_specialize,
        HEADS=heads,
        LONGEST_FIRST=longest_first,
        SKIP_RESCALE=config.skip_rescale,
        Q_CHUNK=config.q_chunk,
        SPLIT_D=split,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
        **extra,
    )
    kernel = DirectKernel(_attn_fwd, grid, meta)
    head_8 = d // 8 if padded else None  # None: a constexpr, no kernel argument

    def run(q, k, v, out, lse=None, counter=None) -> torch.Tensor:
        # Unused pointer arguments still need a tensor; out is never written through them.
        lse_arg = lse if lse is not None else out
        counter_arg = counter if counter is not None else out
        kernel(q, k, v, out, lse_arg, counter_arg, scale, qo_len, kv_len, head_8, *strides)
        return out

    run.use_tma = use_tma  # type: ignore[attr-defined]
    run.tma_fallback = tma_fallback  # type: ignore[attr-defined]
    run.heads_per_program = heads  # type: ignore[attr-defined]
    run.heads_fallback = heads_fallback  # type: ignore[attr-defined]
    return run


def attn_fwd_launcher(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    config: LaunchConfig,
    causal: bool = True,
    sm_scale: float | None = None,
    margin: int = DEFAULT_MARGIN,
    lse: torch.Tensor | None = None,
    counter: torch.Tensor | None = None,
):
    """A no-argument callable that launches the kernel on these preallocated tensors
    (``attn_fwd_plan``'s launcher bound to them; the same ``use_tma``, ``tma_fallback``,
    ``heads_per_program`` and ``heads_fallback`` on it)."""
    run = attn_fwd_plan(q, k, v, out, config, causal, sm_scale, margin, lse, counter)

    def launch() -> torch.Tensor:
        return run(q, k, v, out, lse, counter)

    for name in ("use_tma", "tma_fallback", "heads_per_program", "heads_fallback"):
        setattr(launch, name, getattr(run, name))
    return launch
