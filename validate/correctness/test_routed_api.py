"""single_prefill and batch_prefill as users call them, as routed, over the grid issue 11 names.

Each case calls a public entry point exactly as a user does (no ``arch``: the tensors' device
decides), records the arm that ran (the real ``_run_arm``, wrapped; counted by arm for the
verify run through the plugin's ``routed_case``) and checks it is the arm ``route`` names for
the call on this machine. Then the contract of kernels/API.md: the output within the suite's
tolerance rule (twice the error of PyTorch's math SDPA in the input dtype or of the rounding
a flash kernel must do, plus a tiny epsilon; see _helpers.py), rows that see no key exactly 0
with lse -inf, and the lse within f32 rounding of the reference's.

How the grid is sized. Lengths 1, 2, 3, 17, 63-65, 127-129, 239, 799, 1023-1025, 2048 and
4096 or more, each on either side, with qo_len above, equal to and below kv_len (chunked:
kv_len up to 4096 against 17 queries). On a GPU: hq 8 on hkv 2 (hkv 8, 2 and 1 on the heads
test), head_dim 64 and 128 on the length tests and every routed head_dim on its own test,
f16, bf16 and f32, batch 1 and 2 (single_prefill, and batch_prefill with both).

On the CPU (the CI host: two shared cores, a few minutes for the whole suite) the same axes,
smaller: head_dim 64 and hq 2 on hkv 1 on the length tests, one head from length 1023 up,
long pairs only while a head has at most 4M scores (the f32 references dominate), f16 only
and single_prefill only on the long pairs and on the return_lse and heads tests (batch 2
with the LSE still runs in the strided and scale tests). The return_lse calls are the only
ones the CPU routes to the Triton kernel, whose interpreter walks each block in numpy: they
pair each named length up to 1025, and 4096, with a short other side (2048 reaches the CPU's
flash arm through the long-length test); bf16 with return_lse is GPU only (the
interpreter's bf16 dot is wrong). ``test_grid_reaches_every_arm_route_picks`` checks, for
every arch, that the grid sized for a host of it reaches every arm ``route`` can pick.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from tether.errors import UsageError
from tether.pytest_plugin import current_arch, has_gpu, interpreter_on
from tether_kernels import ARCHES, Shape, batch_prefill, prefill, route, single_prefill
from tether_kernels.arch_caps import ROUTE_ORDER, thresholds_for
from tether_kernels.arms import attention_ref, get_arm
from tether_kernels.routing import candidates
from tether_kernels.serves import HEAD_DIMS_POW2, HEAD_DIMS_SDPA, has_keyless_rows

from validate.correctness._helpers import (
    BF16_REASON,
    assert_within_baseline,
    fresh_seed,
    make_qkv,
    max_err,
    run_arm,
)

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
        "dtype": DTYPES,
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
        "dtype": DTYPES if gpu else _values(("f16",)),
        "entry": ENTRIES_SHORT if gpu else ENTRIES_SHORT[:1],
    },
    LENGTHS.call,
)
RETURN_LSE = Grid(
    lambda gpu: {
        "pair": _pairs(SHORT_PAIRS + LONG_PAIRS if gpu else LSE_CPU_PAIRS),
        "causal": CAUSAL,
        "dtype": DTYPES_LSE,
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
RELATIONS = _pairs(((65, 17), (64, 64), (17, 129)))
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
LSE_HEAD_DIMS = Grid(
    lambda gpu: {
        "head_dim": _values(HEAD_DIMS_POW2, "d{}"),
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
GRIDS = {
    "lengths": LENGTHS,
    "long_lengths": LONG_LENGTHS,
    "return_lse": RETURN_LSE,
    "heads": HEADS,
    "head_dims": HEAD_DIMS,
    "lse_head_dims": LSE_HEAD_DIMS,
    "strided": STRIDED,
    "sm_scale": SCALES,
}


# --- Calling as a user does, and checking the contract ---------------------------------------


@pytest.fixture(autouse=True, scope="module")
def _one_cpu_thread() -> Iterator[None]:
    # Without a GPU every reference is computed on the host. torch's default of a thread per
    # core, times the xdist workers, oversubscribes a small shared CI host: the many small
    # products here ran several times slower than on one thread.
    threads = torch.get_num_threads()
    if not GPU:
        torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch, routed_case: Callable[[str], None]) -> list[str]:
    """The arms the entry points ran, in order: the real ``_run_arm``, recorded."""
    arms: list[str] = []
    real = prefill._run_arm

    def spy(arm_name: str, *args: Any, **kwargs: Any) -> Any:
        arms.append(arm_name)
        routed_case(arm_name)
        return real(arm_name, *args, **kwargs)

    monkeypatch.setattr(prefill, "_run_arm", spy)
    return arms


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


def call_routed(call: Call, ran: list[str]) -> None:
    """Make inputs, call the entry point as a user does, check the arm and the contract."""
    shape, arch = call.shape, current_arch()
    seed = fresh_seed()
    q, k, v = make_qkv(shape, seed)
    args = as_layout(call.layout, q, k, v)
    # The reference sees exactly the values the entry point got (expanded-kv repeats a head).
    q, k, v = (t.contiguous() for t in args)
    if call.entry == "single_prefill":
        args = tuple(t[0] for t in args)
    kwargs: dict[str, Any] = {"causal": shape.causal, "return_lse": call.return_lse}
    if call.sm_scale is not None:
        kwargs["sm_scale"] = call.sm_scale
    want = route(call.entry, shape, arch, return_lse=call.return_lse)
    ran.clear()
    res = ENTRY_FNS[call.entry](*args, **kwargs)
    assert ran == [want], f"{call.entry} ran {ran}, route says {want} for {shape.key()}"
    out, lse = res if call.return_lse else (res, None)
    if call.entry == "single_prefill":
        out = out[None]
        lse = None if lse is None else lse[None]
    assert out.shape == q.shape and out.dtype == q.dtype and out.device == q.device
    assert_within_baseline(f"{call.entry} -> {want}", out, shape, q, k, v, seed, call.sm_scale)
    keyless = shape.qo_len - shape.kv_len if has_keyless_rows(shape) else 0
    if keyless:
        assert torch.equal(out[:, :keyless], torch.zeros_like(out[:, :keyless])), (
            f"{want}: rows that see no key are not 0 ({shape.key()}, seed {seed})"
        )
    if lse is not None:
        assert lse.shape == (shape.batch, shape.hq, shape.qo_len) and lse.dtype == torch.float32
        _, ref_lse = attention_ref(q, k, v, shape.causal, call.sm_scale, return_lse=True)
        assert torch.isneginf(lse[..., :keyless]).all(), f"keyless rows' lse (seed {seed})"
        seen, ref_seen = lse[..., keyless:], ref_lse[..., keyless:]
        tol = 1e-4 * ref_seen.abs().max().item() + 1e-5
        assert max_err(seen, ref_seen) <= tol, f"{want} lse {shape.key()} (seed {seed})"


# --- The tests: one per grid ----------------------------------------------------------------


@LENGTHS.parametrize
def test_lengths(pair, head_dim, causal, dtype, entry, ran) -> None:
    call_routed(LENGTHS.call(GPU, pair, head_dim, causal, dtype, entry), ran)


@pytest.mark.slow
@LONG_LENGTHS.parametrize
def test_long_lengths(pair, head_dim, causal, dtype, entry, ran) -> None:
    call_routed(LONG_LENGTHS.call(GPU, pair, head_dim, causal, dtype, entry), ran)


@pytest.mark.triton
@RETURN_LSE.parametrize
def test_return_lse(pair, causal, dtype, entry, ran) -> None:
    call_routed(RETURN_LSE.call(GPU, pair, causal, dtype, entry), ran)


@HEADS.parametrize
def test_heads(group, pair, causal, return_lse, entry, ran) -> None:
    call_routed(HEADS.call(GPU, group, pair, causal, return_lse, entry), ran)


@HEAD_DIMS.parametrize
def test_head_dims(head_dim, pair, causal, dtype, ran) -> None:
    call_routed(HEAD_DIMS.call(GPU, head_dim, pair, causal, dtype), ran)


@pytest.mark.triton
@LSE_HEAD_DIMS.parametrize
def test_lse_head_dims(head_dim, pair, causal, ran) -> None:
    call_routed(LSE_HEAD_DIMS.call(GPU, head_dim, pair, causal), ran)


@STRIDED.parametrize
def test_strided_inputs(layout, causal, return_lse, entry, ran) -> None:
    call_routed(STRIDED.call(GPU, layout, causal, return_lse, entry), ran)


@SCALES.parametrize
def test_sm_scale(sm_scale, causal, return_lse, entry, ran) -> None:
    call_routed(SCALES.call(GPU, sm_scale, causal, return_lse, entry), ran)


# --- The grid reaches every arm the router can pick ------------------------------------------


def _head_dim_classes(arch: str) -> list[int]:
    """One head_dim per class that every arm's declaration on ``arch`` treats alike."""
    classes: dict[tuple[bool, ...], int] = {}
    for d in (*range(8, 264, 8), 4, 20, 512):
        key = tuple(
            (s := get_arm(a).serves.get(arch)) is not None
            and (s.head_dims is None or d in s.head_dims)
            for a in ROUTE_ORDER[arch]
        )
        classes.setdefault(key, d)
    return sorted(classes.values())


def routable_arms(arch: str) -> set[str]:
    """Every arm ``route`` picks on ``arch`` over a space of calls that varies each thing a
    declaration or a policy threshold can turn on (lengths across 1, 2 and 2048, heads,
    head_dim classes, dtypes, masks, batch, the LSE, both entry points)."""
    lengths = (1, 2, 17, 65, 2048, 4096)
    picked: set[str] = set()
    for qo, kv, hkv, d, dtype, causal, batch, lse in itertools.product(
        lengths, lengths, (8, 2), _head_dim_classes(arch), ("f16", "bf16", "f32"),
        (True, False), (1, 2), (False, True),
    ):  # fmt: skip
        shape = Shape(batch, qo, kv, 8, hkv, d, dtype, causal)
        for entry in ("single_prefill", "batch_prefill")[batch - 1 :]:
            with contextlib.suppress(UsageError):  # no arm serves it: nothing to reach
                picked.add(route(entry, shape, arch, return_lse=lse))
    return picked


def test_the_head_dim_test_covers_every_routed_head_dim() -> None:
    # test_head_dims runs HEAD_DIMS_SDPA: every head_dim an arm route may pick serves.
    for arch in ARCHES:
        for name in ROUTE_ORDER[arch]:
            dims = get_arm(name).serves[arch].head_dims
            assert dims is not None and set(dims) <= set(HEAD_DIMS_SDPA), (arch, name)
        for th in thresholds_for(arch):
            assert set(get_arm(th.arm).serves[arch].head_dims or ()) <= set(HEAD_DIMS_SDPA)


@pytest.mark.parametrize("arch", [pytest.param(a, id=a) for a in ARCHES])
def test_grid_reaches_every_arm_route_picks(arch: str) -> None:
    # The grid as sized for a host of this arch (a GPU host's grid for the GPU arches). On
    # the CPU without the interpreter the return_lse cases skip, as route has no arm for them.
    gpu = arch != "cpu"
    reached: dict[str, int] = {}
    for name, grid in GRIDS.items():
        for call in grid.calls(gpu):
            if not gpu and call.return_lse and not interpreter_on():
                continue
            arm = route(call.entry, call.shape, arch, return_lse=call.return_lse)
            reached[arm] = reached.get(arm, 0) + 1
            assert arm in candidates(call.entry, call.shape, arch), (name, call)
    missing = routable_arms(arch) - set(reached)
    assert not missing, f"route picks {sorted(missing)} on {arch}; the grid never reaches them"


@pytest.mark.gpu(reason="the routed arms of a GPU arch")
def test_this_gpu_grid_reaches_the_arms_named_in_issue_11() -> None:
    # On an H200 the router picks cuDNN, the Triton kernel and the math backend; each must be
    # among the arms this host's grid exercises (each case asserts the arm it ran).
    arch = current_arch()
    reached = {
        route(c.entry, c.shape, arch, return_lse=c.return_lse)
        for g in GRIDS.values()
        for c in g.calls(True)
    }
    if arch == "sm90":
        assert {"sdpa_cudnn", "triton", "sdpa_math"} <= reached
    assert routable_arms(arch) <= reached


# --- NaN and Inf inside the tensors propagate, as in PyTorch ---------------------------------

NAN, INF = float("nan"), float("inf")
# Where a non-finite value sits and which. An infinity in k is left out: it makes scores of
# +-inf, and PyTorch's own backends disagree on those (its math backend gives the row NaN,
# its CPU flash kernel in f16 a finite row), so there is no one PyTorch answer to hold to.
POISON = [
    pytest.param(("q", NAN), id="q-nan"),
    pytest.param(("q", INF), id="q-inf"),
    pytest.param(("q", -INF), id="q-neg-inf"),
    pytest.param(("k", NAN), id="k-nan"),
    pytest.param(("v", NAN), id="v-nan"),
    pytest.param(("v", INF), id="v-inf"),
    pytest.param(("v", -INF), id="v-neg-inf"),
]


# numpy, running the Triton interpreter on the CPU, warns as it meets NaN; a GPU does not.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("return_lse", LSE)
@pytest.mark.parametrize("poison", POISON)
def test_non_finite_inputs_propagate(poison: tuple[str, float], return_lse: bool, ran) -> None:
    where, value = poison
    shape = Shape(1, 40, 56, 4, 2, 64, "f16", True)
    q, k, v = make_qkv(shape, fresh_seed())
    row, key, col = 20, 30, 5  # query row 20 sees keys 0..36; key 30 is seen by rows 14..39
    t = {"q": q, "k": k, "v": v}[where]
    t[0, row if where == "q" else key, 0, col] = value  # kv head 0 serves query heads 0 and 1
    res = single_prefill(q[0], k[0], v[0], causal=True, return_lse=return_lse)
    assert ran == [route("single_prefill", shape, current_arch(), return_lse=return_lse)]
    out, lse = res if return_lse else (res, None)
    out_bad = ~torch.isfinite(out.float())
    # PyTorch's own answer (its math backend, in f32): a +inf score makes its row NaN, a -inf
    # one drops the key. (attention_ref would not do: it zeroes NaN rows, keyless ones.)
    f32 = tuple(x.float() for x in (q, k, v))
    ref_bad = ~torch.isfinite(run_arm("sdpa_math", shape.with_(dtype="f32"), *f32)[0])
    if where == "q":
        rows, heads = slice(row, row + 1), slice(0, 1)
    else:
        rows, heads = slice(key - (shape.kv_len - shape.qo_len), None), slice(0, 2)
    # Never scrubbed: where the rows that read the value are not finite in PyTorch, they are
    # not finite here (rows that do not read it may be, a zero weight times NaN being NaN).
    assert ref_bad[rows, heads].any(), "the fixture's value reached no row in PyTorch either"
    assert out_bad[rows, heads][ref_bad[rows, heads]].all(), "a non-finite result came out finite"
    if where == "q":  # a query row is its own: no other row is touched
        out_bad[rows, heads] = False
        assert not out_bad.any(), "a non-finite query reached another row"
        if lse is not None and ref_bad[row, 0].any():
            assert not torch.isfinite(lse[0, row])
