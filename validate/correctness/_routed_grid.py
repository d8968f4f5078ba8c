"""The routed-API grid: each test's axes, sized for a GPU host or the CPU, and the call each
point of it makes. test_routed_api.py runs it through pytest; validate/gpu_routed_grid.py
runs it (with issue 11's own grid) outside the suite. How it is sized, and why, is in
test_routed_api.py's docstring.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from tether.policy import Threshold, holds, shape_fields
from tether.pytest_plugin import has_gpu
from tether_kernels import ARCHES, ENTRY_POINTS, Shape, batch_prefill, single_prefill
from tether_kernels.policy import thresholds_for
from tether_kernels.routing import policy_choice
from tether_kernels.serves import HEAD_DIMS_POW2, HEAD_DIMS_SDPA, HEAD_DIMS_TRITON

from validate.correctness._helpers import BF16_REASON

GPU = has_gpu()
ENTRY_FNS: dict[str, Callable[..., Any]] = {
    "single_prefill": single_prefill,
    "batch_prefill": batch_prefill,
}

# --- The lengths ------------------------------------------------------------------------------

EQUAL = (1, 2, 3, 17, 63, 64, 65, 127, 128, 129, 239, 799)
BELOW = (
    *((1, 2), (2, 3), (1, 239), (3, 799), (17, 65), (63, 64), (64, 65), (65, 127)),
    *((127, 128), (128, 129), (113, 203), (128, 217), (108, 256), (256, 512), (17, 799)),
)
ABOVE = (
    *((2, 1), (3, 2), (239, 1), (799, 3), (65, 17), (64, 63), (65, 64), (128, 127)),
    *((129, 128), (512, 256), (799, 239)),
)
SHORT_PAIRS = tuple((n, n) for n in EQUAL) + BELOW + ABOVE
LONG_PAIRS = (
    *((1023, 1023), (1024, 1024), (1025, 1025), (2048, 2048), (4096, 4096)),
    *((1023, 1024), (1024, 1025), (17, 4096), (64, 4096), (2048, 4096), (239, 2048)),
    *((1, 4097), (1024, 1023), (1025, 1024), (4096, 17), (4096, 65), (2048, 799), (4097, 1)),
)
# On the CPU, the long pairs whose f32 references stay small (up to 4M scores a head): every
# long length is still on one side, equal ones up to 1025.
LONG_CPU_PAIRS = tuple((qo, kv) for qo, kv in LONG_PAIRS if qo * kv <= 1 << 22)
# The return_lse pairs the CPU interpreter walks quickly: each named length, short opposite.
# (2048 is left to the flash arm's long pairs: two of its pairs here cost as much as the rest.)
LSE_CPU_PAIRS = (
    *((1, 1), (1, 2), (2, 1), (2, 3), (3, 2), (17, 17), (63, 65), (65, 63), (64, 64)),
    *((127, 129), (129, 127), (128, 128), (1, 239), (239, 1), (3, 799), (799, 3)),
    *((17, 1023), (1024, 17), (1, 4096), (4096, 1)),
)


def _pairs(pairs: tuple[tuple[int, int], ...]) -> list[Any]:
    return [pytest.param(p, id=f"q{p[0]}-kv{p[1]}") for p in pairs]


def _values(values: tuple[Any, ...], fmt: str = "{}") -> list[Any]:
    return [pytest.param(v, id=fmt.format(v)) for v in values]


CAUSAL = [pytest.param(True, id="causal"), pytest.param(False, id="full")]
ENTRIES = [
    pytest.param(("single_prefill", 1), id="single"),
    pytest.param(("batch_prefill", 1), id="batch-b1"),
    pytest.param(("batch_prefill", 2), id="batch-b2"),
]
ENTRIES_SHORT = [ENTRIES[0], ENTRIES[2]]
DTYPES = _values(("f16", "bf16", "f32"))
DTYPES_HALF = _values(("f16", "bf16"))
DTYPES_LSE = [
    pytest.param("f16", id="f16"),
    pytest.param("bf16", id="bf16", marks=pytest.mark.gpu(reason=BF16_REASON)),
    pytest.param("f32", id="f32"),
]
LSE = [
    pytest.param(False, id="out"),
    pytest.param(True, id="lse", marks=pytest.mark.triton),
]


# --- One grid: the axes of each test, and the call each point of it makes -------------------


@dataclass(frozen=True)
class Call:
    """One public call: the entry point, the shape it sees and how it is called."""

    entry: str
    shape: Shape
    return_lse: bool = False
    sm_scale: float | None = None
    layout: str = "contiguous"


@dataclass(frozen=True)
class Grid:
    """A test's axes (name -> pytest params, built for a GPU host or not) and its call."""

    axes: Callable[[bool], dict[str, list[Any]]]
    call: Callable[..., Call]

    def parametrize(self, test: Callable[..., None]) -> Callable[..., None]:
        for name, params in reversed(self.axes(GPU).items()):
            test = pytest.mark.parametrize(name, params)(test)
        return test

    def calls(self, gpu: bool) -> Iterator[Call]:
        """Every call the test makes on such a host (params marked GPU-only left out there)."""
        axes = self.axes(gpu)
        kept = {
            name: [p.values[0] for p in params if gpu or not any(m.name == "gpu" for m in p.marks)]
            for name, params in axes.items()
        }
        for combo in itertools.product(*kept.values()):
            yield self.call(gpu, **dict(zip(kept, combo, strict=True)))


def _heads(gpu: bool, pair: tuple[int, int] = (1, 1)) -> tuple[int, int]:
    if gpu:
        return 8, 2
    return (1, 1) if max(pair) >= 1023 else (2, 1)


LENGTHS = Grid(
    lambda gpu: {
        "pair": _pairs(SHORT_PAIRS),
        "head_dim": _values((64, 128) if gpu else (64,), "d{}"),
        "causal": CAUSAL,
        "dtype": DTYPES_HALF if gpu else DTYPES,
        "entry": ENTRIES if gpu else ENTRIES_SHORT,
    },
    lambda gpu, pair, head_dim, causal, dtype, entry: Call(
        entry[0], Shape(entry[1], *pair, *_heads(gpu, pair), head_dim, dtype, causal)
    ),
)
LONG_LENGTHS = Grid(
    lambda gpu: {
        "pair": _pairs(LONG_PAIRS if gpu else LONG_CPU_PAIRS),
        "head_dim": _values((64, 128) if gpu else (64,), "d{}"),
        "causal": CAUSAL,
        "dtype": DTYPES_HALF if gpu else _values(("f16",)),
        "entry": ENTRIES_SHORT if gpu else ENTRIES_SHORT[:1],
    },
    LENGTHS.call,
)
RETURN_LSE = Grid(
    lambda gpu: {
        "pair": _pairs(SHORT_PAIRS + LONG_PAIRS if gpu else LSE_CPU_PAIRS),
        "causal": CAUSAL,
        # A GPU compiles the kernel per dtype and length class: f16 with the LSE runs in the
        # heads, head_dim and strided tests there.
        "dtype": _values(("bf16", "f32")) if gpu else DTYPES_LSE,
        "entry": ENTRIES_SHORT if gpu else ENTRIES_SHORT[:1],
    },
    lambda gpu, pair, causal, dtype, entry: Call(
        entry[0],
        Shape(entry[1], *pair, *_heads(gpu, pair), 64, dtype, causal),
        return_lse=True,
    ),
)
GQA = [
    pytest.param(1, id="mha"),  # hkv = hq
    pytest.param(4, id="gqa4"),  # hkv = hq / 4
    pytest.param(0, id="mqa"),  # hkv = 1
]
HEADS = Grid(
    lambda gpu: {
        "group": GQA,
        "pair": _pairs(((17, 17), (33, 65), (65, 33), (2, 1))),
        "causal": CAUSAL,
        "return_lse": LSE,
        "entry": ENTRIES_SHORT if gpu else ENTRIES_SHORT[:1],
    },
    lambda gpu, group, pair, causal, return_lse, entry: Call(
        entry[0],
        Shape(
            entry[1],
            *pair,
            8,
            8 // group if group else 1,
            64,
            "f16",
            causal,
        ),
        return_lse=return_lse,
    ),
)


def _hd_heads(gpu: bool) -> tuple[int, int]:
    # A GPU compiles the Triton kernel per head count and group: the other tests' heads.
    return _heads(gpu) if gpu else (4, 2)


# Keyless rows (causal qo_len > kv_len), square, and chunked: the relations routing splits on.
RELATIONS = _pairs(((65, 17), (65, 65), (17, 129)))
HEAD_DIMS = Grid(
    lambda gpu: {
        "head_dim": _values(HEAD_DIMS_SDPA, "d{}"),
        "pair": RELATIONS,
        "causal": CAUSAL,
        "dtype": DTYPES,
    },
    lambda gpu, head_dim, pair, causal, dtype: Call(
        "single_prefill", Shape(1, *pair, *_hd_heads(gpu), head_dim, dtype, causal)
    ),
)
# The LSE at every head_dim the Triton kernel serves (issue 24: multiples of 8 up to 256, the
# tile padded to the next power of two). On the CPU the interpreter walks every block in
# numpy: the tile widths and one head_dim padded onto each of 16, 32, 128 and 256 (twice).
LSE_CPU_HEAD_DIMS = tuple(sorted({*HEAD_DIMS_POW2, 8, 24, 96, 200, 248}))
LSE_HEAD_DIMS = Grid(
    lambda gpu: {
        "head_dim": _values(HEAD_DIMS_TRITON if gpu else LSE_CPU_HEAD_DIMS, "d{}"),
        "pair": RELATIONS,
        "causal": CAUSAL,
    },
    lambda gpu, head_dim, pair, causal: Call(
        "single_prefill",
        Shape(1, *pair, *_hd_heads(gpu), head_dim, "f16", causal),
        return_lse=True,
    ),
)
LAYOUTS = _values(("heads-major", "padded-rows", "kv-packed", "expanded-kv"))
STRIDED = Grid(
    lambda gpu: {
        "layout": LAYOUTS,
        "causal": CAUSAL,
        "return_lse": LSE,
        "entry": ENTRIES_SHORT,
    },
    lambda gpu, layout, causal, return_lse, entry: Call(
        entry[0],
        Shape(entry[1], 65, 129, *(_heads(gpu)), 64, "f16", causal),
        return_lse=return_lse,
        layout=layout,
    ),
)
SCALES = Grid(
    lambda gpu: {
        "sm_scale": _values((0.05, 0.3, 1.0), "scale{}"),
        "causal": CAUSAL,
        "return_lse": LSE,
        "entry": ENTRIES_SHORT,
    },
    lambda gpu, sm_scale, causal, return_lse, entry: Call(
        entry[0],
        Shape(entry[1], 129, 65, *(_heads(gpu)), 64, "f32", causal),
        return_lse=return_lse,
        sm_scale=sm_scale,
    ),
)

# --- The calls each policy threshold sends to its arm ----------------------------------------
# The grids above run 8 query heads, which no threshold's scope names, so they never reach the
# arms a policy picks (on sm90 the Gluon kernel, and the Triton kernel's short squares). This
# grid is the thresholds' own calls, derived from their scopes: every combination of the values
# each set threshold names (dtypes, head dims, query/kv head pairs), each at two of these length
# pairs that its region takes (odd lengths and split-KV among them), once contiguous without the
# LSE and once strided with it. GPU only: the arms are GPU kernels, and the CPU's f32 references
# at 32 heads would take minutes.
POLICY_PAIRS = (
    *((128, 4096), (300, 20000), (512, 8192), (2049, 5000), (1000, 3000)),
    *((128, 128), (1000, 1000), (2048, 2048), (4097, 4097)),
)
# A threshold that takes none of POLICY_PAIRS (the many-heads long squares, from 8192 queries)
# is reached at these instead: its shortest calls, judged a slice of heads at a time
# (_helpers.head_slices).
POLICY_LONG_PAIRS = ((8192, 8192),)
POLICY_LAYOUTS = ("kv-packed", "heads-major", "padded-rows")
POLICY_REASON = "the policy's arms are GPU kernels; 32-head f32 references are too slow on a CPU"
_SHAPE_FIELDS = tuple(Shape(1, 1, 1, 1, 1, 8).key())  # a Shape's field names, in order


# Layouts drawn inside a range scope (``hq//hkv within``, ``hq within``), which names no values
# to enumerate: its corners, the catalog's awkward groups, and a layout no sweep names (24/8).
POLICY_RANGE_HEADS = ("1/1", "16/1", "128/8", "28/4", "24/8")


def _scope_values(conditions: tuple[tuple[str, str, object], ...]) -> dict[str, tuple[Any, ...]]:
    """The values a threshold's conditions enumerate (``==`` a constant, ``in`` a tuple), and
    for its head ranges the POLICY_RANGE_HEADS inside them, as ``hq/hkv`` pairs."""
    fields = set(_SHAPE_FIELDS)
    values: dict[str, tuple[Any, ...]] = {}
    ranges = []
    for name, op, value in conditions:
        if op == "in" and isinstance(value, (tuple, list)):
            values[name] = tuple(value)
        elif op == "==" and not (isinstance(value, str) and value in fields):
            values[name] = (value,)
        elif op == "within":
            ranges.append((name, op, value))
    if ranges:
        values["hq/hkv"] = tuple(
            p for p in POLICY_RANGE_HEADS if holds(tuple(ranges), shape_fields({"hq/hkv": p}, {}))
        )
    return values


def _taken(
    th: Threshold, entry: str, arch: str, fields: dict[str, Any], pairs: tuple[tuple[int, int], ...]
) -> list[Shape]:
    """The calls at ``pairs`` (qo_len, kv_len) with ``fields`` that ``th`` sends to its arm."""
    out = []
    for qo, kv in pairs:
        key = {"batch": 1, "qo_len": qo, "kv_len": kv, "causal": True, **fields}
        shape = Shape(**{f: key[f] for f in _SHAPE_FIELDS})
        if th.applies(shape.key()) and policy_choice(entry, shape, arch) == th.arm:
            out.append(shape)
    return out


def policy_calls() -> list[Call]:
    """The calls every set threshold, on every arch, sends to its own arm (see above)."""
    calls: list[Call] = []
    for arch in ARCHES:
        for entry in ENTRY_POINTS:
            for th in thresholds_for(arch, entry):
                if not th.is_set:
                    continue
                values = _scope_values(th.scope + (th.takes or ()))
                for n, combo in enumerate(itertools.product(*values.values())):
                    fields = shape_fields(dict(zip(values, combo, strict=True)), {})
                    taken = _taken(th, entry, arch, fields, POLICY_PAIRS) or _taken(
                        th, entry, arch, fields, POLICY_LONG_PAIRS
                    )
                    for i, shape in enumerate((taken * 2)[n % max(len(taken), 1) :][:2]):
                        layout = POLICY_LAYOUTS[n % len(POLICY_LAYOUTS)] if i else "contiguous"
                        calls.append(Call(entry, shape, return_lse=bool(i), layout=layout))
    return list(dict.fromkeys(calls))


def _call_id(call: Call) -> str:
    s = call.shape
    lse = "-lse" if call.return_lse else ""
    return (f"{call.entry[:6]}-q{s.qo_len}-kv{s.kv_len}-{s.hq}x{s.hkv}-d{s.head_dim}-{s.dtype}"
            f"-{call.layout}{lse}")  # fmt: skip


def gpu_calls(calls: Callable[[], list[Call]], reason: str) -> Grid:
    """A grid of whole calls (``calls()``, built when the test is collected), each GPU-only
    for ``reason``."""
    return Grid(
        lambda gpu: {
            "call": [
                pytest.param(c, id=_call_id(c), marks=pytest.mark.gpu(reason=reason))
                for c in calls()
            ]
        },
        lambda gpu, call: call,
    )


POLICY = gpu_calls(policy_calls, POLICY_REASON)

# --- The model catalog's calls (issue 43 item 5) ---------------------------------------------
# Every per-GPU layout of the catalog's models (kernels/models.toml) at tensor parallelism 1
# and 8, at each model's head_dim, bf16 and causal, through single_prefill as a serving stack
# calls it: a chunk over a longer cache packed (contiguous), and an odd square with the LSE,
# held strided (the layouts rotate through POLICY_LAYOUTS, so each kind of stride meets many
# layouts). GPU only, for the policy grid's reason.
CATALOG_TP = (1, 8)
CATALOG_PAIRS = ((1000, 3000), (2049, 2049))
CATALOG_REASON = (
    "the catalog's layouts route to GPU kernels; their f32 references are slow on a CPU"
)


def catalog_calls() -> list[Call]:
    """single_prefill's calls over every catalog layout at CATALOG_TP (see above)."""
    from tether_kernels_plugin.sweeps import catalog_layouts

    (qo, kv), (sq, _) = CATALOG_PAIRS
    calls = []
    for n, layout in enumerate(catalog_layouts(CATALOG_TP, head_dims=None)):
        hq, hkv, head_dim = map(int, layout.split("/"))
        chunk = Shape(1, qo, kv, hq, hkv, head_dim, "bf16", True)
        square = Shape(1, sq, sq, hq, hkv, head_dim, "bf16", True)
        calls.append(Call("single_prefill", chunk))
        layout = POLICY_LAYOUTS[n % len(POLICY_LAYOUTS)]
        calls.append(Call("single_prefill", square, return_lse=True, layout=layout))
    return calls


CATALOG = gpu_calls(catalog_calls, CATALOG_REASON)
GRIDS = {
    "catalog": CATALOG,
    "lengths": LENGTHS,
    "long_lengths": LONG_LENGTHS,
    "return_lse": RETURN_LSE,
    "heads": HEADS,
    "head_dims": HEAD_DIMS,
    "lse_head_dims": LSE_HEAD_DIMS,
    "strided": STRIDED,
    "sm_scale": SCALES,
    "policy": POLICY,
}


def as_layout(layout: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """The same values as q, k, v [b, len, heads, d], held the way a caller might hold them."""
    if layout == "contiguous":
        return q, k, v
    if layout == "heads-major":  # stored [b, heads, len, d], viewed as [b, len, heads, d]
        return tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))
    if layout == "padded-rows":  # each row a slice of a wider buffer
        return tuple(
            torch.cat([t, torch.zeros_like(t)], dim=-1)[..., : t.shape[-1]] for t in (q, k, v)
        )
    if layout == "kv-packed":  # k and v interleaved in one [b, len, 2, heads, d] cache
        kv = torch.stack([k, v], dim=2)
        return q, kv[:, :, 0], kv[:, :, 1]
    if layout == "expanded-kv":  # k and v heads broadcast from one stored head (stride 0)
        return q, k[:, :, :1].expand_as(k), v[:, :, :1].expand_as(v)
    raise ValueError(layout)
