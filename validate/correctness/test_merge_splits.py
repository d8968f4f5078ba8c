"""``merge_splits``: partial results of a split-KV launch, merged, are the attention over all
the keys, output and LSE, including rows that some or all splits saw nothing of.

The partials are made by the f32 reference over each split's keys, so this checks the merge
alone (the Gluon kernel's split is checked on an sm90 GPU, in test_gluon.py)."""

from __future__ import annotations

import pytest
import torch
from tether.pytest_plugin import device
from tether_kernels.arms import attention_ref

from validate.correctness._helpers import fresh_seed

pytestmark = pytest.mark.triton


def _partials(q, k, v, causal: bool, bounds: list[tuple[int, int]]):
    """Each split's normalised output and LSE over keys [lo, hi), causal masks aligned to the
    whole call (query i sees key j <= kv_len - qo_len + i)."""
    qo_len, kv_len = q.shape[1], k.shape[1]
    scale = q.shape[-1] ** -0.5
    outs, lses = [], []
    for lo, hi in bounds:
        kf = k.float()[:, lo:hi].repeat_interleave(q.shape[2] // k.shape[2], dim=2)
        vf = v.float()[:, lo:hi].repeat_interleave(q.shape[2] // k.shape[2], dim=2)
        s = torch.einsum("bmhd,bnhd->bhmn", q.float(), kf) * scale
        if causal:
            i = torch.arange(qo_len, device=q.device)[:, None]
            j = torch.arange(lo, hi, device=q.device)[None, :]
            s = s.masked_fill(j > i + (kv_len - qo_len), float("-inf"))
        lses.append(torch.logsumexp(s, dim=-1))
        p = torch.softmax(s, dim=-1).nan_to_num(0.0)
        outs.append(torch.einsum("bhmn,bnhd->bmhd", p, vf))
    return torch.stack(outs).contiguous(), torch.stack(lses).contiguous()


@pytest.mark.parametrize(
    ("dims", "causal", "bounds"),
    [
        pytest.param((1, 16, 64, 4, 2, 32), True, [(0, 16), (16, 48), (48, 64)], id="chunked-3"),
        pytest.param((2, 9, 40, 2, 1, 16), False, [(0, 20), (20, 40)], id="b2-full-2"),
        # qo > kv, causal: the first rows see no key at all; the last split is empty.
        pytest.param((1, 24, 16, 2, 2, 16), True, [(0, 8), (8, 16), (16, 16)], id="empty-rows"),
        # A head that is not a power of two (the Gluon kernel's 96, in two parts): the
        # merge pads its register tile and masks the columns past the head.
        pytest.param((1, 16, 48, 2, 1, 48), True, [(0, 24), (24, 48)], id="d48-padded"),
    ],
)
@pytest.mark.parametrize("want_lse", [True, False], ids=["lse", "no-lse"])
def test_merge_is_attention_over_all_keys(dims, causal: bool, bounds, want_lse: bool) -> None:
    import triton
    from tether_kernels.triton.merge import merge_splits

    batch, qo_len, kv_len, hq, hkv, d = dims
    gen = torch.Generator().manual_seed(fresh_seed())
    q = torch.randn(batch, qo_len, hq, d, generator=gen).to(device())
    k = torch.randn(batch, kv_len, hkv, d, generator=gen).to(device())
    v = torch.randn(batch, kv_len, hkv, d, generator=gen).to(device())
    o_part, lse_part = _partials(q, k, v, causal, bounds)
    ref, ref_lse = attention_ref(q, k, v, causal, return_lse=True)
    out = torch.full((batch, qo_len, hq, d), float("nan"), device=device())
    lse = torch.full((batch, hq, qo_len), float("nan"), device=device())
    rows = batch * qo_len * hq
    pad = {} if d & (d - 1) == 0 else {"HEAD_PAD": triton.next_power_of_2(d)}
    merge_splits[(triton.cdiv(rows, 16),)](
        o_part, lse_part, out, lse, rows, qo_len, hq,
        N_SPLIT=len(bounds), HEAD_DIM=d, ROWS=16, STORE_LSE=want_lse, **pad,
    )  # fmt: skip
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5), (out - ref).abs().max()
    if want_lse:
        assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
        seen = torch.isfinite(ref_lse)
        assert torch.allclose(lse[seen], ref_lse[seen], atol=1e-5, rtol=1e-5)
    else:
        assert torch.isnan(lse).all(), "STORE_LSE off wrote the LSE"
    if causal and qo_len > kv_len:
        assert (out[:, : qo_len - kv_len] == 0).all(), "a row that saw no key is not 0"
