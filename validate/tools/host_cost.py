"""Where an eager entry-point call's host time goes, on a GPU (a diagnostic; writes no run).

    python3 -m validate.tools.host_cost [--calls 200] [--reps 7]

Times the host time to issue ``calls`` calls (device drained before, not counted after, as the
bench's ``host`` sampler does) of the public entry point, of FlashInfer's fa3 as a serving stack
calls it, and of the pieces of tether's per-call path, and prints one table of microseconds per
call (the median of ``reps`` repetitions). The store's evidence is the ``api-host-fa3`` sweep;
this says what to shorten.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from tether_kernels import prefill, single_prefill
from tether_kernels.arms import _OnlyBackend, _sdpa_kwargs
from torch.nn.attention import SDPBackend, sdpa_kernel


def host_us(fn: Callable[[], object], calls: int, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(out)


def _shape(qo: int, kv: int, rows: list[tuple[str, str, float]], calls: int, reps: int,
           flashinfer: object) -> None:  # fmt: skip
    dev = torch.device("cuda")
    tag = f"{qo}x{kv}"
    q = torch.randn(qo, 32, 128, device=dev, dtype=torch.bfloat16)
    k = torch.randn(kv, 8, 128, device=dev, dtype=torch.bfloat16)
    v = torch.randn(kv, 8, 128, device=dev, dtype=torch.bfloat16)

    def t(name: str, fn: Callable[[], object]) -> None:
        try:
            rows.append((tag, name, host_us(fn, calls, reps)))
        except Exception as exc:  # a diagnostic: say what failed and go on
            rows.append((tag, f"{name} FAILED {type(exc).__name__}: {exc}"[:90], float("nan")))

    t("single_prefill", lambda: single_prefill(q, k, v, causal=True))
    plan = prefill._PLANS[prefill._key("single_prefill", q, k, v, True, None, False, None)]
    rows.append((tag, f"  routed to {plan.arm}", float("nan")))
    if flashinfer is not None:
        t("fa3", lambda: flashinfer.single_prefill_with_kv_cache(
            q, k, v, causal=True, kv_layout="NHD", backend="fa3"))  # fmt: skip
    t("  _key", lambda: prefill._key("single_prefill", q, k, v, True, None, False, None))
    q4, k4, v4 = q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)
    t("  unsqueeze x3", lambda: (q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0)))
    t("  empty_like", lambda: torch.empty_like(q4))
    t("  plan(q,k,v)", lambda: plan(q4, k4, v4))
    if plan.arm == "gluon":
        from tether_kernels.gluon.launch import GluonPlan
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        gp = GluonPlan((1, qo, kv, 32, 8, 128), torch.bfloat16, dev, causal=True)
        out = torch.empty_like(q4)
        gp.launch(q4, k4, v4, out)  # the first launch, through the JIT
        t("  GluonPlan.launch (direct)", lambda: gp.launch(q4, k4, v4, out))

        (w, q_lay, kv_lay), qm, kn = gp.parts[0], 64, gp.config.block_n  # head_dim 128: one part

        def jit() -> None:
            d = [TensorDescriptor(x.view(dims), dims, [dims[1], 1], blk, lay)
                 for x, dims, blk, lay in ((q4, gp.q_dims, [qm, w], q_lay),
                                           (k4, gp.kv_dims, [kn, w], kv_lay),
                                           (v4, gp.kv_dims, [kn, w], kv_lay))]  # fmt: skip
            gp.kernel._fn[gp.kernel._grid](
                *d, None, None, None, out, gp.no_lse, *gp.consts, out.stride(0), out.stride(1),
                out.stride(2), **gp.kernel._meta)  # fmt: skip

        t("  gluon via the JIT (before)", jit)
        t("  3 TensorDescriptor", lambda: [TensorDescriptor(
            q4.view(gp.q_dims), gp.q_dims, [gp.q_dims[1], 1], [qm, w], q_lay)
            for _ in range(3)])  # fmt: skip
    else:
        qt, kt, vt = (x.transpose(1, 2) for x in (q4, k4, v4))
        from tether_kernels.shapes import Shape

        s = Shape(1, qo, kv, 32, 8, 128, "bf16", True)
        kw = _sdpa_kwargs(s, dev, "additive", None)

        def with_cm() -> object:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(qt, kt, vt, **kw)

        only = _OnlyBackend("CUDNN_ATTENTION")
        t("  cudnn sdpa, sdpa_kernel cm (before)", with_cm)
        t("  cudnn sdpa, _OnlyBackend", lambda: only.call(
            F.scaled_dot_product_attention, qt, kt, vt, **kw))  # fmt: skip

        def cm_alone() -> None:
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                pass

        t("  sdpa_kernel cm alone", cm_alone)
        t("  F.sdpa unforced", lambda: F.scaled_dot_product_attention(qt, kt, vt, **kw))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    rows: list[tuple[str, str, float]] = []
    try:
        import flashinfer
    except ImportError:
        flashinfer = None
    for qo, kv in ((128, 128), (1024, 1024), (256, 4096)):
        _shape(qo, kv, rows, a.calls, a.reps, flashinfer)
    print(f"{'shape':<10} {'what':<48} {'us/call':>8}")
    for tag, name, us in rows:
        print(f"{tag:<10} {name:<48} {us:8.1f}")


if __name__ == "__main__":
    main()
