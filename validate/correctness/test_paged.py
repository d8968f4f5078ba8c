"""paged_prefill: attention over a paged KV cache, against the f32 reference per request.

Each case builds a cache of pages in a shuffled order, some shared between requests (a cached
prefix), the last page of a request partly full, and one-token requests; the reference reads
each request's keys out of the cache slot by slot (a Python loop, independent of either route)
and judges each request's rows by the suite's tolerance rule. Both routes are checked on
their own: ``triton`` (the kernel reading the pages in place: the interpreter on the CPU, f16
and f32) and ``gather`` (the pages gathered, then ragged_prefill). Slots and pages no request
names hold NaN, so a read of one shows in the output.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch
from tether.errors import UsageError
from tether.pytest_plugin import current_arch, device
from tether_kernels import Ragged, paged, route
from tether_kernels.arms import torch_dtype
from tether_kernels.paged import (
    PAGED_ROUTES,
    Paged,
    gather_first,
    paged_prefill,
    paged_routes,
    route_paged,
)

from validate.correctness._helpers import BF16_REASON, assert_matches_per_request, fresh_seed


def _cache(
    kv_lens: tuple[int, ...], page_size: int, hkv: int, d: int, dtype: str, layout: str,
    seed: int, share: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, list[int], list[int], list[int]]:  # fmt: skip
    """(k_cache, v_cache, kv_indptr, kv_indices, kv_last_page_len): random keys and values in
    pages taken in a shuffled order from a pool with spare pages; request 1 reuses request 0's
    first ``share`` pages (full ones: its keys there are request 0's). Every slot no request
    reads is NaN."""
    rng = random.Random(seed)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    need = [-(-n // page_size) for n in kv_lens]
    pool = list(range(sum(need) + 3))
    rng.shuffle(pool)
    tables: list[list[int]] = []
    for i, n in enumerate(need):
        own = min(share, n - 1) if i == 1 else 0
        shared = tables[0][:own] if own else []
        tables.append(shared + [pool.pop() for _ in range(n - own)])
    num_pages = max(max(t) for t in tables) + 2
    nhd = torch.full((num_pages, page_size, hkv, d), float("nan"))
    vals = torch.full_like(nhd, float("nan"))
    for t, n in zip(tables, kv_lens, strict=True):
        for j in range(n):
            page, slot = t[j // page_size], j % page_size
            if torch.isnan(nhd[page, slot]).any():  # a shared page is written once
                nhd[page, slot] = torch.randn(hkv, d, generator=gen)
                vals[page, slot] = torch.randn(hkv, d, generator=gen)
    dt = torch_dtype(dtype)
    k_cache, v_cache = (x.to(device=device(), dtype=dt) for x in (nhd, vals))
    if layout == "HND":
        k_cache, v_cache = (x.transpose(1, 2).contiguous() for x in (k_cache, v_cache))
    indptr = [0, *itertools.accumulate(need)]
    last = [n - (m - 1) * page_size for n, m in zip(kv_lens, need, strict=True)]
    return k_cache, v_cache, indptr, [p for t in tables for p in t], last


def _keys_of(
    cache: torch.Tensor, layout: str, indptr: list[int], indices: list[int],
    kv_lens: tuple[int, ...], page_size: int,
) -> torch.Tensor:  # fmt: skip
    """Every request's keys (or values) read out of the cache one slot at a time, packed."""
    rows = []
    for i, n in enumerate(kv_lens):
        table = indices[indptr[i] : indptr[i + 1]]
        for j in range(n):
            page, slot = table[j // page_size], j % page_size
            rows.append(cache[page, slot] if layout == "NHD" else cache[page, :, slot])
    return torch.stack(rows)


def _q(call: Ragged, seed: int) -> tuple[torch.Tensor, list[int]]:
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    q = torch.randn(call.total_qo, call.hq, call.head_dim, generator=gen)
    return q.to(device=device(), dtype=torch_dtype(call.dtype)), [
        0,
        *itertools.accumulate(call.qo_lens),
    ]


def _routes(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paged, "PAGED_ROUTES", (name,))
    paged.clear_plans()


# One-token requests, a chunk over a long cache, a request with more queries than keys
# (rows that see none), lengths off every page and tile boundary; request 1 shares request
# 0's first page.
QO_LENS = (1, 33, 5, 1, 20)
KV_LENS = (70, 95, 5, 1, 9)

ROUTES = [
    pytest.param(
        "triton", marks=pytest.mark.triton(reason="the in-place route is a Triton kernel")
    ),
    pytest.param("gather"),
]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("page_size", [1, 16, 32, 64])
def test_paged_prefill_matches_the_reference_per_request(
    route: str, layout: str, page_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _routes(route, monkeypatch)
    call = Ragged(QO_LENS, KV_LENS, 8, 2, 64, "f16", True)
    seed = fresh_seed()
    share = 1 if KV_LENS[0] // page_size >= 1 else 0
    k_cache, v_cache, indptr, indices, last = _cache(
        KV_LENS, page_size, 2, 64, "f16", layout, seed, share
    )
    q, qo = _q(call, seed)
    out, lse = paged_prefill(
        q, k_cache, v_cache, qo, indptr, indices, last, kv_layout=layout, return_lse=True
    )
    assert list(paged._PLANS.values())[-1].route == route
    k = _keys_of(k_cache, layout, indptr, indices, KV_LENS, page_size)
    v = _keys_of(v_cache, layout, indptr, indices, KV_LENS, page_size)
    kv = [0, *itertools.accumulate(KV_LENS)]
    assert_matches_per_request(
        f"paged_prefill {route} {layout} page {page_size}", call, q, k, v, qo, kv, out, lse, seed
    )
    again, lse_again = paged_prefill(
        q, k_cache, v_cache, qo, indptr, indices, last, kv_layout=layout, return_lse=True
    )
    assert torch.equal(again, out) and torch.equal(lse_again, lse)


DTYPES = [
    pytest.param("f32", id="f32"),
    pytest.param("bf16", id="bf16", marks=pytest.mark.gpu(reason=BF16_REASON)),
]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    ("hq", "hkv", "d", "causal"),
    [(4, 4, 64, True), (8, 1, 128, False), (6, 2, 40, True), (4, 2, 256, True)],
)
def test_dtypes_heads_and_head_dims(
    route: str, dtype: str, hq: int, hkv: int, d: int, causal: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    if route == "triton" and dtype == "bf16" and current_arch() == "cpu":
        pytest.skip(BF16_REASON)
    _routes(route, monkeypatch)
    qo_lens, kv_lens = (17, 1, 40), (17, 60, 41)
    call = Ragged(qo_lens, kv_lens, hq, hkv, d, dtype, causal)
    seed = fresh_seed()
    k_cache, v_cache, indptr, indices, last = _cache(kv_lens, 16, hkv, d, dtype, "NHD", seed)
    q, qo = _q(call, seed)
    out = paged_prefill(q, k_cache, v_cache, qo, indptr, indices, last, causal=causal)
    k = _keys_of(k_cache, "NHD", indptr, indices, kv_lens, 16)
    v = _keys_of(v_cache, "NHD", indptr, indices, kv_lens, 16)
    kv = [0, *itertools.accumulate(kv_lens)]
    assert_matches_per_request("paged_prefill", call, q, k, v, qo, kv, out, None, seed)


def test_a_block_table_is_the_same_page_table() -> None:
    call = Ragged((3, 20, 1), (40, 20, 33), 4, 2, 64, "f32", True)
    seed = fresh_seed()
    k_cache, v_cache, indptr, indices, last = _cache(call.kv_lens, 16, 2, 64, "f32", "NHD", seed)
    q, qo = _q(call, seed)
    want = paged_prefill(q, k_cache, v_cache, qo, indptr, indices, last)
    width = max(b - a for a, b in itertools.pairwise(indptr)) + 2
    rows = [indices[a:b] + [0] * (width - (b - a)) for a, b in itertools.pairwise(indptr)]
    for table in (rows, torch.tensor(rows, dtype=torch.int32)):
        got = paged_prefill(q, k_cache, v_cache, qo, block_table=table, kv_lens=call.kv_lens)
        assert torch.equal(got, want)


def test_a_page_table_is_planned_once_and_each_new_table_again() -> None:
    call = Ragged((9, 4), (30, 12), 4, 2, 64, "f32", True)
    seed = fresh_seed()
    k_cache, v_cache, indptr, indices, last = _cache(call.kv_lens, 16, 2, 64, "f32", "NHD", seed)
    q, qo = _q(call, seed)
    paged.clear_plans()
    first = paged_prefill(q, k_cache, v_cache, qo, indptr, indices, last)
    paged_prefill(q, k_cache, v_cache, tuple(qo), torch.tensor(indptr), tuple(indices), last)
    assert len(paged._PLANS) == 1
    # Request 1's page moved: another table, planned afresh, and its answer reads the new page.
    moved = [*indices[:-1], max(indices) + 1]
    k2, v2 = k_cache.clone(), v_cache.clone()
    k2[moved[-1]], v2[moved[-1]] = k_cache[indices[-1]], v_cache[indices[-1]]
    k2[indices[-1]] = float("nan")
    again = paged_prefill(q, k2, v2, qo, indptr, moved, last)
    assert len(paged._PLANS) == 2
    assert torch.equal(again, first)


def test_the_route_reads_pages_in_place_where_triton_serves_and_gathers_elsewhere() -> None:
    # MHA: ragged_prefill runs each request on its own there, so the pages are read in place.
    call = Paged((5, 1), (40, 7), 16, 8, 8, 64, "bf16", True)
    assert not gather_first(call, "sm90")
    assert route_paged(call, "sm90") == "triton"
    assert route_paged(call, "sm90", inplace="rows not contiguous") == "gather"
    # bf16 tl.dot is wrong in the interpreter: the CPU's triton arm refuses it, gather serves.
    assert route_paged(call, "cpu") == "gather"


def test_sm90_gathers_first_where_the_packed_batch_takes_the_gluon_launch() -> None:
    """The same requests at a GQA layout: packed, ragged_prefill gives them the Gluon kernel's
    one launch on sm90, so paged_prefill gathers the pages first; on gfx942 (no Gluon) and
    for a batch of one request (per_request) it reads them in place."""
    call = Paged((5, 1), (40, 7), 16, 8, 2, 64, "bf16", True)
    assert route("ragged_prefill", call.ragged, "sm90") == "gluon"
    assert gather_first(call, "sm90")
    assert paged_routes(call, "sm90") == ("gather", "triton")
    assert route_paged(call, "sm90") == "gather"
    assert paged_routes(call, "gfx942") == PAGED_ROUTES
    one = Paged((5,), (40,), 16, 8, 2, 64, "bf16", True)
    assert route_paged(one, "sm90") == "triton"


def _small() -> tuple[torch.Tensor, ...]:
    q = torch.randn(6, 4, 16, device=device())
    k_cache = torch.randn(5, 4, 2, 16, device=device())
    return q, k_cache, torch.randn_like(k_cache)


BAD = [
    (
        "an index past the cache",
        dict(kv_indptr=[0, 1, 2], kv_indices=[0, 5], kv_last_page_len=[4, 4]),
        "kv_indices names page 5 \\(entry 1\\); the cache holds pages 0 to 4",
    ),
    (
        "a negative index",
        dict(kv_indptr=[0, 1, 2], kv_indices=[-1, 2], kv_last_page_len=[4, 4]),
        "names page -1",
    ),
    (
        "a block table shorter than the lengths",
        dict(block_table=[[0, 1], [2, 3]], kv_lens=[4, 9]),
        "block_table row 1 holds 2 pages, but kv_lens\\[1\\] = 9 keys need 3 pages of 4",
    ),
    (
        "a last page fuller than a page",
        dict(kv_indptr=[0, 1, 2], kv_indices=[0, 1], kv_last_page_len=[4, 5]),
        "kv_last_page_len\\[1\\] is 5; a last page holds 1 to page_size \\(4\\)",
    ),
    (
        "a request with no page",
        dict(kv_indptr=[0, 2, 2], kv_indices=[0, 1], kv_last_page_len=[4, 4]),
        "kv_indptr gives request 1 0 pages",
    ),
    (
        "kv_indptr past the indices",
        dict(kv_indptr=[0, 1, 3], kv_indices=[0, 1], kv_last_page_len=[4, 4]),
        "kv_indptr ends at 3, but kv_indices holds 2 pages",
    ),
    (
        "both forms",
        dict(kv_indptr=[0, 1, 2], kv_indices=[0, 1], kv_last_page_len=[4, 4], kv_lens=[4, 4]),
        "one form, all of its parts",
    ),
    ("no page table", {}, "one form, all of its parts"),
    (
        "a float table",
        dict(kv_indptr=torch.tensor([0.0, 1.0, 2.0]), kv_indices=[0, 1], kv_last_page_len=[4, 4]),
        "kv_indptr must be a 1-D integer tensor",
    ),
]


@pytest.mark.parametrize(("what", "table", "match"), BAD, ids=[b[0] for b in BAD])
def test_bad_page_tables_are_refused_before_anything_runs(
    what: str, table: dict, match: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    q, k_cache, v_cache = _small()
    ran: list[str] = []
    monkeypatch.setattr(paged, "_run_plan", lambda p, *a: ran.append(p.route))
    with pytest.raises(UsageError, match=match):
        paged_prefill(q, k_cache, v_cache, [0, 2, 6], **table)
    assert ran == []


def test_bad_tensors_are_refused_with_their_names() -> None:
    q, k_cache, v_cache = _small()
    table = dict(kv_indptr=[0, 1, 2], kv_indices=[0, 1], kv_last_page_len=[4, 4])
    cases = [
        ((q.half(), k_cache, v_cache), "q, k_cache, v_cache dtypes differ"),
        (
            (q, k_cache, v_cache[:, :3]),
            "k_cache \\(5, 4, 2, 16\\) and v_cache \\(5, 3, 2, 16\\) differ",
        ),
        ((q[:, :3], k_cache, v_cache), "q has 3 heads, not a multiple of the cache's 2"),
        (
            (q, k_cache[0], v_cache[0]),
            "k_cache must be 4-D \\[num_pages, page_size, hkv, head_dim\\]",
        ),
        ((q, k_cache.to("meta"), v_cache), "must be on one device"),
        ((q[..., :8], k_cache, v_cache), "q's head_dim 8 is not the cache's 16"),
    ]
    for (a, b, c), match in cases:
        with pytest.raises(UsageError, match=match):
            paged_prefill(a, b, c, [0, 2, 6], **table)
    with pytest.raises(UsageError, match="qo_indptr ends at 5, but q has 6 rows"):
        paged_prefill(q, k_cache, v_cache, [0, 2, 5], **table)
    with pytest.raises(UsageError, match="kv_layout must be one of NHD, HND"):
        paged_prefill(q, k_cache, v_cache, [0, 2, 6], **table, kv_layout="NDH")
    if torch.cuda.is_available():
        with pytest.raises(UsageError, match="pass the page table on the host"):
            gpu = dict(table, kv_indices=torch.tensor([0, 1], device="cuda"))
            paged_prefill(q, k_cache, v_cache, [0, 2, 6], **gpu)


@pytest.mark.gpu(reason="CUDA-graph capture needs a CUDA GPU")
def test_a_planned_call_replays_in_a_cuda_graph() -> None:
    if not torch.cuda.is_available():
        pytest.skip("CUDA-graph capture needs a CUDA GPU (not ROCm's HIP graphs here)")
    call = Ragged((1, 200, 64), (900, 200, 3000), 32, 8, 128, "bf16", True)
    seed = fresh_seed()
    k_cache, v_cache, indptr, indices, last = _cache(call.kv_lens, 16, 8, 128, "bf16", "NHD", seed)
    q, qo = _q(call, seed)
    eager = paged_prefill(q, k_cache, v_cache, qo, indptr, indices, last)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = paged_prefill(q, k_cache, v_cache, qo, indptr, indices, last)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, eager)


# -- the bench's paged case and arms (sweep api-paged-fa3) -----------------------------------


@pytest.mark.parametrize(
    ("mix", "layout", "page_size"), [("spread", "NHD", 16), ("chunk", "HND", 1)]
)
def test_the_bench_case_runs_paged_prefill_on_its_own_scattered_table(
    mix: str, layout: str, page_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sweep's B arm as the bench prepares it: the case's caches and page table (each
    # page of the cache used once, in a shuffled order), and the output per request against
    # the reference reading the case's pages slot by slot.
    from tether_kernels_plugin.adapters import PagedEntryArm
    from tether_kernels_plugin.cases import paged_case

    _routes("gather", monkeypatch)
    seed = fresh_seed()
    fields = {"batch": 3, "seqlen": 40, "page_size": page_size, "kv_layout": layout,
              "mix": mix, "hq": 4, "hkv": 2, "head_dim": 64, "dtype": "f32", "causal": True}  # fmt: skip
    case = paged_case(fields)
    q, k_cache, v_cache, _ = case.inputs(device(), seed)
    indptr, indices, last = case.table()
    assert sorted(indices) == list(range(case.pages())) and indices != sorted(indices)
    assert all(1 <= n <= page_size for n in last)
    assert case.shape.kv_lens == (14, 27, 40)
    assert case.shape.qo_lens == ((14, 27, 40) if mix == "spread" else (3, 6, 10))
    out = PagedEntryArm().prepare(case, (q, k_cache, v_cache, None), current_arch())()
    p = case.shape
    k, v = (_keys_of(c, layout, indptr, indices, p.kv_lens, page_size) for c in (k_cache, v_cache))
    kv = [0, *itertools.accumulate(p.kv_lens)]
    assert_matches_per_request(
        f"paged case {mix} {layout} p{page_size}", p.ragged, q, k, v, case.qo_indptr(), kv,
        out, None, seed,
    )  # fmt: skip


def test_the_paged_sweep_builds_every_cell_and_its_peer_says_where_it_runs() -> None:
    from tether import registry
    from tether_kernels_plugin.adapters import FlashInferPagedArm, PagedEntryArm
    from tether_kernels_plugin.cases import paged_case

    sweep = registry.load(["tether_kernels_plugin"]).get_sweep("api-paged-fa3")
    names = list(sweep.axes)
    cells = [dict(zip(names, v, strict=True)) for v in itertools.product(*sweep.axes.values())]
    assert len(cells) == 64
    for cell in cells:
        case = paged_case({**sweep.fixed, **cell})
        assert case.reach("sm90")["routes"]["paged_prefill"] in ("triton", "gather")
        assert PagedEntryArm().supports(case, "sm90") is None
        reason = FlashInferPagedArm().supports(case, "sm90")
        assert reason is None or "flashinfer" in reason
    assert "sm90 only" in str(FlashInferPagedArm().supports(case, "gfx942"))
    with pytest.raises(UsageError, match="mix"):
        paged_case({**sweep.fixed, **cells[0], "mix": "decode"})
    with pytest.raises(UsageError, match="page_size"):
        paged_case({**sweep.fixed, **cells[0], "page_size": "16"})
