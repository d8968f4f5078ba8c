"""Launch tables: the Triton kernel's launch config per arch, head_dim, dtype and grid.

One table per arch (``launch_config`` reads it): the AMD tables and sm90's f32 tiles are
chosen from compile evidence, sm90's half-precision tiles from tuning runs (kernels/NOTES.md).
Pure data, no torch. The regions between ``BEGIN GENERATED`` / ``END GENERATED`` are written
by ``tether render`` from the results store (each launch table's compile evidence); never edit
them by hand.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.errors import UnknownArchError, UsageError

from tether_kernels.archs import check_arch
from tether_kernels.serves import tile_head_dim

# Below this many two-head, 128-row programs an sm90 call counts as short (see
# launch_config): about two waves over an H200's 132 SMs.
SM90_MIN_PROGRAMS = 256


@dataclass(frozen=True)
class LaunchConfig:
    """Triton launch parameters for the attention forward kernel."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    waves_per_eu: int | None = None  # AMD only: occupancy hint for the compiler
    # Hopper options (issue 7), off until a tuning run in the store supports turning them on:
    # K/V (and Q) loads through tensor descriptors (TMA); the launcher falls back to pointer
    # loads where descriptors are unsupported and reports which path it took.
    use_tma: bool = False
    # ``tl.range(..., warp_specialize=True)`` on the unmasked key loop (producer/consumer warps).
    warp_specialize: bool = False
    # Two query heads of one kv head per program (K/V loads shared, two softmax chains).
    heads_per_program: int = 1
    # Causal calls launch the query blocks with the most keys first (a shorter grid tail).
    longest_first: bool = False
    # Skip the accumulator's rescale for a whole tile when no row of it changed frame.
    skip_rescale: bool = False
    # 0: the query tile stays in registers across the key loop. N: Q K^T is reduced over
    # head-dim chunks of N columns, each chunk of Q and K read per key block, so neither tile
    # is held whole (issue 24: RDNA3.5, where Q and the accumulator overflow a wave's VGPRs).
    q_chunk: int = 0
    # Programs per query tile, each owning 1/split of the output's head dim (V, acc, O) and
    # computing the whole softmax (issue 24: halves the accumulator's registers).
    split_head_dim: int = 1


def launch_config(
    arch: str,
    head_dim: int,
    dtype: str = "f16",
    *,
    qo_len: int | None = None,
    batch_heads: int | None = None,
) -> LaunchConfig:
    """The kernel's launch config on ``arch`` for ``head_dim`` and ``dtype``.

    ``qo_len`` and ``batch_heads`` (batch x query heads) size the grid; without them the
    config is the one for large calls.
    """
    check_arch(arch)
    if arch in AMD_CONFIGS:
        return amd_launch_config(arch, head_dim, dtype)
    if dtype == "f32" and arch == "sm90":
        return _from_table(SM90_F32, arch, head_dim, dtype)
    if arch == "cpu":
        # The interpreter runs each program in numpy: small blocks keep tests quick and
        # still give several blocks per row, so the two-stage loop and tails are exercised.
        return LaunchConfig(block_m=16, block_n=16, num_warps=4, num_stages=1)
    if arch == "sm90":
        if head_dim <= 64:
            return LaunchConfig(block_m=128, block_n=64, num_warps=4, num_stages=3)
        if head_dim <= 128:
            # v6, picked from the v4 and v5 tuning summaries of an H200 session
            # (kernels/tuning/sm90-tune-v4-2026-11-29.json and -v5-; no raw samples in the
            # store: a choice, not evidence; kernels/NOTES.md): two query heads per
            # program, launched longest first, on a 128 x 64 tile with 4 stages. A call too
            # small to fill the GPU about twice with such programs takes the 64 x 64 tile,
            # one head per program, also longest first (the v5 run's best at 1K).
            if qo_len is not None and batch_heads is not None:
                programs = batch_heads // 2 * -(-qo_len // 128)
                if programs < SM90_MIN_PROGRAMS:
                    return LaunchConfig(64, 64, num_warps=4, num_stages=3, longest_first=True)
            if head_dim != 128:
                # Head dims padded onto the 128 tile (issue 24) were never timed: v6's tile
                # with one head per program, whose two-head form spills there as at 128 (the
                # sm90 compile run), the one-head form not.
                return LaunchConfig(128, 64, num_warps=8, num_stages=4, longest_first=True)
            return LaunchConfig(
                128, 64, num_warps=8, num_stages=4, heads_per_program=2, longest_first=True
            )
        return LaunchConfig(block_m=64, block_n=32, num_warps=8, num_stages=2)
    raise UnknownArchError(f"no launch configs for arch {arch!r}")


def amd_launch_config(arch: str, head_dim: int, dtype: str) -> LaunchConfig:
    """The AMD arch's launch config for ``head_dim`` and ``dtype``, from its table below.

    No AMD host has been measured: each table was chosen from compile evidence (no spills,
    LDS fits, matrix instructions in the main loops) and changes only with a new compile run,
    which the generated comment above the table cites. The grid does not change the config.
    """
    return _from_table(AMD_CONFIGS[arch], arch, head_dim, dtype)


def _from_table(
    table: dict[tuple[int, str], LaunchConfig], arch: str, head_dim: int, dtype: str
) -> LaunchConfig:
    """The table's config for the tile ``head_dim`` runs on (the tables are keyed by tile
    widths: a head_dim that is not a power of two runs on the next one's tile, masked)."""

    try:
        return table[(tile_head_dim(head_dim), dtype)]
    except (KeyError, ValueError):
        raise UsageError(
            f"no {arch} launch config for head_dim {head_dim} {dtype}: the Triton arm serves "
            "head dims that are multiples of 8 up to 256 in f16, bf16 and f32"
        ) from None


def _table(
    configs: dict[int, tuple[LaunchConfig, LaunchConfig, LaunchConfig]],
) -> dict[tuple[int, str], LaunchConfig]:
    """{head_dim: (f16, bf16, f32) configs} as {(head_dim, dtype): config}."""
    dtypes = ("f16", "bf16", "f32")  # tether_kernels.shapes.DTYPES, kept free of imports here
    return {(d, dt): c for d, row in configs.items() for dt, c in zip(dtypes, row, strict=True)}


def _cfg(
    m: int, n: int, w: int, s: int, wpe: int = 2, *, q_chunk: int = 0, split: int = 1
) -> LaunchConfig:
    return LaunchConfig(
        block_m=m,
        block_n=n,
        num_warps=w,
        num_stages=s,
        waves_per_eu=wpe,
        q_chunk=q_chunk,
        split_head_dim=split,
    )


# The AMD tables below are the picks of validate/tools/tune_amd_compile.py by its rule (clean, that
# is no spills, LDS within the arch, matrix instructions in the main loops; then 2 waves per
# SIMD, then the larger tile, then occupancy), recorded in
# kernels/tuning/amd-compile-search-2026-11-30.json (triton 3.9); where a pick spilled under
# triton 3.6 (the H200's), the cell was searched again under 3.6
# (kernels/tuning/compile-search-triton36-2026-12-01.json) and that pick is shipped where it is
# clean under 3.9 too; where it is not, the pick of a search under both compilers
# (validate/tools/tune_amd_compile.py --also-under). kernels/NOTES.md says why and what is left. The region above
# each table is the compile runs of the whole map that the compile gate judges, per compiler,
# rendered from the store.
# BEGIN GENERATED: launch-configs-gfx942 (tether render)
# Compile evidence for the gfx942 launch configs below (tether compile, no GPU):
# run 20261207T072316Z-compile-attn-fwd-gfx942-6bd80716090c
# (2026-12-07, git 6da236683095, triton 3.6.0, target hip:gfx942:64).
# 240 variants: 0 registers spilled, 0 over the LDS,
# 0 with a main loop without matrix instructions;
# occupancy 2-6 waves per SIMD. Gate compile-gfx942: passes.
# With triton 3.9.0, run 20261207T070630Z-compile-attn-fwd-gfx942-d4b24875eca7:
# 0 registers spilled, 0 over the LDS. Gate compile-gfx942: passes.
# Per config, triton 3.6.0: head_dim dtype: config, max VGPRs, spills,
# max LDS bytes, occupancy.
#   d8 f16: m128 n64 w8 s1 wpe2, 106, 0, 16384, 4
#   d8 bf16: m128 n32 w8 s1 wpe2, 79, 0, 8192, 6
#   d8 f32: m128 n64 w8 s1 wpe2, 110, 0, 32768, 4
#   d16 f16: m128 n64 w8 s1 wpe2, 106, 0, 16384, 4
#   d16 bf16: m128 n32 w8 s1 wpe2, 78, 0, 8192, 6
#   d16 f32: m128 n64 w8 s1 wpe2, 116, 0, 32768, 4
#   d24 f16: m128 n64 w4 s1 wpe2, 152, 0, 8192, 3-4
#   d24 bf16: m128 n64 w4 s1 wpe2, 154, 0, 8192, 3
#   d24 f32: m128 n64 w4 s1 wpe2, 146, 0, 16384, 3
#   d32 f16: m128 n64 w4 s1 wpe2, 125, 0, 8192, 4
#   d32 bf16: m128 n64 w4 s1 wpe2, 130, 0, 8192, 3
#   d32 f32: m128 n64 w4 s1 wpe2, 150, 0, 16384, 3
#   d40 f16: m128 n64 w4 s1 wpe2, 193, 0, 16384, 2-3
#   d40 bf16: m128 n64 w4 s1 wpe2, 197, 0, 16384, 2
#   d40 f32: m128 n64 w8 s1 wpe2, 179, 0, 32768, 2
#   d64 f16: m128 n64 w4 s1 wpe2, 169, 0, 16384, 2-3
#   d64 bf16: m128 n64 w4 s1 wpe2, 196, 0, 16384, 2
#   d64 f32: m128 n64 w8 s1 wpe2, 183, 0, 32768, 2
#   d72 f16: m128 n32 w8 s1 wpe2, 158, 0, 32768, 3
#   d72 bf16: m128 n32 w8 s1 wpe2, 159, 0, 32768, 3
#   d72 f32: m128 n32 w8 s1 wpe2, 204, 0, 65536, 2
#   d128 f16: m128 n32 w8 s1 wpe2, 158, 0, 32768, 3
#   d128 bf16: m128 n32 w8 s1 wpe2, 159, 0, 32768, 3
#   d128 f32: m128 n32 w8 s1 wpe2, 209, 0, 65536, 2
#   d136 f16: m128 n32 w8 s1 wpe2, 239, 0, 65536, 2
#   d136 bf16: m128 n32 w8 s1 wpe2, 240, 0, 65536, 2
#   d136 f32: m32 n16 w4 s1 wpe2, 194, 0, 32768, 2
#   d256 f16: m128 n32 w8 s1 wpe2, 237, 0, 65536, 2
#   d256 bf16: m128 n32 w8 s1 wpe2, 238, 0, 65536, 2
#   d256 f32: m32 n16 w4 s1 wpe2, 197, 0, 32768, 2
# END GENERATED: launch-configs-gfx942
_GFX942: dict[int, tuple[LaunchConfig, LaunchConfig, LaunchConfig]] = {
    # head_dim: (f16, bf16, f32)
    16: (_cfg(128, 64, 8, 1), _cfg(128, 32, 8, 1), _cfg(128, 64, 8, 1)),
    32: (_cfg(128, 64, 4, 1), _cfg(128, 64, 4, 1), _cfg(128, 64, 4, 1)),
    64: (_cfg(128, 64, 4, 1), _cfg(128, 64, 4, 1), _cfg(128, 64, 8, 1)),
    128: (_cfg(128, 32, 8, 1), _cfg(128, 32, 8, 1), _cfg(128, 32, 8, 1)),
    256: (_cfg(128, 32, 8, 1), _cfg(128, 32, 8, 1), _cfg(32, 16, 4, 1)),
}
# BEGIN GENERATED: launch-configs-gfx950 (tether render)
# Compile evidence for the gfx950 launch configs below (tether compile, no GPU):
# run 20261207T072514Z-compile-attn-fwd-gfx950-0080ba573e30
# (2026-12-07, git 6da236683095, triton 3.6.0, target hip:gfx950:64).
# 240 variants: 0 registers spilled, 0 over the LDS,
# 0 with a main loop without matrix instructions;
# occupancy 2-4 waves per SIMD. Gate compile-gfx950: passes.
# With triton 3.9.0, run 20261207T070857Z-compile-attn-fwd-gfx950-708b93ba37df:
# 0 registers spilled, 0 over the LDS. Gate compile-gfx950: passes.
# Per config, triton 3.6.0: head_dim dtype: config, max VGPRs, spills,
# max LDS bytes, occupancy.
#   d8 f16: m128 n64 w4 s1 wpe2, 115, 0, 16384, 4
#   d8 bf16: m128 n64 w4 s1 wpe2, 115, 0, 16384, 4
#   d8 f32: m128 n64 w4 s1 wpe2, 135, 0, 32768, 3
#   d16 f16: m128 n64 w4 s1 wpe2, 115, 0, 16384, 4
#   d16 bf16: m128 n64 w4 s1 wpe2, 115, 0, 16384, 4
#   d16 f32: m128 n64 w4 s1 wpe2, 132, 0, 32768, 3
#   d24 f16: m128 n64 w4 s1 wpe2, 129, 0, 8192, 3-4
#   d24 bf16: m128 n64 w4 s1 wpe2, 129, 0, 8192, 3-4
#   d24 f32: m128 n64 w4 s2 wpe2, 139, 0, 16384, 3
#   d32 f16: m128 n64 w4 s1 wpe2, 110, 0, 8192, 4
#   d32 bf16: m128 n64 w4 s1 wpe2, 110, 0, 8192, 4
#   d32 f32: m128 n64 w4 s2 wpe2, 141, 0, 16384, 3
#   d40 f16: m128 n64 w4 s1 wpe2, 177, 0, 16384, 2-3
#   d40 bf16: m128 n64 w4 s1 wpe2, 177, 0, 16384, 2-3
#   d40 f32: m128 n64 w8 s1 wpe2, 169, 0, 32768, 2-3
#   d64 f16: m128 n64 w4 s1 wpe2, 157, 0, 16384, 3
#   d64 bf16: m128 n64 w4 s1 wpe2, 157, 0, 16384, 3
#   d64 f32: m128 n64 w8 s1 wpe2, 176, 0, 32768, 2
#   d72 f16: m128 n32 w8 s1 wpe2, 158, 0, 32768, 3
#   d72 bf16: m128 n32 w8 s1 wpe2, 158, 0, 32768, 3
#   d72 f32: m128 n32 w4 s1 wpe2, 226, 0, 65536, 2
#   d128 f16: m128 n32 w8 s1 wpe2, 159, 0, 32768, 3
#   d128 bf16: m128 n32 w8 s1 wpe2, 159, 0, 32768, 3
#   d128 f32: m128 n32 w4 s1 wpe2, 229, 0, 65536, 2
#   d136 f16: m128 n32 w8 s1 wpe2, 240, 0, 65536, 2
#   d136 bf16: m128 n32 w8 s1 wpe2, 240, 0, 65536, 2
#   d136 f32: m32 n16 w2 s1 wpe2, 254, 0, 32768, 2
#   d256 f16: m128 n32 w8 s1 wpe2, 240, 0, 65536, 2
#   d256 bf16: m128 n32 w8 s1 wpe2, 240, 0, 65536, 2
#   d256 f32: m32 n16 w2 s1 wpe2, 256, 0, 32768, 2
# END GENERATED: launch-configs-gfx950
_GFX950: dict[int, tuple[LaunchConfig, LaunchConfig, LaunchConfig]] = {
    # head_dim: (f16, bf16, f32)
    # f16, bf16 at 16, 64 and 128, f32 at 256: the two-stage picks (and 64 x 32, 8 warps, at
    # 256) spill under triton 3.6; these are the 3.6 search's picks, except f16 and bf16 at 128,
    # where that pick spills under 3.9: there the pick of a search under both compilers
    # (kernels/tuning/compile-search-gfx950-d128-both-2026-12-01.json)
    16: (_cfg(128, 64, 4, 1), _cfg(128, 64, 4, 1), _cfg(128, 64, 4, 1)),
    32: (_cfg(128, 64, 4, 1), _cfg(128, 64, 4, 1), _cfg(128, 64, 4, 2)),
    64: (_cfg(128, 64, 4, 1), _cfg(128, 64, 4, 1), _cfg(128, 64, 8, 1)),
    128: (_cfg(128, 32, 8, 1), _cfg(128, 32, 8, 1), _cfg(128, 32, 4, 1)),
    256: (_cfg(128, 32, 8, 1), _cfg(128, 32, 8, 1), _cfg(32, 16, 2, 1)),
}
# BEGIN GENERATED: launch-configs-gfx1151 (tether render)
# Compile evidence for the gfx1151 launch configs below (tether compile, no GPU):
# run 20261207T072811Z-compile-attn-fwd-gfx1151-9954cc1d4bc4
# (2026-12-07, git 6da236683095, triton 3.6.0, target hip:gfx1151:32).
# 240 variants: 0 registers spilled, 0 over the LDS,
# 0 with a main loop without matrix instructions (80 f32 by design);
# occupancy 5-10 waves per SIMD. Gate compile-gfx1151: passes.
# With triton 3.9.0, run 20261207T071129Z-compile-attn-fwd-gfx1151-5bc5d2ce34bb:
# 0 registers spilled, 0 over the LDS. Gate compile-gfx1151: passes.
# Per config, triton 3.6.0: head_dim dtype: config, max VGPRs, spills,
# max LDS bytes, occupancy.
#   d8 f16: m128 n64 w8 s1 wpe2, 153, 0, 2048, 9
#   d8 bf16: m128 n64 w8 s1 wpe2, 153, 0, 2048, 9
#   d8 f32: m64 n64 w8 s1 wpe2 qc16, 190, 0, 16384, 8
#   d16 f16: m128 n64 w8 s1 wpe2, 151, 0, 2048, 9-10
#   d16 bf16: m128 n64 w8 s1 wpe2, 150, 0, 2048, 9-10
#   d16 f32: m64 n64 w8 s1 wpe2 qc16, 196, 0, 16384, 7
#   d24 f16: m128 n64 w8 s1 wpe2, 200, 0, 8192, 7-8
#   d24 bf16: m128 n64 w8 s1 wpe2, 200, 0, 8192, 7-8
#   d24 f32: m32 n16 w4 s1 wpe2, 203, 0, 4096, 7
#   d32 f16: m128 n64 w8 s1 wpe2, 194, 0, 8192, 7-8
#   d32 bf16: m128 n64 w8 s1 wpe2, 201, 0, 8192, 7-8
#   d32 f32: m32 n16 w4 s1 wpe2, 205, 0, 4096, 7
#   d40 f16: m128 n32 w8 s2 wpe2, 256, 0, 16384, 5
#   d40 bf16: m128 n32 w8 s2 wpe2, 256, 0, 16384, 5
#   d40 f32: m32 n16 w4 s1 wpe2 qc16 split2, 256, 0, 2048, 5
#   d64 f16: m128 n32 w8 s2 wpe2, 256, 0, 16384, 5
#   d64 bf16: m128 n32 w8 s2 wpe2, 256, 0, 16384, 5
#   d64 f32: m32 n16 w4 s1 wpe2 qc16 split2, 248, 0, 2048, 5
#   d72 f16: m32 n16 w4 s1 wpe2, 242, 0, 8192, 5
#   d72 bf16: m32 n16 w4 s1 wpe2, 242, 0, 8192, 5
#   d72 f32: m16 n16 w8 s1 wpe2, 248, 0, 8192, 5
#   d128 f16: m32 n16 w4 s1 wpe2, 242, 0, 8192, 5
#   d128 bf16: m32 n16 w4 s1 wpe2, 242, 0, 8192, 5
#   d128 f32: m16 n16 w8 s1 wpe2, 243, 0, 8192, 5
#   d136 f16: m64 n64 w8 s1 wpe2 qc16 split2, 231, 0, 16384, 6
#   d136 bf16: m64 n64 w8 s1 wpe2 qc16 split2, 231, 0, 16384, 6
#   d136 f32: m32 n16 w8 s1 wpe2 qc32 split2, 192, 0, 16384, 8
#   d256 f16: m64 n64 w8 s1 wpe2 qc16 split2, 228, 0, 16384, 6
#   d256 bf16: m64 n64 w8 s1 wpe2 qc16 split2, 228, 0, 16384, 6
#   d256 f32: m32 n16 w8 s1 wpe2 qc32 split2, 190, 0, 16384, 8
# END GENERATED: launch-configs-gfx1151
_GFX1151: dict[int, tuple[LaunchConfig, LaunchConfig, LaunchConfig]] = {
    # head_dim: (f16, bf16, f32)
    # The picks marked "both" are those of a search under triton 3.9 and 3.6 together
    # (validate/tools/tune_amd_compile.py --also-under, --all-margins), clean in both arms of
    # every head dim padded onto the tile, recorded in
    # kernels/tuning/gfx1151-compile-search-both-2026-12-01.json; the searches there were
    # narrowed (--tile, --warps, --q-chunk, --split) to the candidates hand compiles of single
    # variants showed worth trying, not run over the whole candidate space. f32 dots run on FMAs
    # here, whose operands a lane holds along the whole reduction: 8 warps hold less per lane.
    # f32 (both): the 16-column chunk reads Q per key block; held (m64 n64 w8, the 3.6
    # search's pick at head_dim 16) it spills under 3.9 at head_dim 8, padded onto this tile
    16: (_cfg(128, 64, 8, 1), _cfg(128, 64, 8, 1), _cfg(64, 64, 8, 1, q_chunk=16)),
    32: (_cfg(128, 64, 8, 1), _cfg(128, 64, 8, 1), _cfg(32, 16, 4, 1)),
    # f32: no candidate holding Q compiles without spills in both arms; Q K^T over 16-column
    # chunks with the accumulator split in two (issue 24), picked from one variant per
    # candidate (causal, LSE, deferred) compiled by hand under triton 3.9 and 3.6, not by a
    # full search (kernels/NOTES.md); the whole map's compile runs found it clean.
    64: (_cfg(128, 32, 8, 2), _cfg(128, 32, 8, 2), _cfg(32, 16, 4, 1, q_chunk=16, split=2)),
    # f32 (both): 16 x 16 with 8 warps holds Q, no option needed; the 4-warp tile with Q in
    # 16-column chunks and the accumulator split in four spilled under both compilers. The rule
    # ranks a held Q above a chunked one at equal tile and occupancy; 64-column chunks are
    # clean too, with fewer VGPRs (the search file has both)
    128: (_cfg(32, 16, 4, 1), _cfg(32, 16, 4, 1), _cfg(16, 16, 8, 1)),
    # f16, bf16 (both): Q K^T in 16-column chunks (Q read per key block, not held) and the
    # accumulator split in two; the 128 x 32 tile with chunks alone spilled at head_dim 136
    # (both compilers) and 256 (bf16), and so did 64 x 64 with chunks alone under 3.9, where
    # both options are needed. f32 (both): once the kernel runs its head-dim chunks as a loop,
    # not unrolled (unrolled, no candidate was clean under 3.6), every candidate searched at
    # head_dim 256 is clean
    # (kernels/tuning/gfx1151-compile-search-d256-f32-2026-12-02.json), but at 136, padded
    # onto the tile, 64-column chunks and two-stage 32-column ones spill under 3.6: shipped is
    # the pick of the search at 136 (-d136-f32- beside it), clean at 256 too: 32 x 16, 8 warps,
    # Q K^T in 32-column chunks, the accumulator split in two
    256: (
        _cfg(64, 64, 8, 1, q_chunk=16, split=2),
        _cfg(64, 64, 8, 1, q_chunk=16, split=2),
        _cfg(32, 16, 8, 1, q_chunk=32, split=2),
    ),
}
# sm90's f32 tiles: no sweep times f32 on the H200 (its f16 and bf16 configs above come from
# timing runs), so they are picked from compile evidence by the AMD tables' rule, with 2 warps
# per SM sub-partition for 2 waves per SIMD (validate/tools/tune_amd_compile.py --arch sm90, recorded
# in kernels/tuning/sm90-f32-compile-search-2026-12-01.json, and for a pick that spilled under
# triton 3.6 in kernels/tuning/compile-search-triton36-2026-12-01.json). The region is the
# compile runs of the whole sm90 map that the compile gate judges.
# BEGIN GENERATED: launch-configs-sm90 (tether render)
# Compile evidence for the sm90 launch configs below (tether compile, no GPU):
# run 20261207T072924Z-compile-attn-fwd-sm90-88bac73ff0d9
# (2026-12-07, git 6da236683095, triton 3.6.0, target cuda:90:32).
# 288 variants: 112 registers spilled, 0 over the LDS,
# 0 with a main loop without matrix instructions (80 f32 by design);
# occupancy 1-7 blocks per SM. Gate compile-sm90: fails on 16 variants.
# With triton 3.9.0, run 20261207T071424Z-compile-attn-fwd-sm90-2ea0c29671cb:
# 280 registers spilled, 0 over the LDS. Gate compile-sm90: fails on 28 variants.
# Per config, triton 3.6.0: head_dim dtype: config, max registers per thread, spills,
# max LDS bytes, occupancy.
#   d8 f16: m128 n64 w4 s3, 146, 0, 16384, 3
#   d8 bf16: m128 n64 w4 s3, 146, 0, 16384, 3
#   d8 f32: m128 n64 w8 s2, 190, 0, 49152, 1
#   d16 f16: m128 n64 w4 s3, 148, 0, 16384, 3
#   d16 bf16: m128 n64 w4 s3, 148, 0, 16384, 3
#   d16 f32: m128 n64 w8 s2, 196, 0, 49152, 1
#   d24 f16: m128 n64 w4 s3, 188, 0, 32768, 2-3
#   d24 bf16: m128 n64 w4 s3, 188, 0, 32768, 2-3
#   d24 f32: m128 n64 w8 s1, 230, 0, 57856, 1
#   d32 f16: m128 n64 w4 s3, 176, 0, 32768, 2-3
#   d32 bf16: m128 n64 w4 s3, 176, 0, 32768, 2-3
#   d32 f32: m128 n64 w8 s1, 254, 0, 57856, 1
#   d40 f16: m128 n64 w4 s3, 255, 4, 65536, 2
#   d40 bf16: m128 n64 w4 s3, 255, 4, 65536, 2
#   d40 f32: m64 n32 w8 s1, 176, 0, 33024, 1
#   d64 f16: m128 n64 w4 s3, 238, 0, 65536, 2
#   d64 bf16: m128 n64 w4 s3, 238, 0, 65536, 2
#   d64 f32: m64 n32 w8 s1, 168, 0, 33024, 1
#   d72 f16: m128 n64 w8 s4 longest_first, 188, 0, 163840, 1
#   d72 f16: m64 n64 w4 s3 longest_first, 168, 0, 114688, 2
#   d72 bf16: m128 n64 w8 s4 longest_first, 188, 0, 163840, 1
#   d72 bf16: m64 n64 w4 s3 longest_first, 168, 0, 114688, 2
#   d72 f32: m16 n16 w4 s1, 83, 0, 24576, 5-6
#   d128 f16: m128 n64 w8 s4 longest_first hpp2, 255, 52, 196608, 1
#   d128 f16: m64 n64 w4 s3 longest_first, 170, 0, 114688, 2
#   d128 bf16: m128 n64 w8 s4 longest_first hpp2, 255, 52, 196608, 1
#   d128 bf16: m64 n64 w4 s3 longest_first, 170, 0, 114688, 2
#   d128 f32: m16 n16 w4 s1, 76, 0, 24576, 6-7
#   d136 f16: m64 n32 w8 s2, 168, 0, 98304, 1
#   d136 bf16: m64 n32 w8 s2, 168, 0, 98304, 1
#   d136 f32: m32 n16 w4 s1, 221, 0, 65536, 2
#   d256 f16: m64 n32 w8 s2, 140, 0, 98304, 1
#   d256 bf16: m64 n32 w8 s2, 140, 0, 98304, 1
#   d256 f32: m32 n16 w4 s1, 204, 0, 65536, 2
# END GENERATED: launch-configs-sm90
SM90_F32: dict[tuple[int, str], LaunchConfig] = {
    (d, "f32"): LaunchConfig(m, n, num_warps=w, num_stages=s)
    for d, (m, n, w, s) in {
        16: (128, 64, 8, 2),  # the 4-warp pick spills under triton 3.6; the 3.6 search's
        32: (128, 64, 8, 1),
        64: (64, 32, 8, 1),
        128: (16, 16, 4, 1),
        256: (32, 16, 4, 1),
    }.items()
}
AMD_CONFIGS: dict[str, dict[tuple[int, str], LaunchConfig]] = {
    "gfx942": _table(_GFX942),
    "gfx950": _table(_GFX950),
    "gfx1151": _table(_GFX1151),
}

# The chunked-prefill call from the seeds: one 2K-token query chunk against 16K keys.
CHUNKED_PREFILL_16K: dict[str, object] = {
    "batch": 1,
    "qo_len": 2048,
    "kv_len": 16384,
    "hq": 32,
    "hkv": 8,
    "head_dim": 128,
    "dtype": "f16",
    "causal": True,
}
