"""Merging the partial results of a split-KV launch: one output and one LSE per query row.

A split-KV launch shares one query tile's key blocks among ``n_split`` programs. Each writes
the attention of its rows over its own keys, normalised, in f32 (``O_s``), and that softmax's
log-sum-exp (``lse_s``, natural log; -inf where a row saw none of the split's keys). Over all
the keys, with ``M = max_s lse_s`` and ``w_s = exp(lse_s - M)``:

    O = sum_s w_s O_s / sum_s w_s,    lse = M + log(sum_s w_s)

A row that saw no key in any split gives 0 and lse -inf, as the unsplit kernels do. One
program merges ``ROWS`` query rows (a row is one token's one head), the splits unrolled.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def merge_splits(o_part, lse_part, out, lse_out, n_rows, qo_len, hq, N_SPLIT: tl.constexpr,
                 HEAD_DIM: tl.constexpr, ROWS: tl.constexpr, STORE_LSE: tl.constexpr,
                 HEAD_PAD: tl.constexpr = None):  # fmt: skip
    """o_part f32 [N_SPLIT, n_rows, HEAD_DIM], rows in BSHD order (token-major, heads
    inside); lse_part f32 [N_SPLIT, batch, hq, qo_len]; out [n_rows, HEAD_DIM] contiguous,
    the inputs' dtype; lse_out f32 [batch, hq, qo_len] when STORE_LSE. Grid:
    (cdiv(n_rows, ROWS),). HEAD_PAD: the register tile's width, the next power of two of a
    HEAD_DIM that is not one (96: 128, the columns past the head masked); None: HEAD_DIM."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    live = rows < n_rows
    if HEAD_PAD is None:
        cols = tl.arange(0, HEAD_DIM)
        keep = live[:, None]
    else:
        cols = tl.arange(0, HEAD_PAD)
        keep = live[:, None] & (cols < HEAD_DIM)[None, :]
    # BSHD row r is (token r // hq, head r % hq); the LSE is laid out [batch, hq, qo_len].
    token = rows // hq
    head = rows % hq
    lse_at = ((token // qo_len) * hq + head) * qo_len + token % qo_len
    m = tl.full([ROWS], -float("inf"), tl.float32)
    for s in tl.static_range(N_SPLIT):
        m = tl.maximum(m, tl.load(lse_part + s * n_rows + lse_at, mask=live, other=-float("inf")))
    # Rows no split saw: every w_s is exp(-inf) = 0 against a finite stand-in for M.
    m_use = tl.where(m == -float("inf"), 0.0, m)
    total = tl.zeros([ROWS], tl.float32)
    acc = tl.zeros([ROWS, HEAD_DIM if HEAD_PAD is None else HEAD_PAD], tl.float32)
    offs = rows[:, None] * HEAD_DIM + cols[None, :]
    for s in tl.static_range(N_SPLIT):
        w = tl.exp(tl.load(lse_part + s * n_rows + lse_at, mask=live, other=-float("inf")) - m_use)
        total += w
        part = tl.load(o_part + s * n_rows * HEAD_DIM + offs, mask=keep, other=0.0)
        acc += w[:, None] * part
    acc = acc / tl.where(total == 0.0, 1.0, total)[:, None]
    tl.store(out + offs, acc.to(out.dtype.element_ty), mask=keep)
    if STORE_LSE:
        # log of a stand-in where total is 0: both sides of the where are evaluated.
        lse = tl.where(
            total > 0.0, m_use + tl.log(tl.where(total > 0.0, total, 1.0)), -float("inf")
        )
        tl.store(lse_out + lse_at, lse, mask=live)


__all__ = ["merge_splits"]
