"""Compile the Gluon sm90 kernel ahead of time, on any host (no GPU), and report what it became.

    python validate/tools/gluon_aot.py [--json FILE]      # every variant, bf16, head_dim 128

For each variant of ``tether_kernels.gluon.launch.VARIANTS`` (and the causal and non-causal
kernels, with the LSE stored) it compiles for ``GPUTarget("cuda", 90, 32)`` and reads the
result: wgmma instructions in the PTX, setmaxnreg register splits, shared memory, and from
ptxas (``-v``, Triton's bundled one) registers and spill bytes; from cuobjdump the SASS HGMMA
count. Exit 1 when a variant does not compile, spills, or has no wgmma.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
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
            check=True,
        )
        info = res.stdout + res.stderr
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
    return row


def main(argv: list[str] | None = None) -> int:
    from tether_kernels.gluon.launch import VARIANTS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="write the table as JSON here")
    args = ap.parse_args(argv)
    import triton

    rows, ok = [], True
    for name in VARIANTS:
        for causal in (True, False):
            row: dict[str, Any] = {"variant": name, "causal": causal, "triton": triton.__version__}
            try:
                row.update(inspect(compile_variant(name, causal)))
            except Exception as exc:  # report every variant; the exit code says it failed
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[-1][:200]}"
            good = "error" not in row and row["spill_bytes"] == 0 and row["wgmma_ptx"] > 0
            ok = ok and good
            rows.append(row)
            print(
                f"{name:<9} causal={causal!s:<5} "
                + (
                    row.get("error")
                    or f"wgmma {row['wgmma_ptx']} HGMMA {row['hgmma_sass']} regs "
                    f"{row['registers']} spill {row['spill_bytes']} B smem {row['shared_bytes']} B "
                    f"warps {row['num_warps']} setmaxnreg {row['setmaxnreg']}"
                )
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
