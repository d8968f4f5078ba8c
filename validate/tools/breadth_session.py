"""The sm90 policy's breadth on an H200 (a diagnostic; writes no run).

    python3 -m validate.tools.breadth_session [--calls 20] [--reps 7]

Over head_dim 64 and 128, heads 32/8, 32/32 and 8/1, f16 and bf16, times in CUDA graphs (the
serving stacks' mode) tether's Gluon and Triton arms, the cuDNN arm a call takes where no
threshold speaks for it, and FlashInfer's fa3, each prepared outside the graph, on the
chunked and square calls the policy's thresholds would cover. Prints one table: microseconds
per call (the median of ``reps`` replays) and each tether arm against cuDNN and fa3. It says
where the thresholds' scopes can widen; the store's evidence is the ``policy-*`` sweeps.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable
from pathlib import Path

import torch
from tether_kernels import Shape
from tether_kernels.arms import get_arm

from validate.tools import peer_session
from validate.tools.split_session import graph_us

HEADS = ((32, 8), (32, 32), (8, 1))
HEAD_DIMS = (64, 128)
DTYPES = {"f16": torch.float16, "bf16": torch.bfloat16}
CHUNKED = ((128, 4096), (1024, 4096), (128, 32768), (1024, 32768))
SQUARE = (128, 512, 1024, 2048, 4096, 16384)
ARMS = ("gluon", "triton", "sdpa_cudnn")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument(
        "--build",
        metavar="OUT",
        help="first build FlashInfer's fa3 modules at head_dim 64 beside the restored ones "
        "and pack them all into OUT/fi-jit-sm90.tar.xz (copy it into .peers/)",
    )
    args = ap.parse_args(argv)
    if args.build:
        specs = peer_session.module_specs()
        specs += peer_session.module_specs(head_dims=(64,), backends=("fa3",))
        print(peer_session.build_modules(Path(args.build), specs), flush=True)
    try:
        import flashinfer
    except ImportError:
        flashinfer = None
    dev = torch.device("cuda")
    shapes = [*CHUNKED, *((n, n) for n in SQUARE)]
    rows = []
    for (hq, hkv), d, (dname, dtype), (qo, kv) in itertools.product(
        HEADS, HEAD_DIMS, DTYPES.items(), shapes
    ):
        q = torch.randn(1, qo, hq, d, device=dev, dtype=dtype)
        k = torch.randn(1, kv, hkv, d, device=dev, dtype=dtype)
        v = torch.randn(1, kv, hkv, d, device=dev, dtype=dtype)
        out = torch.empty_like(q)
        shape = Shape(1, qo, kv, hq, hkv, d, dname, True)
        # Long calls: fewer per graph, so each config stays near a second.
        calls = max(2, min(args.calls, int(args.calls * 4096 * 4096 / max(qo * kv, 1))))
        us: dict[str, float] = {}

        def t(
            name: str,
            fn: Callable[[], object],
            us: dict[str, float] = us,
            calls: int = calls,
            where: str = f"{hq}/{hkv} d{d} {dname} {qo}x{kv}",
        ) -> None:
            try:
                us[name] = graph_us(fn, calls, args.reps)
            except Exception as exc:  # a diagnostic: say what failed and go on
                print(f"{where} {name}: {type(exc).__name__}: {exc}"[:160], flush=True)
                us[name] = float("nan")

        if flashinfer is not None:
            t("fa3", lambda q=q, k=k, v=v: flashinfer.single_prefill_with_kv_cache(
                q[0], k[0], v[0], causal=True, kv_layout="NHD", backend="fa3"))  # fmt: skip
        for arm in ARMS:
            reason = get_arm(arm).supports(shape, "sm90")
            if reason is not None:
                us[arm] = float("nan")
                continue
            t(arm, get_arm(arm).prepare(q, k, v, shape, out=out, lse=None, arch="sm90"))
        rows.append((f"{hq}/{hkv}", d, dname, f"{qo}x{kv}", us))
        del q, k, v, out
        torch.cuda.empty_cache()
    head = f"{'heads':<6}{'d':>4} {'dtype':<5} {'shape':<12}"
    head += "".join(f"{a:>11}" for a in ("fa3", *ARMS))
    head += f"{'cudnn/gl':>9}{'cudnn/tr':>9}{'fa3/gl':>8}{'fa3/tr':>8}"
    print(head)
    for heads, d, dname, tag, us in rows:
        nan = float("nan")
        fa3, gl, tr, cu = (us.get(a, nan) for a in ("fa3", *ARMS))
        line = f"{heads:<6}{d:>4} {dname:<5} {tag:<12}"
        line += "".join(f"{x:11.2f}" for x in (fa3, gl, tr, cu))
        line += f"{cu / gl:9.3f}{cu / tr:9.3f}{fa3 / gl:8.3f}{fa3 / tr:8.3f}"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
