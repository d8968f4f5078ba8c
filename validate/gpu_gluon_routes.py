"""The calls sm90's policy routes to its own kernels, through the public API, checked on a GPU.

validate/gpu_routed_grid.py's shapes (small heads, issue 11's grid) route nowhere near the
Gluon thresholds' scope (32 query heads over 8 kv heads, head_dim 128), so this checks the
scope's own calls: square and chunked, f16 and bf16, with and without the LSE, contiguous and
strided, each twice (the second call runs the cached plan), against the f32 reference by the
accuracy rule of kernels/API.md. Prints one line per case and a last line OK or FAILED; exit 1 on a
failure.

    python3 -m validate.gpu_gluon_routes
"""

from __future__ import annotations

import sys

import torch
from tether_kernels import Shape, route, single_prefill
from tether_kernels.arms import attention_ref

LSE_TOL = 1e-2
# Squares below 2048 take the Triton kernel, longer ones Gluon; chunked calls take Gluon,
# split-KV where the query tiles are few (128 and 256 queries here, 32 heads).
SHAPES = ((128, 128), (512, 512), (1000, 1000), (2048, 2048), (128, 4096), (256, 8192),
          (300, 20000), (512, 8192), (2049, 5000))  # fmt: skip
CASES = [
    (qo, kv, dtype, lse, strided)
    for qo, kv in SHAPES
    for dtype in (torch.float16, torch.bfloat16)
    for lse in (False, True)
    for strided in (False, True)
]


def _inputs(qo: int, kv: int, dtype: torch.dtype, strided: bool, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    if strided:  # views of one packed qkv buffer, as a serving stack holds them
        packed = torch.randn(kv, 48, 128, device="cuda", dtype=dtype, generator=gen)
        return packed[-qo:, :32], packed[:, 32:40], packed[:, 40:48]
    q = torch.randn(qo, 32, 128, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(kv, 8, 128, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn(kv, 8, 128, device="cuda", dtype=dtype, generator=gen)
    return q, k, v


def main() -> int:
    failed = 0
    for n, (qo, kv, dtype, lse, strided) in enumerate(CASES):
        q, k, v = _inputs(qo, kv, dtype, strided, n)
        name = {torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]
        arm = route("single_prefill", Shape(1, qo, kv, 32, 8, 128, name), "sm90", return_lse=lse)
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
        print(f"{'ok ' if ok else 'BAD'} {qo}x{kv} {name} lse={lse} strided={strided} arm={arm} "
              f"err {worst:.2e} tol {tol:.2e} lse err {worst_lse:.1e}")  # fmt: skip
    print("OK: every case passed" if not failed else f"FAILED: {failed} of {len(CASES)} cases")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
