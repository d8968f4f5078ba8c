"""Flash-attention forward for Hopper (sm90) in Gluon: the FlashAttention-3 schedule, spelled out.

Layout BSHD, contiguous: q [batch, qo_len, hq, d], k/v [batch, kv_len, hkv, d]; d is 64, 96, 128 or
256 (96 as two power-of-two parts, see ``_consumer``);
f16 or bf16. One program owns 128 query rows of one query head and runs three partitions
(``gl.warp_specialize``):

- a producer warp that issues TMA loads: the two 64-row Q tiles once, then K and V tiles of
  ``BLOCK_N`` keys into a ring of ``STAGES`` shared-memory slots, each slot guarded by a
  ready and an empty mbarrier (the consumers release a slot when their MMAs have read it);
- two consumer warpgroups, 64 query rows each (the default partition is consumer 0), which
  run S = Q K^T and O += P V on the tensor cores with ``warpgroup_mma`` (wgmma) and the
  online softmax on the CUDA cores.

Within a consumer (FlashAttention-3's intra-warpgroup overlap): the MMA of block j's scores
and the MMA of block j-1's P V are issued together; the softmax of block j then runs while
the P V MMA is still on the tensor cores. Across consumers (``PINGPONG``): two mbarriers pass
a turn back and forth so that one warpgroup issues its MMAs while the other runs its
softmax, keeping the tensor cores fed by one warpgroup while the other uses the CUDA cores.

Slot releases (``ONE_RELEASE``): by default a consumer releases a K slot once its score MMA
is done and a V slot once its P V MMA is done, two single-thread arrives per block. Triton
3.6 puts a warpgroup ``bar.sync`` before each arrive and one before the next wait, three per
block (read by hand from its compile, kernels/NOTES.md); with ``ONE_RELEASE`` the consumer arrives once per block, after both MMAs are done, on
``k_empty`` alone: release j frees block j's K slot and block j-1's V slot, and the producer
waits release j - STAGES for a K slot and release j - STAGES + 1 for a V slot (two
``bar.sync`` per block; ``v_empty`` is unused).

Two blocks per loop trip (``UNROLL``), an attempt: ptxas gives the P of consecutive blocks one
register set, since P is carried around the loop, so it moves the P V MMA's wait above the
softmax that writes the next P, and the overlap above is lost in the compiled loop. Unrolling
by two was meant to let P alternate between two sets; compiled without spills, ptxas still
puts the wait above the softmax (read by hand, kernels/NOTES.md), and its tuning run there
has it behind the loop of one block per trip.

Key blocks are visited from the last one (the causal diagonal and the key tail) down to the
first, so the blocks that need the per-element mask come first and run in the masked
variant of the step; the rest, which every row of the program sees in full, run unmasked.
Causal masks are aligned bottom-right (query i sees keys j <= kv_len - qo_len + i); a row that
sees no key gives 0 and lse -inf. Scores are in log2 units: ``qk_scale`` is sm_scale * log2(e)
applied inside one FMA per score (``s * qk_scale - m``), and the row max is taken of the raw
scores (the scale must be positive, which the launcher checks).

The grid launches the query tiles with the most keys first (causal) and varies the query head
fastest, so the query heads that share a kv head run side by side on the same K/V in L2.

Ragged batches (``RAGGED``): requests of their own lengths, packed one after another, in one
launch. The launcher lists every (request, query tile) once, sorted by key blocks, most first,
and each program reads its request's offsets; a request's tiles are masked at its own ends
exactly as a batch's tiles are at the batch's.

Split-KV (``n_split`` > 1): a short chunked call has too few query tiles to fill the GPU (128
queries over 32 heads make 32 programs for 132 SMs), so each tile's key blocks are shared among
``n_split`` programs, each visiting its own run of blocks last to first as above. Each writes
its rows' normalised partial output in f32 and its LSE; ``tether_kernels.triton.merge`` then
combines them into the output (``launch.split_count`` picks the split, ``GluonPlan`` launches
both).
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

from tether_kernels.gluon.compat import tma_load

BLOCK_M = 128  # query rows per program: two consumer warpgroups of 64 rows
# A ragged launch's work row: query tile, first query row, qo_len, first key row, kv_len.
WORK_FIELDS: gl.constexpr = gl.constexpr(5)
WG_M = 64  # query rows per consumer warpgroup (the wgmma M of one warpgroup)
LN2 = 0.6931471805599453


@gluon.jit
def _tile_coords(qo_len, kv_len, n_split, work, HQ: gl.constexpr, GROUP: gl.constexpr,
                 BLOCK_N: gl.constexpr, CAUSAL: gl.constexpr, RAGGED: gl.constexpr):  # fmt: skip
    """(batch, output batch row, query head, kv head, first query row, one past the program's
    last key block, key blocks it visits, masked ones among them, the first row of its
    request's queries and of its keys in the 2-D views, and the request's qo_len and kv_len).

    The program's tile sees key blocks [0, n_total); the last n_total - n_full need the
    per-element mask. A split-KV launch (n_split > 1) gives each of n_split programs of a tile
    an equal run of those blocks; every program visits its run from its last block down.

    RAGGED: program ``pid`` is work item ``pid // HQ`` of query head ``pid % HQ``; ``work``
    holds each item's row (query tile, its request's first query row, its qo_len, its first
    key row, its kv_len: int32, WORK_FIELDS of them), in the order the launcher sorted them
    (most key blocks first). The five loads are independent: one memory latency before the
    program's first TMA, where reading the request's offsets after its index took two.
    Never split."""
    if RAGGED:
        pid = gl.program_id(0)
        item = pid // HQ
        h = pid % HQ
        row = work + WORK_FIELDS * item
        tile = gl.load(row)
        q_start = gl.load(row + 1)
        r_qo = gl.load(row + 2)
        kv_start = gl.load(row + 3)
        r_kv = gl.load(row + 4)
        b = 0
        split = 0
        sb = 0
    else:
        n_m = gl.cdiv(qo_len, 128)
        bh_count = gl.num_programs(0) // (n_m * n_split)
        pid = gl.program_id(0)
        per_tile = bh_count * n_split
        tile = pid // per_tile
        rest = pid % per_tile
        split = rest // bh_count
        bh = rest % bh_count
        if CAUSAL:
            tile = n_m - 1 - tile  # most keys first: the grid's tail holds the short tiles
        b = bh // HQ
        h = bh % HQ
        r_qo = qo_len
        r_kv = kv_len
        q_start = b * qo_len
        kv_start = b * kv_len
        # The output row block this program writes: its batch's, in its split's slice of the
        # partial results ([n_split, batch, ...]) when the launch is split.
        sb = split * (bh_count // HQ) + b
    hk = h // GROUP
    m0 = tile * 128
    if CAUSAL:
        shift = r_kv - r_qo
        end = gl.minimum(r_kv, m0 + 128 + shift)  # one past the last key row m0+127 sees
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
    return b, sb, h, hk, m0, hi, count, n_masked, q_start, kv_start, r_qo, r_kv


@gluon.jit
def _producer(q_desc, k_desc, v_desc, q1_desc, k1_desc, v1_desc, q_smem, k_smem, v_smem,
              q1_smem, k1_smem, v1_smem, bars, qo_len, kv_len, n_split, work, HQ: gl.constexpr,
              GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, D0: gl.constexpr,
              BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
              RAGGED: gl.constexpr, ONE_RELEASE: gl.constexpr):  # fmt: skip
    """TMA loads of Q once and the K/V ring; a head split in two parts (``D0 < HEAD_DIM``)
    loads each tile as its two parts onto one barrier (columns [0, D0) and [D0, HEAD_DIM))."""
    q_bar, k_ready, k_empty, v_ready, v_empty, _turn = bars
    _b, _sb, h, hk, m0, hi, count, _n_masked, q_start, kv_row, _r_qo, _r_kv = _tile_coords(
        qo_len, kv_len, n_split, work, HQ, GROUP, BLOCK_N, CAUSAL, RAGGED)  # fmt: skip
    SPLIT: gl.constexpr = D0 < HEAD_DIM
    q_row = q_start + m0
    # Bytes each barrier expects, constants (a name assigned at run time would be a tensor).
    q_bytes: gl.constexpr = 2 * (
        q_desc.block_type.nbytes + (q1_desc.block_type.nbytes if SPLIT else 0)
    )
    k_bytes: gl.constexpr = k_desc.block_type.nbytes + (k1_desc.block_type.nbytes if SPLIT else 0)
    v_bytes: gl.constexpr = v_desc.block_type.nbytes + (v1_desc.block_type.nbytes if SPLIT else 0)
    mbarrier.expect(q_bar, q_bytes)
    tma_load(q_desc, [q_row, h * HEAD_DIM], q_bar, q_smem.index(0))
    tma_load(q_desc, [q_row + 64, h * HEAD_DIM], q_bar, q_smem.index(1))
    if SPLIT:
        tma_load(q1_desc, [q_row, h * HEAD_DIM + D0], q_bar,
                                        q1_smem.index(0))  # fmt: skip
        tma_load(q1_desc, [q_row + 64, h * HEAD_DIM + D0], q_bar,
                                        q1_smem.index(1))  # fmt: skip
    for j in range(count):
        n = hi - 1 - j
        s = j % STAGES
        phase = (j // STAGES) & 1
        # A fresh mbarrier counts as having completed the phase before 0: the first
        # STAGES waits on an empty slot pass at once.
        mbarrier.wait(k_empty.index(s), phase ^ 1)
        mbarrier.expect(k_ready.index(s), k_bytes)
        tma_load(k_desc, [kv_row + n * BLOCK_N, hk * HEAD_DIM], k_ready.index(s), k_smem.index(s))
        if SPLIT:
            tma_load(k1_desc, [kv_row + n * BLOCK_N, hk * HEAD_DIM + D0],
                                            k_ready.index(s), k1_smem.index(s))  # fmt: skip
        if ONE_RELEASE:
            # Visit j's V slot is free at release j - STAGES + 1 (k_empty[(j + 1) % STAGES]);
            # for j < STAGES - 1 that is before release 0, and the fresh barrier passes.
            mbarrier.wait(k_empty.index((j + 1) % STAGES), (((j + 1) // STAGES) & 1) ^ 1)
        else:
            mbarrier.wait(v_empty.index(s), phase ^ 1)
        mbarrier.expect(v_ready.index(s), v_bytes)
        tma_load(v_desc, [kv_row + n * BLOCK_N, hk * HEAD_DIM], v_ready.index(s), v_smem.index(s))
        if SPLIT:
            tma_load(v1_desc, [kv_row + n * BLOCK_N, hk * HEAD_DIM + D0],
                                            v_ready.index(s), v1_smem.index(s))  # fmt: skip


@gluon.jit
def _to_operand(p, dtype: gl.constexpr, PACK: gl.constexpr):
    """P in the MMA's 16-bit type. ``PACK``: two scores per ``cvt.rn.{bf16,f16}x2.f32``, each
    register as the P V MMA reads it (element 0 low), where ``p.to(dtype)`` converts one score
    at a time and ptxas (Triton 3.6's, read by hand: kernels/NOTES.md), packing the halves in
    the other order, adds two ``PRMT`` per register (both round to nearest even)."""
    if PACK:
        if dtype == gl.bfloat16:
            r = gl.inline_asm_elementwise("cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,r,r", [p],
                                          dtype=gl.bfloat16, is_pure=True, pack=2)  # fmt: skip
        else:
            r = gl.inline_asm_elementwise("cvt.rn.f16x2.f32 $0, $2, $1;", "=r,r,r", [p],
                                          dtype=gl.float16, is_pure=True, pack=2)  # fmt: skip
    else:
        r = p.to(dtype)
    return r


@gluon.jit
def _softmax(s, m_i, l_i, qk_scale, rows, n, kv_len, shift, BLOCK_N: gl.constexpr,
             s_layout: gl.constexpr, MASK: gl.constexpr, CAUSAL: gl.constexpr):  # fmt: skip
    """One block's online-softmax update; returns p (f32), alpha, and the new m and l."""
    if MASK:
        cols = n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        valid = gl.expand_dims(cols < kv_len, 0)
        if CAUSAL:
            valid = valid & (gl.expand_dims(cols, 0) <= gl.expand_dims(rows + shift, 1))
        s = gl.where(valid, s, -float("inf"))
    m_new = gl.maximum(m_i, gl.max(s, axis=1) * qk_scale)
    # Masked blocks: a row that has seen no key yet keeps m = -inf, and exp2 must not see
    # -inf - -inf. Unmasked blocks are seen in full by every row, so m is finite there.
    m_use = gl.where(m_new == -float("inf"), 0.0, m_new) if MASK else m_new
    alpha = gl.exp2(m_i - m_use)
    p = gl.exp2(s * qk_scale - gl.expand_dims(m_use, 1))
    l_i = l_i * alpha + gl.sum(p, axis=1)
    return p, alpha, m_new, l_i


@gluon.jit
def _consumer(WG: gl.constexpr, o_ptr, lse_ptr, qk_scale, qo_len, kv_len, n_split, stride_ob,
              stride_om, stride_oh, q_smem, k_smem, v_smem, q1_smem, k1_smem, v1_smem, bars,
              work, HQ: gl.constexpr, GROUP: gl.constexpr, HEAD_DIM: gl.constexpr,
              D0: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              CAUSAL: gl.constexpr, PINGPONG: gl.constexpr, STORE_LSE: gl.constexpr,
              RAGGED: gl.constexpr, ONE_RELEASE: gl.constexpr,
              UNROLL: gl.constexpr, PACK: gl.constexpr):  # fmt: skip
    """A head split in two parts (``D0 < HEAD_DIM``: 96 as 64 + 32, each part a power of two
    as register tiles must be) sums S over both parts' products and keeps O as two
    accumulators from one P; unsplit, the second part's names alias the first's and no code
    is generated for them."""
    q_bar, k_ready, k_empty, v_ready, v_empty, turn = bars
    dtype: gl.constexpr = q_smem.dtype
    SPLIT: gl.constexpr = D0 < HEAD_DIM
    D1: gl.constexpr = HEAD_DIM - D0 if D0 < HEAD_DIM else D0
    # One warpgroup, 64 rows: wgmma tiles of 16 rows per warp, N the whole tile width.
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BLOCK_N, 16]
    )
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D0, 16]
    )
    o1_layout: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, D1, 16]
    )
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    p1_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o1_layout, k_width=2)
    row_s: gl.constexpr = gl.SliceLayout(1, s_layout)
    row_o: gl.constexpr = gl.SliceLayout(1, o_layout)
    row_o1: gl.constexpr = gl.SliceLayout(1, o1_layout)

    _b, sb, h, _hk, m0, hi, count, n_masked, q_start, _kv_start, r_qo, r_kv = _tile_coords(
        qo_len, kv_len, n_split, work, HQ, GROUP, BLOCK_N, CAUSAL, RAGGED)  # fmt: skip
    shift = r_kv - r_qo
    rows = m0 + WG * 64 + gl.arange(0, 64, layout=row_s)
    q_tile = q_smem.index(WG)
    q1_tile = q1_smem.index(WG)
    my_turn = turn.index(WG)
    other_turn = turn.index(1 - WG)

    m_i = gl.full([64], -float("inf"), gl.float32, layout=row_s)
    l_i = gl.zeros([64], gl.float32, layout=row_s)
    acc = gl.zeros([64, D0], gl.float32, layout=o_layout)
    acc1 = gl.zeros([64, D1], gl.float32, layout=o1_layout) if SPLIT else acc
    s_zero = gl.zeros([64, BLOCK_N], gl.float32, layout=s_layout)
    mbarrier.wait(q_bar, 0)

    if count > 0:
        # Iteration 0, peeled: block hi - 1, always masked (it holds the diagonal or the key
        # tail whenever any block of the run does; a run below them masks nothing, which the
        # masked step computes the same); only its score MMA is issued.
        if PINGPONG:
            mbarrier.wait(my_turn, 1 - WG)  # consumer 0 goes first
        mbarrier.wait(k_ready.index(0), 0)
        s_tok = warpgroup_mma(q_tile, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False,
                              is_async=True)  # fmt: skip
        if SPLIT:
            s_tok = warpgroup_mma(q1_tile, k1_smem.index(0).permute((1, 0)), s_tok, is_async=True)
        if PINGPONG:
            mbarrier.arrive(other_turn)
        s = warpgroup_mma_wait(0, deps=(s_tok,))
        mbarrier.arrive(k_empty.index(0))
        p, _alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, rows, hi - 1, r_kv, shift,
                                      BLOCK_N, s_layout, True, CAUSAL)  # fmt: skip
        p_op = gl.convert_layout(_to_operand(p, dtype, PACK), p_layout)
        p1_op = gl.convert_layout(_to_operand(p, dtype, PACK), p1_layout) if SPLIT else p_op

        # The rest of the masked blocks (visited first: the run goes last to first), then the
        # unmasked ones: each iteration issues block
        # j's score MMA and block j-1's P V MMA, then runs block j's softmax.
        for j in range(1, gl.maximum(n_masked, 1)):
            acc, acc1, p_op, p1_op, m_i, l_i = _step(
                j, hi, acc, acc1, p_op, p1_op, m_i, l_i, qk_scale, rows, r_kv, shift, q_tile,
                q1_tile, k_smem, v_smem, k1_smem, v1_smem, k_ready, k_empty, v_ready, v_empty,
                my_turn, other_turn, s_zero, WG, BLOCK_N, STAGES, s_layout, row_o, row_o1,
                p_layout, p1_layout, True, CAUSAL, PINGPONG, SPLIT, ONE_RELEASE, PACK)  # fmt: skip
        first = gl.maximum(n_masked, 1)
        if UNROLL:
            # Two blocks per trip (an odd block first), meant to give P two register sets so
            # block j's softmax need not wait for block j-1's P V MMA (see the module doc: as
            # compiled, it still does).
            if (count - first) % 2 == 1:
                acc, acc1, p_op, p1_op, m_i, l_i = _step(
                    first, hi, acc, acc1, p_op, p1_op, m_i, l_i, qk_scale, rows, r_kv, shift,
                    q_tile, q1_tile, k_smem, v_smem, k1_smem, v1_smem, k_ready, k_empty,
                    v_ready, v_empty, my_turn, other_turn, s_zero, WG, BLOCK_N, STAGES,
                    s_layout, row_o, row_o1, p_layout, p1_layout, False, CAUSAL, PINGPONG,
                    SPLIT, ONE_RELEASE, PACK)  # fmt: skip
                first += 1
            for j in range(first, count, 2):
                acc, acc1, p_op, p1_op, m_i, l_i = _step(
                    j, hi, acc, acc1, p_op, p1_op, m_i, l_i, qk_scale, rows, r_kv, shift,
                    q_tile, q1_tile, k_smem, v_smem, k1_smem, v1_smem, k_ready, k_empty,
                    v_ready, v_empty, my_turn, other_turn, s_zero, WG, BLOCK_N, STAGES,
                    s_layout, row_o, row_o1, p_layout, p1_layout, False, CAUSAL, PINGPONG,
                    SPLIT, ONE_RELEASE, PACK)  # fmt: skip
                acc, acc1, p_op, p1_op, m_i, l_i = _step(
                    j + 1, hi, acc, acc1, p_op, p1_op, m_i, l_i, qk_scale, rows, r_kv, shift,
                    q_tile, q1_tile, k_smem, v_smem, k1_smem, v1_smem, k_ready, k_empty,
                    v_ready, v_empty, my_turn, other_turn, s_zero, WG, BLOCK_N, STAGES,
                    s_layout, row_o, row_o1, p_layout, p1_layout, False, CAUSAL, PINGPONG,
                    SPLIT, ONE_RELEASE, PACK)  # fmt: skip
        else:
            for j in range(first, count):
                acc, acc1, p_op, p1_op, m_i, l_i = _step(
                    j, hi, acc, acc1, p_op, p1_op, m_i, l_i, qk_scale, rows, r_kv, shift,
                    q_tile, q1_tile, k_smem, v_smem, k1_smem, v1_smem, k_ready, k_empty,
                    v_ready, v_empty, my_turn, other_turn, s_zero, WG, BLOCK_N, STAGES,
                    s_layout, row_o, row_o1, p_layout, p1_layout, False, CAUSAL, PINGPONG,
                    SPLIT, ONE_RELEASE, PACK)  # fmt: skip

        # The last block's P V.
        last = count - 1
        ls = last % STAGES
        mbarrier.wait(v_ready.index(ls), (last // STAGES) & 1)
        o_tok = warpgroup_mma(p_op, v_smem.index(ls), acc, is_async=True)
        if SPLIT:
            o1_tok = warpgroup_mma(p1_op, v1_smem.index(ls), acc1, is_async=True)
        acc = warpgroup_mma_wait(0, deps=(o_tok,))
        if SPLIT:
            acc1 = warpgroup_mma_wait(0, deps=(o1_tok,))
        if ONE_RELEASE:
            mbarrier.arrive(k_empty.index(count % STAGES))  # release count: the last V slot
        else:
            mbarrier.arrive(v_empty.index(ls))

    # Epilogue: normalise, store the rows that exist; rows that saw no key give 0, lse -inf.
    l_o = gl.convert_layout(l_i, row_o)
    acc = acc / gl.expand_dims(gl.where(l_o == 0.0, 1.0, l_o), 1)
    rows_o = m0 + WG * 64 + gl.arange(0, 64, layout=row_o)
    cols_o = gl.arange(0, D0, layout=gl.SliceLayout(0, o_layout))
    o_base = o_ptr + sb * stride_ob + h * stride_oh
    if RAGGED:
        o_base += q_start * stride_om  # the request's rows of the packed output
    offs = gl.expand_dims(rows_o * stride_om, 1) + gl.expand_dims(cols_o, 0)
    # The inputs' dtype, or f32 into a split-KV launch's partial results.
    gl.store(o_base + offs, acc.to(o_ptr.dtype.element_ty), mask=gl.expand_dims(rows_o < r_qo, 1))
    if SPLIT:
        l_o1 = gl.convert_layout(l_i, row_o1)
        acc1 = acc1 / gl.expand_dims(gl.where(l_o1 == 0.0, 1.0, l_o1), 1)
        rows_o1 = m0 + WG * 64 + gl.arange(0, 64, layout=row_o1)
        cols_o1 = D0 + gl.arange(0, D1, layout=gl.SliceLayout(0, o1_layout))
        offs1 = gl.expand_dims(rows_o1 * stride_om, 1) + gl.expand_dims(cols_o1, 0)
        gl.store(o_base + offs1, acc1.to(o_ptr.dtype.element_ty),
                 mask=gl.expand_dims(rows_o1 < r_qo, 1))  # fmt: skip
    if STORE_LSE:
        lse = gl.where(l_i > 0.0, (m_i + gl.log2(l_i)) * 0.6931471805599453, -float("inf"))
        # Ragged: [HQ, total queries] (the kernel's qo_len is the packed total there).
        lse_base = lse_ptr + (h * qo_len + q_start if RAGGED else (sb * HQ + h) * qo_len)
        gl.store(lse_base + rows, lse, mask=rows < r_qo)


@gluon.jit
def _step(j, hi, acc, acc1, p_op, p1_op, m_i, l_i, qk_scale, rows, kv_len, shift, q_tile,
          q1_tile, k_smem, v_smem, k1_smem, v1_smem, k_ready, k_empty, v_ready, v_empty,
          my_turn, other_turn, s_zero, WG: gl.constexpr, BLOCK_N: gl.constexpr,
          STAGES: gl.constexpr, s_layout: gl.constexpr, row_o: gl.constexpr,
          row_o1: gl.constexpr, p_layout: gl.constexpr, p1_layout: gl.constexpr,
          MASK: gl.constexpr, CAUSAL: gl.constexpr, PINGPONG: gl.constexpr,
          SPLIT: gl.constexpr, ONE_RELEASE: gl.constexpr, PACK: gl.constexpr):  # fmt: skip
    """Iteration j >= 1: S_j = Q K_j^T and O += P_{j-1} V_{j-1} on the tensor cores, then
    block j's softmax on the CUDA cores while the P V MMA finishes (a split head: both
    parts' products, S summed over them, O in its two accumulators)."""
    s_idx = j % STAGES
    prev = (j - 1) % STAGES
    mbarrier.wait(k_ready.index(s_idx), (j // STAGES) & 1)
    mbarrier.wait(v_ready.index(prev), ((j - 1) // STAGES) & 1)
    if PINGPONG:
        mbarrier.wait(my_turn, (j & 1) ^ (1 - WG))
    s_tok = warpgroup_mma(q_tile, k_smem.index(s_idx).permute((1, 0)), s_zero, use_acc=False,
                          is_async=True)  # fmt: skip
    if SPLIT:
        s_tok = warpgroup_mma(q1_tile, k1_smem.index(s_idx).permute((1, 0)), s_tok, is_async=True)
    o_tok = warpgroup_mma(p_op, v_smem.index(prev), acc, is_async=True)
    if SPLIT:
        o1_tok = warpgroup_mma(p1_op, v1_smem.index(prev), acc1, is_async=True)
    if PINGPONG:
        mbarrier.arrive(other_turn)
    # The score MMAs, issued first, are done; the P V ones (one per head part) may not be.
    s = warpgroup_mma_wait(2 if SPLIT else 1, deps=(s_tok,))
    if not ONE_RELEASE:
        mbarrier.arrive(k_empty.index(s_idx))
    p, alpha, m_i, l_i = _softmax(s, m_i, l_i, qk_scale, rows, hi - 1 - j, kv_len, shift,
                                  BLOCK_N, s_layout, MASK, CAUSAL)  # fmt: skip
    acc = warpgroup_mma_wait(0, deps=(o_tok,))
    if SPLIT:
        acc1 = warpgroup_mma_wait(0, deps=(o1_tok,))
    if ONE_RELEASE:
        mbarrier.arrive(k_empty.index(s_idx))  # release j: block j's K slot, block j-1's V slot
    else:
        mbarrier.arrive(v_empty.index(prev))
    acc = acc * gl.expand_dims(gl.convert_layout(alpha, row_o), 1)
    p_op = gl.convert_layout(_to_operand(p, q_tile.dtype, PACK), p_layout)
    if SPLIT:
        acc1 = acc1 * gl.expand_dims(gl.convert_layout(alpha, row_o1), 1)
        p1_op = gl.convert_layout(_to_operand(p, q_tile.dtype, PACK), p1_layout)
    return acc, acc1, p_op, p1_op, m_i, l_i


@gluon.jit
def _consumer0(o_ptr, lse_ptr, qk_scale, qo_len, kv_len, n_split, stride_ob, stride_om, stride_oh,
               q_smem, k_smem, v_smem, q1_smem, k1_smem, v1_smem, bars, work, HQ: gl.constexpr,
               GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, D0: gl.constexpr,
               BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
               PINGPONG: gl.constexpr, STORE_LSE: gl.constexpr, RAGGED: gl.constexpr,
               ONE_RELEASE: gl.constexpr, UNROLL: gl.constexpr, PACK: gl.constexpr):  # fmt: skip
    _consumer(0, o_ptr, lse_ptr, qk_scale, qo_len, kv_len, n_split, stride_ob, stride_om,
              stride_oh, q_smem, k_smem, v_smem, q1_smem, k1_smem, v1_smem, bars, work, HQ,
              GROUP, HEAD_DIM, D0, BLOCK_N, STAGES, CAUSAL, PINGPONG, STORE_LSE, RAGGED,
              ONE_RELEASE, UNROLL, PACK)  # fmt: skip


@gluon.jit
def _consumer1(o_ptr, lse_ptr, qk_scale, qo_len, kv_len, n_split, stride_ob, stride_om, stride_oh,
               q_smem, k_smem, v_smem, q1_smem, k1_smem, v1_smem, bars, work, HQ: gl.constexpr,
               GROUP: gl.constexpr, HEAD_DIM: gl.constexpr, D0: gl.constexpr,
               BLOCK_N: gl.constexpr, STAGES: gl.constexpr, CAUSAL: gl.constexpr,
               PINGPONG: gl.constexpr, STORE_LSE: gl.constexpr, RAGGED: gl.constexpr,
               ONE_RELEASE: gl.constexpr, UNROLL: gl.constexpr, PACK: gl.constexpr):  # fmt: skip
    _consumer(1, o_ptr, lse_ptr, qk_scale, qo_len, kv_len, n_split, stride_ob, stride_om,
              stride_oh, q_smem, k_smem, v_smem, q1_smem, k1_smem, v1_smem, bars, work, HQ,
              GROUP, HEAD_DIM, D0, BLOCK_N, STAGES, CAUSAL, PINGPONG, STORE_LSE, RAGGED,
              ONE_RELEASE, UNROLL, PACK)  # fmt: skip


@gluon.jit
def attn_fwd_sm90(q_desc, k_desc, v_desc, q1_desc, k1_desc, v1_desc, o_ptr, lse_ptr, qk_scale,
                  qo_len, kv_len, n_split, stride_ob, stride_om, stride_oh, work,
                  HQ: gl.constexpr, GROUP: gl.constexpr, HEAD_DIM: gl.constexpr,
                  D0: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                  CAUSAL: gl.constexpr, PINGPONG: gl.constexpr, STORE_LSE: gl.constexpr,
                  PRODUCER_REGS: gl.constexpr, CONSUMER_REGS: gl.constexpr,
                  RAGGED: gl.constexpr = False, ONE_RELEASE: gl.constexpr = False,
                  UNROLL: gl.constexpr = False, PACK: gl.constexpr = False):  # fmt: skip
    """Grid: (cdiv(qo_len, 128) * n_split * batch * HQ,); num_warps=4 (consumer 0); see the
    module doc.

    n_split 1: o_ptr is the output (the inputs' dtype, strides as given) and lse_ptr, when
    STORE_LSE, the f32 [batch, HQ, qo_len] LSE. n_split > 1 (split-KV, STORE_LSE on): each
    tile's key blocks are shared among n_split programs, each of which writes its normalised
    partial output, f32, into o_ptr's [n_split, batch, qo_len, HQ, HEAD_DIM] (stride_ob the
    batch stride, so a split's slice follows the last batch's) and its LSE into lse_ptr's
    [n_split, batch, HQ, qo_len]; ``merge.merge_splits`` combines them.

    q_desc: [batch * qo_len, HQ * HEAD_DIM] with 64 x D0 blocks; k_desc, v_desc:
    [batch * kv_len, hkv * HEAD_DIM] with BLOCK_N x D0 blocks. Rows a tile reads past
    its own batch's end (another batch's rows, or zeros past the tensor) are masked out of
    the scores (keys) or never stored (queries). D0 is HEAD_DIM, or the first part of a head
    that is not a power of two (96: 64, then 32): q1_desc, k1_desc and v1_desc then describe
    the same tensors in blocks of the second part's width, read at column offset D0; unsplit
    they are None (constexprs: the launcher neither builds nor passes them).

    RAGGED (``ragged_prefill``: requests of their own lengths, packed): the grid is (work
    items * HQ,), qo_len and kv_len are the packed totals, q_desc and k_desc/v_desc describe
    [total queries, HQ * HEAD_DIM] and [total keys, hkv * HEAD_DIM], o_ptr is [total queries,
    HQ, HEAD_DIM] and lse_ptr [HQ, total queries]; ``work`` (int32 rows of WORK_FIELDS: query
    tile, the request's first query row, qo_len, first key row, kv_len) places each program
    (``_tile_coords``). A tile's rows past its request's end are the next request's (or
    zeros), masked as a batch's are. Otherwise ``work`` is None (a constexpr, never passed).
    """
    dtype: gl.constexpr = q_desc.dtype
    q_smem = gl.allocate_shared_memory(dtype, [2, 64, D0], q_desc.layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D0], k_desc.layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D0], v_desc.layout)
    if D0 < HEAD_DIM:
        D1: gl.constexpr = HEAD_DIM - D0
        q1_smem = gl.allocate_shared_memory(dtype, [2, 64, D1], q1_desc.layout)
        k1_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D1], k1_desc.layout)
        v1_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, D1], v1_desc.layout)
    else:
        q1_smem = q_smem
        k1_smem = k_smem
        v1_smem = v_smem
    bar_layout: gl.constexpr = mbarrier.MBarrierLayout()
    q_bar = gl.allocate_shared_memory(gl.int64, [1], bar_layout)
    k_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    k_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    v_ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    v_empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], bar_layout)
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], bar_layout)
    mbarrier.init(q_bar, count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(k_ready.index(i), count=1)
        mbarrier.init(v_ready.index(i), count=1)
        # Both consumers read every slot; the slot is free once both have arrived.
        mbarrier.init(k_empty.index(i), count=2)
        mbarrier.init(v_empty.index(i), count=2)
    mbarrier.init(turn.index(0), count=1)
    mbarrier.init(turn.index(1), count=1)
    fence_async_shared()
    bars = (q_bar, k_ready, k_empty, v_ready, v_empty, turn)
    # The argument tuples are written inline: a tuple assigned to a name first would turn
    # its constexpr members into tensors.
    gl.warp_specialize(
        [
            (_consumer0, (o_ptr, lse_ptr, qk_scale, qo_len, kv_len, n_split, stride_ob, stride_om,
                          stride_oh, q_smem, k_smem, v_smem, q1_smem, k1_smem, v1_smem, bars,
                          work, HQ, GROUP, HEAD_DIM, D0, BLOCK_N, STAGES, CAUSAL, PINGPONG,
                          STORE_LSE, RAGGED, ONE_RELEASE, UNROLL, PACK)),
            (_consumer1, (o_ptr, lse_ptr, qk_scale, qo_len, kv_len, n_split, stride_ob, stride_om,
                          stride_oh, q_smem, k_smem, v_smem, q1_smem, k1_smem, v1_smem, bars,
                          work, HQ, GROUP, HEAD_DIM, D0, BLOCK_N, STAGES, CAUSAL, PINGPONG,
                          STORE_LSE, RAGGED, ONE_RELEASE, UNROLL, PACK)),
            (_producer, (q_desc, k_desc, v_desc, q1_desc, k1_desc, v1_desc, q_smem, k_smem,
                         v_smem, q1_smem, k1_smem, v1_smem, bars, qo_len, kv_len, n_split,
                         work, HQ, GROUP, HEAD_DIM, D0, BLOCK_N, STAGES, CAUSAL, RAGGED,
                         ONE_RELEASE)),
        ],
        [4, 1],
        [CONSUMER_REGS, PRODUCER_REGS],
    )  # fmt: skip
