"""Split-KV exploration on an H200 (a diagnostic; writes no run).

    python3 -m validate.tools.split_session [--calls 20] [--reps 9]

For the short calls where the unsplit Gluon launch leaves SMs idle, times, in CUDA graphs of
``calls`` launches (the serving stacks' mode), the Gluon plan at each forced split count, the
split ``split_count`` picks, the Triton arm, cuDNN (the arm short square calls take today),
FlashInfer's fa3 and ``single_prefill`` as routed; prints one table of microseconds per call (the median of
``reps`` replays) and each against fa3. It says which split counts to pick; the store's
evidence is the ``api-*`` and ``policy-*`` sweeps.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

import torch
from tether_kernels import Shape, single_prefill
from tether_kernels.arms import get_arm
from tether_kernels.gluon.launch import GluonPlan


def graph_us(fn: Callable[[], object], calls: int, reps: int) -> float:
    """Median microseconds per call over ``reps`` replays of one graph of ``calls`` calls."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args(argv)
    try:
        import flashinfer
    except ImportError:
        flashinfer = None
    dev = torch.device("cuda")
    shapes = [(qo, kv) for kv in (8192, 32768) for qo in (128, 256, 512)]
    shapes += [(n, n) for n in (128, 256, 512, 1024)]
    rows: list[tuple[str, str, float]] = []
    for qo, kv in shapes:
        tag = f"{qo}x{kv}"
        q = torch.randn(1, qo, 32, 128, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, kv, 8, 128, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, kv, 8, 128, device=dev, dtype=torch.bfloat16)
        out = torch.empty_like(q)
        dims = (1, qo, kv, 32, 8, 128)

        def t(name: str, fn: Callable[[], object], tag: str = tag) -> None:
            try:
                rows.append((tag, name, graph_us(fn, args.calls, args.reps)))
            except Exception as exc:  # a diagnostic: say what failed and go on
                rows.append((tag, f"{name} FAILED {type(exc).__name__}: {exc}"[:90], float("nan")))

        if flashinfer is not None:
            t("fa3", lambda q=q, k=k, v=v: flashinfer.single_prefill_with_kv_cache(
                q[0], k[0], v[0], causal=True, kv_layout="NHD", backend="fa3"))  # fmt: skip
        auto = GluonPlan(dims, torch.bfloat16, dev)
        t(
            f"gluon auto (split {auto.n_split})",
            lambda p=auto, q=q, k=k, v=v, o=out: p.launch(q, k, v, o),
        )
        for n in (1, 2, 4, 8):
            p = GluonPlan(dims, torch.bfloat16, dev, n_split=n)
            t(f"gluon split {n}", lambda p=p, q=q, k=k, v=v, o=out: p.launch(q, k, v, o))
        shape = Shape(1, qo, kv, 32, 8, 128, "bf16", True)
        for arm in ("sdpa_cudnn", "triton") if qo == kv else ("triton",):
            t(arm, get_arm(arm).prepare(q, k, v, shape, out=out, lse=None, arch="sm90"))
        t("single_prefill", lambda q=q, k=k, v=v: single_prefill(q[0], k[0], v[0], causal=True))
    fa3 = {tag: us for tag, name, us in rows if name == "fa3"}
    print(f"{'shape':<12} {'arm':<26} {'us/call':>9} {'fa3/arm':>8}")
    for tag, name, us in rows:
        ratio = fa3.get(tag, float("nan")) / us if us == us else float("nan")
        print(f"{tag:<12} {name:<26} {us:9.2f} {ratio:8.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
