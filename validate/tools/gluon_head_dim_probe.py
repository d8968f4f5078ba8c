"""Issue 24, item 2: can the Gluon kernel serve head_dim 96 and 256 as it stands? (GPU, sm90)

The kernel's launcher admits head_dim 64 and 128 only (``gluon.launch.HEAD_DIMS``). This
probe widens that list in this process alone and, for each head dim asked, builds a plan per
key-tile variant, checks its output and LSE against PyTorch's f32 math on one causal shape,
then times it beside cuDNN's SDPA (called directly, what ``single_prefill`` routes these head
dims to on sm90 today) with CUDA events over graph replays. It writes no run: it answers
whether the kernel compiles, is right and is worth routing, before a sweep is declared.

    python3 validate/tools/gluon_head_dim_probe.py --head-dim 96 --head-dim 256 --out probe.json

Each line printed is one (head_dim, variant, length): the error against the reference, in
units of the tolerance, and the time of the kernel over cuDNN's, or the error that stopped it.
"""

from __future__ import annotations

import argparse
import json
import math
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from tether_kernels.gluon import launch as gl_launch
from torch.nn.attention import SDPBackend, sdpa_kernel

VARIANTS = {
    "n128s2": gl_launch.GluonConfig(pingpong=False),
    "n64s2": gl_launch.GluonConfig(block_n=64, pingpong=False),
    "n64s3": gl_launch.GluonConfig(block_n=64, stages=3, pingpong=False),
}
HQ, HKV = 32, 8
TOL = 2e-2  # bf16 inputs, f32 accumulation: the suite's bound for this dtype
PEER: list[str] = []  # --peer fa3: FlashInfer's fa3 timed beside (its JIT build comes first)


def _graph_ms(fn: Any, reps: int = 20) -> float:
    """Milliseconds per call, from one CUDA graph of ``reps`` calls replayed five times."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = math.inf
    for _ in range(5):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / reps)
    return best


def _tensors(n: int, d: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator(device="cuda").manual_seed(n * 1000 + d)
    q = torch.randn(1, n, HQ, d, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(1, n, HKV, d, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(1, n, HKV, d, device="cuda", dtype=torch.bfloat16, generator=g)
    return q, k, v


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, ...]:
    qf, kf, vf = (t[0].transpose(0, 1).float() for t in (q, k, v))
    kf = kf.repeat_interleave(HQ // HKV, 0)
    vf = vf.repeat_interleave(HQ // HKV, 0)
    s = (qf @ kf.transpose(1, 2)) * q.shape[-1] ** -0.5
    s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), -math.inf)
    lse = torch.logsumexp(s, -1)
    return (torch.softmax(s, -1) @ vf).transpose(0, 1), lse


def _check(d: int, config: Any) -> float:
    n = 1000  # not a multiple of either key tile: the tails are masked
    q, k, v = _tensors(n, d)
    out = torch.empty_like(q)
    lse = torch.empty(1, HQ, n, device="cuda", dtype=torch.float32)
    gl_launch.attn_fwd_sm90_launcher(q, k, v, out, config, causal=True, lse=lse)()
    ref, ref_lse = _reference(q, k, v)
    err = (out[0].float() - ref).abs().max().item() / TOL
    return max(err, (lse[0] - ref_lse).abs().max().item() / TOL)


def _time(d: int, config: Any, n: int) -> dict[str, float]:
    q, k, v = _tensors(n, d)
    out = torch.empty_like(q)
    gluon = gl_launch.attn_fwd_sm90_launcher(q, k, v, out, config, causal=True)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

    def cudnn() -> torch.Tensor:
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)

    g_ms, c_ms = _graph_ms(gluon), _graph_ms(cudnn)
    flops = 4 * n * n * HQ * d / 2  # causal: half the square
    row = {"gluon_ms": g_ms, "cudnn_ms": c_ms, "gluon_tflops": flops / g_ms / 1e9}
    if PEER:
        import flashinfer  # the peer, carried in .peers/ (validate/peer_env.sh)

        q3, k3, v3 = q[0], k[0], v[0]

        def fa3() -> torch.Tensor:
            return flashinfer.single_prefill_with_kv_cache(q3, k3, v3, causal=True, backend="fa3")

        row["fa3_ms"] = _graph_ms(fa3)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dim", type=int, action="append", required=True)
    parser.add_argument("--length", type=int, action="append", help="square lengths to time")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--variant", action="append", choices=tuple(VARIANTS))
    parser.add_argument("--peer", action="append", choices=("fa3",), default=[])
    args = parser.parse_args(argv)
    PEER[:] = args.peer
    gl_launch.HEAD_DIMS = tuple(sorted({*gl_launch.HEAD_DIMS, *args.head_dim}))
    rows: list[dict[str, Any]] = []
    for d in args.head_dim:
        for name, config in VARIANTS.items():
            if args.variant and name not in args.variant:
                continue
            row: dict[str, Any] = {"head_dim": d, "variant": name}
            t0 = time.time()
            try:
                row["error_over_tol"] = _check(d, config)
                for n in args.length or [4096, 8192]:
                    row[f"n{n}"] = _time(d, config, n)
            except Exception as exc:  # a compile or launch error is the answer here
                row["error"] = f"{type(exc).__name__}: {str(exc)[:400]}"
                row["trace"] = traceback.format_exc()[-2000:]
            row["seconds"] = round(time.time() - t0, 1)
            rows.append(row)
            timed = {key: v for key, v in row.items() if key.startswith("n")}
            ratios = " ".join(
                f"{key}: {v['gluon_ms'] / v['cudnn_ms']:.3f}x cuDNN's time"
                + (f", {v['gluon_ms'] / v['fa3_ms']:.3f}x fa3's" if "fa3_ms" in v else "")
                for key, v in timed.items()
            )
            said = (
                row["error"] if "error" in row else f"err/tol {row['error_over_tol']:.3f} {ratios}"
            )
            print(d, name, said)
            args.out.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
