"""tether_kernels_plugin.isa: what compiled code says about itself, read from FIXTURE assembly.

The assembly here is FIXTURE text shaped like what the compiler emits (labels, branches,
metadata, the ptxas report), small enough to count by eye; the real compiler's output is
read by validate/correctness/test_compile_variants.py and judged by the compile gates.
"""

from __future__ import annotations

import pytest
from tether_kernels_plugin.isa import (
    LIMITS,
    amd_occupancy,
    parse_amdgcn,
    parse_ptx,
    parse_ptxas,
    sm90_occupancy,
)

AMD_META = """
\t.amdgpu_metadata
---
amdhsa.kernels:
  - .agpr_count:     4
    .args:
      - .offset:         0
        .size:           8
        .value_kind:     global_buffer
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: {scratch}
    .sgpr_count:     {sgprs}
    .sgpr_spill_count: 0
    .symbol:         _attn_fwd.kd
    .vgpr_count:     {vgprs}
    .vgpr_spill_count: {spills}
    .wavefront_size: 64
...
\t.end_amdgpu_metadata
"""

# Two loops: the first (blocks .LBB0_1 .. .LBB0_2) runs an MFMA, the second a scalar FMA
# only. .LBB0_3 is placed after .LBB0_4 and branches back up to it without forming a cycle:
# a backward branch alone is not a loop.
AMD_CODE = """_attn_fwd:
\ts_load_dwordx2 s[2:3], s[0:1], 0x0
.LBB0_1:
\tv_mfma_f32_32x32x8_f16 v[0:15], v[16:17], v[18:19], v[0:15]
\ts_cbranch_scc0 .LBB0_2
\tv_add_f32_e32 v1, v1, v2
.LBB0_2:
\tv_exp_f32_e32 v3, v3
\ts_cbranch_scc1 .LBB0_1
\ts_branch .LBB0_5
.LBB0_4:
\tv_mov_b32_e32 v4, 0
\ts_branch .LBB0_6
.LBB0_5:
\tv_fmac_f32_e32 v5, v6, v7
\ts_cbranch_vccnz .LBB0_5
\ts_cbranch_scc0 .LBB0_4
.LBB0_6:
\ts_endpgm
; NumVgprs: {vgprs}
; NumAgprs: 4
; TotalNumVgprs: {total}
; ScratchSize: {scratch}
; Occupancy: 2
"""


def amdgcn(vgprs: int = 120, spills: int = 0, scratch: int = 0, sgprs: int = 90) -> str:
    fields = {"vgprs": vgprs, "spills": spills, "scratch": scratch, "sgprs": sgprs}
    total = vgprs + 4
    return AMD_CODE.format(total=total, **fields) + AMD_META.format(**fields)


def test_amdgcn_registers_spills_and_scratch() -> None:
    got = parse_amdgcn(amdgcn(vgprs=256, spills=24, scratch=96, sgprs=106))
    assert got["vgprs"] == 256 and got["agprs"] == 4 and got["vgprs_total"] == 260
    assert got["sgprs"] == 106 and got["spills"] == 24 and got["scratch_bytes"] == 96
    assert got["llvm_occupancy"] == 2
    assert got["matrix_instructions"] == {"v_mfma_f32_32x32x8_f16": 1}


def test_amdgcn_loops_are_cycles_not_backward_branches() -> None:
    loops = parse_amdgcn(amdgcn())["loops"]
    # .LBB0_1/.LBB0_2 cycle with the MFMA; .LBB0_5 loops on itself with the FMA; .LBB0_4 is
    # reached by a backward branch but never returns to it.
    assert [(lp["blocks"], lp["matrix"], lp["fma"]) for lp in loops] == [(3, 1, 0), (1, 0, 1)]


def test_amdgcn_without_metadata_is_an_error() -> None:
    with pytest.raises(ValueError, match="vgpr_count"):
        parse_amdgcn(AMD_CODE.format(vgprs=1, total=1, scratch=0))


PTX = """.visible .entry _attn_fwd(
)
{
\tmov.u32 %r1, 0;
$L__BB0_1:
\twgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%f1}, %rd1, %rd2, 1, 1, 1, 0, 1;
\t@%p1 bra $L__BB0_1;
$L__BB0_2:
\tfma.rn.f32 %f2, %f3, %f4, %f2;
\t@!%p2 bra $L__BB0_2;
\tbra.uni $L__BB0_3;
$L__BB0_3:
\tret;
}
"""


def test_ptx_loops_and_matrix_instructions() -> None:
    got = parse_ptx(PTX)
    assert got["matrix_instructions"] == {"wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16": 1}
    assert [(lp["matrix"], lp["fma"]) for lp in got["loops"]] == [(1, 0), (0, 1)]


PTXAS = """ptxas info    : 11 bytes gmem
ptxas info    : Compiling entry function '_attn_fwd' for 'sm_90a'
ptxas info    : Function properties for _attn_fwd
    64 bytes stack frame, 64 bytes spill stores, 72 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 64 bytes cumulative stack size
"""


def test_ptxas_report() -> None:
    got = parse_ptxas(PTXAS)
    assert got["n_regs"] == 255 and got["stack_bytes"] == 64
    assert got["spill_store_bytes"] == 64 and got["spill_load_bytes"] == 72
    # Triton's own CompiledKernel.n_spills: local bytes per thread over 4.
    assert got["n_spills"] == got["spills"] == 16


def test_ptxas_report_of_two_kernels_is_an_error() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        parse_ptxas(PTXAS + PTXAS)


@pytest.mark.parametrize(
    ("vgprs", "sgprs", "lds", "waves", "limiter"),
    [
        pytest.param(256, 90, 0, 2, "registers", id="256-vgprs"),
        pytest.param(128, 90, 0, 4, "registers", id="128-vgprs"),
        pytest.param(60, 106, 0, 7, "sgprs", id="sgprs-over-100"),
        pytest.param(128, 90, 32768, 2, "lds", id="lds-32k"),
        pytest.param(500, 90, 0, 1, "registers", id="agprs-too"),
    ],
)
def test_cdna3_waves_per_simd(vgprs: int, sgprs: int, lds: int, waves: int, limiter: str) -> None:
    got = amd_occupancy(LIMITS["gfx942"], vgprs, sgprs, lds, num_warps=4)
    assert (got["waves_per_simd"], got["limited_by"]) == (waves, limiter)


def test_cdna4_has_more_lds_than_cdna3() -> None:
    a = amd_occupancy(LIMITS["gfx942"], 64, 40, 65536, num_warps=4)
    b = amd_occupancy(LIMITS["gfx950"], 64, 40, 65536, num_warps=4)
    assert a["by"]["lds"] == 1 and b["by"]["lds"] == 2


def test_rdna_wave32_granule() -> None:
    # 1536 VGPRs per SIMD in blocks of 24: 256 VGPRs round to 264, so 5 waves; SGPRs do not
    # limit RDNA.
    got = amd_occupancy(LIMITS["gfx1151"], 256, 106, 0, num_warps=4)
    assert got["waves_per_simd"] == 5 and "sgprs" not in got["by"]


@pytest.mark.parametrize(
    ("regs", "shared", "warps", "blocks", "limiter"),
    [
        pytest.param(255, 0, 8, 1, "registers", id="255-regs-8-warps"),
        pytest.param(128, 0, 4, 4, "registers", id="128-regs-4-warps"),
        pytest.param(24, 0, 4, 16, "warps", id="few-regs"),
        pytest.param(64, 114688, 4, 2, "shared", id="112k-shared"),
    ],
)
def test_sm90_blocks_per_sm(regs: int, shared: int, warps: int, blocks: int, limiter: str) -> None:
    got = sm90_occupancy(LIMITS["sm90"], regs, shared, warps)
    assert (got["blocks_per_sm"], got["limited_by"]) == (blocks, limiter)
