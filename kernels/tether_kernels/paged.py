"""paged_prefill: attention over a paged KV cache, the layout serving engines keep.

Queries are packed as ragged_prefill packs them: q [total_qo, hq, d], request i's rows
``qo_indptr[i]:qo_indptr[i + 1]``. Keys and values live in pages of ``page_size`` slots,
k_cache and v_cache [num_pages, page_size, hkv, d] (``kv_layout="NHD"``) or [num_pages, hkv,
page_size, d] (``"HND"``), reached through a page table, in either of two forms:

- FlashInfer's: ``kv_indptr`` (batch + 1 offsets into ``kv_indices``), ``kv_indices`` (the
  pages of each request, in order) and ``kv_last_page_len`` (how many slots of each request's
  last page hold keys, 1 to page_size);
- vLLM's: ``block_table`` [batch, max pages] (each row a request's pages, in order; entries
  past the request's pages are not read) with ``kv_lens`` (each request's number of keys).

Request i attends to its keys as single_prefill would to k/v gathered from those pages in
order: causal is bottom-right per request. A page may appear in several requests' tables (a
shared prefix) and is read in place.

The page table is host integers (lists, tuples or CPU integer tensors), as FlashInfer's
``plan`` takes it: a serving step's batch is checked, routed and planned once (its work list
and page table copied to the device then), and every layer's call of it only launches, under
CUDA-graph capture too (the plan's device buffers are fixed). A table on a GPU is refused:
checking it would read it back on every call.

Routes, tried in order (``route_paged``): ``triton``, the Triton kernel reading the pages in
place (triton/paged_fwd.py), where the Triton arm serves every request; then ``gather``, the
requests' pages gathered into packed k and v (one indexed copy per call) and run as
ragged_prefill runs them, which serves every call some arm serves (on the CPU, PyTorch's
kernels). On sm90, where ragged_prefill takes the Gluon kernel's one launch, ``gather`` comes
first (``gather_first``), an order taken from a diagnostic on the H100
(validate/tools/ragged_session.py, 2026-12-07, a run for reading, not evidence): the copy of
the keys and values is one pass over them, where the attention makes one per query tile. No
policy threshold speaks for paged calls yet, and no stored run yet measures either route;
api-paged-fa3 times the route taken.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.errors import UsageError

from tether_kernels.arms import get_arm
from tether_kernels.launch_tables import LaunchConfig
from tether_kernels.prefill import (
    PLAN_CACHE_SIZE,
    _check_device,
    _check_flags,
    _offsets_key,
    _tensor_key,
    ragged_prefill,
)
from tether_kernels.routing import route
from tether_kernels.serves import INT32_ELEMENTS
from tether_kernels.shapes import TORCH_DTYPES, Ragged, Shape

if TYPE_CHECKING:
    import torch

ENTRY = "paged_prefill"
KV_LAYOUTS: tuple[str, ...] = ("NHD", "HND")
# The routes paged_prefill tries, in order (see the module docstring).
PAGED_ROUTES: tuple[str, ...] = ("triton", "gather")


@dataclass(frozen=True)
class Paged:
    """One paged_prefill call: requests of their own lengths, queries packed, keys and values
    in pages of ``page_size`` slots. ``ragged`` is the same batch as ragged_prefill takes it
    (what the attention computes); ``key`` is its envelope with the page size and layout."""

    qo_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    page_size: int
    hq: int
    hkv: int
    head_dim: int
    dtype: str = "f16"
    causal: bool = True
    kv_layout: str = "NHD"

    def __post_init__(self) -> None:
        if not isinstance(self.page_size, int) or isinstance(self.page_size, bool):
            raise UsageError(f"Paged.page_size: expected a positive int, got {self.page_size!r}")
        if self.page_size < 1:
            raise UsageError(f"Paged.page_size: expected a positive int, got {self.page_size!r}")
        if self.kv_layout not in KV_LAYOUTS:
            raise UsageError(f"Paged.kv_layout: {self.kv_layout!r} is not one of {KV_LAYOUTS}")
        self.ragged  # noqa: B018  (the lengths and shared fields are a Ragged's: checked there)

    @property
    def ragged(self) -> Ragged:
        return Ragged(
            self.qo_lens, self.kv_lens, self.hq, self.hkv, self.head_dim, self.dtype, self.causal
        )

    @property
    def batch(self) -> int:
        return len(self.qo_lens)

    def requests(self) -> tuple[Shape, ...]:
        return self.ragged.requests()

    def key(self) -> dict[str, object]:
        return {**self.ragged.key(), "page_size": self.page_size, "kv_layout": self.kv_layout}


@dataclass(frozen=True)
class PageTable:
    """A checked page table in FlashInfer's form: request i's pages are
    ``indices[indptr[i]:indptr[i + 1]]``, its last one holding ``last[i]`` keys."""

    indptr: tuple[int, ...]
    indices: tuple[int, ...]
    last: tuple[int, ...]

    def kv_lens(self, page_size: int) -> tuple[int, ...]:
        return tuple(
            (self.indptr[i + 1] - self.indptr[i] - 1) * page_size + self.last[i]
            for i in range(len(self.last))
        )

    def slots(self, page_size: int) -> tuple[list[int], list[int]]:
        """Each key's page and slot, requests one after another (the gather's indices)."""
        pages: list[int] = []
        slots: list[int] = []
        for i, n in enumerate(self.kv_lens(page_size)):
            table = self.indices[self.indptr[i] : self.indptr[i + 1]]
            pages += [table[j // page_size] for j in range(n)]
            slots += [j % page_size for j in range(n)]
        return pages, slots


# --- checks ------------------------------------------------------------------------------


def _ints(name: str, value: object) -> tuple[int, ...]:
    """``value`` as host ints: a list, tuple or 1-D CPU integer tensor (else a UsageError)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.device.type != "cpu":
            raise UsageError(
                f"{ENTRY}: {name} is on {value.device}; pass the page table on the host (a list "
                "or a CPU tensor): it keys the call's plan, which a device tensor would make "
                "every call read back"
            )
        if value.is_floating_point() or value.dim() != 1:
            raise UsageError(
                f"{ENTRY}: {name} must be a 1-D integer tensor, got {value.dtype} of shape "
                f"{tuple(value.shape)}"
            )
    values = _offsets_key(value)
    if values is None:
        raise UsageError(
            f"{ENTRY}: {name} must be a sequence of ints (or a CPU integer tensor), got "
            f"{type(value).__name__}"
        )
    return values


def _check_cache(
    q: Any, k_cache: Any, v_cache: Any, kv_layout: object
) -> tuple[int, int, int, int, int, str]:
    """(num_pages, page_size, hq, hkv, head_dim, dtype) of checked q and caches."""
    import torch

    if kv_layout not in KV_LAYOUTS:
        raise UsageError(
            f"{ENTRY}: kv_layout must be one of {', '.join(KV_LAYOUTS)}, got {kv_layout!r}"
        )
    for name, t, rank in (("q", q, 3), ("k_cache", k_cache, 4), ("v_cache", v_cache, 4)):
        if not isinstance(t, torch.Tensor):
            raise UsageError(f"{ENTRY}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != rank:
            want = "[total_qo, hq, head_dim]" if rank == 3 else (
                "[num_pages, page_size, hkv, head_dim]" if kv_layout == "NHD"
                else "[num_pages, hkv, page_size, head_dim]"
            )  # fmt: skip
            raise UsageError(f"{ENTRY}: {name} must be {rank}-D {want}, got shape {tuple(t.shape)}")
        if 0 in t.shape:
            raise UsageError(f"{ENTRY}: {name} has an empty dimension, shape {tuple(t.shape)}")
    if k_cache.shape != v_cache.shape:
        raise UsageError(
            f"{ENTRY}: k_cache {tuple(k_cache.shape)} and v_cache {tuple(v_cache.shape)} differ"
        )
    num_pages, a, b, d = k_cache.shape
    page_size, hkv = (a, b) if kv_layout == "NHD" else (b, a)
    hq = q.shape[1]
    if q.shape[2] != d:
        raise UsageError(f"{ENTRY}: q's head_dim {q.shape[2]} is not the cache's {d}")
    if hq % hkv:
        raise UsageError(f"{ENTRY}: q has {hq} heads, not a multiple of the cache's {hkv} (GQA)")
    if not (q.dtype == k_cache.dtype == v_cache.dtype):
        raise UsageError(
            f"{ENTRY}: q, k_cache, v_cache dtypes differ ({q.dtype}, {k_cache.dtype}, "
            f"{v_cache.dtype})"
        )
    dtype = {f"torch.{t}": name for name, t in TORCH_DTYPES.items()}.get(str(q.dtype))
    if dtype is None:
        raise UsageError(f"{ENTRY}: dtype {q.dtype} is not one of f16, bf16, f32")
    return num_pages, page_size, hq, hkv, d, dtype


def _check_qo(qo_indptr: object, total: int) -> tuple[int, ...]:
    qo = _ints("qo_indptr", qo_indptr)
    if len(qo) < 2 or qo[0] != 0:
        raise UsageError(
            f"{ENTRY}: qo_indptr must start at 0 and hold batch + 1 offsets, got {qo[:8]!r}"
        )
    for i in range(len(qo) - 1):
        if qo[i + 1] <= qo[i]:
            raise UsageError(
                f"{ENTRY}: qo_indptr gives request {i} {qo[i + 1] - qo[i]} rows ({qo[i]} to "
                f"{qo[i + 1]}); every request needs at least one"
            )
    if qo[-1] != total:
        raise UsageError(f"{ENTRY}: qo_indptr ends at {qo[-1]}, but q has {total} rows")
    return qo


def _check_flashinfer_table(
    kv_indptr: object, kv_indices: object, kv_last_page_len: object, batch: int,
    num_pages: int, page_size: int,
) -> PageTable:  # fmt: skip
    indptr = _ints("kv_indptr", kv_indptr)
    indices = _ints("kv_indices", kv_indices)
    last = _ints("kv_last_page_len", kv_last_page_len)
    if len(indptr) != batch + 1 or indptr[0] != 0:
        raise UsageError(
            f"{ENTRY}: kv_indptr must start at 0 and hold batch + 1 = {batch + 1} offsets "
            f"(qo_indptr's requests), got {len(indptr)}: {indptr[:8]!r}"
        )
    for i in range(batch):
        if indptr[i + 1] <= indptr[i]:
            raise UsageError(
                f"{ENTRY}: kv_indptr gives request {i} {indptr[i + 1] - indptr[i]} pages; every "
                "request needs at least one"
            )
    if indptr[-1] != len(indices):
        raise UsageError(
            f"{ENTRY}: kv_indptr ends at {indptr[-1]}, but kv_indices holds {len(indices)} pages"
        )
    if len(last) != batch:
        raise UsageError(
            f"{ENTRY}: kv_last_page_len holds {len(last)} entries for {batch} requests"
        )
    for i, n in enumerate(last):
        if not 1 <= n <= page_size:
            raise UsageError(
                f"{ENTRY}: kv_last_page_len[{i}] is {n}; a last page holds 1 to page_size "
                f"({page_size}) keys"
            )
    _check_pages(indices, num_pages, "kv_indices")
    return PageTable(indptr, indices, last)


def _check_block_table(
    block_table: object, kv_lens: object, batch: int, num_pages: int, page_size: int
) -> PageTable:
    import torch

    if isinstance(block_table, torch.Tensor):
        if block_table.device.type != "cpu":
            raise UsageError(
                f"{ENTRY}: block_table is on {block_table.device}; pass it on the host (a list "
                "of lists or a CPU tensor): it keys the call's plan"
            )
        if block_table.is_floating_point() or block_table.dim() != 2:
            raise UsageError(
                f"{ENTRY}: block_table must be a 2-D integer tensor [batch, max pages], got "
                f"{block_table.dtype} of shape {tuple(block_table.shape)}"
            )
        rows = [tuple(int(x) for x in row) for row in block_table.tolist()]
    elif isinstance(block_table, (list, tuple)):
        rows = [_ints(f"block_table[{i}]", row) for i, row in enumerate(block_table)]
    else:
        raise UsageError(
            f"{ENTRY}: block_table must be a CPU integer tensor or a list of lists, got "
            f"{type(block_table).__name__}"
        )
    lens = _ints("kv_lens", kv_lens)
    if len(rows) != batch or len(lens) != batch:
        raise UsageError(
            f"{ENTRY}: block_table has {len(rows)} rows and kv_lens {len(lens)} entries for "
            f"{batch} requests (qo_indptr's)"
        )
    indptr: list[int] = [0]
    indices: list[int] = []
    last: list[int] = []
    for i, (row, n) in enumerate(zip(rows, lens, strict=True)):
        if n < 1:
            raise UsageError(f"{ENTRY}: kv_lens[{i}] is {n}; every request needs a key")
        need = -(-n // page_size)
        if need > len(row):
            raise UsageError(
                f"{ENTRY}: block_table row {i} holds {len(row)} pages, but kv_lens[{i}] = {n} "
                f"keys need {need} pages of {page_size}"
            )
        indices += row[:need]
        indptr.append(len(indices))
        last.append(n - (need - 1) * page_size)
    _check_pages(tuple(indices), num_pages, "block_table")
    return PageTable(tuple(indptr), tuple(indices), tuple(last))


def _check_pages(indices: tuple[int, ...], num_pages: int, name: str) -> None:
    for j, page in enumerate(indices):
        if not 0 <= page < num_pages:
            raise UsageError(
                f"{ENTRY}: {name} names page {page} (entry {j}); the cache holds pages 0 to "
                f"{num_pages - 1}"
            )


# --- routes --------------------------------------------------------------------------------


def _triton_refusal(call: Paged, arch: str, need_lse: bool, inplace_ok: str | None) -> str | None:
    triton = get_arm("triton")
    for i, request in call.ragged.distinct():
        reason = triton.supports(request, arch, need_lse=need_lse)
        if reason is not None:
            return f"request {i} ({request.qo_len} x {request.kv_len}): {reason}"
    largest = sum(call.qo_lens) * call.hq * call.head_dim
    if largest > INT32_ELEMENTS:
        return f"packed q of {largest} elements: the kernel's query offsets are 32-bit"
    return inplace_ok


def gather_first(call: Paged, arch: str, return_lse: bool = False) -> bool:
    """Whether ``call`` tries ``gather`` before ``triton`` (module docstring): on sm90, where
    its requests packed are a batch ragged_prefill gives the Gluon kernel."""
    if arch != "sm90":
        return False
    try:
        return route("ragged_prefill", call.ragged, arch, return_lse=return_lse) == "gluon"
    except UsageError:
        return False


def paged_routes(call: Paged, arch: str, return_lse: bool = False) -> tuple[str, ...]:
    """The routes ``call`` tries on ``arch``, in order: PAGED_ROUTES, or gather first."""
    if gather_first(call, arch, return_lse):
        return tuple(reversed(PAGED_ROUTES))
    return PAGED_ROUTES


def route_paged(
    call: Paged, arch: str, *, return_lse: bool = False, inplace: str | None = None
) -> str:
    """The route paged_prefill takes for ``call`` on ``arch``: ``triton`` (the pages read in
    place) or ``gather`` (gathered, then ragged_prefill's route). ``inplace``: why the caller's
    tensors cannot be read in place (a cache whose rows are not contiguous), or None.
    UsageError naming each route's refusal when neither serves."""
    reasons = []
    for name in paged_routes(call, arch, return_lse):
        if name == "triton":
            reason = _triton_refusal(call, arch, return_lse, inplace)
        else:
            try:
                route("ragged_prefill", call.ragged, arch, return_lse=return_lse)
                reason = None
            except UsageError as exc:
                reason = str(exc)
        if reason is None:
            return name
        reasons.append(f"{name}: {reason}")
    lse = " with return_lse" if return_lse else ""
    raise UsageError(f"{ENTRY}: no route on {arch} serves {call.key()}{lse}: " + "; ".join(reasons))


def _config(arch: str, head_dim: int) -> LaunchConfig:
    """The in-place kernel's tile. The interpreter runs each program in numpy: small blocks
    keep tests quick and still give several key blocks per request. On a GPU, a tile the
    paged sweeps have yet to tune (none is measured): 64 queries by 64 keys, 32 keys at
    head_dim 256 (the tile's registers)."""
    if arch == "cpu":
        return LaunchConfig(block_m=16, block_n=16, num_warps=4, num_stages=1)
    if head_dim > 128:
        return LaunchConfig(block_m=64, block_n=32, num_warps=8, num_stages=2)
    return LaunchConfig(block_m=64, block_n=64, num_warps=4, num_stages=2)


@dataclass(frozen=True)
class PagedPlan:
    """One key's checked, routed paged call: ``route`` names the route taken; calling it
    with the call's q, k_cache and v_cache only allocates the output (and LSE) and launches."""

    route: str
    shape: Paged
    arch: str
    return_lse: bool
    launch: Callable[..., Any]

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor) -> Any:
        return self.launch(q, k_cache, v_cache)


def _triton_plan(
    call: Paged, arch: str, table: PageTable, scale: float | None, return_lse: bool, q: Any
) -> Callable[..., Any]:
    import torch

    from tether_kernels.triton.paged_fwd import paged_fwd_plan

    config = _config(arch, call.head_dim)
    run = paged_fwd_plan(
        qo_lens=call.qo_lens, kv_lens=call.kv_lens, page_starts=table.indptr[:-1],
        kv_indices=torch.tensor(table.indices, dtype=torch.int32, device=q.device),
        hq=call.hq, hkv=call.hkv, head_dim=call.head_dim, page_size=call.page_size,
        causal=call.causal, sm_scale=scale, block_m=config.block_m, block_n=config.block_n,
        num_warps=config.num_warps, num_stages=config.num_stages,
        ieee=call.dtype == "f32", store_lse=return_lse,
    )  # fmt: skip
    hnd = call.kv_layout == "HND"
    total = sum(call.qo_lens)

    def launch(q: Any, k_cache: Any, v_cache: Any) -> Any:
        if q.stride(-1) != 1:
            q = q.contiguous()  # the kernel reads each row's head_dim as one run
        out = torch.empty_like(q)
        lse = None
        if return_lse:
            lse = torch.empty((call.hq, total), dtype=torch.float32, device=q.device)
        run(q, k_cache, v_cache, out, lse, hnd=hnd)
        return (out, lse) if return_lse else out

    return launch


def _gather_plan(
    call: Paged, arch: str, table: PageTable, scale: float | None, return_lse: bool,
    qo: tuple[int, ...], q: Any,
) -> Callable[..., Any]:  # fmt: skip
    import torch

    pages, slots = table.slots(call.page_size)
    pages_t = torch.tensor(pages, dtype=torch.long, device=q.device)
    slots_t = torch.tensor(slots, dtype=torch.long, device=q.device)
    kv = [0]
    for n in call.kv_lens:
        kv.append(kv[-1] + n)
    kv_indptr = tuple(kv)
    hnd = call.kv_layout == "HND"
    causal = call.causal

    def launch(q: Any, k_cache: Any, v_cache: Any) -> Any:
        # [total_kv, hkv, d]: an advanced index on pages and slots (either side of HND's head
        # axis puts the indexed axis first, as NHD's does).
        if hnd:
            k, v = k_cache[pages_t, :, slots_t], v_cache[pages_t, :, slots_t]
        else:
            k, v = k_cache[pages_t, slots_t], v_cache[pages_t, slots_t]
        if return_lse:
            return ragged_prefill(q, k, v, qo, kv_indptr, causal, scale, return_lse=True, arch=arch)
        return ragged_prefill(q, k, v, qo, kv_indptr, causal, scale, arch=arch)

    return launch


_PLANS: OrderedDict[tuple[Any, ...], PagedPlan] = OrderedDict()


def _table_key(value: object) -> object:
    """A page-table argument as a hashable key part (None where it cannot be one: the full
    check then names what is wrong)."""
    import torch

    if value is None:
        return ()
    if isinstance(value, torch.Tensor) and value.dim() == 2 and value.device.type == "cpu":
        return (tuple(value.shape), tuple(value.flatten().tolist()))
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], (list, tuple)):
        rows = tuple(_offsets_key(row) for row in value)
        return None if None in rows else rows
    return _offsets_key(value)


def _key(
    q: Any, k_cache: Any, v_cache: Any, tables: tuple[Any, ...], flags: tuple[Any, ...]
) -> tuple[Any, ...] | None:
    """The call's key: each tensor's, every page-table part's values, and the flags with their
    types (so ``causal=1`` never finds the plan of ``causal=True``); None where it cannot be
    formed (the full check then names what is wrong)."""
    try:
        parts = [_table_key(t) for t in tables]
        if None in parts:
            return None
        return (
            _tensor_key(q), _tensor_key(k_cache), _tensor_key(v_cache), *parts,
            *((type(f), f) for f in flags),
        )  # fmt: skip
    except Exception:  # anything that is not a tensor or a table: the full check names it
        return None


def _checked_plan(
    q: Any, k_cache: Any, v_cache: Any, qo_indptr: Any, kv_indptr: Any, kv_indices: Any,
    kv_last_page_len: Any, block_table: Any, kv_lens: Any, kv_layout: object, causal: object,
    sm_scale: object, return_lse: object, arch: str | None,
) -> PagedPlan:  # fmt: skip
    num_pages, page_size, hq, hkv, d, dtype = _check_cache(q, k_cache, v_cache, kv_layout)
    causal, scale, return_lse = _check_flags(ENTRY, causal, sm_scale, return_lse)
    found = _check_device(ENTRY, q, k_cache, v_cache, arch)
    qo = _check_qo(qo_indptr, q.shape[0])
    batch = len(qo) - 1
    flashinfer = (kv_indptr, kv_indices, kv_last_page_len)
    vllm = (block_table, kv_lens)
    if all(x is not None for x in flashinfer) and all(x is None for x in vllm):
        table = _check_flashinfer_table(*flashinfer, batch, num_pages, page_size)
    elif all(x is not None for x in vllm) and all(x is None for x in flashinfer):
        table = _check_block_table(block_table, kv_lens, batch, num_pages, page_size)
    else:
        raise UsageError(
            f"{ENTRY}: give the page table as kv_indptr, kv_indices and kv_last_page_len, or as "
            "block_table and kv_lens (one form, all of its parts)"
        )
    call = Paged(
        tuple(qo[i + 1] - qo[i] for i in range(batch)), table.kv_lens(page_size), page_size,
        hq, hkv, d, dtype, causal, str(kv_layout),
    )  # fmt: skip
    inplace = None
    if k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        inplace = "the cache's head_dim is not contiguous (its rows are read as runs)"
    taken = route_paged(call, found, return_lse=return_lse, inplace=inplace)
    if taken == "triton":
        launch = _triton_plan(call, found, table, scale, return_lse, q)
    else:
        launch = _gather_plan(call, found, table, scale, return_lse, qo, q)
    return PagedPlan(taken, call, found, return_lse, launch)


def _run_plan(plan: PagedPlan, q: Any, k_cache: Any, v_cache: Any) -> Any:
    """The one place a paged call runs its plan (``plan.route`` names the route), so tests
    can record it."""
    return plan(q, k_cache, v_cache)


def clear_plans() -> None:
    """Forget every cached paged plan (tests)."""
    _PLANS.clear()


def paged_prefill(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    qo_indptr: Sequence[int] | torch.Tensor,
    kv_indptr: Sequence[int] | torch.Tensor | None = None,
    kv_indices: Sequence[int] | torch.Tensor | None = None,
    kv_last_page_len: Sequence[int] | torch.Tensor | None = None,
    *,
    block_table: Sequence[Sequence[int]] | torch.Tensor | None = None,
    kv_lens: Sequence[int] | torch.Tensor | None = None,
    kv_layout: str = "NHD",
    causal: bool = True,
    sm_scale: float | None = None,
    return_lse: bool = False,
    arch: str | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention for a batch of requests over a paged KV cache: q [total_qo, hq, d], k_cache
    and v_cache [num_pages, page_size, hkv, d] (NHD) or [num_pages, hkv, page_size, d] (HND)
    -> out [total_qo, hq, d]; (out, lse [hq, total_qo]) with ``return_lse``.

    The page table is FlashInfer's (``kv_indptr``, ``kv_indices``, ``kv_last_page_len``) or
    vLLM's (``block_table`` with ``kv_lens``), on the host; see the module docstring and
    kernels/API.md for the full contract. Bad input is a UsageError naming it, before
    anything runs.
    """
    args = (q, k_cache, v_cache, qo_indptr, kv_indptr, kv_indices, kv_last_page_len,
            block_table, kv_lens, kv_layout, causal, sm_scale, return_lse, arch)  # fmt: skip
    key = _key(q, k_cache, v_cache, args[3:9], args[9:])
    plan = _PLANS.get(key) if key is not None else None
    if plan is None:
        plan = _checked_plan(*args)
        if key is not None:
            _PLANS[key] = plan
            if len(_PLANS) > PLAN_CACHE_SIZE:
                _PLANS.popitem(last=False)
    res: torch.Tensor | tuple[torch.Tensor, torch.Tensor] = _run_plan(plan, q, k_cache, v_cache)
    return res


__all__ = [
    "KV_LAYOUTS",
    "PAGED_ROUTES",
    "PageTable",
    "Paged",
    "gather_first",
    "paged_prefill",
    "paged_routes",
    "route_paged",
]
