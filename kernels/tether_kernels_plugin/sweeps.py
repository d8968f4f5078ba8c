"""The sweeps, probe and gate calls tether_kernels declares: data over the case model and arms.

Sweeps are data (a grid, arms by role, a timing policy): what a sample means lives in
cases.py and adapters.py and in tether's timing engine, which the harness fingerprint covers;
declaring or editing a sweep here supersedes no run of another sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tether import registry
from tether.bench.engine import TimingPolicy
from tether.policy import Condition, holds
from tether.registry import Bound, Probe, Sweep
from tether_kernels.arms import get_arm
from tether_kernels.gluon.launch import VARIANTS
from tether_kernels.paged import ENTRY as PAGED_ENTRY
from tether_kernels.policy import (
    SM90_SHORT_LAYOUTS,
    SM90_SQUARE64_LAYOUTS,
    SM90_SQUARE_HEADS_LAYOUTS,
    SM90_SQUARE_HEADS_MIN_QO,
    SM90_SQUARE_LAYOUTS,
)
from tether_kernels.routing import ENTRY_POINTS
from tether_kernels.shapes import TORCH_DTYPES, Shape

from tether_kernels_plugin.candidates import CANDIDATES
from tether_kernels_plugin.cases import SQUARE_ALIAS
from tether_kernels_plugin.catalog import load_catalog

# --- sweeps ---------------------------------------------------------------------------------

_SQUARE = {"hkv": 8, "head_dim": 128, "dtype": "bf16", "causal": True}
_CHUNKED = {"batch": 1, "qo_len": 2048, "hq": 32, "hkv": 8, "head_dim": 128, "causal": True}
# The SDPA arm a call would otherwise take, in order of preference: the first that serves
# every cell on the arch is role A.
_SDPA = ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient")
# tether's own kernel on the arch: the Gluon Hopper kernel where it serves (sm90), else Triton.
_OURS = ("gluon", "triton")

registry.sweep(
    Sweep(
        name="prefill-vs-sdpa",
        case="attention",
        axes={
            "batch": (1, 4),
            "hq": (16, 32, 64),
            "seqlen": (256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 16384),
        },
        aliases=SQUARE_ALIAS,
        fixed=_SQUARE,
        arms={"A": _SDPA, "B": _OURS},
        entry_points=ENTRY_POINTS,
        timing=TimingPolicy(),
        description="square causal prefill, bf16, head_dim 128, GQA to 8 kv heads",
    )
)
registry.sweep(
    Sweep(
        name="chunked-prefill",
        case="attention",
        axes={"kv_len": (2048, 4096, 8192, 16384), "dtype": ("f16", "bf16")},
        fixed=_CHUNKED,
        # A is the SDPA arm the call takes without a threshold (cuDNN on sm90, which serves
        # kv_len > qo_len bottom-right with the mask built outside the call); an arm that
        # builds the mask inside its call is still flagged by the fidelity check, not trusted.
        arms={"A": _SDPA, "B": _OURS},
        entry_points=ENTRY_POINTS,
        timing=TimingPolicy(),
        description="qo_len 2048 against kv_len 2K to 16K, f16 and bf16",
    )
)
registry.sweep(
    Sweep(
        name="deferred-rescale",
        case="attention",
        axes={"kv_len": (2048, 4096, 8192, 16384), "dtype": ("f16", "bf16")},
        fixed=_CHUNKED,
        arms={"A": "triton_eager", "B": "triton"},
        entry_points=ENTRY_POINTS,
        timing=TimingPolicy(),
        description="margin 0 (rescale every block) against the deferred rescale, chunked grid",
    )
)
# The seeds' failure, shown on purpose: the allocator cache released between arms, so each
# arm pays device malloc inside its own samples (few calls per sample, events rather than
# graphs, which never allocate). The engine flags the cells; never a published number.
registry.sweep(
    Sweep(
        name="aa-release-demo",
        case="attention",
        axes={"seqlen": (256, 1024, 4096)},
        aliases=SQUARE_ALIAS,
        fixed={"batch": 1, "hq": 32, **_SQUARE},
        arms={"A": _SDPA, "B": "triton"},
        entry_points=ENTRY_POINTS,
        timing=TimingPolicy(
            sampler="events",
            calls_per_sample=3,
            min_reps=7,
            max_reps=15,
            cell_cap_s=3.0,
            release_between_arms=True,
        ),
        description="A/A demonstration: allocator released between arms (deliberately wrong)",
    )
)
registry.sweep(
    Sweep(
        name="aa-control-demo",
        case="attention",
        axes={"seqlen": (256, 1024, 4096)},
        aliases=SQUARE_ALIAS,
        fixed={"batch": 1, "hq": 32, **_SQUARE},
        arms={"A": _SDPA, "B": "triton"},
        entry_points=ENTRY_POINTS,
        timing=TimingPolicy(),
        description="A/A demonstration control: the release demo's cells at the default policy",
    )
)
registry.sweep(
    Sweep(
        name="cpu-demo",
        case="attention",
        axes={"hq": (2, 4), "seqlen": (64, 128, 256)},
        aliases=SQUARE_ALIAS,
        fixed={"batch": 1, "hkv": 2, "head_dim": 64, "dtype": "f32", "causal": True},
        arms={"A": "sdpa_math", "B": "sdpa_flash"},
        entry_points=ENTRY_POINTS,
        timing=TimingPolicy(
            min_sample_s=2e-3, min_reps=6, max_reps=16, noise_target=0.05, cell_cap_s=0.6
        ),
        needs_gpu=False,
        description="CPU demo: SDPA math against SDPA flash, f32, head_dim 64",
    )
)

# The peer serving stacks call: FlashInfer's Hopper FA3 kernel as A, tether's own kernel as B,
# on issue 15's calls. They run where flashinfer is installed (tether_kernels.peers); elsewhere
# the run is rejected with the arm's reason.
registry.sweep(
    Sweep(
        name="chunked-prefill-fa3",
        case="attention",
        axes={"kv_len": (8192, 16384), "dtype": ("bf16", "f16")},
        fixed=_CHUNKED,
        arms={"A": "flashinfer_fa3", "B": _OURS},
        entry_points=ENTRY_POINTS,
        # Four cells: each call lasts well under a millisecond, so the noise target usually
        # stops a cell before this cap (the default is sized for 60-cell maps).
        timing=TimingPolicy(cell_cap_s=6.0),
        description="qo_len 2048 against kv_len 8K and 16K, bf16 and f16, FlashInfer FA3 as A",
    )
)
registry.sweep(
    Sweep(
        name="square-prefill-fa3",
        case="attention",
        # A grid is a product: the 32/32 row covers every length, including the 4096 cell.
        axes={"hkv": (8, 32), "seqlen": (2048, 4096, 8192, 16384)},
        aliases=SQUARE_ALIAS,
        fixed={"batch": 1, "hq": 32, "head_dim": 128, "dtype": "bf16", "causal": True},
        arms={"A": "flashinfer_fa3", "B": _OURS},
        entry_points=ENTRY_POINTS,
        timing=TimingPolicy(cell_cap_s=4.0),
        description="square causal prefill, bf16, head_dim 128, 32 query heads over 8 or 32 kv heads",
    )
)

# --- the probe: the chunked calls against dense-matmul bounds of the same run -------------

BOUND_N = 8192


def matmul_bound(n: int, dtype: str) -> Bound:
    """A dense n x n x n matmul in ``dtype`` (2 n^3 FLOPs), the ceiling of a compute-bound
    call of that dtype; on the CPU in f32 (CPU half matmuls are emulated)."""

    def prepare(device: str) -> Callable[[], Any]:
        import torch

        name = dtype if device != "cpu" else "f32"
        tdtype = getattr(torch, TORCH_DTYPES[name])
        gen = torch.Generator(device=device).manual_seed(n)
        a = torch.randn(n, n, device=device, dtype=tdtype, generator=gen)
        b = torch.randn(n, n, device=device, dtype=tdtype, generator=gen)
        c = torch.empty(n, n, device=device, dtype=tdtype)
        return lambda: torch.matmul(a, b, out=c)

    return Bound(dtype, 2.0 * n**3, f"dense {n}x{n}x{n} {dtype} matmul (torch.matmul)", prepare)


def _probe_bounds(device: str) -> tuple[Bound, ...]:
    n = BOUND_N if device != "cpu" else 256
    return tuple(matmul_bound(n, d) for d in ("f16", "bf16"))


registry.probe(
    Probe(
        sweep=Sweep(
            name="chunked-prefill-bound",
            case="attention",
            axes={"kv_len": (2048, 8192, 16384), "dtype": ("f16", "bf16")},
            fixed=_CHUNKED,
            arms={"B": _OURS},
            entry_points=("single_prefill",),
            timing=TimingPolicy(cell_cap_s=2.0),
            kind="probe",
            description="single_prefill chunked calls against the dense matmul bound",
        ),
        bounds=_probe_bounds,
        bound_field="dtype",
    )
)

# --- the gates' calls: the previous kernel against today's, in short bursts from rest ---------

# Each gate is set between what its call ran at before and after a kernel change, both measured
# here side by side, briefly and from rest so that neither is taken at a power-limited clock.
registry.sweep(
    Sweep(
        name="gate-calls-sm90",
        case="attention",
        axes={"qo_len": (2048, 16384), "dtype": ("f16", "bf16")},
        fixed={"batch": 1, "kv_len": 16384, "hq": 32, "hkv": 8, "head_dim": 128, "causal": True},
        arms={"A": "triton", "B": "gluon"},
        entry_points=ENTRY_POINTS,
        # The stated clock fraction for these absolute rates: an H200 at its power limit holds
        # these calls below its maximum SM clock when sustained (each run's recorded clock range
        # is in docs/backends.md), so from rest a sample at or above 0.85 of the maximum is a
        # burst before the power limit bites, and a lower one is flagged.
        timing=TimingPolicy(
            min_reps=6, max_reps=12, cell_cap_s=0.4, cooldown_s=3.0, throttle_ratio=0.85
        ),
        replicates=3,
        description="the gated calls: the Triton kernel (before) against the Gluon kernel (after)",
    )
)

# --- tuning: candidate configs against the fastest peer -----------------------------------

registry.sweep(
    Sweep(
        name="tune-sm90",
        case="attention",
        axes={
            "config": tuple(CANDIDATES),
            "seqlen": (4096, 16384),
        },
        aliases=SQUARE_ALIAS,
        fixed={"batch": 1, "hq": 32, **_SQUARE},
        arms={"A": ("flashinfer_fa3", "sdpa_cudnn"), "B": "triton"},
        entry_points=(),
        timing=TimingPolicy(cell_cap_s=1.5),
        kind="tune",
        description="candidate sm90 launch configs of the Triton arm against the fastest peer",
    )
)


registry.sweep(
    Sweep(
        name="tune-gluon-sm90",
        case="attention",
        axes={"config": tuple(VARIANTS), "seqlen": (4096, 8192, 16384)},
        aliases=SQUARE_ALIAS,
        fixed={"batch": 1, "hq": 32, **_SQUARE},
        arms={"A": ("flashinfer_fa3", "sdpa_cudnn"), "B": "gluon"},
        entry_points=(),
        timing=TimingPolicy(cell_cap_s=1.0),
        kind="tune",
        description="variants of the Gluon sm90 kernel against the fastest peer",
    )
)

# --- the public entry points as called (the headline), and the evidence of sm90's policy ------

# What a serving stack calls: bf16, head_dim 128, 32 query heads over 8 kv heads, one request.
_API = {"batch": 1, "hq": 32, "hkv": 8, "head_dim": 128, "dtype": "bf16", "causal": True}
_API_TIMING = TimingPolicy(cell_cap_s=1.0)


def _single_block(
    name: str,
    axes: dict[str, tuple[object, ...]],
    fixed: dict[str, object],
    arms: dict[str, str],
    description: str,
    timing: TimingPolicy = _API_TIMING,
    case: str = "attention",
) -> Sweep:
    """A sweep of one replicate block per run (two runs of a commit give the band), its
    ``seqlen`` axis, where it has one, a square call's length (a ragged cell's longest).

    A paged sweep's cells are reached from paged_prefill, which routes by its own order (not
    the policy's ENTRY_POINTS): its runs record that entry point, so the front page's check
    sees the public call timed (the first api-paged-fa3 runs, 2026-12-07, recorded the
    policy's three and cannot be cited)."""
    return registry.sweep(
        Sweep(
            name=name,
            case=case,
            axes=axes,
            aliases=SQUARE_ALIAS if "seqlen" in axes else {},
            fixed=fixed,
            arms=arms,
            entry_points=(PAGED_ENTRY,) if case == "paged" else ENTRY_POINTS,
            timing=timing,
            replicates=1,
            description=description,
        )
    )


_API_CHUNKED = {k: v for k, v in _API.items() if k not in ("qo_len", "kv_len")}
_API_BATCH = {k: v for k, v in _API.items() if k != "batch"}
_VS_FA3 = {"A": "flashinfer_fa3", "B": "single_prefill"}
_single_block(
    "api-chunked-fa3",
    {"qo_len": (128, 256, 512, 1024, 2048, 4096, 8192), "kv_len": (8192, 16384, 32768)},
    _API_CHUNKED,
    _VS_FA3,
    "single_prefill as called (CUDA graph) against FlashInfer fa3: chunked prefill",
)
_single_block(
    "api-square-fa3",
    {"seqlen": (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)},
    _API,
    _VS_FA3,
    "single_prefill as called (CUDA graph) against FlashInfer fa3: square prefill",
)
# The long squares again in f16 (the sweep above is bf16, what serving stacks run): the Gluon
# kernel's square calls are judged in both dtypes it serves.
_single_block(
    "api-square-f16-fa3",
    {"seqlen": (4096, 8192, 16384, 32768)},
    {**_API, "dtype": "f16"},
    _VS_FA3,
    "single_prefill as called (CUDA graph) against FlashInfer fa3: square prefill, f16",
)
# The heads models use, as pairs (32 query heads over 8, 32 or 1 kv heads would be a cross
# product with 8/32, which no model has): GQA 32/8, MHA 32/32, and 8/1 (8 query heads, MQA).
HEADS = ("32/8", "32/32", "8/1")
_BREADTH = {"hq/hkv": HEADS, "head_dim": (64, 128), "dtype": ("f16", "bf16")}
_API_FIXED = {"batch": 1, "causal": True}
_single_block(
    "api-breadth-fa3",
    {"qo_len": (512, 4096), "kv_len": (4096, 16384), **_BREADTH, "head_dim": (64, 128, 256)},
    _API_FIXED,
    _VS_FA3,
    "single_prefill as called (CUDA graph) against FlashInfer fa3: head_dim 64, 128 and 256, "
    "heads 32/8, 32/32 and 8/1, f16 and bf16, chunked and square",
)


def catalog_layouts(
    tp: tuple[int, ...] = (1, 8), head_dims: tuple[int, ...] | None = (64, 128, 256)
) -> tuple[str, ...]:
    """The model catalog's distinct per-GPU layouts at tensor-parallel degrees ``tp``, as
    "hq/hkv/head_dim" values, in catalog order: what a serving engine hands one GPU for the
    models people serve. ``head_dims``: the ones the peer instantiates (fa3 has no 96), or
    None for every head_dim the catalog has."""
    seen: dict[str, None] = {}
    for model in load_catalog():
        if head_dims is not None and model.head_dim not in head_dims:
            continue
        for degree in tp:
            layout = model.tp[degree]
            if layout is not None:
                seen.setdefault(f"{layout[0]}/{layout[1]}/{model.head_dim}", None)
    return tuple(seen)


# The headline over the model catalog: single_prefill as called against fa3 at every layout
# the catalog's models put on one GPU at TP 1 and 8 (head_dim 96, which fa3 lacks, is left to
# the breadth sweep's other peers), at a tiny chunk (a serving engine's short step), a long
# chunk and a long square.
_single_block(
    "api-models-fa3",
    {
        "qo_len/kv_len": ("64/16384", "2048/16384", "8192/8192"),
        "hq/hkv/head_dim": catalog_layouts(),
    },
    {"batch": 1, "causal": True, "dtype": "bf16"},
    _VS_FA3,
    "single_prefill as called (CUDA graph) against FlashInfer fa3 over the model catalog's "
    "per-GPU layouts at TP 1 and 8, bf16, a tiny chunk, a long chunk and a long square",
)
# Routing regret (issue 43 item 3): single_prefill as called (B) against each arm it could
# route to, forced (A), over the catalog and the lengths serving engines send: chunks of 1 to
# 8192 queries over 4K to 128K keys and squares of 128 to 32K, f16 and bf16. One sweep per
# arm, on one grid axis so a cell names one call in every sweep: per call, the lowest ratio
# over the sweeps is the public call against the fastest of its arms. sdpa_math (the
# reference, which the router takes only where nothing else serves) is not a candidate.
REGRET_ARMS = {"gluon": "gluon", "triton": "triton", "cudnn": "sdpa_cudnn"}
REGRET_LENGTHS = (
    *("1/4096", "16/16384", "127/32768", "512/131072", "2048/16384", "8192/65536"),
    *("128/128", "1024/1024", "4096/4096", "8192/8192", "32768/32768"),
)
REGRET_AXIS = "hq/hkv/head_dim/qo_len/kv_len/dtype"


def regret_design() -> tuple[str, ...]:
    """The regret sweeps' calls: each catalog layout (TP 1 and 8, at every head_dim the catalog
    has, fa3's or not) at two lengths, stepping through REGRET_LENGTHS so every length meets a spread of
    layouts, the first in bf16 and the second in bf16 or f16 by turns (a designed sample of
    the product, which would take hours of device time)."""
    calls = []
    for i, layout in enumerate(catalog_layouts(head_dims=None)):
        first = REGRET_LENGTHS[(2 * i) % len(REGRET_LENGTHS)]
        second = REGRET_LENGTHS[(2 * i + 5) % len(REGRET_LENGTHS)]
        calls.append(f"{layout}/{first}/bf16")
        calls.append(f"{layout}/{second}/{('bf16', 'f16')[i % 2]}")
    return tuple(calls)


def _served_by(arm: str, calls: tuple[str, ...]) -> tuple[str, ...]:
    """The calls of ``calls`` that ``arm`` serves on sm90 by its declaration (a sweep whose
    arm cannot serve a cell is rejected whole, so the arm's sweep leaves those out)."""
    out = []
    for call in calls:
        hq, hkv, head_dim, qo, kv, dtype = call.split("/")
        shape = Shape(1, int(qo), int(kv), int(hq), int(hkv), int(head_dim), dtype, True)
        if get_arm(arm).declared_refusal(shape, "sm90") is None:
            out.append(call)
    return tuple(out)


for _short, _arm in REGRET_ARMS.items():
    _single_block(
        f"api-regret-{_short}",
        {REGRET_AXIS: _served_by(_arm, regret_design())},
        {"batch": 1, "causal": True},
        {"A": _arm, "B": "single_prefill"},
        f"single_prefill as called (CUDA graph) against the {_arm} arm forced, over the model "
        "catalog's layouts at a designed sample of serving lengths, f16 and bf16: routing "
        "regret, where the public call is slower than an arm it could have taken",
    )


_single_block(
    "api-eager-fa3",
    {"seqlen": (128, 1024, 4096)},
    _API,
    _VS_FA3,
    "single_prefill called eagerly (host clock, device synchronised) against fa3",
    TimingPolicy(sampler="wall", cell_cap_s=1.0),
)
_single_block(
    "api-host-fa3",
    {"seqlen": (128, 1024, 4096)},
    _API,
    _VS_FA3,
    "host time to issue one eager single_prefill call, against fa3's",
    TimingPolicy(sampler="host", cell_cap_s=1.0),
)
_single_block(
    "api-chunked-sdpa",
    {"qo_len": (256, 2048), "kv_len": (4096, 16384)},
    _API_CHUNKED,
    {"A": "sdpa", "B": "single_prefill"},
    "single_prefill as called against PyTorch SDPA as a user calls it",
)
_single_block(
    "api-batch-sdpa",
    {"batch": (2, 4, 8, 16), "seqlen": (1024, 4096)},
    _API_BATCH,
    {"A": "sdpa", "B": "batch_prefill"},
    "batch_prefill as called against PyTorch SDPA as a user calls it",
)

# The policy's evidence: tether's kernel (B: Gluon, or Triton for short squares) against the
# arm a call otherwise takes (A), each through the arm's own per-call path, from the shortest
# call its region routes. A threshold's scope states ranges of layouts (policy._SM90_LAYOUTS:
# GQA groups 1 to 16, up to 128 query heads); the evidence is a designed sample spanning them,
# LAYOUT_DESIGN: each end of both ranges (1/1, 16/1, 128/128, 128/8) and of the narrower ones
# the square and ragged scopes state (8/1 and 32/32: 8 and 32 query heads, MHA), a spread inside that
# includes the catalog's awkward groups (28/4: Qwen2.5-7B, 64/8: Llama-70B and Qwen3-32B, 32/8:
# Llama-8B), in bf16 (what serving stacks run) and a corner-and-middle subset in f16, as one
# "hq/hkv/dtype" axis so the grid is that sample and not its cross product.
LAYOUT_DESIGN = (
    *(f"{h}/bf16" for h in ("1/1", "8/1", "16/1", "32/32", "128/128", "128/8", "32/8", "28/4")),
    "64/8/bf16",
    *(f"{h}/f16" for h in ("1/1", "128/8", "32/8")),
)


def _design(
    *ranges: tuple[Condition, ...], corners: tuple[str, ...] = ()
) -> dict[str, tuple[str, ...]]:
    """The layout axis over LAYOUT_DESIGN's layouts inside any of ``ranges`` (the layout ranges
    of the scopes one sweep speaks for), then ``corners``: layouts a narrower scope has at an
    end the design does not reach.

    A threshold narrower than the design (long squares, short squares, ragged batches) is
    judged on its own population only, so its sweep times what the scope can route: the cells
    outside were timed at 9eba023 (2026-12-06, both runs in the store), which is why the scope
    stops where it does, and the device time they took goes to the replicate run instead.
    """
    keep = []
    for layout in LAYOUT_DESIGN:
        hq, hkv, _dtype = layout.split("/")
        if any(holds(r, {"hq": int(hq), "hkv": int(hkv)}) for r in ranges):
            keep.append(layout)
    return {"hq/hkv/dtype": (*keep, *corners)}


_LAYOUTS = {"hq/hkv/dtype": LAYOUT_DESIGN}
_VS_CUDNN = {"A": "sdpa_cudnn", "B": "gluon"}
_single_block(
    "policy-chunked-sm90",
    {"qo_len": (16, 1024), "kv_len": (4096, 32768), **_LAYOUTS, "head_dim": (64, 128)},
    _API_FIXED,
    _VS_CUDNN,
    "sm90 chunked prefill from 16 queries: gluon against cuDNN, head_dim 64 and 128, the "
    "layout design (GQA groups 1 to 16, 1 to 128 query heads), f16 and bf16",
)
# The long squares' three scopes (policy.SM90_SQUARE_LAYOUTS and its neighbours) from one
# sweep: 40/10 is the many-heads scope's corner (its fewest heads and smallest group, a
# catalog layout), and SM90_SQUARE_HEADS_MIN_QO the length from which that scope takes calls.
_single_block(
    "policy-square-sm90",
    {
        "seqlen": tuple(sorted({2048, 4096, SM90_SQUARE_HEADS_MIN_QO, 16384})),
        **_design(
            SM90_SQUARE_LAYOUTS,
            SM90_SQUARE64_LAYOUTS,
            SM90_SQUARE_HEADS_LAYOUTS,
            corners=("40/10/bf16",),
        ),
        "head_dim": (64, 128),
    },
    _API_FIXED,
    _VS_CUDNN,
    "sm90 square prefill from 2048: gluon against cuDNN, head_dim 64 and 128, the layout "
    "design, f16 and bf16",
)
_single_block(
    "policy-square-short-sm90",
    {"seqlen": (128, 512, 1024), **_design(SM90_SHORT_LAYOUTS)},
    {**_API_FIXED, "head_dim": 128},
    {"A": "sdpa_cudnn", "B": "triton"},
    "sm90 short square prefill: the Triton kernel against cuDNN, head_dim 128, the layout "
    "design, f16 and bf16",
)
_single_block(
    "policy-wide-sm90",
    {"qo_len/kv_len": ("16/16384", "2048/2048", "2048/16384"), **_LAYOUTS, "head_dim": (96, 256)},
    _API_FIXED,
    {"A": "triton", "B": "gluon"},
    "sm90 prefill at head_dim 96 and 256, a tiny chunk, a square and a chunk: gluon against the "
    "Triton kernel (which takes them otherwise: cuDNN is declared for 64 and 128 only), the "
    "layout design, f16 and bf16",
)
_single_block(
    "policy-batch-sm90",
    {"batch": (2, 4, 8, 16), "seqlen": (1024, 4096)},
    _API_BATCH,
    _VS_CUDNN,
    "sm90 batch_prefill, square: gluon against cuDNN, bf16",
)
_single_block(
    "policy-batch-short-sm90",
    {"batch": (2, 4, 8, 16), "seqlen": (512, 1024, 4096)},
    _API_BATCH,
    {"A": "sdpa_cudnn", "B": "triton"},
    "sm90 batch_prefill, square: the Triton kernel against cuDNN, bf16",
)
# Ragged batches (ragged_prefill: requests of their own lengths, packed), each cell's requests
# spread up to its longest length (tether_kernels_plugin.cases.spread): the entry point as
# called against FlashInfer's fa3 ragged wrapper (planned once, outside the call, as a serving
# stack plans a step), and the policy's evidence, the Gluon kernel's one launch against
# per_request (each request as single_prefill runs it), over the scope's dtypes, head_dims
# and heads.
_single_block(
    "api-ragged-fa3",
    {"batch": (2, 4, 8, 16), "seqlen": (256, 1024, 4096), "mix": ("spread", "serving")},
    {"causal": True, "hq": 32, "hkv": 8, "head_dim": 128, "dtype": "bf16"},
    {"A": "flashinfer_fa3", "B": "ragged_prefill"},
    "ragged_prefill as called (CUDA graph) against FlashInfer fa3's ragged wrapper: batches "
    "of 2 to 16 requests up to the longest length, new prompts and serving steps",
    case="ragged",
)
# The ragged scope's designed sample (hq/hkv/head_dim/dtype): each end of its ranges (groups
# of 2 and 16, 4 and 64 query heads) and layouts inside, and every head_dim and dtype pair the
# scope routes, rather than every layout at every head_dim and dtype (a product four times the
# size, which the device time of a session does not hold twice).
RAGGED_DESIGN = (
    "4/1/128/bf16",  # the fewest query heads (Llama-3-8B at TP 8)
    "16/1/64/bf16",  # the widest group
    "16/8/128/bf16",  # the narrowest group (Gemma-2-9B)
    "64/8/128/bf16",  # the most query heads (Llama-3-70B)
    "8/1/64/bf16",  # Llama-3-70B at TP 8
    "28/4/64/f16",
    "32/8/128/f16",
)
_single_block(
    "policy-ragged-sm90",
    {
        "batch": (2, 16),
        "seqlen": (128, 4096),
        "mix": ("spread", "serving"),
        "hq/hkv/head_dim/dtype": RAGGED_DESIGN,
    },
    {"causal": True},
    {"A": "per_request", "B": "gluon"},
    "sm90 ragged batches, new prompts and serving steps: the Gluon kernel's one launch against "
    "per_request (each request as single_prefill runs it), the ragged scope's layout design",
    case="ragged",
)
# Paged batches (paged_prefill, issue 44 item 2): the entry point as called against FlashInfer's
# fa3 paged wrapper (planned once, outside the call, in its CUDA-graph mode), on the same
# caches and page table: page sizes 1 to 64, both cache layouts, new prompts ("spread") and
# chunked prefills over a cached prefix ("chunk"), 32/8 at head_dim 128 in bf16.
_single_block(
    "api-paged-fa3",
    {
        "batch": (4, 16),
        "seqlen": (1024, 4096),
        "page_size": (1, 16, 32, 64),
        "kv_layout": ("NHD", "HND"),
        "mix": ("spread", "chunk"),
    },
    {"causal": True, "hq": 32, "hkv": 8, "head_dim": 128, "dtype": "bf16"},
    {"A": "flashinfer_fa3_paged", "B": "paged_prefill"},
    "paged_prefill as called (CUDA graph) against FlashInfer fa3's paged wrapper: batches of "
    "4 and 16 requests up to the longest length, pages of 1 to 64 slots scattered over the "
    "cache, NHD and HND, new prompts and chunks over a cached prefix",
    case="paged",
)
# The public API's gated calls: the arm the call took before the policy routed it to Gluon
# (cuDNN, A) against single_prefill as called (B), in short bursts from rest.
registry.sweep(
    Sweep(
        name="gate-calls-api",
        case="attention",
        axes={"qo_len": (1024, 2048), "kv_len": (2048, 16384)},
        fixed={k: v for k, v in _API.items() if k not in ("qo_len", "kv_len")},
        arms={"A": "sdpa_cudnn", "B": "single_prefill"},
        entry_points=ENTRY_POINTS,
        timing=TimingPolicy(
            min_reps=6, max_reps=12, cell_cap_s=0.4, cooldown_s=2.0, throttle_ratio=0.85
        ),
        replicates=2,
        description="the gated public-API calls: cuDNN (before) against single_prefill (after)",
    )
)
