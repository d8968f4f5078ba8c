"""The attention case model as tether's bench sees it: a cell's fields -> a Shape and its inputs.

This module decides what a sample means (how inputs are made and laid out, which launch config
a tuning cell runs), so it is part of the harness fingerprint ([tool.tether.fingerprint]
harness); the sweep declarations (sweeps.py) are not: adding a sweep supersedes no run.
Importing it imports neither torch nor triton.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tether import registry
from tether.arch import check_arch
from tether.errors import UsageError
from tether.policy import PAIR, shape_fields
from tether_kernels.gluon.launch import VARIANTS, GluonConfig
from tether_kernels.launch_tables import LaunchConfig
from tether_kernels.paged import Paged, route_paged
from tether_kernels.routing import reachable_entry_points, route
from tether_kernels.shapes import TORCH_DTYPES, Ragged, Shape, flops

from tether_kernels_plugin.candidates import CANDIDATES

# Device tensors of a role start on 2 MiB boundaries (the allocator's large-segment and huge
# page granule), so every role's inputs are placed alike; see tether.bench.engine.
SLAB_ALIGN = {"cpu": 64}
DEVICE_ALIGN = 2 * 1024 * 1024
# A sweep axis ``seqlen`` is a square call's length: it stands for qo_len and kv_len alike.
SQUARE_ALIAS = {"seqlen": ("qo_len", "kv_len")}
_SHAPE_FIELDS = ("batch", "qo_len", "kv_len", "hq", "hkv", "head_dim", "dtype", "causal")


def make_inputs(shape: Shape, device: str, seed: int) -> tuple[Any, Any, Any, Any]:
    """q [b, qo, hq, d], k and v [b, kv, hkv, d] and an output like q, all allocated now.

    The four live in one slab, each starting on an aligned address, so every role and buffer
    set gets the same layout: the same relative placement of q, k, v and the output.
    Filled from a seeded normal distribution on the device (never zeros: zeros hide
    unwritten outputs and run faster than real data).
    """
    import torch

    dtype = getattr(torch, TORCH_DTYPES[shape.dtype])
    item = torch.empty((), dtype=dtype).element_size()
    align = SLAB_ALIGN.get(device, DEVICE_ALIGN) // item
    q_dims = (shape.batch, shape.qo_len, shape.hq, shape.head_dim)
    kv_dims = (shape.batch, shape.kv_len, shape.hkv, shape.head_dim)
    dims = (q_dims, kv_dims, kv_dims, q_dims)
    sizes = [int(math.prod(d)) for d in dims]
    starts, total = [], 0
    for n in sizes:
        starts.append(total)
        total += -(-n // align) * align
    # One spare granule, so the slab's own start can be moved onto an aligned address.
    raw = torch.empty(total + align, dtype=dtype, device=device)
    shift = (-raw.data_ptr() % (align * item)) // item
    slab = raw[shift : shift + total]
    q, k, v, out = (slab[s : s + n].view(d) for s, n, d in zip(starts, sizes, dims, strict=True))
    gen = torch.Generator(device=device).manual_seed(seed)
    for t in (q, k, v):
        t.normal_(generator=gen)
    out.zero_()
    return q, k, v, out


@dataclass(frozen=True)
class AttentionCase:
    """One prefill attention call as a cell: its Shape, and for tuning cells the launch config
    the Triton arm is forced to (``launch``; None: the arch's own choice)."""

    shape: Shape
    config_name: str | None = None
    launch: LaunchConfig | GluonConfig | None = None

    @property
    def work(self) -> float:
        """FLOPs of one call (tether_kernels.flops: the exact bottom-right causal count)."""
        return flops(self.shape)

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.shape.key())
        if self.config_name is not None:
            out["config"] = self.config_name
        return out

    def inputs(self, device: str, seed: int) -> tuple[Any, Any, Any, Any]:
        return make_inputs(self.shape, device, seed)

    def reach(self, arch: str) -> dict[str, Any]:
        """Which entry points produce this call, and the arm each one's router picks."""
        check_arch(arch)
        reached = list(reachable_entry_points(self.shape))
        routes = {}
        for entry in reached:
            try:
                routes[entry] = route(entry, self.shape, arch)
            except Exception as exc:  # an arch the policy does not know routes nowhere
                routes[entry] = f"none: {type(exc).__name__}"
        return {"entry_points": reached, "routes": routes}


@registry.case("attention")
def attention_case(fields: Mapping[str, Any]) -> AttentionCase:
    """A cell's fields (``seqlen`` meaning a square call; a pair such as ``hq/hkv`` = "32/8"
    setting both; ``config`` naming a tuning candidate) as an AttentionCase."""
    full = shape_fields(fields, {}, SQUARE_ALIAS)
    full.pop("seqlen", None)
    for pair in [f for f in full if PAIR in f]:
        full.pop(pair)
    name = full.pop("config", None)
    unknown = sorted(set(full) - set(_SHAPE_FIELDS))
    if unknown:
        raise UsageError(f"attention case: unknown fields {unknown} in {dict(fields)}")
    shape = Shape(**full)
    if name is None:
        return AttentionCase(shape)
    return AttentionCase(shape, str(name), candidate(str(name)))


def candidate(name: str) -> Any:
    """A tuning candidate by name: a Triton LaunchConfig or a Gluon variant."""
    found = CANDIDATES.get(name) or VARIANTS.get(name)
    if found is None:
        known = ", ".join([*CANDIDATES, *VARIANTS])
        raise UsageError(f"tuning candidate {name!r}: unknown (known: {known})")
    return found


# --- ragged batches: requests of their own lengths, packed (ragged_prefill's call) -------------

# How a ragged cell's requests share out its longest length. "spread": request i of b has
# ceil(L * (i + 1) / b) queries and as many keys (square, causal), so a batch holds short and
# long requests alike, the longest L (a serving step's mix of new prompts). "serving": the
# keys as "spread" gives them, and a serving engine's step of three kinds of request in turn:
# a one-token row (a request decoding), a chunked prefill (the last quarter of its keys as
# queries, over its cached prefix), a new prompt (as many queries as keys), and another new
# prompt.
MIXES = ("spread", "serving")


def spread(batch: int, longest: int) -> tuple[int, ...]:
    """The "spread" mix's lengths: request i of ``batch`` has ceil(longest * (i + 1) / batch)."""
    return tuple(-(-longest * (i + 1) // batch) for i in range(batch))


def mix_lengths(mix: str, batch: int, longest: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(qo_lens, kv_lens) of a ragged cell's requests under ``mix`` (see MIXES)."""
    kv = spread(batch, longest)
    if mix == "spread":
        return kv, kv
    qo = tuple(
        1 if i % 4 == 0 else max(1, -(-n // 4)) if i % 4 == 1 else n for i, n in enumerate(kv)
    )
    return qo, kv


@dataclass(frozen=True)
class RaggedCase:
    """One ragged batch as a cell: its ``Ragged`` call and the mix that made it. Its inputs
    are packed: q [total queries, hq, d], k and v [total keys, hkv, d], an output like q."""

    shape: Ragged
    mix: str
    config_name: str | None = None  # no tuning candidate runs a ragged batch
    launch: None = None

    @property
    def work(self) -> float:
        """FLOPs of one call: its requests' (tether_kernels.flops)."""
        return flops(self.shape)

    def fields(self) -> dict[str, Any]:
        return {**self.shape.key(), "mix": self.mix}

    def offsets(self) -> tuple[list[int], list[int]]:
        """qo_indptr and kv_indptr, as a caller holds them on the host."""
        qo, kv = [0], [0]
        for a, b in zip(self.shape.qo_lens, self.shape.kv_lens, strict=True):
            qo.append(qo[-1] + a)
            kv.append(kv[-1] + b)
        return qo, kv

    def inputs(self, device: str, seed: int) -> tuple[Any, Any, Any, Any]:
        """The packed tensors: a batch of one of the totals' lengths, laid out and filled as
        ``make_inputs`` lays out and fills every case's, viewed without its batch dimension."""
        r = self.shape
        one = Shape(1, r.total_qo, r.total_kv, r.hq, r.hkv, r.head_dim, r.dtype, r.causal)
        q, k, v, out = make_inputs(one, device, seed)
        return q[0], k[0], v[0], out[0]

    def reach(self, arch: str) -> dict[str, Any]:
        """ragged_prefill produces this call; the arm its router picks."""
        check_arch(arch)
        try:
            routed = route("ragged_prefill", self.shape, arch)
        except Exception as exc:  # an arch the policy does not know routes nowhere
            routed = f"none: {type(exc).__name__}"
        return {"entry_points": ["ragged_prefill"], "routes": {"ragged_prefill": routed}}


@registry.case("ragged")
def ragged_case(fields: Mapping[str, Any]) -> RaggedCase:
    """A cell's fields as a RaggedCase: ``batch`` requests mixed by ``mix`` (default "spread")
    up to the longest ``seqlen`` (the longest request's keys; its queries as the mix gives
    them), the shared fields as an attention cell's (``hq/hkv`` pairs too)."""
    full = shape_fields(fields, {}, SQUARE_ALIAS)
    full.pop("seqlen", None)
    for pair in [f for f in full if PAIR in f]:
        full.pop(pair)
    mix = str(full.pop("mix", "spread"))
    unknown = sorted(set(full) - set(_SHAPE_FIELDS))
    if unknown:
        raise UsageError(f"ragged case: unknown fields {unknown} in {dict(fields)}")
    if mix not in MIXES:
        raise UsageError(f"ragged case: mix {mix!r} is not one of {MIXES}")
    batch, qo_len, kv_len = (full.pop(n, None) for n in ("batch", "qo_len", "kv_len"))
    if not isinstance(batch, int) or not isinstance(qo_len, int) or qo_len != kv_len:
        raise UsageError(
            f"ragged case: mix {mix!r} takes a batch and one longest length (seqlen), got "
            f"batch={batch!r}, qo_len={qo_len!r}, kv_len={kv_len!r}"
        )
    qo_lens, kv_lens = mix_lengths(mix, batch, qo_len)
    return RaggedCase(Ragged(qo_lens, kv_lens, **full), mix)


# --- paged batches: ragged requests whose keys and values live in a paged cache -------------

# How a paged cell's requests share out its longest key length: "spread" as a ragged cell's
# (square requests, new prompts); "chunk": request i's keys as "spread" gives them and its
# queries their last quarter (at least one), a chunked prefill over its cached prefix.
PAGED_MIXES = ("spread", "chunk")
# The cache's pages are handed to requests in an order drawn once from this seed: a serving
# engine's allocator scatters a request's pages over the cache, so no request reads one
# contiguous run of pages (which would time a kernel on an access pattern callers never have).
PAGE_ORDER_SEED = 20261207


@dataclass(frozen=True)
class PagedCase:
    """One paged batch as a cell: its ``Paged`` call and the mix that made it. Its inputs are
    q packed [total queries, hq, d], k and v caches of exactly the pages the batch uses
    ([pages, page_size, hkv, d] for NHD, [pages, hkv, page_size, d] for HND) and an output
    like q; ``table`` is FlashInfer's page table over them, on the host."""

    shape: Paged
    mix: str
    config_name: str | None = None  # no tuning candidate runs a paged batch
    launch: None = None

    @property
    def work(self) -> float:
        """FLOPs of one call: its requests' (tether_kernels.flops), as the same ragged batch."""
        return flops(self.shape.ragged)

    def fields(self) -> dict[str, Any]:
        return {**self.shape.key(), "mix": self.mix}

    def qo_indptr(self) -> list[int]:
        out = [0]
        for n in self.shape.qo_lens:
            out.append(out[-1] + n)
        return out

    def pages(self) -> int:
        size = self.shape.page_size
        return sum(-(-n // size) for n in self.shape.kv_lens)

    def table(self) -> tuple[list[int], list[int], list[int]]:
        """FlashInfer's page table (kv_indptr, kv_indices, kv_last_page_len): each request's
        pages taken in turn from one shuffled order of the cache's pages."""
        size = self.shape.page_size
        order = list(range(self.pages()))
        random.Random(PAGE_ORDER_SEED).shuffle(order)
        indptr, last = [0], []
        for n in self.shape.kv_lens:
            indptr.append(indptr[-1] + -(-n // size))
            last.append(n - (-(-n // size) - 1) * size)
        return indptr, order, last

    def inputs(self, device: str, seed: int) -> tuple[Any, Any, Any, Any]:
        """Laid out and filled as ``make_inputs`` lays out and fills every case's: q and the
        output packed, k and v the slab's key rows viewed as pages."""
        p = self.shape
        slots = self.pages() * p.page_size
        one = Shape(1, sum(p.qo_lens), slots, p.hq, p.hkv, p.head_dim, p.dtype, p.causal)
        q, k, v, out = make_inputs(one, device, seed)
        if p.kv_layout == "NHD":
            dims = (self.pages(), p.page_size, p.hkv, p.head_dim)
        else:
            dims = (self.pages(), p.hkv, p.page_size, p.head_dim)
        return q[0], k[0].view(dims), v[0].view(dims), out[0]

    def reach(self, arch: str) -> dict[str, Any]:
        """paged_prefill produces this call; the route it takes."""
        check_arch(arch)
        try:
            routed = route_paged(self.shape, arch)
        except Exception as exc:  # an arch no route serves
            routed = f"none: {type(exc).__name__}"
        return {"entry_points": ["paged_prefill"], "routes": {"paged_prefill": routed}}


@registry.case("paged")
def paged_case(fields: Mapping[str, Any]) -> PagedCase:
    """A cell's fields as a PagedCase: ``batch`` requests mixed by ``mix`` (default "spread")
    up to the longest ``seqlen`` keys, in pages of ``page_size`` (``kv_layout`` NHD or HND,
    default NHD), the shared fields as an attention cell's (``hq/hkv`` pairs too)."""
    full = shape_fields(fields, {}, SQUARE_ALIAS)
    full.pop("seqlen", None)
    for pair in [f for f in full if PAIR in f]:
        full.pop(pair)
    mix = str(full.pop("mix", "spread"))
    page_size = full.pop("page_size", None)
    kv_layout = str(full.pop("kv_layout", "NHD"))
    unknown = sorted(set(full) - set(_SHAPE_FIELDS))
    if unknown:
        raise UsageError(f"paged case: unknown fields {unknown} in {dict(fields)}")
    if mix not in PAGED_MIXES:
        raise UsageError(f"paged case: mix {mix!r} is not one of {PAGED_MIXES}")
    if not isinstance(page_size, int) or isinstance(page_size, bool):
        raise UsageError(f"paged case: page_size must be an int, got {page_size!r}")
    batch, qo_len, kv_len = (full.pop(n, None) for n in ("batch", "qo_len", "kv_len"))
    if not isinstance(batch, int) or not isinstance(qo_len, int) or qo_len != kv_len:
        raise UsageError(
            f"paged case: mix {mix!r} takes a batch and one longest length (seqlen), got "
            f"batch={batch!r}, qo_len={qo_len!r}, kv_len={kv_len!r}"
        )
    kv = spread(batch, kv_len)
    qo = kv if mix == "spread" else tuple(max(1, n // 4) for n in kv)
    return PagedCase(Paged(qo, kv, page_size, kv_layout=kv_layout, **full), mix)
