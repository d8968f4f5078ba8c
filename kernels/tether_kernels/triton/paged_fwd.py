"""Flash-attention forward over a paged KV cache, in Triton: paged_prefill's in-place arm.

Queries are packed as ragged_prefill packs them: q [total_qo, hq, d], request r's rows
``qo_start[r] .. qo_start[r] + qo_len[r]``. Keys and values stay in the cache's pages,
[num_pages, page_size, hkv, d] (NHD) or [num_pages, hkv, page_size, d] (HND: the same kernel,
other strides); request r's key j is slot ``j % page_size`` of page
``kv_indices[page_start[r] + j // page_size]``. Nothing is gathered: each key block's rows are
looked up in the page table as they are loaded, so every page size (1 to the block's width
and beyond) runs the same code, and pages shared between requests (a cached prefix) are read
where they are.

Grid: (tiles, hq). A tile is one (request, query block) pair; the host builds the tile list
once per plan (``paged_tiles``), the tiles with the most keys to visit first, so the programs
left for the tail of the grid are the shortest (as FA3's scheduler and FlashInfer's plan order
their work). Each program walks its request's visible key blocks, masked per element (the
request's kv tail and its bottom-right causal diagonal), with the Triton kernel's online
softmax step and output store (``attn_fwd._update`` and ``_finish``: one definition of the
arithmetic, the deferred rescale and its bound on P included).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import triton
import triton.language as tl

from tether_kernels.triton.attn_fwd import (
    DEFAULT_MARGIN,
    LOG2E,
    _finish,
    _load,
    _scores,
    _update,
    head_dim_pad,
)

if TYPE_CHECKING:
    import torch


@triton.jit
def _paged_fwd(
    Q,
    K,
    V,
    Out,
    Lse,
    TileReq,
    TileBlock,
    QoStart,
    QoLen,
    KvLen,
    PageStart,
    KvIndices,
    qk_scale,
    total_qo,
    head_dim,
    stride_qm,
    stride_qh,
    stride_kp,
    stride_ks,
    stride_kh,
    stride_vp,
    stride_vs,
    stride_vh,
    stride_om,
    stride_oh,
    HQ: tl.constexpr,
    GROUP: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    PADDED: tl.constexpr,
    PAGE_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr,
    MARGIN: tl.constexpr,
    STORE_LSE: tl.constexpr,
    IEEE_DOT: tl.constexpr,
):
    tile = tl.program_id(0)
    h = tl.program_id(1)
    hk = h // GROUP
    r = tl.load(TileReq + tile)
    start_m = tl.load(TileBlock + tile)
    q_start = tl.load(QoStart + r)
    qo_len = tl.load(QoLen + r)
    kv_len = tl.load(KvLen + r)
    page_start = tl.load(PageStart + r)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM_PAD)
    row_ok = offs_m < qo_len
    d_ok = offs_d < head_dim
    q_ptrs = Q + (q_start + offs_m)[:, None] * stride_qm + h * stride_qh + offs_d[None, :]
    q = _load(q_ptrs, row_ok[:, None], d_ok[None, :], True, PADDED)

    f = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)
    cnt = tl.zeros([BLOCK_M], dtype=tl.int32)
    # Bottom-right alignment per request: query i sees keys j <= i + shift.
    shift = kv_len - qo_len
    hi = kv_len
    if CAUSAL:  # blocks past the tile's last row's diagonal are never visited
        hi = tl.minimum(hi, tl.maximum(0, (start_m + 1) * BLOCK_M + shift))
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < kv_len
        # The page of each key row, and its slot there; a row past the request's keys reads
        # page 0 (never out of range) and is masked out of the scores and of V's load.
        page = tl.load(KvIndices + page_start + cols // PAGE_SIZE, mask=col_ok, other=0)
        slot = cols % PAGE_SIZE
        # 64-bit page offsets: a serving engine's cache holds more than 2**31 elements.
        k_rows = K + page.to(tl.int64) * stride_kp + slot * stride_ks + hk * stride_kh
        v_rows = V + page.to(tl.int64) * stride_vp + slot * stride_vs + hk * stride_vh
        kt = _load(k_rows[None, :] + offs_d[:, None], col_ok[None, :], d_ok[:, None], True, PADDED)
        v = _load(v_rows[:, None] + offs_d[None, :], col_ok[:, None], d_ok[None, :], True, PADDED)
        raw = _scores(q, kt, IEEE_DOT)
        f, l_i, acc, cnt = _update(
            raw, v, f, l_i, acc, cnt, qk_scale, cols, offs_m, shift, kv_len,
            True, CAUSAL, MARGIN, IEEE_DOT, False,
        )  # fmt: skip

    # The packed output's rows of this request (and the LSE's columns [hq, total_qo]).
    _finish(
        acc, l_i, f, cnt, Out + q_start * stride_om, Lse + q_start, Out, 0, h, offs_m, offs_d,
        row_ok, total_qo, 0, stride_om, stride_oh, HQ, STORE_LSE, False, d_ok, PADDED,
    )  # fmt: skip


def paged_tiles(
    qo_lens: tuple[int, ...], kv_lens: tuple[int, ...], block_m: int, causal: bool
) -> tuple[list[int], list[int]]:
    """The work list: one (request, query block) tile per BLOCK_M rows of each request, the
    tiles with the most keys to visit first (ties in request order), as two int lists."""
    tiles = []
    for r, (qo, kv) in enumerate(zip(qo_lens, kv_lens, strict=True)):
        for m in range(triton.cdiv(qo, block_m)):
            keys = min(kv, max(0, (m + 1) * block_m + kv - qo)) if causal else kv
            tiles.append((-keys, r, m))
    tiles.sort()
    return [r for _, r, _ in tiles], [m for _, _, m in tiles]


def paged_fwd_plan(
    *,
    qo_lens: tuple[int, ...],
    kv_lens: tuple[int, ...],
    page_starts: tuple[int, ...],
    kv_indices: torch.Tensor,
    hq: int,
    hkv: int,
    head_dim: int,
    page_size: int,
    causal: bool,
    sm_scale: float | None,
    block_m: int,
    block_n: int,
    num_warps: int,
    num_stages: int,
    ieee: bool,
    store_lse: bool,
):
    """A launcher for one planned batch: ``run(q, k_cache, v_cache, out, lse=None)`` launches
    on the call's tensors and returns ``out``. The work list and the per-request offsets are
    copied to ``kv_indices``' device here, once (fixed buffers: a CUDA graph captures their
    addresses), so a call only launches. ``kv_indices`` is the page table on the device."""
    import torch

    device = kv_indices.device
    reqs, blocks = paged_tiles(qo_lens, kv_lens, block_m, causal)
    qo_start = [0]
    for n in qo_lens[:-1]:
        qo_start.append(qo_start[-1] + n)

    def ints(values: list[int] | tuple[int, ...]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int32, device=device)

    tile_req, tile_block = ints(reqs), ints(blocks)
    starts, qo_t, kv_t, pages = ints(qo_start), ints(qo_lens), ints(kv_lens), ints(page_starts)
    scale = (head_dim**-0.5 if sm_scale is None else sm_scale) * LOG2E
    pad = head_dim_pad(head_dim)
    total_qo = sum(qo_lens)
    grid = (len(reqs), hq)
    meta = dict(
        HQ=hq,
        GROUP=hq // hkv,
        HEAD_DIM_PAD=pad,
        PADDED=pad != head_dim,
        PAGE_SIZE=page_size,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        CAUSAL=causal,
        MARGIN=DEFAULT_MARGIN,
        STORE_LSE=store_lse,
        IEEE_DOT=ieee,
        num_warps=num_warps,
        num_stages=num_stages,
    )

    def run(q, k_cache, v_cache, out, lse=None, *, hnd: bool = False) -> torch.Tensor:
        # NHD [pages, page_size, hkv, d] and HND [pages, hkv, page_size, d]: the kernel reads
        # (page, slot, head) strides, so either layout (or a strided view) is read in place.
        ks = k_cache.stride()
        vs = v_cache.stride()
        kp, kslot, kh = (ks[0], ks[2], ks[1]) if hnd else (ks[0], ks[1], ks[2])
        vp, vslot, vh = (vs[0], vs[2], vs[1]) if hnd else (vs[0], vs[1], vs[2])
        _paged_fwd[grid](
            q, k_cache, v_cache, out, lse if lse is not None else out,
            tile_req, tile_block, starts, qo_t, kv_t, pages, kv_indices,
            scale, total_qo, head_dim, q.stride(0), q.stride(1),
            kp, kslot, kh, vp, vslot, vh, out.stride(0), out.stride(1),
            **meta,
        )  # fmt: skip
        return out

    return run
