"""The Gluon kernel on the H200: a correctness grid, then timing beside Triton, FlashInfer FA3, cuDNN.

Run through ``validate/tools/peer_session.sh`` (it installs FlashInfer from ``.peers/``)::

    bash validate/tools/peer_session.sh validate/tools/gluon_session.py [--variants n128s2pp,n64s3pp]

1. FlashInfer's modules built in one ninja, or restored from ``.peers/fi-jit-sm90.tar.xz``;
   packed into ``$OUT/fi-jit-sm90.tar.xz`` for the next session (skipped, and the fa3 arm
   left out, where flashinfer is not importable).
2. Every Gluon variant against the f32 reference (output and LSE) on a grid of tails, causal
   and not, GQA, qo_len > kv_len (rows with no key: 0 and lse -inf), kv_len >> qo_len, head_dim
   64, f16, batch 2 and the chunked goal call. A variant that fails is not timed.
3. One process, one engine (``tether.bench.engine.measure``: warm-up, interleaved shuffled
   rounds, CUDA-graph replay, medians): the Gluon variants, tether's Triton arm,
   ``flashinfer_fa3`` and ``sdpa_cudnn`` on the chunked 2048 x 16384 call and the square
   calls 4096, 8192, 16384 (batch 1, 32/8 heads, d128, bf16, causal bottom-right).
4. A table (rates from the exact attended-pair count, ratios to fa3) and
   ``$OUT/gluon_session.json``. These are session numbers for the lead to read, not store runs.

A stall watchdog (no progress for ``--stall-s``) writes what it has and exits 3: a kernel
that deadlocks on its mbarriers ends the session with a record of which call hung.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

OUT = Path(os.environ.get("OUT", "/tmp/peer-out"))
REPORT: dict[str, Any] = {"steps": [], "check": [], "timing": []}
_progress = {"t": time.monotonic(), "what": "start"}


def step(what: str) -> None:
    _progress["t"], _progress["what"] = time.monotonic(), what
    REPORT["steps"].append(what)
    print(f"gluon_session: {what}", file=sys.stderr, flush=True)


def dump() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "gluon_session.json").write_text(json.dumps(REPORT, indent=1, default=str) + "\n")


def watchdog(stall_s: float) -> None:
    def run() -> None:
        while True:
            time.sleep(2.0)
            if time.monotonic() - _progress["t"] > stall_s:
                REPORT["stalled"] = f"no progress for {stall_s:.0f} s during: {_progress['what']}"
                print(f"gluon_session: STALLED: {REPORT['stalled']}", file=sys.stderr, flush=True)
                dump()
                os._exit(3)

    threading.Thread(target=run, daemon=True).start()


# (batch, qo_len, kv_len, hq, hkv, head_dim, dtype, causal, every variant?)
GRID = (
    (1, 128, 128, 2, 2, 128, "bf16", True, True),
    (1, 200, 333, 4, 2, 128, "bf16", True, True),
    (1, 333, 200, 4, 1, 128, "bf16", True, True),  # qo > kv: the first rows see no key
    (1, 200, 333, 4, 2, 128, "bf16", False, True),
    (2, 190, 190, 8, 2, 128, "bf16", True, True),
    (1, 64, 4096, 8, 1, 128, "bf16", True, True),  # kv >> qo
    (1, 1000, 1000, 8, 8, 128, "f16", True, False),
    (1, 777, 1500, 4, 2, 64, "bf16", True, False),
    (1, 2048, 16384, 32, 8, 128, "bf16", True, False),
)


def check_variant(name: str, cfg: Any, shape_row: tuple) -> dict[str, Any]:
    import torch
    from tether_kernels import Shape
    from tether_kernels.arms import attention_ref, get_arm
    from tether_kernels.gluon.arm import prepare_gluon

    from validate.correctness._helpers import (
        ABS_EPS,
        make_qkv,
        max_err,
        rounding_bound,
        score_eps,
    )

    b, qo, kv, hq, hkv, d, dtype, causal, _ = shape_row
    shape = Shape(b, qo, kv, hq, hkv, d, dtype, causal)
    q, k, v = make_qkv(shape, seed=qo * 31 + kv)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((b, hq, qo), float("nan"), device=q.device)
    step(f"check {name} {shape.key()}")
    prepare_gluon(cfg)(q, k, v, shape, out, lse, "sm90")()
    torch.cuda.synchronize()
    ref, ref_lse = attention_ref(q, k, v, causal, return_lse=True)
    # Math SDPA gives NaN for rows that see no key (the reference gives 0): those rows are
    # judged by the LSE and finiteness checks below, not by the baseline's error.
    base = get_arm("sdpa_math").prepare(q, k, v, shape, arch="sm90")().nan_to_num(0.0)
    tol = (
        2 * max(max_err(base, ref), rounding_bound(q, k, v, causal)) + ABS_EPS + score_eps(q, k, v)
    )
    err = max_err(out, ref) if torch.isfinite(out).all() else math.inf
    seen = torch.isfinite(ref_lse)
    lse_err = (lse[seen] - ref_lse[seen]).abs().max().item() if seen.any() else 0.0
    empty_ok = bool((lse[~seen] == -math.inf).all())
    row = {
        "variant": name,
        "shape": shape.key(),
        "err": err,
        "tol": tol,
        "lse_err": lse_err,
        "empty_rows_ok": empty_ok,
    }
    row["ok"] = err <= tol and lse_err < 1e-2 and empty_ok
    return row


TIMED = (
    ("chunk 2048x16384", 2048, 16384),
    ("square 4096", 4096, 4096),
    ("square 8192", 8192, 8192),
    ("square 16384", 16384, 16384),
)


def time_shapes(variants: dict[str, Any], peers_ok: bool, cap_s: float) -> None:
    import torch
    from tether.bench.engine import TimingPolicy, measure
    from tether_kernels import Shape, flops
    from tether_kernels.arms import get_arm
    from tether_kernels.gluon.arm import prepare_gluon

    policy = TimingPolicy(min_reps=7, max_reps=40, cell_cap_s=cap_s, buffer_sets=1)
    for i, (label, qo, kv) in enumerate(TIMED):
        shape = Shape(1, qo, kv, 32, 8, 128, "bf16", True)
        gen = torch.Generator(device="cuda").manual_seed(i)
        q = torch.randn(1, qo, 32, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(1, kv, 8, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(1, kv, 8, 128, device="cuda", dtype=torch.bfloat16, generator=gen)
        fns: dict[str, Any] = {}
        for arm in ("triton", "sdpa_cudnn", *(("flashinfer_fa3",) if peers_ok else ())):
            step(f"prepare {arm} {label}")
            fns[arm] = get_arm(arm).prepare(q, k, v, shape, out=torch.empty_like(q), arch="sm90")
        for name, cfg in variants.items():
            step(f"prepare gluon:{name} {label}")
            fns[f"gluon:{name}"] = prepare_gluon(cfg)(q, k, v, shape, torch.empty_like(q), None,
                                                      "sm90")  # fmt: skip
        step(f"time {label}: {', '.join(fns)}")
        timing = measure(fns, policy, device="cuda", seed=i)
        work = flops(shape)
        med = {role: statistics.median(s) for role, s in timing.samples.items()}
        REPORT["timing"].append(
            {
                "shape": label,
                "key": shape.key(),
                "flops": work,
                "median_s": med,
                "tflops": {r: work / t / 1e12 for r, t in med.items()},
                "spread": timing.extra.get("spread"),
                "reps": timing.extra.get("reps"),
                "sampler": timing.extra.get("sampler"),
                "clock_mhz": timing.extra.get("clock_mhz"),
                "flags": timing.flags,
            }
        )
        dump()
        del fns, q, k, v
        torch.cuda.empty_cache()


def print_tables() -> None:
    rows = REPORT["check"]
    bad = [r for r in rows if not r["ok"]]
    print(f"correctness: {len(rows) - len(bad)} of {len(rows)} cases within tolerance")
    for r in bad:
        s = r["shape"]
        print(f"  FAIL {r['variant']} {s}: err {r['err']:.2e} tol {r['tol']:.2e} "
              f"lse_err {r['lse_err']:.2e} empty_rows_ok {r['empty_rows_ok']}")  # fmt: skip
    for cell in REPORT["timing"]:
        tf = cell["tflops"]
        ref = tf.get("flashinfer_fa3")
        print(f"\n{cell['shape']} (bf16, 32/8, d128, causal; TFLOP/s, x fa3; clock "
              f"{cell['clock_mhz']})")  # fmt: skip
        for role in sorted(tf, key=lambda r: -tf[r]):
            ratio = f"{tf[role] / ref:.3f}" if ref else "-"
            print(f"  {role:<18} {tf[role]:8.1f}  {ratio:>6}  spread {cell['spread'][role]:.4f}")


def main(argv: list[str] | None = None) -> int:
    from tether_kernels.gluon.launch import VARIANTS

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated names")
    ap.add_argument("--cap-s", type=float, default=8.0, help="per-shape sampling cap")
    ap.add_argument("--stall-s", type=float, default=150.0, help="watchdog: max quiet time")
    ap.add_argument("--skip-build", action="store_true", help="leave FlashInfer out")
    args = ap.parse_args(argv)
    names = [n for n in args.variants.split(",") if n]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown:
        ap.error(f"unknown variants {unknown}; known: {', '.join(VARIANTS)}")
    OUT.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    # The FlashInfer build is quiet for up to about two minutes: the watchdog allows it.
    watchdog(args.stall_s)
    import torch
    import triton

    REPORT["env"] = {"torch": torch.__version__, "triton": triton.__version__,
                     "device": torch.cuda.get_device_name()}  # fmt: skip
    peers_ok = False
    if not args.skip_build:
        from tether_kernels.peers import flashinfer_missing

        missing = flashinfer_missing()
        if missing is None:
            from validate.tools.peer_session import build_modules

            step("FlashInfer modules: build or restore")
            try:
                REPORT["flashinfer_build"] = build_modules(OUT)
                peers_ok = True
            except Exception as exc:  # recorded and shown; the Gluon checks still run
                REPORT["flashinfer_build"] = {"error": traceback.format_exc()[-2000:]}
                print(f"gluon_session: FlashInfer build failed: {exc!r}", file=sys.stderr)
        else:
            REPORT["flashinfer_build"] = {"skipped": missing}
    passed: dict[str, Any] = {}
    for name in names:
        ok = True
        for row in GRID:
            if not row[-1] and name != names[0]:
                continue  # the wide cases run for the first variant named only
            try:
                res = check_variant(name, VARIANTS[name], row)
            except Exception as exc:  # a variant that cannot run is a failed case, recorded
                res = {"variant": name, "shape": row, "ok": False, "err": math.inf,
                       "tol": 0.0, "lse_err": math.inf, "empty_rows_ok": False,
                       "error": f"{exc!r}"[:500]}  # fmt: skip
            REPORT["check"].append(res)
            ok = ok and res["ok"]
            dump()
        if ok:
            passed[name] = VARIANTS[name]
        torch.cuda.empty_cache()
    REPORT["timed_variants"] = sorted(passed)
    time_shapes(passed, peers_ok, args.cap_s)
    REPORT["elapsed_s"] = round(time.monotonic() - t0, 1)
    step("done")
    dump()
    print_tables()
    print(f"\ngluon_session: {REPORT['elapsed_s']} s; $OUT/gluon_session.json written")
    return 0 if all(r["ok"] for r in REPORT["check"]) else 1


if __name__ == "__main__":
    sys.exit(main())
