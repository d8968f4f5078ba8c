"""Issue 7: time candidate launch configs of the Triton arm on Hopper against SDPA.

Run once on the H200 (tether installed with ``pip install --no-deps --no-build-isolation -e .``)::

    python3 validate/tune_sm90.py --out /path/to/tune-sm90.json [--grid schedule|v1]

For each candidate LaunchConfig the script first checks the output on a small shape in each
dtype against the f32 reference (the suite's rule: at most twice the error of math SDPA in
the same dtype); a config that fails to compile or is wrong is recorded with the reason and
not timed. Three grids:

- ``rescale`` (default, round v5): the v4 winner (two heads per program, longest first) and
  its neighbours, each with and without skipping the tile's rescale, on square calls from
  1K to 16K and the chunked call; timed as ``schedule`` is.
- ``schedule`` (round v4): the v3 tiles and neighbours, each with and without two
  query heads per program and longest-first launch order, on square causal bf16 d128 GQA
  32/8 at 4K, 8K and 16K and the chunked call (qo 2K x kv 16K). Each shape is timed by
  tether's engine exactly as a sweep times a cell (graph replay, interleaved, warmed)
  against the reference arm the goal names (cuDNN for square calls, flash for chunked
  ones) and an A/A twin of it, so the ratios are the sweep's ratios.
- ``v1`` (the 2026-11-29 round): block sizes, warps, stages, TMA and warp specialization,
  timed with ``triton.testing.do_bench`` (median, L2 flushed between calls) against cuDNN
  on the square shapes.

A table (TFLOP/s per shape from ``tether_kernels.flops``, ratio against the reference) is
printed last and everything is written as JSON to ``--out``. ``--budget-s`` caps the whole
run: configs left when it runs out are recorded as not run.

``--tiny`` runs toy shapes and a few small configs on the CPU under ``TRITON_INTERPRET=1``
(f16 only: the interpreter's bf16 dot is wrong), timed with a wall clock; the reference is
recorded as unavailable there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tether.errors import ArmUnavailableError
from tether_kernels import Shape, flops
from tether_kernels.arch_caps import LaunchConfig, detect_arch, launch_config

ROOT = Path(__file__).resolve().parents[1]
SMEM_LIMIT_SM90 = 227 * 1024  # bytes of shared memory one block may use on sm90


@dataclass(frozen=True)
class Candidate:
    """One launch config under test and its short name (``m128n64w8s3+tma``)."""

    name: str
    config: LaunchConfig


def config_name(c: LaunchConfig) -> str:
    opts = ("+tma" if c.use_tma else "") + ("+ws" if c.warp_specialize else "")
    opts += ("+h2" if c.heads_per_program == 2 else "") + ("+lf" if c.longest_first else "")
    opts += "+sk" if c.skip_rescale else ""
    return f"m{c.block_m}n{c.block_n}w{c.num_warps}s{c.num_stages}{opts}"


def smem_estimate(c: LaunchConfig, head_dim: int, elem_bytes: int) -> int:
    """Shared memory the config needs: the Q tile(s) plus one K and one V tile per stage."""
    q_rows = c.block_m * c.heads_per_program
    return (q_rows + 2 * c.block_n * c.num_stages) * head_dim * elem_bytes


# Each round's baseline is the default of its day, kept here so that a grid means the same
# candidates after the default moves on.
V1_DEFAULT = LaunchConfig(128, 64, 8, 3)
V3_LONG = LaunchConfig(128, 128, 8, 3)
V3_SHORT = LaunchConfig(64, 64, 4, 3)


def sm90_candidates(head_dim: int = 128, elem_bytes: int = 2) -> list[Candidate]:
    """BLOCK_M {64,128} x BLOCK_N {64,128} x warps {4,8} x stages {2,3,4}, pruned, plus options.

    Pruned: 8 warps on 64 rows (two warpgroups share one 64-row MMA tile) and whatever does
    not fit shared memory. The TMA and warp-specialize variants are added on the v1
    default and on the 128 x 128 tile.
    """
    grid: list[LaunchConfig] = []
    for bm in (64, 128):
        for bn in (64, 128):
            for warps in (4, 8):
                if bm == 64 and warps == 8:
                    continue
                for stages in (2, 3, 4):
                    c = LaunchConfig(bm, bn, warps, stages)
                    if smem_estimate(c, head_dim, elem_bytes) <= SMEM_LIMIT_SM90:
                        grid.append(c)
    default = V1_DEFAULT
    big = LaunchConfig(128, 128, 8, 2)
    extras = [
        LaunchConfig(default.block_m, default.block_n, default.num_warps, default.num_stages, **o)
        for o in ({"use_tma": True}, {"warp_specialize": True}, {"use_tma": True, "warp_specialize": True})
    ] + [
        LaunchConfig(big.block_m, big.block_n, big.num_warps, big.num_stages, use_tma=True),
        LaunchConfig(big.block_m, big.block_n, big.num_warps, big.num_stages, use_tma=True, warp_specialize=True),
    ]  # fmt: skip
    seen: list[LaunchConfig] = []
    for c in [default, *grid, *extras]:  # the default first: it is the baseline of the table
        if c not in seen:
            seen.append(c)
    return [Candidate(config_name(c), c) for c in seen]


def sm90_schedule_candidates(head_dim: int = 128, elem_bytes: int = 2) -> list[Candidate]:
    """Round v4: the v3 tiles and their neighbours, each with and without two heads per
    program and longest-first launch order (kernels/NOTES.md), pruned to what fits."""
    tiles = [
        V3_LONG,
        V3_SHORT,
        LaunchConfig(128, 64, 8, 3),
        LaunchConfig(128, 64, 8, 2),
        LaunchConfig(64, 128, 4, 3),
    ]
    seen: list[LaunchConfig] = []
    for t in tiles:
        for heads in (1, 2):
            for lf in (False, True):
                c = LaunchConfig(
                    t.block_m, t.block_n, t.num_warps, t.num_stages,
                    heads_per_program=heads, longest_first=lf,
                )  # fmt: skip
                if smem_estimate(c, head_dim, elem_bytes) <= SMEM_LIMIT_SM90 and c not in seen:
                    seen.append(c)
    return [Candidate(config_name(c), c) for c in seen]


def sm90_rescale_candidates(head_dim: int = 128, elem_bytes: int = 2) -> list[Candidate]:
    """Round v5: the v4 winner (two heads, longest first) and its neighbours in stages and
    key-tile size, each with and without skipping the tile's rescale; the one-head tiles
    with longest first for the short calls (kernels/NOTES.md)."""
    base = [
        LaunchConfig(128, 64, 8, 3, heads_per_program=2, longest_first=True),
        LaunchConfig(128, 64, 8, 4, heads_per_program=2, longest_first=True),
        LaunchConfig(128, 128, 8, 2, heads_per_program=2, longest_first=True),
        LaunchConfig(128, 128, 8, 3, longest_first=True),
        LaunchConfig(64, 64, 4, 3, longest_first=True),
    ]
    seen: list[LaunchConfig] = [V3_LONG]
    for c in base:
        for skip in (False, True):
            c2 = dataclasses.replace(c, skip_rescale=skip)
            if smem_estimate(c2, head_dim, elem_bytes) <= SMEM_LIMIT_SM90 and c2 not in seen:
                seen.append(c2)
    return [Candidate(config_name(c), c) for c in seen]


def tiny_candidates() -> list[Candidate]:
    """Small blocks for the interpreter, one per kernel option."""
    configs = [
        launch_config("cpu", 32, "f16"),
        LaunchConfig(32, 16, 4, 1, use_tma=True),
        LaunchConfig(16, 32, 4, 1, warp_specialize=True),
        LaunchConfig(32, 32, 4, 1, use_tma=True, warp_specialize=True),
        LaunchConfig(16, 16, 4, 1, heads_per_program=2, longest_first=True),
        LaunchConfig(16, 16, 4, 1, heads_per_program=2, skip_rescale=True),
    ]
    return [Candidate(config_name(c), c) for c in configs]


def shape_id(s: Shape) -> str:
    kind = "square" if s.qo_len == s.kv_len else "chunked"
    return f"{kind}-{s.qo_len}x{s.kv_len}-{s.dtype}"


def timed_shapes(tiny: bool, grid: str = "v1") -> list[Shape]:
    if tiny:
        base = Shape(1, 32, 32, 2, 1, 32, "f16", True)
        return [base, base.with_(qo_len=16, kv_len=48)]
    base = Shape(1, 4096, 4096, 32, 8, 128, "bf16", True)
    if grid == "rescale":
        # v5 adds the short calls, where the short-call config is decided.
        return [
            base.with_(qo_len=1024, kv_len=1024),
            base.with_(qo_len=2048, kv_len=2048),
            base,
            base.with_(qo_len=8192, kv_len=8192),
            base.with_(qo_len=16384, kv_len=16384),
            base.with_(qo_len=2048, kv_len=16384),
        ]
    if grid == "schedule":
        # The square goal's range (4K to 16K) and the chunked goal's 16K-key call.
        return [
            base,
            base.with_(qo_len=8192, kv_len=8192),
            base.with_(qo_len=16384, kv_len=16384),
            base.with_(qo_len=2048, kv_len=16384),
        ]
    return [
        base,
        base.with_(qo_len=16384, kv_len=16384),
        base.with_(qo_len=2048, kv_len=16384),
        base.with_(qo_len=2048, kv_len=16384, dtype="f16"),
    ]


def check_shapes(shapes: list[Shape], tiny: bool) -> list[Shape]:
    """Small shapes with tails and a chunked offset, one pair per dtype of the timed shapes.

    Heads and head_dim match the timed shapes and the GPU lengths are multiples of 16, so
    the check compiles the same specialization that is then timed (one compile per dtype).
    """
    out: list[Shape] = []
    s0 = shapes[0]
    for dtype in sorted({s.dtype for s in shapes}):
        if tiny:
            square = Shape(1, 40, 40, s0.hq, s0.hkv, s0.head_dim, dtype, True)
            out += [square, square.with_(qo_len=24, kv_len=72)]
        else:
            square = Shape(1, 400, 400, s0.hq, s0.hkv, s0.head_dim, dtype, True)
            out += [square, square.with_(qo_len=208, kv_len=528)]
    return out


def make_inputs(shape: Shape, device: str, seed: int = 0):
    import torch
    from tether_kernels.arms import torch_dtype

    gen = torch.Generator(device="cpu").manual_seed(seed)
    dims_q = (shape.batch, shape.qo_len, shape.hq, shape.head_dim)
    dims_kv = (shape.batch, shape.kv_len, shape.hkv, shape.head_dim)
    dtype = torch_dtype(shape.dtype)
    return tuple(
        torch.randn(*dims, generator=gen).to(device=device, dtype=dtype)
        for dims in (dims_q, dims_kv, dims_kv)
    )


def check_config(c: LaunchConfig, shape: Shape, arch: str, device: str) -> dict[str, Any]:
    """Max error of ``c`` against the f32 reference, and the tolerance (STYLE.md 6)."""
    import torch
    from tether_kernels.arms import attention_ref, get_arm
    from tether_kernels.triton.attn_fwd import attn_fwd_launcher

    q, k, v = make_inputs(shape, device, seed=shape.qo_len * 7919 + shape.kv_len)
    out = torch.full_like(q, float("nan"))
    launch = attn_fwd_launcher(q, k, v, out, c, causal=shape.causal)
    launch()
    base = get_arm("sdpa_math").prepare(q, k, v, shape, arch=arch)()
    ref = attention_ref(q, k, v, shape.causal)
    err = (out.float() - ref).abs().max().item()
    base_err = (base.float() - ref).abs().max().item()
    s_max = torch.einsum(
        "bmhd,bnhd->bhmn", q.float(), k.float().repeat_interleave(shape.group, dim=2)
    ).abs().max().item() * shape.head_dim**-0.5 * 1.4426950408889634  # fmt: skip
    eps = 2 * torch.finfo(torch.float32).eps * s_max * v.float().abs().max().item()
    tol = 2 * base_err + 1e-6 + eps
    ok = bool(torch.isfinite(out).all().item()) and err <= tol
    return {
        "shape": shape.key(),
        "err": err,
        "tol": tol,
        "ok": ok,
        "use_tma": launch.use_tma,
        "tma_fallback": launch.tma_fallback,
    }


def bench(fn, tiny: bool, warmup_ms: int, rep_ms: int) -> float:
    """Median milliseconds of one call: do_bench on a GPU, a wall clock in the interpreter."""
    if tiny:
        fn()
        samples = []
        for _ in range(2):
            t0 = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(samples)
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))


def engine_ratio(ref_fn, fn, cap_s: float) -> dict[str, Any]:
    """Time ``fn`` against ``ref_fn`` the way a sweep does: tether's engine, graph replay,
    interleaved, with an A/A twin of the reference; ms per call and both ratios."""
    from tether.bench.engine import TimingPolicy, measure

    policy = TimingPolicy(cell_cap_s=cap_s, max_reps=40)
    timing = measure({"A": ref_fn, "A2": ref_fn, "B": fn}, policy, device="cuda")
    med = {role: statistics.median(xs) for role, xs in timing.samples.items()}
    return {
        "median_ms": med["B"] * 1e3,
        "ref_ms": med["A"] * 1e3,
        "ratio_vs_ref": med["A"] / med["B"],
        "aa_ratio": med["A"] / med["A2"],
        "flags": list(timing.flags),
    }


def tflops(shape: Shape, ms: float) -> float:
    return flops(shape) / (ms * 1e-3) / 1e12


def provenance() -> dict[str, Any]:
    import torch
    import triton
    from tether.store.provenance import git_state, kernels_fingerprint

    sha, dirty = git_state(ROOT)
    dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    return {
        "git_sha": sha,
        "git_dirty": dirty,
        "kernels_fingerprint": kernels_fingerprint(ROOT),
        "host": platform.node(),
        "device": dev,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def reference_arm(s: Shape) -> str:
    """The SDPA arm a shape's goal names: cuDNN for square calls, flash for chunked ones
    (cuDNN builds the bottom-right mask inside a chunked call; see chunked-prefill-cudnn)."""
    return "sdpa_cudnn" if s.qo_len == s.kv_len else "sdpa_flash"


def time_reference(shapes, inputs, arch, tiny, warmup_ms, rep_ms, fns=None) -> dict[str, Any]:
    """The reference arm per shape (``reference_arm``); the reason where it cannot run.

    With ``fns`` (a dict), the prepared reference calls are put there by shape id for the
    engine timer, and nothing is timed here.
    """
    from tether_kernels.arms import get_arm

    ref: dict[str, Any] = {}
    for s in shapes:
        sid, arm = shape_id(s), reference_arm(s)
        if fns is None and s.qo_len != s.kv_len:
            continue  # the do_bench table compares square shapes with cuDNN only
        try:
            fn = get_arm(arm).prepare(*inputs[sid], s, arch=arch)
        except ArmUnavailableError as exc:
            ref[sid] = {"arm": arm, "unavailable": str(exc)}
            continue
        if fns is not None:
            fns[sid] = fn
            ref[sid] = {"arm": arm}
            continue
        ms = bench(fn, tiny, warmup_ms, rep_ms)
        ref[sid] = {"arm": arm, "median_ms": ms, "tflops": tflops(s, ms)}
    return ref


def run_candidate(
    cand, shapes, checks, inputs, ref, arch, device, args, ref_fns=None
) -> dict[str, Any]:
    import torch
    from tether_kernels.triton.attn_fwd import DEFAULT_MARGIN, attn_fwd_launcher

    rec: dict[str, Any] = {"name": cand.name, "config": asdict(cand.config), "results": {}}
    try:
        rec["checks"] = [check_config(cand.config, s, arch, device) for s in checks]
    except Exception as exc:  # recorded with its reason and printed, never skipped silently
        rec["status"], rec["reason"] = "failed", f"{type(exc).__name__}: {str(exc)[:400]}"
        return rec
    bad = [c for c in rec["checks"] if not c["ok"]]
    if bad:
        rec["status"] = "wrong"
        rec["reason"] = f"err {bad[0]['err']:.3e} > tol {bad[0]['tol']:.3e} at {bad[0]['shape']}"
        return rec
    fallback = next((c["tma_fallback"] for c in rec["checks"] if c["tma_fallback"]), None)
    if fallback:
        rec["status"], rec["reason"] = "tma_fallback", fallback
        return rec
    for s in shapes:
        sid = shape_id(s)
        q, k, v = inputs[sid]
        out = torch.empty_like(q)
        fn = attn_fwd_launcher(q, k, v, out, cand.config, causal=s.causal, margin=DEFAULT_MARGIN)
        rec["heads_per_program"] = fn.heads_per_program
        ref_fn = (ref_fns or {}).get(sid)
        if ref_fn is not None:
            row: dict[str, Any] = engine_ratio(ref_fn, fn, args.cell_cap_s)
            row["tflops"] = tflops(s, row["median_ms"])  # ratio_vs_ref above 1: faster
        else:
            ms = bench(fn, args.tiny, args.warmup_ms, args.rep_ms)
            row = {"median_ms": ms, "tflops": tflops(s, ms)}
            if "median_ms" in ref.get(sid, {}):
                row["ratio_vs_cudnn"] = ref[sid]["median_ms"] / ms  # above 1: faster than cuDNN
        rec["results"][sid] = row
    rec["status"] = "ok"
    return rec


def print_table(report: dict[str, Any], out=sys.stdout) -> None:
    sids = [shape_id(Shape(**s)) for s in report["shapes"]]
    head = ["config", "status", *sids]
    rows = [head]
    ref_row = ["reference", "ref"]
    for sid in sids:
        r = report["reference"].get(sid)
        if r is None:
            ref_row.append("-")
        else:
            ref_row.append(r["arm"] + (f" {r['tflops']:.4g}" if "tflops" in r else ""))
    rows.append(ref_row)
    for rec in report["configs"]:
        row = [rec["name"] + (" *" if rec.get("is_default") else ""), rec["status"]]
        for sid in sids:
            r = rec.get("results", {}).get(sid)
            ratio = None if r is None else r.get("ratio_vs_ref", r.get("ratio_vs_cudnn"))
            if r is None:
                row.append("-")
            elif ratio is not None:
                row.append(f"{r['tflops']:.4g} ({ratio:.3f}x)")
            else:
                row.append(f"{r['tflops']:.4g}")
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    for r in rows:
        print(
            "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip(), file=out
        )
    print(
        "TFLOP/s per shape; (ratio) = reference time / config time; * = current default",
        file=out,
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file to write")
    ap.add_argument("--tiny", action="store_true", help="toy shapes (CPU, TRITON_INTERPRET=1)")
    ap.add_argument("--budget-s", type=float, default=170.0, help="cap on the whole run")
    ap.add_argument("--warmup-ms", type=int, default=25)
    ap.add_argument("--rep-ms", type=int, default=100)
    ap.add_argument("--only", default="", help="comma-separated config names to run")
    ap.add_argument(
        "--grid",
        choices=("v1", "schedule", "rescale"),
        default="rescale",
        help="v1: tiles, stages, TMA and warp specialization (do_bench, the 2026-11-29 run); "
        "schedule (v4): heads per program and launch order on the v3 tiles; rescale (v5): "
        "skipping the tile's rescale on the v4 winner and its neighbours, 1K to 16K; both "
        "timed by tether's engine against the reference arm as a sweep times it",
    )
    ap.add_argument("--cell-cap-s", type=float, default=2.0, help="engine time cap per shape")
    args = ap.parse_args(argv)
    t_start = time.monotonic()

    import torch

    arch = detect_arch()
    if args.tiny:
        device = "cuda" if arch != "cpu" else "cpu"
    elif arch == "cpu":
        print("tune_sm90: no GPU; use --tiny for the interpreter", file=sys.stderr)
        return 2
    else:
        device = "cuda"
    if not args.tiny and arch != "sm90":
        print(f"tune_sm90: note: running on {arch}, not sm90", file=sys.stderr)
    shapes = timed_shapes(args.tiny, args.grid)
    checks = check_shapes(shapes, args.tiny)
    if args.tiny:
        cands = tiny_candidates()
    else:
        cands = {
            "v1": sm90_candidates,
            "schedule": sm90_schedule_candidates,
            "rescale": sm90_rescale_candidates,
        }[args.grid]()
    if args.only:
        keep = set(args.only.split(","))
        cands = [c for c in cands if c.name in keep]
    default = launch_config(arch, shapes[0].head_dim, shapes[0].dtype)

    inputs = {shape_id(s): make_inputs(s, device) for s in shapes}
    # The engine needs CUDA graphs; the interpreter keeps the wall-clock timer.
    engine = args.grid != "v1" and not args.tiny
    ref_fns: dict[str, Any] | None = {} if engine else None
    ref = time_reference(shapes, inputs, arch, args.tiny, args.warmup_ms, args.rep_ms, ref_fns)
    report: dict[str, Any] = {
        "schema": "tether.tune/1",
        "name": "tune-sm90",
        "tiny": args.tiny,
        "arch": arch,
        "provenance": provenance(),
        "timing": (
            {"timer": "engine", "cell_cap_s": args.cell_cap_s, "stat": "median"}
            if engine
            else {
                "timer": "do_bench",
                "warmup_ms": args.warmup_ms,
                "rep_ms": args.rep_ms,
                "stat": "median",
            }
        ),
        "grid": args.grid,
        "margin": "deferred",
        "shapes": [s.key() for s in shapes],
        "reference": ref,
        "configs": [],
    }
    for i, cand in enumerate(cands):
        elapsed = time.monotonic() - t_start
        if elapsed > args.budget_s:
            rec = {"name": cand.name, "config": asdict(cand.config), "status": "not_run"}
            rec["reason"] = f"budget of {args.budget_s:.0f} s spent before this config"
        else:
            rec = run_candidate(cand, shapes, checks, inputs, ref, arch, device, args, ref_fns)
        rec["is_default"] = cand.config == default
        rec["seconds"] = round(time.monotonic() - t_start - elapsed, 2)
        report["configs"].append(rec)
        print(f"[{i + 1}/{len(cands)}] {cand.name}: {rec['status']}", file=sys.stderr)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    report["seconds"] = round(time.monotonic() - t_start, 2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(args.out)
    for rec in report["configs"]:
        if rec["status"] not in ("ok",):
            print(f"{rec['name']}: {rec['status']}: {rec.get('reason', '')}")
    print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
