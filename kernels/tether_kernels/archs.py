"""The arches tether's kernels run on: one row each, and everything derived from the rows.

A row (``Arch``) holds every per-arch fact the library and its plugin read: the name, the
vendor and family, how ``detect_arch`` recognises the device (a CUDA capability or a
``gcnArchName``), the compile target and ISA limits of ``tether compile``, the arms that run
there and the order routing tries them in, and tether's own kernel there. ``ARCHES``,
``AMD_ARCHES``, ``GPU_ARCHES``, ``ARCH_ARMS``, ``ROUTE_ORDER`` and ``OWN_ARM`` are derived from
the rows. What else an arch takes: its launch table (launch_tables.py), its kernel-name
patterns in the arms (arms.py), its compile gate (gates.py) and ``doc_arches`` in
pyproject.toml (CONTRIBUTING.md, "Add an arch").

The arch-name parser is the suite's (``tether.arch``), so the kernel library and the suite read
a ``gcnArchName`` or a capability one way. Importing this module must not import torch;
``detect_arch`` imports torch when it is called.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.arch import from_compute_capability, parse_gcn_arch
from tether.errors import UnknownArchError

__all__ = [
    "AMD_ARCHES",
    "ARCH",
    "ARCHES",
    "ARCH_ARMS",
    "ARCH_TABLE",
    "GPU_ARCHES",
    "OWN_ARM",
    "PER_REQUEST",
    "ROUTE_ORDER",
    "Arch",
    "ArchLimits",
    "check_arch",
    "detect_arch",
    "parse_gcn_arch",
]

VENDORS: tuple[str, ...] = ("nvidia", "amd", "cpu")


@dataclass(frozen=True)
class ArchLimits:
    """The per-arch resources that bound how many waves (or blocks) run at once.

    AMD: registers are per lane of a wave, ``unit`` is what one workgroup runs on (a CU on CDNA,
    a WGP on RDNA in Triton's default WGP mode) and holds ``simds`` SIMDs. sm90: registers are
    per thread, ``unit`` is an SM, and ``max_waves`` counts warps per SM.
    """

    arch: str
    vendor: str  # "amd" or "nvidia"
    wave_size: int
    simds: int  # SIMDs per unit (AMD); 1 on sm90, where occupancy counts per SM
    regs_per_simd: int  # AMD: VGPRs per lane per SIMD; sm90: 32-bit registers per SM
    reg_granule: int  # AMD: VGPRs per allocation block; sm90: registers per warp block
    max_regs_per_wave: int  # AMD: VGPRs a wave can address; sm90: registers per thread
    max_waves: int  # AMD: waves per SIMD; sm90: warps per SM
    lds_per_unit: int  # bytes of LDS per CU / WGP, shared memory per SM
    lds_per_workgroup: int  # the most one workgroup (block) may allocate
    lds_granule: int  # allocation block in bytes
    lds_reserved: int = 0  # per block, taken by the system (sm90)
    max_blocks: int = 0  # sm90: resident blocks per SM (0: no separate limit)
    sgpr_limited: bool = False  # GCN/CDNA: SGPRs can bound waves (not on RDNA)


@dataclass(frozen=True)
class Arch:
    """One arch tether's kernels run on.

    ``capability`` (NVIDIA) or ``gcn`` (AMD: ``gcnArchName`` without its feature suffix) is the
    detection rule; the CPU row has neither. ``target`` is ``(backend, arch, warp size)`` for
    triton's ``GPUTarget`` and ``isa`` the limits the compile evidence's occupancy is read
    against (GPUs only). ``arms``: the arms that run there at all (an arm's ``serves`` narrows
    it per shape); ``route_order``: the arms routing tries after the policy's choice, in order.
    ``own_arm``: tether's own kernel there, the arm the policy thresholds send calls to
    (a threshold may send a region to the Triton kernel instead: sm90's short squares).
    ``kernel_names``: the key of each arm's profiler kernel-name patterns
    (``Arm.kernels_by_arch``) on this arch: one key for a vendor's arches whose libraries name
    their kernels alike.
    """

    name: str
    vendor: str  # one of VENDORS
    family: str
    arms: tuple[str, ...]
    route_order: tuple[str, ...]
    kernel_names: str
    capability: tuple[int, int] | None = None
    gcn: str | None = None
    target: tuple[str, int | str, int] | None = None
    isa: ArchLimits | None = None
    own_arm: str = "triton"

    def __post_init__(self) -> None:
        if self.vendor not in VENDORS:
            raise ValueError(f"arch {self.name}: vendor {self.vendor!r} not in {VENDORS}")
        gpu = self.vendor != "cpu"
        if gpu != (self.target is not None) or gpu != (self.isa is not None):
            raise ValueError(f"arch {self.name}: a GPU has a compile target and ISA limits")
        if (self.vendor == "nvidia") != (self.capability is not None) or (self.vendor == "amd") != (
            self.gcn is not None
        ):
            raise ValueError(f"arch {self.name}: one detection rule, the vendor's")
        if self.capability is not None and from_compute_capability(*self.capability) != self.name:
            raise ValueError(f"arch {self.name}: capability {self.capability} names another")
        if self.gcn is not None and parse_gcn_arch(self.gcn) != self.name:
            raise ValueError(f"arch {self.name}: gcnArchName {self.gcn!r} names another")
        if self.isa is not None and (self.isa.arch, self.isa.vendor) != (self.name, self.vendor):
            raise ValueError(f"arch {self.name}: ISA limits of {self.isa.arch}")
        if (
            self.target is not None
            and self.isa is not None
            and self.target[2] != self.isa.wave_size
        ):
            raise ValueError(f"arch {self.name}: compile target's warp size is not the ISA's")
        missing = [a for a in (*self.route_order, self.own_arm) if a not in self.arms]
        if missing:
            raise ValueError(f"arch {self.name}: routes to arms that do not run there: {missing}")


# Arms that run on every GPU here (an arm's ``serves`` narrows this per shape); the SDPA arm
# ``sdpa`` is PyTorch SDPA as a user calls it (a comparison, never routed).
_GPU_ARMS = (
    "triton",
    "triton_eager",
    "sdpa_flash",
    "sdpa_efficient",
    "sdpa_math",
    "reference",
    "sdpa",
)

# The route order: arms routing tries after the policy's choice, in order: the first whose
# declaration (``serves`` in tether_kernels.arms) covers the call takes it, so every call gets
# an arm that meets the contract in kernels/API.md. First the SDPA arm each policy threshold
# names as its ``otherwise``; then the Triton arm, which serves every length, mask and dtype the
# SDPA arm may not (on sm90: causal qo_len > kv_len, kv_len 1, f32) and every head_dim up to 256
# that is a multiple of 8 (issue 24); then PyTorch's math backend for what is beyond the Triton
# kernel's grid and 32-bit offsets. The CPU's flash arm serves every head_dim it is asked.
_AMD_ROUTE = ("sdpa_flash", "triton", "sdpa_math")

# ISA limits, sources for each number:
# - gfx942 (CDNA3, MI300X) and gfx950 (CDNA4, MI350X): AMD "CDNA3 / CDNA4 Instruction Set
#   Architecture" reference guides (512 unified VGPRs + AGPRs per lane, 8 waves per SIMD, 4 SIMDs
#   per CU); LDS per CU 64 KiB (CDNA3) and 160 KiB (CDNA4) from the ROCm "GPU hardware
#   specifications" table; allocation granules from LLVM's AMDGPUUsage.rst (LDS: 128 dwords,
#   320 dwords on GFX950; VGPRs: 8 on gfx90a/gfx94x/gfx950) and AMDGPUBaseInfo.cpp
#   (IsaInfo::getVGPRAllocGranule, getTotalNumVGPRs, getMaxWavesPerEU).
# - gfx1151 (RDNA3.5, Radeon 8060S): LLVM GCNProcessors.td maps it to FeatureISAVersion11_5_1,
#   which carries half again the gfx11 VGPR file (1536 VGPRs per SIMD for wave32, granule 24); gfx11 runs
#   16 waves per SIMD (getMaxWavesPerEU) and a wave addresses 256 VGPRs; Triton compiles gfx11
#   in WGP mode (HIPOptions.wgp_cu_mode = "wgp"): a workgroup runs on a WGP of 4 SIMD32 with
#   128 KiB of LDS, 64 KiB at most per workgroup ("RDNA3 Instruction Set Architecture", LDS).
# - sm90 (H100/H200): CUDA C++ Programming Guide, "Compute Capabilities" table, and the CUDA
#   Occupancy Calculator: 64K registers per SM allocated per warp in blocks of 256, 255 per
#   thread, 64 warps and 32 blocks per SM, 228 KiB shared memory per SM, 227 KiB per block,
#   1 KiB reserved per block, 128-byte allocation granule.
ARCH_TABLE: tuple[Arch, ...] = (
    Arch(
        "sm90",
        "nvidia",
        "hopper",
        arms=(
            "triton",
            "triton_eager",
            "sdpa_flash",
            "sdpa_cudnn",
            "sdpa_efficient",
            "sdpa_math",
            "reference",
            # Optional peers and the Gluon kernel (issue 15): each refuses with the reason where
            # flashinfer is not importable or Gluon cannot run.
            "flashinfer_fa3",
            "flashinfer_fa2",
            "gluon",
            "sdpa",
        ),
        route_order=("sdpa_cudnn", "triton", "sdpa_math"),
        kernel_names="sm90",
        capability=(9, 0),
        target=("cuda", 90, 32),
        isa=ArchLimits(
            "sm90",
            "nvidia",
            32,
            simds=1,
            regs_per_simd=65536,
            reg_granule=256,
            max_regs_per_wave=255,
            max_waves=64,
            lds_per_unit=233472,
            lds_per_workgroup=232448,
            lds_granule=128,
            lds_reserved=1024,
            max_blocks=32,
        ),
        # tether's own kernel on sm90 is the Gluon Hopper kernel; the Triton kernel elsewhere.
        own_arm="gluon",
    ),
    Arch(
        "gfx942",
        "amd",
        "cdna3",
        arms=_GPU_ARMS,
        route_order=_AMD_ROUTE,
        kernel_names="amd",
        gcn="gfx942",
        target=("hip", "gfx942", 64),
        isa=ArchLimits(
            "gfx942",
            "amd",
            64,
            simds=4,
            regs_per_simd=512,
            reg_granule=8,
            max_regs_per_wave=512,
            max_waves=8,
            lds_per_unit=65536,
            lds_per_workgroup=65536,
            lds_granule=512,
            sgpr_limited=True,
        ),
    ),
    Arch(
        "gfx950",
        "amd",
        "cdna4",
        arms=_GPU_ARMS,
        route_order=_AMD_ROUTE,
        kernel_names="amd",
        gcn="gfx950",
        target=("hip", "gfx950", 64),
        isa=ArchLimits(
            "gfx950",
            "amd",
            64,
            simds=4,
            regs_per_simd=512,
            reg_granule=8,
            max_regs_per_wave=512,
            max_waves=8,
            lds_per_unit=163840,
            lds_per_workgroup=163840,
            lds_granule=1280,
            sgpr_limited=True,
        ),
    ),
    Arch(
        "gfx1151",
        "amd",
        "rdna3.5",
        arms=_GPU_ARMS,
        route_order=_AMD_ROUTE,
        kernel_names="amd",
        gcn="gfx1151",
        target=("hip", "gfx1151", 32),
        isa=ArchLimits(
            "gfx1151",
            "amd",
            32,
            simds=4,
            regs_per_simd=1536,
            reg_granule=24,
            max_regs_per_wave=256,
            max_waves=16,
            lds_per_unit=131072,
            lds_per_workgroup=65536,
            lds_granule=512,
        ),
    ),
    # The Triton arms run on the CPU only under TRITON_INTERPRET=1 (tests, not timing).
    Arch(
        "cpu",
        "cpu",
        "cpu",
        arms=("triton", "triton_eager", "sdpa_flash", "sdpa_math", "reference"),
        route_order=("sdpa_flash", "triton"),
        kernel_names="cpu",
    ),
)

# --- Derived: the names the library and its plugin read -----------------------------------
ARCH: dict[str, Arch] = {a.name: a for a in ARCH_TABLE}
ARCHES: tuple[str, ...] = tuple(ARCH)
AMD_ARCHES: tuple[str, ...] = tuple(a.name for a in ARCH_TABLE if a.vendor == "amd")
GPU_ARCHES: tuple[str, ...] = tuple(a.name for a in ARCH_TABLE if a.vendor != "cpu")
# Arms each arch can run at all; an arm's own ``supports`` narrows this per shape.
ARCH_ARMS: dict[str, tuple[str, ...]] = {a.name: a.arms for a in ARCH_TABLE}
ROUTE_ORDER: dict[str, tuple[str, ...]] = {a.name: a.route_order for a in ARCH_TABLE}
# What a ragged batch (ragged_prefill) takes on every arch after the route order's arms that
# take one in one launch: each request routed and run as single_prefill would (routing.py).
PER_REQUEST = "per_request"
# tether's own kernel where it is not the Triton kernel (the policy's ``OWN_ARM.get(arch,
# "triton")``).
OWN_ARM: dict[str, str] = {a.name: a.own_arm for a in ARCH_TABLE if a.own_arm != "triton"}


def check_arch(arch: str) -> str:
    """``arch`` itself if tether knows it, else UnknownArchError naming it."""
    if arch not in ARCH:
        raise UnknownArchError(f"unknown arch {arch!r}; known: {', '.join(ARCHES)}")
    return arch


def detect_arch(device: object = None) -> str:
    """The arch of ``device`` (a torch device or its name; default: GPU 0, or the CPU when
    there is no GPU): one of ``ARCHES``, by each row's detection rule."""
    import torch

    if device is not None and torch.device(device).type == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        return "cpu"
    index = 0 if device is None else torch.device(device)
    if getattr(torch.version, "hip", None):
        gcn = getattr(torch.cuda.get_device_properties(index), "gcnArchName", "")
        base = parse_gcn_arch(gcn)
        for row in ARCH_TABLE:
            if row.gcn is not None and parse_gcn_arch(row.gcn) == base:
                return row.name
        raise UnknownArchError(f"unsupported AMD GPU arch {base!r} (from {gcn!r})")
    cap = tuple(torch.cuda.get_device_capability(index))
    for row in ARCH_TABLE:
        if row.capability == cap:
            return row.name
    raise UnknownArchError(f"unsupported NVIDIA GPU arch sm{cap[0]}{cap[1]}")
