"""Issue 11's grid and the routed-API suite's grid, through the public API as routed, on a GPU.

Run from the repository root on the GPU host (tether installed editable there):

    OUT=/tmp/routed python3 -m validate.gpu_routed_grid            # both grids, 8 processes
    python3 -m validate.gpu_routed_grid --grid issue               # the issue's grid only
    python3 -m validate.gpu_routed_grid --every 10                 # every tenth case, quickly

The cases are shared among ``--jobs`` processes on the one GPU (default 8), split by the
Triton build they need, so the kernel's builds (one per dtype, head_dim, mask, group and
length class) compile in parallel and once each.

``--device cpu`` runs the same code on a CPU host (the CPU's arms, not the GPU's): a check
of this script, not of a GPU.

Every case calls single_prefill or batch_prefill as a user does (no ``arch``), records the
arm that ran (the real ``_run_plan``, wrapped) and checks: it is the arm ``route`` names; the
output is finite and within the suite's tolerance rule (validate/correctness/_helpers.py:
twice the error of PyTorch's math SDPA in the input dtype or of the rounding a flash kernel
must do, plus a tiny epsilon); rows that see no key are exactly 0 with lse -inf; the lse is
within f32 rounding of the reference's. An exception is a failure of its case, not of the run.

The issue's grid ("Where it stands"): 17 length pairs, GQA 8/8, 8/2 and 8/1, head_dim 64
and 128, f16 and bf16, causal on and off, batch 1 (single_prefill) and 2 (batch_prefill):
816 calls. The suite's grid is validate/correctness/_routed_grid.py's GRIDS as sized for a GPU host. The table at
the end gives the cases by arm and every failure with its shape, error and tolerance;
$OUT/routed_grid.json (when OUT is set) holds every case. Exit status 1 on any failure.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tether_kernels import Shape, prefill, route
from tether_kernels.archs import detect_arch
from tether_kernels.arms import attention_ref, torch_dtype
from tether_kernels.serves import has_keyless_rows

from validate.correctness._helpers import max_err, tolerance
from validate.correctness._routed_grid import ENTRY_FNS, GRIDS, Call, as_layout

ISSUE_PAIRS = (
    *((1, 1), (1, 239), (3, 799), (113, 203), (128, 217), (108, 256), (256, 512), (512, 256)),
    *((1023, 1024), (1024, 1023), (2048, 2048), (239, 1), (799, 3), (64, 4096), (4096, 64)),
    *((17, 17), (65, 129)),
)


def issue_grid() -> Iterator[Call]:
    """The 816 calls of issue 11's external grid."""
    for (qo, kv), hkv, d, dtype, causal, batch in itertools.product(
        ISSUE_PAIRS, (8, 2, 1), (64, 128), ("f16", "bf16"), (True, False), (1, 2)
    ):
        entry = "single_prefill" if batch == 1 else "batch_prefill"
        yield Call(entry, Shape(batch, qo, kv, 8, hkv, d, dtype, causal))


def suite_grid() -> Iterator[tuple[str, Call]]:
    for name, grid in GRIDS.items():
        for call in grid.calls(True):
            yield name, call


def _inputs(shape: Shape, gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """q [b, qo, hq, d], k and v [b, kv, hkv, d], drawn on the generator's device."""
    dtype = torch_dtype(shape.dtype)
    q_dims = (shape.batch, shape.qo_len, shape.hq, shape.head_dim)
    kv_dims = (shape.batch, shape.kv_len, shape.hkv, shape.head_dim)
    return tuple(
        torch.randn(dims, generator=gen, device=gen.device).to(dtype)
        for dims in (q_dims, kv_dims, kv_dims)
    )


def run_case(call: Call, arch: str, gen: torch.Generator, ran: list[str]) -> dict[str, Any]:
    """One public call and its checks; every problem found is listed, none raised."""
    shape = call.shape
    record: dict[str, Any] = {
        "entry": call.entry,
        "shape": shape.key(),
        "return_lse": call.return_lse,
        "sm_scale": call.sm_scale,
        "layout": call.layout,
        "problems": [],
    }
    problems = record["problems"]
    try:
        want = route(call.entry, shape, arch, return_lse=call.return_lse)
    except Exception as exc:  # a route failure is this case's failure, reported in the table
        record.update(arm=None, err=None, tol=None)
        problems.append(f"route raised {type(exc).__name__}: {exc}")
        return record
    record["routed"] = want
    args = as_layout(call.layout, *_inputs(shape, gen))
    q, k, v = (t.contiguous() for t in args)
    if call.entry == "single_prefill":
        args = tuple(t[0] for t in args)
    kwargs: dict[str, Any] = {"causal": shape.causal, "return_lse": call.return_lse}
    if call.sm_scale is not None:
        kwargs["sm_scale"] = call.sm_scale
    ran.clear()
    try:
        res = ENTRY_FNS[call.entry](*args, **kwargs)
        if q.is_cuda:
            torch.cuda.synchronize()
    except Exception as exc:  # an arm that raised is this case's failure
        record.update(arm=ran[0] if ran else None, err=None, tol=None)
        problems.append(f"raised {type(exc).__name__}: {str(exc)[:300]}")
        return record
    record["arm"] = ran[0] if ran else None
    if ran != [want]:
        problems.append(f"ran {ran}, route names {want}")
    out, lse = res if call.return_lse else (res, None)
    if call.entry == "single_prefill":
        out = out[None]
        lse = None if lse is None else lse[None]
    ref, ref_lse = attention_ref(q, k, v, shape.causal, call.sm_scale, return_lse=True)
    tol, math_err, _ = tolerance(shape, q, k, v, call.sm_scale, ref)
    finite = bool(torch.isfinite(out).all())
    err = max_err(out, ref) if finite else float("inf")
    record.update(err=err, tol=tol, math_err=math_err)
    if not finite:
        problems.append("non-finite output")
    elif err > tol:
        problems.append(f"err {err:.3e} > tol {tol:.3e}")
    keyless = shape.qo_len - shape.kv_len if has_keyless_rows(shape) else 0
    if keyless and not torch.equal(out[:, :keyless], torch.zeros_like(out[:, :keyless])):
        problems.append(f"rows that see no key are not 0 (max {out[:, :keyless].abs().max():.3e})")
    if lse is not None:
        if not torch.isneginf(lse[..., :keyless]).all():
            problems.append("keyless rows' lse is not -inf")
        seen, ref_seen = lse[..., keyless:], ref_lse[..., keyless:]
        lse_err = max_err(seen, ref_seen)
        lse_tol = 1e-4 * ref_seen.abs().max().item() + 1e-5
        record.update(lse_err=lse_err, lse_tol=lse_tol)
        if not lse_err <= lse_tol:
            problems.append(f"lse err {lse_err:.3e} > {lse_tol:.3e}")
    return record


def _short(shape: dict[str, Any]) -> str:
    return (
        f"b{shape['batch']} q{shape['qo_len']} kv{shape['kv_len']} "
        f"{shape['hq']}/{shape['hkv']} d{shape['head_dim']} {shape['dtype']} "
        f"{'causal' if shape['causal'] else 'full'}"
    )


def _length_class(n: int) -> str:
    # Triton specialises an int argument equal to 1, or divisible by 16, into its own build.
    return "1" if n == 1 else "16k" if n % 16 == 0 else "n"


def worker_of(call: Call, arch: str, jobs: int) -> int:
    """The worker that runs ``call``: calls that compile the same Triton build share one, so
    each build compiles once across the workers."""
    try:
        arm = route(call.entry, call.shape, arch, return_lse=call.return_lse)
    except Exception:  # run_case reports it; any worker will do
        arm = "-"
    s = call.shape
    key = (arm, s.dtype, s.head_dim, s.causal, call.return_lse, s.hq // s.hkv)
    key += (_length_class(s.qo_len), _length_class(s.kv_len))
    return zlib.crc32(repr(key).encode()) % jobs


def select_cases(grid: str, every: int) -> list[tuple[int, str, Call]]:
    """(index, grid name, call) of every case to run; the index seeds the case's inputs."""
    cases: list[tuple[str, Call]] = []
    if grid in ("all", "issue"):
        cases += [("issue", c) for c in issue_grid()]
    if grid in ("all", "suite"):
        cases += list(suite_grid())
    return [(i, g, c) for i, (g, c) in enumerate(cases)][::every]


def run_cases(
    cases: list[tuple[int, str, Call]], arch: str, device: str, progress: str = ""
) -> list[dict[str, Any]]:
    ran: list[str] = []
    real = prefill._run_plan

    def spy(plan: Any, *a: Any) -> Any:
        ran.append(plan.arm)
        return real(plan, *a)

    prefill._run_plan = spy
    gen = torch.Generator(device=device)
    records = []
    started = time.time()
    for n, (index, grid, call) in enumerate(cases, 1):
        gen.manual_seed(11_000_000 + index)
        record = run_case(call, arch, gen, ran)
        record.update(index=index, grid=grid)
        records.append(record)
        if n % 250 == 0:
            bad = sum(bool(r["problems"]) for r in records)
            print(
                f"  {progress}{n}/{len(cases)} cases, {bad} failed, {time.time() - started:.0f} s"
            )
    prefill._run_plan = real
    return records


def run_workers(argv: list[str], jobs: int) -> tuple[list[dict[str, Any]], list[str]]:
    """Run ``jobs`` copies of this script, each on its share; their records, and what failed."""
    with tempfile.TemporaryDirectory(prefix="routed-grid-") as tmp:
        procs = []
        for i in range(jobs):
            path = Path(tmp) / f"worker{i}.json"
            log = (Path(tmp) / f"worker{i}.log").open("w")
            cmd = [sys.executable, "-m", "validate.gpu_routed_grid", *argv]
            cmd += ["--worker", str(i), "--records", str(path)]
            procs.append((i, path, log, subprocess.Popen(cmd, stdout=log, stderr=log)))
        records: list[dict[str, Any]] = []
        broken = []
        for i, path, log, proc in procs:
            rc = proc.wait()
            log.close()
            if rc not in (0, 1) or not path.exists():
                tail = (Path(tmp) / f"worker{i}.log").read_text()[-2000:]
                broken.append(f"worker {i} exited {rc} without its records:\n{tail}")
                continue
            records += json.loads(path.read_text())
            print(f"  worker {i} done")
    return sorted(records, key=lambda r: r["index"]), broken


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grid", choices=("all", "issue", "suite"), default="all")
    parser.add_argument("--every", type=int, default=1, help="run every Nth case only")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--jobs", type=int, default=8, help="processes sharing the GPU (Triton builds in parallel)"
    )
    parser.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--records", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_routed_grid: no GPU visible; this grid is for a GPU host", file=sys.stderr)
        return 2
    if args.every < 1 or args.jobs < 1:
        parser.error("--every and --jobs must be at least 1")
    # The suite's references run in f32: no TF32 in their products.
    torch.backends.cuda.matmul.allow_tf32 = False
    arch = detect_arch(args.device)
    cases = select_cases(args.grid, args.every)
    if args.worker is not None:  # one share of a parallel run: records to the parent's file
        mine = [c for c in cases if worker_of(c[2], arch, args.jobs) == args.worker]
        records = run_cases(mine, arch, args.device, progress=f"worker {args.worker}: ")
        Path(args.records).write_text(json.dumps(records))
        return 0
    started = time.time()
    broken: list[str] = []
    if args.jobs == 1:
        records = run_cases(cases, arch, args.device)
    else:
        records, broken = run_workers(argv, args.jobs)
    elapsed = time.time() - started
    failures = [r for r in records if r["problems"]]
    device = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    _report(records, failures, broken, f"{arch} ({device})", args.grid, elapsed)
    out_dir = os.environ.get("OUT")
    if out_dir:
        path = Path(out_dir) / "routed_grid.json"
        meta = {
            "arch": arch,
            "device": device,
            "torch": torch.__version__,
            "triton": __import__("triton").__version__,
            "cudnn": torch.backends.cudnn.version(),
            "elapsed_s": round(elapsed, 1),
            "grid": args.grid,
            "every": args.every,
            "jobs": args.jobs,
            "cases_expected": len(cases),
            "broken_workers": broken,
        }
        path.write_text(json.dumps({"meta": meta, "cases": records}, indent=1) + "\n")
        print(f"\nwrote {path}")
    ok = not failures and not broken and len(records) == len(cases)
    print(
        "OK: every case passed" if ok else f"FAILED: {len(failures)} cases, {len(broken)} workers"
    )
    return 0 if ok else 1


def _report(
    records: list[dict[str, Any]],
    failures: list[dict[str, Any]],
    broken: list[str],
    where: str,
    grid: str,
    elapsed: float,
) -> None:
    by_arm: dict[str, list[int]] = {}
    for r in records:
        counts = by_arm.setdefault(r.get("arm") or r.get("routed") or "(no arm)", [0, 0])
        counts[0] += 1
        counts[1] += bool(r["problems"])
    print(f"\nrouted grid on {where}, torch {torch.__version__}: ", end="")
    print(f"{len(records)} cases ({grid}) in {elapsed:.0f} s")
    print(f"  {'arm':<16}{'cases':>7}{'failed':>8}")
    for arm, (n, bad) in sorted(by_arm.items()):
        print(f"  {arm:<16}{n:>7}{bad:>8}")
    for text in broken:
        print(f"\n{text}")
    if not failures:
        return
    print(f"\n{len(failures)} failures (first 40):")
    print(f"  {'grid':<14}{'entry':<15}{'arm':<12}{'shape':<48}{'err':>10}{'tol':>10}  problem")
    for r in failures[:40]:
        err = "-" if r.get("err") is None else f"{r['err']:.2e}"
        tol = "-" if r.get("tol") is None else f"{r['tol']:.2e}"
        extra = (" lse" if r["return_lse"] else "") + (
            f" {r['layout']}" if r["layout"] != "contiguous" else ""
        )
        print(
            f"  {r['grid']:<14}{r['entry']:<15}{r.get('arm') or '-':<12}"
            f"{_short(r['shape']) + extra:<48}{err:>10}{tol:>10}  {'; '.join(r['problems'])}"
        )


if __name__ == "__main__":
    sys.exit(main())
