"""The calls sm90's policy routes to its own kernels, through the public API, checked on a GPU.

validate/gpu_routed_grid.py's shapes (small heads, issue 11's grid) route nowhere near the
thresholds' scopes (heads 32/8, 32/32 and 8/1, head_dim 128 and, chunked, 64), so this checks
the scopes' own calls: at 32/8 and head_dim 128, square and chunked, f16 and bf16, with and
without the LSE, contiguous and strided; at the other heads and head_dims, the same lengths'
kinds in bf16; each twice (the second call runs the cached plan), against the f32 reference by
the accuracy rule of kernels/API.md. Prints one line per case and a last line OK or FAILED; exit 1 on a
failure.

    python3 -m validate.gpu_gluon_routes [--start N]

``--start N`` begins at case N (numbered from 0 in the order printed), to finish a list that a
session's time limit cut short.
"""

from __future__ import annotations

import argparse
import sys

import torch
from tether_kernels import Shape, route, single_prefill
from tether_kernels.arms import attention_ref

LSE_TOL = 1e-2
# Squares below 2048 take the Triton kernel, longer ones Gluon; chunked calls take Gluon,
# split-KV where the query tiles are few (128 and 256 queries here, 32 heads).
SHAPES = ((128, 128), (512, 512), (1000, 1000), (2048, 2048), (128, 4096), (256, 8192),
          (300, 20000), (512, 8192), (2049, 5000))  # fmt: skip
# (hq, hkv, head_dim) beyond 32/8 at 128: the pairs and head_dim the scopes add.
WIDER = ((32, 32, 128), (8, 1, 128), (32, 8, 64), (32, 32, 64), (8, 1, 64))
WIDER_SHAPES = ((128, 4096), (512, 512), (2048, 2048), (1000, 3000), (2049, 5000))
CASES = [
    (qo, kv, 32, 8, 128, dtype, lse, strided)
    for qo, kv in SHAPES
    for dtype in (torch.float16, torch.bfloat16)
    for lse in (False, True)
    for strided in (False, True)
] + [
    (qo, kv, hq, hkv, d, torch.bfloat16, lse, strided)
    for hq, hkv, d in WIDER
    for qo, kv in WIDER_SHAPES
    for lse, strided in ((False, True), (True, False))
]


def _inputs(qo: int, kv: int, hq: int, hkv: int, d: int, dtype: torch.dtype, strided: bool,
            seed: int):  # fmt: skip
    gen = torch.Generator(device="cuda").manual_seed(seed)
    if strided:  # views of one packed qkv buffer, as a serving stack holds them
        packed = torch.randn(kv, hq + 2 * hkv, d, device="cuda", dtype=dtype, generator=gen)
        return packed[-qo:, :hq], packed[:, hq : hq + hkv], packed[:, hq + hkv :]
    q = torch.randn(qo, hq, d, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(kv, hkv, d, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn(kv, hkv, d, device="cuda", dtype=dtype, generator=gen)
    return q, k, v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--start", type=int, default=0, help="the first case to run")
    args = ap.parse_args(argv)
    failed = 0
    for n, (qo, kv, hq, hkv, d, dtype, lse, strided) in enumerate(CASES):
        if n < args.start:
            continue
        q, k, v = _inputs(qo, kv, hq, hkv, d, dtype, strided, n)
        name = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
        shape = Shape(1, qo, kv, hq, hkv, d, name)
        arm = route("single_prefill", shape, "sm90", return_lse=lse)
        ref, ref_lse = attention_ref(q[None], k[None], v[None], True, return_lse=True)
        same = attention_ref(q[None], k[None], v[None], True).to(dtype).float()
        tol = 2 * (same - ref).abs().max().item() + 1e-3
        worst, worst_lse = 0.0, 0.0
        for _ in range(2):
            got = single_prefill(q, k, v, causal=True, return_lse=lse)
            out = got[0] if lse else got
            worst = max(worst, (out.float() - ref[0]).abs().max().item())
            if lse:  # f32 accumulation of the same inputs: within LSE_TOL of the reference's
                worst_lse = max(worst_lse, (got[1] - ref_lse[0]).abs().max().item())
        ok = worst <= tol and worst_lse <= LSE_TOL
        failed += not ok
        print(f"{'ok ' if ok else 'BAD'} {qo}x{kv} {hq}/{hkv} d{d} {name} lse={lse} "
              f"strided={strided} arm={arm} "
              f"err {worst:.2e} tol {tol:.2e} lse err {worst_lse:.1e}")  # fmt: skip
    ran = len(CASES) - min(args.start, len(CASES))
    print(
        f"OK: every case passed ({ran} from case {args.start})"
        if not failed
        else f"FAILED: {failed} of {ran} cases"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
