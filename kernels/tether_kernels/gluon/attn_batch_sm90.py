"""Flash-attention forward for a serving batch on Hopper (sm90) in Gluon: one persistent launch.

The batch's work is a list of items built on the host at plan time (``gluon/batch.py``): each
item is one query tile of 128 rows of one request, longest first (the tiles that see the most
key blocks lead, as FA3's scheduler and FlashInfer's plan order them). Work index ``w``
enumerates (item, KV split, query head), the head fastest, so the heads that share a kv head
run side by side on the same K/V in L2. The grid holds at most one program per SM; program
``p`` takes ``w = p, p + grid, p + 2 grid, ...`` (a static round-robin over the longest-first
list: the longest tiles start first, the short ones fill in behind them), and the number of
items is read from device memory, so a captured CUDA graph replays whatever list the plan
last wrote into its buffers.

One program runs three partitions (``gl.warp_specialize``), as ``attn_fwd_sm90`` does: a
producer warp issuing TMA loads (Q once per tile, K and V blocks into a ring of ``STAGES``
slots), and two consumer warpgroups of 64 query rows each (wgmma for S = Q K^T and O += P V,
the online softmax on the CUDA cores, block j's score MMA issued beside block j-1's P V MMA).
What persistence adds: the ring's slots and phases run on across tiles (a global block
counter), so the producer loads the next tile's first K/V blocks while the consumers still
finish the current tile, and Q has its own full/empty barrier pair, released by both
consumers once their last P V MMA of the tile is done; the consumers' epilogue (normalise and
store the rows) then overlaps the next tile's loads.

K and V come in one of two forms (``PAGE``):

- ``PAGE == 0``: packed, as ``ragged_prefill`` takes them: k/v [total keys, hkv, d], request
  i's keys starting at its row ``kv_start``.
- ``PAGE > 0``: a paged cache, as ``paged_prefill`` takes it: pages of ``PAGE`` tokens,
  request i's pages listed in ``kv_indices[kv_start:]``; a page's token ``r`` of kv head
  ``hk`` is row ``page * page_rows + hk * head_rows + r`` and columns ``hk * head_cols`` on
  of the cache's 2-D view (NHD: [pages * PAGE, hkv * d], page_rows PAGE, head_rows 0,
  head_cols d; HND: [pages * hkv * PAGE, d], page_rows hkv * PAGE, head_rows PAGE, head_cols
  0). A K/V block of ``BLOCK_N`` keys arrives as ``BLOCK_N / min(PAGE, BLOCK_N)`` TMA loads,
  each of one page's rows, onto one barrier. A block past the request's last page reads that
  last page again (its keys are masked out of the scores); the rows of a request's last page
  past its last token are whatever the cache holds there (never written, perhaps not finite),
  so before the P V MMA of the block that holds them each consumer overwrites those V rows
  in shared memory with zeros (``_zero_rows``): P is 0 there, but 0 times a NaN is not.

Split-KV (``n_split`` > 1, when the list is too short to fill the GPU): every item's key
blocks are shared among ``n_split`` programs, each writing its rows' normalised partial
output (f32, [n_split, total queries, hq, d]) and LSE ([n_split, hq, total queries]);
``triton.merge.merge_splits`` combines them (a batch of one of the packed totals).

Causal masks are bottom-right per request; a row that sees no key gives 0 and lse -inf.
Scores are in log2 units (``qk_scale`` = sm_scale * log2(e)), the row max taken of the raw
scores (the launcher checks the scale is positive). The head is one register tile: 64, 128
or 256 (96, two parts, stays with ``attn_fwd_sm90``'s ragged launch).
"""

from __future__ import annotations

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from tether_kernels.gluon.attn_fwd_sm90 import _softmax, _to_operand
from tether_kernels.gluon.compat import thread_barrier, tma_load

# A work item's row: query tile, the request's first query row, its qo_len, its first key
# row (packed) or first entry of its page list (paged), its kv_len.
ITEM_FIELDS: gl.constexpr = gl.constexpr(5)


@gluon.jit
def _coords(w, n_split, hq, group, work, BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr):
    """Work index ``w``'s (split, query head, kv head, first query row of its tile, one past its
    last key block, blocks it visits, masked ones among them, its request's first query row,
    first key row or page-list entry, qo_len and kv_len)."""
    per_item = n_split * hq
    item = w // per_item
    rest = w % per_item
    split = rest // hq
    h = rest % hq
    row = work + ITEM_FIELDS * item
    # Five independent loads: one memory latency.
    tile = gl.load(row)
    q_start = gl.load(row + 1)
    r_qo = gl.load(row + 2)
    kv_start = gl.load(row + 3)
    r_kv = gl.load(row + 4)
    hk = h // group
    m0 = tile * 128
    if CAUSAL:
        shift = r_kv - r_qo
        end = gl.minimum(r_kv, m0 + 128 + shift)  # one past the last key row m0 + 127 sees
        n_total = gl.cdiv(gl.maximum(end, 0), BLOCK_N)
        n_full = gl.minimum(gl.maximum(m0 + shift + 1, 0), r_kv) // BLOCK_N
    else:
        n_total = gl.cdiv(r_kv, BLOCK_N)
        n_full = r_kv // BLOCK_N
    per = gl.cdiv(n_total, n_split)
    lo = split * per
    hi = gl.minimum(lo + per, n_total)
    count = gl.maximum(hi - lo, 0)
    n_masked = gl.maximum(hi - gl.maximum(lo, n_full), 0)
    return split, h, hk, m0, hi, count, n_masked, q_start, kv_start, r_qo, r_kv


@gluon.jit
def _load_kv(desc, smem, bar, n, kv_start, r_kv, hk, kv_indices, page_rows, head_rows,
             head_cols, HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr,
             PAGE: gl.constexpr):  # fmt: skip
    """Key block ``n`` (keys n * BLOCK_N on) of one request into ``smem``, completing on ``bar``."""
    if PAGE == 0:
        tma_load(desc, [kv_start + n * BLOCK_N, hk * HEAD_DIM], bar, smem)
    else:
        ROWS: gl.constexpr = PAGE if PAGE < BLOCK_N else BLOCK_N
        last = gl.cdiv(r_kv, PAGE) - 1  # the request's last page
        for sub in gl.static_range(BLOCK_N // ROWS):
            key = n * BLOCK_N + sub * ROWS
            page = gl.load(kv_indices + kv_start + gl.minimum(key // PAGE, last))
            tma_load(desc, [page * page_rows + hk * head_rows + key % PAGE, hk * head_cols], bar,
                     smem.slice(sub * ROWS, ROWS))  # fmt: skip


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, bars, n_work, n_split, hq, group,
              work, kv_indices, page_rows, head_rows, head_cols, HEAD_DIM: gl.constexpr,
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              PAGE: gl.constexpr):  # fmt: skip
    """Q once per tile and the K/V ring, across every tile the program takes. A tile's Q is
    loaded once the ring holds its first blocks (or at once, for a tile with none), so the
    first K/V loads of a tile are in flight while the consumers finish the one before."""
    q_full, q_empty, k_ready, k_empty, v_ready, v_empty = bars
    q_bytes: gl.constexpr = 2 * q_desc.block_type.nbytes
    kv_bytes: gl.constexpr = BLOCK_N * HEAD_DIM * k_desc.dtype.primitive_bitwidth // 8
    total = gl.load(n_work) * (n_split * hq)
    g = gl.program_id(0) * 0  # blocks loaded so far (the ring's position), an i32
    it = gl.program_id(0) * 0  # tiles so far (Q's phase)
    for w in range(gl.program_id(0), total, gl.num_programs(0)):
        _split, h, hk, m0, hi, count, _n_masked, q_start, kv_start, _r_qo, r_kv = _coords(
            w, n_split, hq, group, work, BLOCK_N, CAUSAL)  # fmt: skip
        q_at = gl.minimum(count, STAGES) - 1  # Q goes after this block (-1: before any)
        if q_at < 0:
            mbarrier.wait(q_empty, (it & 1) ^ 1)
            mbarrier.expect(q_full, q_bytes)
            tma_load(q_desc, [q_start + m0, h * HEAD_DIM], q_full, q_smem.index(0))
            tma_load(q_desc, [q_start + m0 + 64, h * HEAD_DIM], q_full, q_smem.index(1))
        for j in range(count):
            c = g + j
            s = c % STAGES
            phase = (c // STAGES) & 1
            n = hi - 1 - j
            # A fresh mbarrier counts as having completed the phase before 0: the first
            # STAGES waits on an empty slot pass at once.
            mbarrier.wait(k_empty.index(s), phase ^ 1)
            mbarrier.expect(k_ready.index(s), kv_bytes)
            _load_kv(k_desc, k_smem.index(s), k_ready.index(s), n, kv_start, r_kv, hk,
                     kv_indices, page_rows, head_rows, head_cols, HEAD_DIM, BLOCK_N,
                     PAGE)  # fmt: skip
            mbarrier.wait(v_empty.index(s), phase ^ 1)
            mbarrier.expect(v_ready.index(s), kv_bytes)
            _load_kv(v_desc, v_smem.index(s), v_ready.index(s), n, kv_start, r_kv, hk,
                     kv_indices, page_rows, head_rows, head_cols, HEAD_DIM, BLOCK_N,
                     PAGE)  # fmt: skip
            if j == q_at:
                mbarrier.wait(q_empty, (it & 1) ^ 1)
                mbarrier.expect(q_full, q_bytes)
                tma_load(q_desc, [q_start + m0, h * HEAD_DIM], q_full, q_smem.index(0))
                tma_load(q_desc, [q_start + m0 + 64, h * HEAD_DIM], q_full, q_smem.index(1))
        g += count
        it += 1


@gluon.jit
def _zero_rows(slot, valid, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr):
    """Rows ``valid`` on of one V slot set to 0 (the unwritten tail of a request's last
    page), then fenced for the tensor cores and synchronised across the warpgroup. Both
    consumers write the same zeros over the same rows, so neither can read a value the other
    changes."""
    # Chunks of 8 rows (a swizzle period), 16 bytes a thread: few registers, whatever the
    # head_dim, beside the accumulator the consumer keeps live.
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [8, 4], [1, 4], [1, 0])
    for c in gl.static_range(BLOCK_N // 8):
        if (c + 1) * 8 > valid:
            chunk = slot.slice(c * 8, 8)
            t = chunk.load(layout)
            r = c * 8 + gl.arange(0, 8, layout=gl.SliceLayout(1, layout))
            t = gl.where(gl.expand_dims(r < valid, 1), t, gl.zeros([8, HEAD_DIM], t.dtype, layout))
            chunk.store(t)
    fence_async_shared()
    thread_barrier()


@gluon.jit
def _step(c, n, acc, p_op, m_i, l_i, qk_scale, rows, kv_len, shift, q_tile, k_smem, v_smem,
          k_ready, k_empty, v_ready, v_empty, s_zero, STAGES: gl.constexpr,
          BLOCK_N: gl.constexpr, s_layout: gl.constexpr, row_o: gl.constexpr,
          p_layout: gl.constexpr, MASK: gl.constexpr, CAUSAL: gl.constexpr,
          PACK: gl.constexpr):  # fmt: skip
    """Ring position ``c`` (key block ``n``): S = Q K_n^T and O += P V of the block before on
    the tensor cores, then block n's softmax while the P V MMA finishes."""
    s_idx = c % STAGES
    prev = (c - 1) % STAGES
    mbarrier.wait(k_ready.index(s_idx), (c // STAGES) & 1)
    mbarrier.wait(v_ready.index(prev), ((c - 1) // STAGES) & 1)
    s_tok = warpgroup_mma(q_tile, k_smem.index(s_idx).permute((1, 0)), s_zero, use_acc=False,
                          is_async=True)  # fmt: skip
    o_tok = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
    s = warpgroup_mma_wait(1, deps=(s_tok,))
    mbarrier.arrive(k_empty.index(s_idx))
    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, rows, n, kv_len, shift, BLOCK_N,
                                  s_layout, MASK, CAUSAL)  # fmt: skip
    acc = warpgroup_mma_wait(0, deps=(o_tok,))
    mbarrier.arrive(v_empty.index(prev))
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
    p_op = gl.convert_layout(_to_operand(p, q_tile.dtype, PACK), p_layout)
    return acc, p_op, m_i, l_i


@gluon.jit
def _consumer(WG: gl.constexpr, o_ptr, lse_ptr, qk_scale, total_qo, n_work, n_split, hq, group,
              stride_os, stride_om, stride_oh, q_smem, k_smem, v_smem, bars, work,
              HEAD_DIM: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              CAUSAL: gl.constexpr, STORE_LSE: gl.constexpr, PAGE: gl.constexpr,
              PACK: gl.constexpr):  # fmt: skip
    q_full, q_empty, k_ready, k_empty, v_ready, v_empty = bars
    dtype: gl.constexpr = q_smem.dtype
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, HEAD_DIM, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    q_tile = q_smem.index(WG)
    s_zero = gl.zeros([64, BLOCK_N], gl.float32, layout=s_layout)
    total = gl.load(n_work) * (n_split * hq)
    g = gl.program_id(0) * 0
    it = gl.program_id(0) * 0
    for w in range(gl.program_id(0), total, gl.num_programs(0)):
        split, h, _hk, m0, hi, count, n_masked, q_start, _kv_start, r_qo, r_kv = _coords(
            w, n_split, hq, group, work, BLOCK_N, CAUSAL)  # fmt: skip
        shift = r_kv - r_qo
        rows = m0 + WG * 64 + gl.arange(0, 64, layout=row_s)
        m_i = gl.full([64], -float("inf"), gl.float32, layout=row_s)
        l_i = gl.zeros([64], gl.float32, layout=row_s)
        acc = gl.zeros([64, HEAD_DIM], gl.float32, layout=o_layout)
        mbarrier.wait(q_full, it & 1)
        if count > 0:
            # Block hi - 1 first, always masked (it holds the diagonal or the key tail
            # whenever any block of the run does); only its score MMA is issued.
            c0 = g
            slot0 = c0 % STAGES
            mbarrier.wait(k_ready.index(slot0), (c0 // STAGES) & 1)
            s_tok = warpgroup_mma(q_tile, k_smem.index(slot0).permute((1, 0)), s_zero,
                                  use_acc=False, is_async=True)  # fmt: skip
            s = warpgroup_mma_wait(0, deps=(s_tok,))
            mbarrier.arrive(k_empty.index(slot0))
            p, _alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, rows, hi - 1, r_kv, shift,
                                          BLOCK_N, s_layout, True, CAUSAL)  # fmt: skip
            p_op = gl.convert_layout(_to_operand(p, dtype, PACK), p_layout)
            if PAGE > 0:
                if hi * BLOCK_N > r_kv:  # this block holds the request's last page's tail
                    mbarrier.wait(v_ready.index(slot0), (c0 // STAGES) & 1)
                    _zero_rows(v_smem.index(slot0), r_kv - (hi - 1) * BLOCK_N, BLOCK_N,
                               HEAD_DIM)  # fmt: skip
            for j in range(1, gl.maximum(n_masked, 1)):
                acc, p_op, m_i, l_i = _step(
                    g + j, hi - 1 - j, acc, p_op, m_i, l_i, qk_scale, rows, r_kv, shift, q_tile,
                    k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, s_zero, STAGES,
                    BLOCK_N, s_layout, row_o, p_layout, True, CAUSAL, PACK)  # fmt: skip
            for j in range(gl.maximum(n_masked, 1), count):
                acc, p_op, m_i, l_i = _step(
                    g + j, hi - 1 - j, acc, p_op, m_i, l_i, qk_scale, rows, r_kv, shift, q_tile,
                    k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, s_zero, STAGES,
                    BLOCK_N, s_layout, row_o, p_layout, False, CAUSAL, PACK)  # fmt: skip
            last = g + count - 1
            ls = last % STAGES
            mbarrier.wait(v_ready.index(ls), (last // STAGES) & 1)
            o_tok = warpgroup_mma(p_op, v_smem.index(ls), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(o_tok,))
            mbarrier.arrive(v_empty.index(ls))
        # This tile is done with Q: the producer may load the next tile's.
        mbarrier.arrive(q_empty)

        # Epilogue: normalise, store the rows that exist; rows that saw no key give 0,
        # lse -inf (a split with no block of the tile too: the merge weighs it 0).
        l_o = gl.convert_layout(l_i, row_o)
        out = acc / gl.expand_dims(gl.where(l_o == 0.0, 1.0, l_o), 1)
        rows_o = m0 + WG * 64 + gl.arange(0, 64, layout=row_o)
        cols_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
        o_base = o_ptr + split * stride_os + q_start * stride_om + h * stride_oh
        offs = gl.expand_dims(rows_o * stride_om, 1) + gl.expand_dims(cols_o, 0)
        gl.store(o_base + offs, out.to(o_ptr.dtype.element_ty),
                 mask=gl.expand_dims(rows_o < r_qo, 1))  # fmt: skip
        if STORE_LSE:
            lse = gl.where(l_i > 0.0, (m_i + gl.log2(l_i)) * 0.6931471805599453, -float("inf"))
            lse_base = lse_ptr + (split * hq + h) * total_qo + q_start
            gl.store(lse_base + rows, lse, mask=rows < r_qo)
        g += count
        it += 1


@gluon.jit
def _consumer0(o_ptr, lse_ptr, qk_scale, total_qo, n_work, n_split, hq, group, stride_os,
               stride_om, stride_oh, q_smem, k_smem, v_smem, bars, work, HEAD_DIM: gl.constexpr,
               BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
               STORE_LSE: gl.constexpr, PAGE: gl.constexpr, PACK: gl.constexpr):  # fmt: skip
    _consumer(0, o_ptr, lse_ptr, qk_scale, total_qo, n_work, n_split, hq, group, stride_os,
              stride_om, stride_oh, q_smem, k_smem, v_smem, bars, work, HEAD_DIM, BLOCK_N,
              STAGES, CAUSAL, STORE_LSE, PAGE, PACK)  # fmt: skip


@gluon.jit
def _consumer1(o_ptr, lse_ptr, qk_scale, total_qo, n_work, n_split, hq, group, stride_os,
               stride_om, stride_oh, q_smem, k_smem, v_smem, bars, work, HEAD_DIM: gl.constexpr,
               BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
               STORE_LSE: gl.constexpr, PAGE: gl.constexpr, PACK: gl.constexpr):  # fmt: skip
    _consumer(1, o_ptr, lse_ptr, qk_scale, total_qo, n_work, n_split, hq, group, stride_os,
              stride_om, stride_oh, q_smem, k_smem, v_smem, bars, work, HEAD_DIM, BLOCK_N,
              STAGES, CAUSAL, STORE_LSE, PAGE, PACK)  # fmt: skip


@gluon.jit
def attn_batch_sm90(q_desc, k_desc, v_desc, o_ptr, lse_ptr, qk_scale, total_qo, n_work,
                    n_split, hq, group, stride_os, stride_om, stride_oh, work, kv_indices,
                    page_rows, head_rows, head_cols, HEAD_DIM: gl.constexpr,
                    BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
                    STORE_LSE: gl.constexpr, PAGE: gl.constexpr, PACK: gl.constexpr,
                    PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr):  # fmt: skip
    """Grid: (programs,), at most one per SM; num_warps=4 (consumer 0); see the module doc.

    q_desc: [total queries, hq * HEAD_DIM], 64 x HEAD_DIM blocks. k_desc, v_desc: packed
    (PAGE 0) [total keys, hkv * HEAD_DIM] in BLOCK_N x HEAD_DIM blocks; paged, the cache's
    2-D view in min(PAGE, BLOCK_N) x HEAD_DIM blocks. ``work``: int32 [items, ITEM_FIELDS];
    ``n_work``: int32 [1], the number of items. o_ptr: the output [total queries, hq,
    HEAD_DIM] (n_split 1), or f32 partial results [n_split, total queries, hq, HEAD_DIM]
    (``stride_os`` apart); lse_ptr: f32 [n_split, hq, total queries] when STORE_LSE.
    ``kv_indices``: int32 page ids (PAGE > 0; else unused).
    """
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2, 64, HEAD_DIM], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], v_desc.layout)
    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    q_full = gl.allocate_shared_memory(gl.int64, [1], bar_layout)
    q_empty = gl.allocate_shared_memory(gl.int64, [1], bar_layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    mbarrier.init(q_full, count=1)
    # Both consumers read Q and every slot: free once both have arrived.
    mbarrier.init(q_empty, count=2)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    fence_async_shared()
    bars = (q_full, q_empty, k_ready, k_empty, v_ready, v_empty)
    # The argument tuples are written inline: a tuple assigned to a name first would turn
    # its constexpr members into tensors.
    gl.warp_specialize(
        [
            (_consumer0, (o_ptr, lse_ptr, qk_scale, total_qo, n_work, n_split, hq, group,
                          stride_os, stride_om, stride_oh, q_smem, k_smem, v_smem, bars, work,
                          HEAD_DIM, BLOCK_N, STAGES, CAUSAL, STORE_LSE, PAGE, PACK)),
            (_consumer1, (o_ptr, lse_ptr, qk_scale, total_qo, n_work, n_split, hq, group,
                          stride_os, stride_om, stride_oh, q_smem, k_smem, v_smem, bars, work,
                          HEAD_DIM, BLOCK_N, STAGES, CAUSAL, STORE_LSE, PAGE, PACK)),
            (_producer, (q_desc, k_desc, v_desc, q_smem, k_smem, v_smem, bars, n_work, n_split,
                         hq, group, work, kv_indices, page_rows, head_rows, head_cols, HEAD_DIM,
                         BLOCK_N, STAGES, CAUSAL, PAGE)),
        ],
        [4, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip
