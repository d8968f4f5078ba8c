"""Issue 24, item 2: can the Gluon kernel serve head_dim 96 and 256 as it stands? (GPU, sm90)

When it was written the kernel's launcher admitted head_dim 64 and 128 only (it now admits
256 too: ``gluon.launch.HEAD_DIMS``). This probe widens that list in this process alone and, for each head dim asked, builds a plan per
key-tile variant, checks its output against the f32 reference by the suite's tolerance rule
(validate/correctness/_helpers.py: twice the same-dtype math SDPA's error) and its LSE
against the reference's on one causal shape, then times it beside cuDNN's SDPA (called directly, what ``single_prefill`` routes these head
dims to on sm90 today) with CUDA events over graph replays. It writes no run: it answers
whether the kernel compiles, is right and is worth routing, before a sweep is declared.

    python3 validate/tools/gluon_head_dim_probe.py --head-dim 96 --head-dim 256 --out probe.json

Each line printed is one (head_dim, variant): the output's error in units of the suite's
tolerance, the LSE's largest error, and per length the kernel's time over cuDNN's (and fa3's,
with ``--peer fa3``), or the error that stopped it.
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
from tether_kernels import Shape
from tether_kernels.arms import attention_ref
from tether_kernels.gluon import launch as gl_launch
from torch.nn.attention import SDPBackend, sdpa_kernel

from validate.correctness._helpers import max_err, tolerance

VARIANTS = {
    "n128s2": gl_launch.GluonConfig(pingpong=False),
    "n64s2": gl_launch.GluonConfig(block_n=64, pingpong=False),
    "n64s3": gl_launch.GluonConfig(block_n=64, stages=3, pingpong=False),
}
HQ, HKV = 32, 8


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


def _check(d: int, config: Any) -> dict[str, float]:
    """The output's error over the suite's tolerance, and the LSE's largest error."""
    n = 1000  # not a multiple of either key tile: the tails are masked
    q, k, v = _tensors(n, d)
    out = torch.empty_like(q)
    lse = torch.empty(1, HQ, n, device="cuda", dtype=torch.float32)
    gl_launch.attn_fwd_sm90_launcher(q, k, v, out, config, causal=True, lse=lse)()
    ref, ref_lse = attention_ref(q, k, v, True, return_lse=True)
    shape = Shape(batch=1, qo_len=n, kv_len=n, hq=HQ, hkv=HKV, head_dim=d, dtype="bf16")
    tol = tolerance(shape, q, k, v, ref=ref)[0]
    return {"error_over_tol": max_err(out, ref) / tol, "lse_error": max_err(lse, ref_lse)}


def _time(d: int, config: Any, n: int, fa3: bool) -> dict[str, float]:
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
    if fa3:
        import flashinfer  # the peer, carried in .peers/ (validate/peer_env.sh)

        q3, k3, v3 = q[0], k[0], v[0]

        def peer() -> torch.Tensor:
            return flashinfer.single_prefill_with_kv_cache(q3, k3, v3, causal=True, backend="fa3")

        row["fa3_ms"] = _graph_ms(peer)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dim", type=int, action="append", required=True)
    parser.add_argument("--length", type=int, action="append", help="square lengths to time")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--variant", action="append", choices=tuple(VARIANTS))
    parser.add_argument("--peer", action="append", choices=("fa3",), default=[])
    args = parser.parse_args(argv)
    gl_launch.HEAD_DIMS = tuple(sorted({*gl_launch.HEAD_DIMS, *args.head_dim}))
    rows: list[dict[str, Any]] = []
    for d in args.head_dim:
        for name, config in VARIANTS.items():
            if args.variant and name not in args.variant:
                continue
            row: dict[str, Any] = {"head_dim": d, "variant": name}
            t0 = time.time()
            try:
                row.update(_check(d, config))
                for n in args.length or [4096, 8192]:
                    row[f"n{n}"] = _time(d, config, n, "fa3" in args.peer)
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
                row["error"]
                if "error" in row
                else f"err/tol {row['error_over_tol']:.3f} lse err {row['lse_error']:.2e} {ratios}"
            )
            print(d, name, said)
            args.out.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
