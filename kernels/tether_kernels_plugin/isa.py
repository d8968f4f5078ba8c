"""What compiled code says about itself: registers, spills, LDS, matrix instructions, loops.

Pure text parsing and arithmetic, no torch, no triton: ``tether check`` and the tests read it on
any host. ``tether_kernels_plugin.compile`` feeds it the AMDGCN assembly (AMD) or the PTX plus the
``ptxas -v`` report (sm90) that the installed Triton returns for each kernel variant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tether_kernels.archs import ARCH_TABLE, ArchLimits

# The per-arch limits are facts of each arch row (tether_kernels.archs, with their sources).
LIMITS: dict[str, ArchLimits] = {a.name: a.isa for a in ARCH_TABLE if a.isa is not None}


def _roundup(value: int, granule: int) -> int:
    return -(-value // granule) * granule


def _sgpr_waves(sgprs: int) -> int:
    """Waves per SIMD that ``sgprs`` allow on GCN/CDNA (LLVM getOccupancyWithNumSGPRs, GFX8+)."""
    if sgprs <= 80:
        return 10
    if sgprs <= 88:
        return 9
    if sgprs <= 100:
        return 8
    return 7


def amd_occupancy(lim: ArchLimits, vgprs: int, sgprs: int, lds: int, num_warps: int) -> dict:
    """Waves per SIMD for one kernel, and which resource binds it.

    ``vgprs`` is the total per lane (VGPRs plus AGPRs on CDNA), ``lds`` bytes per workgroup.
    A workgroup's ``num_warps`` waves spread over the unit's SIMDs, so LDS admits
    ``workgroups x num_warps / simds`` waves per SIMD.
    """
    by = {
        "registers": min(
            lim.max_waves, lim.regs_per_simd // _roundup(max(vgprs, 1), lim.reg_granule)
        )
    }
    if lim.sgpr_limited:
        by["sgprs"] = min(lim.max_waves, _sgpr_waves(sgprs))
    if lds > 0:
        groups = lim.lds_per_unit // _roundup(lds, lim.lds_granule)
        by["lds"] = min(lim.max_waves, groups * num_warps // lim.simds)
    limiter = min(by, key=lambda k: (by[k], k))
    return {"waves_per_simd": by[limiter], "limited_by": limiter, "by": by}


def sm90_occupancy(lim: ArchLimits, regs: int, shared: int, num_warps: int) -> dict:
    """Blocks per SM for one kernel (CUDA occupancy calculator rules), and what binds it."""
    per_warp = _roundup(max(regs, 1) * lim.wave_size, lim.reg_granule)
    by = {
        "registers": lim.regs_per_simd // per_warp // num_warps,
        "warps": lim.max_waves // num_warps,
        "blocks": lim.max_blocks,
    }
    if shared > 0:
        by["shared"] = lim.lds_per_unit // (_roundup(shared, lim.lds_granule) + lim.lds_reserved)
    limiter = min(by, key=lambda k: (by[k], k))
    return {"blocks_per_sm": by[limiter], "limited_by": limiter, "by": by}


# -- loops and matrix instructions ----------------------------------------------------------

AMD_LABEL = re.compile(r"^(\.LBB\d+_\d+):")
# group 1: the mnemonic (s_branch is unconditional), group 2: the target label.
AMD_BRANCH = re.compile(r"^\s*(s_branch|s_cbranch_\w+)\s+(\.LBB\d+_\d+)")
AMD_END = re.compile(r"^\s*s_endpgm\b")
AMD_MATRIX = re.compile(r"^\s*(v_(?:mfma|smfmac|wmma|swmmac)\w*)")
# Scalar f32 multiply-adds: what a dot that fell off the matrix units turns into.
AMD_FMA = re.compile(r"^\s*(v_(?:fma|fmac|pk_fma)_f32\w*)")
PTX_LABEL = re.compile(r"^(\$L__BB\d+_\d+):")
# group 1: the guard predicate (absent: unconditional), group 2: the target label.
PTX_BRANCH = re.compile(r"^\s*(@!?%p\d+\s+)?bra(?:\.uni)?\s+(\$L__BB\d+_\d+);")
PTX_END = re.compile(r"^\s*ret;")
PTX_MATRIX = re.compile(r"^\s*(?:@!?%p\d+\s+)?((?:wgmma\.mma_async|mma\.sync|mma\.sp)[\w.]*)")
PTX_FMA = re.compile(r"^\s*(?:@!?%p\d+\s+)?(fma\.rn\.f32)\b")


@dataclass(frozen=True)
class Syntax:
    """How one assembly language spells labels, branches, the end, and what to count."""

    label: re.Pattern[str]
    branch: re.Pattern[str]
    end: re.Pattern[str]
    matrix: re.Pattern[str]
    fma: re.Pattern[str]
    unconditional: str  # the branch group-1 value (AMD) or None-ness (PTX) of a plain jump


AMDGCN = Syntax(AMD_LABEL, AMD_BRANCH, AMD_END, AMD_MATRIX, AMD_FMA, "s_branch")
PTX = Syntax(PTX_LABEL, PTX_BRANCH, PTX_END, PTX_MATRIX, PTX_FMA, "")


@dataclass(frozen=True)
class Loop:
    """An outermost loop of the code (a cycle of its control flow) and what runs inside it."""

    first: int  # first and last line of its blocks
    last: int
    blocks: int
    matrix: int  # matrix instructions (mfma / wmma / wgmma / mma) inside
    fma: int  # scalar f32 FMAs inside

    def to_json(self) -> dict[str, int]:
        return {"blocks": self.blocks, "matrix": self.matrix, "fma": self.fma}


def _blocks(lines: list[str], syn: Syntax) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """Basic blocks as (first, last) line spans, and each block's successors.

    A block starts at a label or after a branch or the end instruction; a conditional branch
    falls through to the next block, an unconditional one and the end do not.
    """
    starts = [0]
    for i, line in enumerate(lines):
        if syn.label.match(line) and i not in starts:
            starts.append(i)
        if (syn.branch.match(line) or syn.end.match(line)) and i + 1 < len(lines):
            starts.append(i + 1)
    starts = sorted(set(starts))
    spans = [(a, b - 1) for a, b in zip(starts, [*starts[1:], len(lines)], strict=True)]
    label_block = {}
    for n, (a, _) in enumerate(spans):
        m = syn.label.match(lines[a])
        if m:
            label_block[m.group(1)] = n
    succ: list[list[int]] = []
    for n, (a, b) in enumerate(spans):
        out: list[int] = []
        falls = True
        for line in lines[a : b + 1]:
            br = syn.branch.match(line)
            if br:
                if br.group(2) in label_block:
                    out.append(label_block[br.group(2)])
                if (br.group(1) or "").strip() == syn.unconditional:
                    falls = False
            elif syn.end.match(line):
                falls = False
        if falls and n + 1 < len(spans):
            out.append(n + 1)
        succ.append(out)
    return spans, succ


def _cycles(succ: list[list[int]]) -> list[list[int]]:
    """Strongly connected components that hold a cycle (Tarjan, iterative): the outermost
    loops, each with every loop nested in it."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on: set[int] = set()
    found: list[list[int]] = []
    counter = 0
    for root in range(len(succ)):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on.add(node)
            if i < len(succ[node]):
                work.append((node, i + 1))
                nxt = succ[node][i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                if len(comp) > 1 or node in succ[node]:
                    found.append(sorted(comp))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return sorted(found)


def outer_loops(lines: list[str], syn: Syntax) -> list[Loop]:
    """Every outermost loop of the code, in code order, with the matrix instructions and
    scalar FMAs it runs. A branch back up the code is not enough: the blocks must form a
    cycle of the control flow (the compiler also places plain blocks out of line)."""
    spans, succ = _blocks(lines, syn)
    loops = []
    for comp in _cycles(succ):
        body = [ln for n in comp for ln in lines[spans[n][0] : spans[n][1] + 1]]
        loops.append(
            Loop(
                first=min(spans[n][0] for n in comp),
                last=max(spans[n][1] for n in comp),
                blocks=len(comp),
                matrix=sum(1 for ln in body if syn.matrix.match(ln)),
                fma=sum(1 for ln in body if syn.fma.match(ln)),
            )
        )
    return sorted(loops, key=lambda lp: lp.first)


def count(lines: list[str], pattern: re.Pattern[str]) -> dict[str, int]:
    """How many times each instruction matching ``pattern`` occurs, by mnemonic."""
    out: dict[str, int] = {}
    for line in lines:
        m = pattern.match(line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0) + 1
    return dict(sorted(out.items()))


# -- AMDGCN -----------------------------------------------------------------------------------

_AMD_META = re.compile(
    r"^\s+(?:- )?\.(vgpr_count|agpr_count|sgpr_count|vgpr_spill_count|sgpr_spill_count|"
    r"private_segment_fixed_size|group_segment_fixed_size|wavefront_size):\s+(\d+)\s*$",
    re.M,
)
_AMD_COMMENT = re.compile(r"^; (TotalNumVgprs|Occupancy|NumVgprs|NumAgprs):\s+(\d+)\s*$", re.M)


def parse_amdgcn(text: str) -> dict[str, Any]:
    """Registers, spills, scratch, static LDS and LLVM's own occupancy from AMDGCN assembly.

    Numbers come from the code object metadata (``.amdgpu_metadata``) and the compiler's
    comments; a missing field is an error, never a zero.
    """
    meta = {k: int(v) for k, v in _AMD_META.findall(text)}
    notes = {k: int(v) for k, v in _AMD_COMMENT.findall(text)}
    need = ("vgpr_count", "sgpr_count", "vgpr_spill_count", "sgpr_spill_count")
    missing = [k for k in (*need, "private_segment_fixed_size") if k not in meta]
    if missing or "Occupancy" not in notes:
        raise ValueError(f"AMDGCN without {', '.join(missing) or 'an Occupancy comment'}")
    lines = text.splitlines()
    loops = outer_loops(lines, AMDGCN)
    return {
        "vgprs": notes.get("NumVgprs", meta["vgpr_count"]),
        "agprs": meta.get("agpr_count", notes.get("NumAgprs", 0)),
        "vgprs_total": notes.get("TotalNumVgprs", meta["vgpr_count"]),
        "sgprs": meta["sgpr_count"],
        "vgpr_spills": meta["vgpr_spill_count"],
        "sgpr_spills": meta["sgpr_spill_count"],
        "spills": meta["vgpr_spill_count"] + meta["sgpr_spill_count"],
        "scratch_bytes": meta["private_segment_fixed_size"],
        "static_lds_bytes": meta.get("group_segment_fixed_size", 0),
        "llvm_occupancy": notes["Occupancy"],
        "matrix_instructions": count(lines, AMD_MATRIX),
        "loops": [loop.to_json() for loop in loops],
    }


# -- PTX and the ptxas report -------------------------------------------------------------------

_PTXAS_REGS = re.compile(r"Used (\d+) registers")
_PTXAS_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)


def parse_ptxas(log: str) -> dict[str, Any]:
    """Registers per thread and spill bytes from ``ptxas -v`` for the one kernel compiled.

    ``n_spills`` follows Triton's own ``CompiledKernel.n_spills``: local memory bytes per
    thread over 4 (the stack frame, which for this kernel holds spills only).
    """
    regs = _PTXAS_REGS.findall(log)
    frames = _PTXAS_FRAME.findall(log)
    if len(regs) != 1 or len(frames) != 1:
        raise ValueError(f"ptxas report without exactly one kernel's usage: {log.strip()[:400]!r}")
    frame, stores, loads = (int(x) for x in frames[0])
    return {
        "n_regs": int(regs[0]),
        "stack_bytes": frame,
        "spill_store_bytes": stores,
        "spill_load_bytes": loads,
        "n_spills": frame // 4,
        "spills": frame // 4,
    }


def parse_ptx(text: str) -> dict[str, Any]:
    """Matrix instructions and loops of the PTX Triton emits for sm90."""
    lines = text.splitlines()
    loops = outer_loops(lines, PTX)
    return {
        "matrix_instructions": count(lines, PTX_MATRIX),
        "loops": [loop.to_json() for loop in loops],
    }
