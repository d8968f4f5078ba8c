"""Compile the Gluon sm90 kernel ahead of time, on any host (no GPU), and report what it became.

    python validate/tools/gluon_aot.py [--json FILE] [--workers N]

The cases (``CASES``): each variant of ``tether_kernels.gluon.launch.VARIANTS`` at bf16,
head_dim 128, causal and not and the split-KV launch; what the arm launches at each
head_dim (``default_config``), causal and not, split, and f16; and the ragged launch at the
head_dims the ragged scope routes. Each compiles for
``GPUTarget("cuda", 90, 32)`` under the installed Triton, and the result is read: wgmma in the
PTX, setmaxnreg register splits, shared memory, from ptxas (``-v``, Triton's bundled one)
registers and spill bytes, and from cuobjdump's SASS the HGMMA count and the steady loops
(``steady_loops``: the innermost loop holding HGMMA, the consumers' main loop, and the one
holding UTMALDG, the producer's TMA loop, each with its instruction mix). ``gate`` is the
compile gate: exit 1 when a case does not compile, spills, or its main loop lacks wgmma or
its producer loop TMA. validate/tools/compile_releases.sh runs it under every Triton release
of ``GLUON_TRITON``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether_kernels.gluon.launch import GluonConfig


def compile_variant(
    name: str | GluonConfig,
    causal: bool,
    dtype: str = "bf16",
    head_dim: int = 128,
    split: bool = False,
    ragged: bool = False,
) -> Any:
    """The compiled kernel (triton's CompiledKernel) of one variant (a name in VARIANTS, or a
    config) for sm90; ``split``: the split-KV launch's, which writes f32 partial results;
    ``ragged``: the ragged batch's launch (``RAGGED``: packed requests, offsets read per
    program)."""
    import triton
    from tether_kernels.gluon.attn_fwd_sm90 import attn_fwd_sm90
    from tether_kernels.gluon.launch import MAXNREG, VARIANTS, head_part
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    cfg = VARIANTS[name] if isinstance(name, str) else name
    elt = {"bf16": gl.bfloat16, "f16": gl.float16}[dtype]
    sig_dtype = {"bf16": "bf16", "f16": "fp16"}[dtype]  # Triton's signature names
    d, n = head_dim, cfg.block_n
    d0 = head_part(d)
    d1 = d - d0 or d0  # unsplit: the second part's descriptors repeat the first's

    def desc(rows: int, width: int) -> str:
        layout = gl.NVMMASharedLayout.get_default_for([rows, width], elt)
        return f"tensordesc<{sig_dtype}[{rows}, {width}],{layout!r}>"

    # The launcher passes None for an unsplit head's second part: a constexpr.
    second = "constexpr" if d1 == d0 and d0 == d else None
    sig: dict[str, str] = {
        "q_desc": desc(64, d0),
        "k_desc": desc(n, d0),
        "v_desc": desc(n, d0),
        "q1_desc": second or desc(64, d1),
        "k1_desc": second or desc(n, d1),
        "v1_desc": second or desc(n, d1),
        "o_ptr": "*fp32" if split else f"*{sig_dtype}",
        "lse_ptr": "*fp32",
        "qk_scale": "fp32",
        "qo_len": "i32",
        "kv_len": "i32",
        "n_split": "i32",
        "stride_ob": "i32",
        "stride_om": "i32",
        "stride_oh": "i32",
        "work": "*i32" if ragged else "constexpr",
    }
    constexprs: dict[str, Any] = dict(
        HQ=32,
        GROUP=4,
        HEAD_DIM=d,
        D0=d0,
        BLOCK_N=n,
        STAGES=cfg.stages,
        CAUSAL=causal,
        PINGPONG=cfg.pingpong,
        ONE_RELEASE=cfg.one_release,
        UNROLL=cfg.unroll,
        PACK=cfg.pack,
        STORE_LSE=True,
        PRODUCER_REGS=cfg.producer_regs,
        CONSUMER_REGS=cfg.consumer_regs,
        RAGGED=ragged,
    )
    if not ragged:
        constexprs.update(work=None)
    if second:
        constexprs.update(q1_desc=None, k1_desc=None, v1_desc=None)
    sig.update({k: "constexpr" for k in constexprs})
    src = GluonASTSource(attn_fwd_sm90, sig, constexprs=constexprs)
    options = {"num_warps": 4, "maxnreg": MAXNREG}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def _tool(name: str) -> Path:
    import triton

    if name == "ptxas":
        # The ptxas the compiler itself runs for sm90: from Triton 3.7 on that is the bundled
        # CUDA 13 one (get_ptxas: "ptxas-blackwell" from arch 90), and its PTX (.version 9.x)
        # is refused by the legacy CUDA 12 "ptxas" beside it; 3.6 has no such resolver.
        try:
            from triton.backends.nvidia.compiler import get_ptxas
        except ImportError:
            pass
        else:
            return Path(get_ptxas(90).path)
    return Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name


def inspect(compiled: Any) -> dict[str, Any]:
    ptx = compiled.asm["ptx"]
    row: dict[str, Any] = {
        "wgmma_ptx": ptx.count("wgmma.mma_async"),
        "setmaxnreg": sorted(
            set(re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx))
        ),
        "shared_bytes": compiled.metadata.shared,
        "num_warps": compiled.metadata.num_warps,
        "local_ptx": ptx.count("ld.local") + ptx.count("st.local"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        ptx_path = Path(tmp) / "k.ptx"
        ptx_path.write_text(ptx)
        res = subprocess.run(
            [str(_tool("ptxas")), "-arch=sm_90a", "-v", str(ptx_path), "-o", f"{tmp}/k.cubin"],
            capture_output=True,
            text=True,
            check=False,
        )
        info = res.stdout + res.stderr
        if res.returncode != 0:
            # ptxas says why on stderr; a bare exit status names nothing to fix.
            raise RuntimeError(f"ptxas exit {res.returncode}: {' '.join(info.split()[-40:])}")
        regs = re.search(r"Used (\d+) registers", info)
        spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", info)
        row["registers"] = int(regs.group(1)) if regs else None
        row["spill_bytes"] = int(spill.group(1)) + int(spill.group(2)) if spill else None
        cubin = Path(tmp) / "k.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        sass = subprocess.run(
            [str(_tool("cuobjdump")), "-sass", str(cubin)], capture_output=True, text=True
        ).stdout
        row["hgmma_sass"] = sass.count("HGMMA")
        row["utmaldg_sass"] = sass.count("UTMALDG")
        row["loops"] = steady_loops(sass)
    return row


# One SASS instruction: its address and opcode (cuobjdump: "/*0a70*/  HGMMA.64x128x16... ;"),
# with an optional predicate ("@P0 BRA ..."); a branch's target is an address.
_SASS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)([^;]*);")


def steady_loops(sass: str) -> dict[str, dict[str, Any]]:
    """The innermost SASS loops (a backward branch's span) holding HGMMA (the consumer
    warpgroups' main loop) and UTMALDG (the producer's TMA loop): their length and instruction
    mix (opcode -> count), or absent where no loop holds the instruction: what runs every key
    block, the part of the kernel its speed comes from."""
    code = [(int(a, 16), op, rest) for a, op, rest in _SASS.findall(sass)]
    loops = []
    for addr, op, rest in code:
        if op not in ("BRA", "JMP"):
            continue
        hit = re.search(r"0x([0-9a-f]+)", rest)
        if hit and int(hit.group(1), 16) < addr:
            start = int(hit.group(1), 16)
            loops.append([o for a, o, _ in code if start <= a <= addr])
    found: dict[str, dict[str, Any]] = {}
    for role, opcode in (("main", "HGMMA"), ("producer", "UTMALDG")):
        holding = [body for body in loops if opcode in body]
        if holding:
            body = min(holding, key=len)
            mix = Counter(body)
            found[role] = {"instructions": len(body), "mix": dict(mix.most_common())}
    return found


def _case_rows() -> list[dict[str, Any]]:
    from tether_kernels.gluon.launch import HEAD_DIMS, VARIANTS

    cases: list[dict[str, Any]] = []
    for name in VARIANTS:
        for causal, split in ((True, False), (False, False), (True, True)):
            cases.append(
                {"set": "variant", "variant": name, "head_dim": 128, "dtype": "bf16"}
                | {"causal": causal, "split": split}
            )
    for head_dim in HEAD_DIMS:
        for causal, split, dtype in (
            (True, False, "bf16"),
            (False, False, "bf16"),
            (True, True, "bf16"),
            (True, False, "f16"),
        ):
            cases.append(
                {"set": "head_dim", "variant": "default", "head_dim": head_dim, "dtype": dtype}
                | {"causal": causal, "split": split}
            )
    # What ragged_prefill launches where the ragged scope routes it (head_dim 64 and 128): the
    # ragged launch, whose work rows are read per program. Not 256, which the scope leaves to
    # per_request: its ragged launch (served when the arm is forced) spills under 3.6,
    # where the batch launch at 256 does not.
    for head_dim in (64, 128):
        cases.append(
            {"set": "ragged", "variant": "default", "head_dim": head_dim, "dtype": "bf16"}
            | {"causal": True, "split": False}
        )
    return cases


CASES = _case_rows  # a function: the cases read the installed kernel's VARIANTS and HEAD_DIMS


def compile_case(case: dict[str, Any]) -> dict[str, Any]:
    """One case compiled and read (``inspect`` and ``steady_loops``); a failure to compile is
    the row's ``error``, so every case is reported."""
    import triton
    from tether_kernels.gluon.launch import default_config

    row: dict[str, Any] = {**case, "triton": triton.__version__}
    cfg = default_config(case["head_dim"]) if case["variant"] == "default" else case["variant"]
    try:
        compiled = compile_variant(
            cfg, case["causal"], case["dtype"], case["head_dim"], split=case["split"],
            ragged=case["set"] == "ragged",
        )  # fmt: skip
        row.update(inspect(compiled))
    except Exception as exc:  # report every case; the gate says it failed
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[-1][:200]}"
    return row


def gate(rows: list[dict[str, Any]]) -> list[str]:
    """The compile gate's failures, one line per case: it did not compile, it spills (ptxas
    spill bytes, or local memory in the PTX), or its main loop runs no wgmma, or no steady
    loop issues TMA loads."""
    bad = []
    for row in rows:
        what = f"{row['set']} {row['variant']} d{row['head_dim']} {row['dtype']} " + (
            f"causal={row['causal']} split={row['split']} (triton {row['triton']})"
        )
        loops = row.get("loops", {})
        why = (
            row.get("error")
            or (row["spill_bytes"] != 0 and f"spills {row['spill_bytes']} bytes")
            or (row["local_ptx"] != 0 and f"{row['local_ptx']} local-memory accesses")
            or (row["wgmma_ptx"] == 0 and "no wgmma in the PTX")
            or ("main" not in loops and "no loop holds HGMMA")
            or ("producer" not in loops and "no loop holds UTMALDG (TMA)")
        )
        if why:
            bad.append(f"{what}: {why}")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the rows as JSON here")
    ap.add_argument("--workers", type=int, default=2, help="compiler processes (default 2)")
    args = ap.parse_args(argv)
    cases = CASES()
    with ProcessPoolExecutor(max_workers=max(1, args.workers)) as pool:
        rows = list(pool.map(compile_case, cases))
    for row in rows:
        loops = row.get("loops", {})
        print(
            f"{row['set']:<8} {row['variant']:<9} d{row['head_dim']:<3} {row['dtype']:<4} "
            f"causal={row['causal']!s:<5} split={row['split']!s:<5} "
            + (
                row.get("error")
                or f"wgmma {row['wgmma_ptx']} HGMMA {row['hgmma_sass']} regs "
                f"{row['registers']} spill {row['spill_bytes']} B smem {row['shared_bytes']} B "
                f"warps {row['num_warps']} main loop "
                f"{loops.get('main', {}).get('mix', {}).get('HGMMA', 0)} HGMMA, producer loop "
                f"{loops.get('producer', {}).get('mix', {}).get('UTMALDG', 0)} UTMALDG"
            )
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    failed = gate(rows)
    for line in failed:
        print(f"gluon_aot: gate: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
