"""tether_kernels as tether sees it: the attention case model, its arms, sweeps and probe.

``[tool.tether] plugins`` names this module; importing it registers everything below with
``tether.registry``. Importing it imports neither torch nor triton (the check and the renderer
may import plugins on light installs); they are imported where a measurement starts.

Its code decides what a sample means (how inputs are laid out, which launch config a tuning
cell runs), so it is part of the harness fingerprint (``[tool.tether.fingerprint] harness``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tether import registry
from tether.bench.engine import TimingPolicy
from tether.errors import ArmUnavailableError
from tether.policy import shape_fields
from tether.registry import Bound, Probe, Sweep

from tether_kernels.arch_caps import LaunchConfig
from tether_kernels.routing import ENTRY_POINTS, reachable_entry_points, route
from tether_kernels.shapes import Shape, flops

_TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}
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

    dtype = getattr(torch, _TORCH_DTYPES[shape.dtype])
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
    launch: LaunchConfig | None = None

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
        from tether.arch import check_arch

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
    """A cell's fields (``seqlen`` meaning a square call; ``config`` naming a tuning
    candidate) as an AttentionCase."""
    full = shape_fields(fields, {}, SQUARE_ALIAS)
    full.pop("seqlen", None)
    name = full.pop("config", None)
    unknown = sorted(set(full) - set(_SHAPE_FIELDS))
    if unknown:
        from tether.errors import UsageError

        raise UsageError(f"attention case: unknown fields {unknown} in {dict(fields)}")
    shape = Shape(**full)
    if name is None:
        return AttentionCase(shape)
    return AttentionCase(shape, str(name), candidate(str(name)))


def candidate(name: str) -> Any:
    """A tuning candidate by name: a Triton LaunchConfig or a Gluon variant."""
    from tether_kernels.gluon.launch import VARIANTS

    found = CANDIDATES.get(name) or VARIANTS.get(name)
    if found is None:
        from tether.errors import UsageError

        known = ", ".join([*CANDIDATES, *VARIANTS])
        raise UsageError(f"tuning candidate {name!r}: unknown (known: {known})")
    return found


@dataclass(frozen=True)
class AttentionArm:
    """A tether_kernels arm as tether's bench sees it (the tether.registry.Arm protocol)."""

    arm: Any  # tether_kernels.arms.Arm

    @property
    def name(self) -> str:
        return str(self.arm.name)

    @property
    def allowed_kernels(self) -> tuple[str, ...]:
        return tuple(self.arm.allowed_kernels)

    def supports(self, case: AttentionCase, arch: str) -> str | None:
        return self.arm.supports(case.shape, arch)

    def prepare(self, case: AttentionCase, inputs: Any, arch: str) -> Callable[[], Any]:
        q, k, v, out = inputs
        if case.launch is not None and self.name in ("triton", "triton_eager"):
            from tether_kernels.arms import prepare_triton_config

            if not isinstance(case.launch, LaunchConfig):
                raise ArmUnavailableError(f"arm {self.name}: {case.config_name} is not its config")
            return prepare_triton_config(q, k, v, case.shape, out, case.launch, self.name, arch)
        if case.launch is not None and self.name == "gluon":
            from tether_kernels.gluon.arm import prepare_gluon

            if isinstance(case.launch, LaunchConfig):
                raise ArmUnavailableError(
                    f"arm gluon: {case.config_name} is not one of its variants"
                )
            reason = self.arm.supports(case.shape, arch)
            if reason is not None:
                raise ArmUnavailableError(f"arm gluon: {reason}")
            return prepare_gluon(case.launch)(q, k, v, case.shape, out, None, arch)
        return self.arm.prepare(q, k, v, case.shape, out=out, arch=arch)

    def kernels_on(self, arch: str) -> tuple[str, ...]:
        try:
            return tuple(self.arm.expected_kernels_on(arch))
        except Exception:  # an arch the kernel library does not know: nothing to expect
            return ()


def _register_arms() -> None:
    from tether_kernels.arms import ARMS

    for arm in ARMS.values():
        registry.arm(AttentionArm(arm))


_register_arms()

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
        tdtype = getattr(torch, _TORCH_DTYPES[name])
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
        # The stated clock fraction for these absolute rates: an H200 at its 700 W limit holds
        # these calls at 1620-1755 MHz of 1980 when sustained, so from rest a sample at or above
        # 0.85 of the maximum is a burst before the power limit bites, and a lower one is flagged.
        timing=TimingPolicy(
            min_reps=6, max_reps=12, cell_cap_s=0.4, cooldown_s=3.0, throttle_ratio=0.85
        ),
        replicates=3,
        description="the gated calls: the Triton kernel (before) against the Gluon kernel (after)",
    )
)

# --- tuning: candidate configs against the fastest peer -----------------------------------

# Candidates are named by their fields; the current sm90 default is among them so every tune
# run measures today's kernel beside the alternatives.
CANDIDATES: dict[str, LaunchConfig] = {
    "m128n64w8s4h2lf": LaunchConfig(128, 64, 8, 4, heads_per_program=2, longest_first=True),
    "m128n64w8s3h2lf": LaunchConfig(128, 64, 8, 3, heads_per_program=2, longest_first=True),
    "m128n128w8s2h2lf": LaunchConfig(128, 128, 8, 2, heads_per_program=2, longest_first=True),
    "m128n128w8s3lf": LaunchConfig(128, 128, 8, 3, longest_first=True),
    "m64n64w4s3lf": LaunchConfig(64, 64, 4, 3, longest_first=True),
}
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


def _gluon_variants() -> tuple[str, ...]:
    from tether_kernels.gluon.launch import VARIANTS

    return tuple(VARIANTS)


registry.sweep(
    Sweep(
        name="tune-gluon-sm90",
        case="attention",
        axes={"config": _gluon_variants(), "seqlen": (4096, 16384)},
        aliases=SQUARE_ALIAS,
        fixed={"batch": 1, "hq": 32, **_SQUARE},
        arms={"A": ("flashinfer_fa3", "sdpa_cudnn"), "B": "gluon"},
        entry_points=(),
        timing=TimingPolicy(cell_cap_s=1.0),
        kind="tune",
        description="variants of the Gluon sm90 kernel against the fastest peer",
    )
)
