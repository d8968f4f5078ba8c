"""One GPU session: the probe, the sweeps and the A/A release demonstration, into one store.

Run on the H200 (tether installed with ``pip install --no-deps --no-build-isolation -e .``)::

    python3 validate/gpu_session.py --store /path/to/store

The default budget (540 s) is sized for one device call of at most 9.5 minutes including
interpreter start-up. Order: probe, prefill-triton-vs-sdpa, chunked-prefill,
deferred-rescale (chunked grid), aa-release-demo and its control aa-control-demo (the same
cells at the default policy, for a side-by-side comparison), deferred-rescale-square. Each
step gets a share of the budget and its per-cell time cap is scaled to fit; a step that no
longer fits is reported as not run (nothing is written for it). Each step's elapsed time is
printed as it ends, and a short table of what was written last. ``--only`` and ``--skip``
pick steps by name (``probe`` or a sweep name).

``--tiny`` shrinks every grid to toy shapes so the whole session runs on the CPU under
``TRITON_INTERPRET=1`` in seconds (f16 only there: the interpreter's bf16 dot is wrong).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tether.bench.engine import TimingPolicy
from tether.bench.probe import run_probe
from tether.bench.sweep import SweepDef, Target, load_sweep, run_sweep
from tether.errors import TetherError
from tether.stats import aa_statistics, floor_of

ROOT = Path(__file__).resolve().parents[1]

# One device call is limited to 600 s; this leaves room for start-up and the table.
DEFAULT_BUDGET_S = 540.0
# (sweep, share of the budget); the probe's share is not enforced (its policy is fixed),
# only set aside. The shares leave the rest of the budget for start-up and overruns.
PROBE = "probe"
PROBE_SHARE = 0.06
STEPS: tuple[tuple[str, float], ...] = (
    ("prefill-triton-vs-sdpa", 0.45),
    ("chunked-prefill", 0.08),
    ("deferred-rescale", 0.08),
    ("aa-release-demo", 0.03),
    ("aa-control-demo", 0.03),
    ("deferred-rescale-square", 0.15),
)
STEP_NAMES = (PROBE, *(name for name, _ in STEPS))
# Of a cell's share of wall time, the part the engine may spend sampling; the rest is
# warm-up, graph capture, the profiler pass and input allocation.
SAMPLING_FRACTION = 0.85

# Four repetitions, so the rotation over two buffer sets runs at toy size too.
TINY_POLICY = TimingPolicy(calls_per_sample=1, warmup_calls=1, min_reps=4, max_reps=4)
TINY_SQUARE = {"hkv": 1, "head_dim": 16, "dtype": "f16", "causal": True}
TINY_CHUNK = {"batch": 1, "qo_len": 16, "hq": 2, "hkv": 1, "head_dim": 16, "causal": True}


def tiny(sweep: SweepDef) -> SweepDef:
    """A toy version of ``sweep`` with the same arms and structure, for the interpreter."""
    policy = TimingPolicy(
        **{**TINY_POLICY.to_json(), "release_between_arms": sweep.timing.release_between_arms}
    )
    if "seqlen" in sweep.axes:
        axes: dict[str, tuple[Any, ...]] = {"seqlen": (16, 32)}
        fixed: dict[str, Any] = dict(TINY_SQUARE)
        for name in ("batch", "hq"):
            if name in sweep.axes:
                axes = {name: (1 if name == "batch" else 2,), **axes}
            else:
                fixed[name] = 1 if name == "batch" else 2
    else:
        axes = {"kv_len": (16, 32), "dtype": ("f16",)}
        fixed = dict(TINY_CHUNK)
    return sweep.replace(axes=axes, fixed=fixed, timing=policy, needs_gpu=False)


def fit(sweep: SweepDef, seconds: float) -> SweepDef:
    """Scale the per-cell cap so the sweep fits ``seconds`` of wall time."""
    cells = max(1, len(sweep.keys()))
    cap = max(0.2, min(sweep.timing.cell_cap_s, SAMPLING_FRACTION * seconds / cells))
    policy = TimingPolicy(**{**sweep.timing.to_json(), "cell_cap_s": round(cap, 3)})
    return sweep.replace(timing=policy)


@contextlib.contextmanager
def guarded(mode: str, target: Target) -> Iterator[Any]:
    """The guard's holding (its evidence goes into every run), or None when off/unavailable."""
    if mode == "off":
        yield None
        return
    try:
        from tether.guard.api import acquire

        cm = acquire(target="cpu" if target.device == "cpu" else "auto", wait_s=60.0,
                     purpose="validate/gpu_session.py")  # fmt: skip
        holding = cm.__enter__()
    except (ImportError, TetherError) as exc:
        if mode == "require":
            raise
        print(f"gpu_session: guard unavailable ({exc}); runs record guard {{}}", file=sys.stderr)
        yield None
        return
    try:
        yield holding
    finally:
        cm.__exit__(None, None, None)


def summarize(run: Any) -> dict[str, Any]:
    """One table row: status, cells, flagged cells, median A/A floor width (the floor as
    ``tether.stats`` builds it) and B-over-A geomean."""
    row: dict[str, Any] = {"kind": run.kind, "name": run.name, "status": run.status}
    row["cells"] = len(run.cells)
    row["flagged"] = sum(1 for c in run.cells if c.flags)
    spans, logs = [], []
    for c in run.cells:
        s = c.samples
        if "A" in s and "A2" in s:
            lo, hi = floor_of(aa_statistics(list(s["A"]), list(s["A2"])))
            spans.append(hi - lo)
        if "A" in s and "B" in s:
            logs.append(math.log(statistics.median(s["A"]) / statistics.median(s["B"])))
    row["aa_span"] = f"{statistics.median(spans):.3f}" if spans else "-"
    row["b_over_a"] = f"{math.exp(statistics.fmean(logs)):.3f}" if logs else "-"
    if run.kind == "probe" and run.status == "ok":
        row["b_over_a"] = f"bound {run.results['bound_tflops']:.1f} TF"
    return row


def print_table(rows: list[dict[str, Any]]) -> None:
    if not rows:
        print("gpu_session: no step was run")
        return
    cols = ("kind", "name", "status", "cells", "flagged", "aa_span", "b_over_a", "secs")
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols}
    print("  ".join(c.ljust(widths[c]) for c in cols))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in cols))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="results store to write into")
    ap.add_argument(
        "--budget-s", type=float, default=DEFAULT_BUDGET_S, help="total wall-time budget"
    )
    ap.add_argument("--tiny", action="store_true", help="toy shapes (CPU, TRITON_INTERPRET=1)")
    ap.add_argument("--guard", choices=("auto", "require", "off"), default="auto")
    ap.add_argument("--only", action="append", help="run only these steps (probe or a sweep)")
    ap.add_argument("--skip", action="append", help="skip these steps (probe or a sweep)")
    args = ap.parse_args(argv)
    unknown = sorted((set(args.only or ()) | set(args.skip or ())) - set(STEP_NAMES))
    if unknown:
        ap.error(f"unknown step {', '.join(unknown)} (steps: {', '.join(STEP_NAMES)})")
    t0 = time.monotonic()
    target = Target.detect()
    print(f"gpu_session: {target.arch} {target.device_name}; store {args.store}", file=sys.stderr)
    rows: list[dict[str, Any]] = []
    want = set(args.only or STEP_NAMES) - set(args.skip or ())

    def done(step: float) -> None:
        row = rows[-1]
        row["secs"] = f"{time.monotonic() - step:.0f}"
        print(f"gpu_session: {row['name']}: {row['status']} in {row['secs']} s "
              f"(session {time.monotonic() - t0:.0f} s of {args.budget_s:.0f} s)",
              file=sys.stderr, flush=True)  # fmt: skip

    with guarded(args.guard, target) as holding:
        if PROBE in want:
            step = time.monotonic()
            run = run_probe(store=args.store, root=ROOT, tiny=args.tiny, target=target,
                            holding=holding, err=sys.stderr)  # fmt: skip
            rows.append(summarize(run))
            done(step)
        for name, share in STEPS:
            if name not in want:
                continue
            step = time.monotonic()
            left = args.budget_s - (time.monotonic() - t0)
            seconds = min(share * args.budget_s, left)
            if seconds < 5.0 and not args.tiny:
                rows.append({"kind": "sweep", "name": name, "status": "not run: budget"})
                done(step)
                continue
            sweep = load_sweep(name, ROOT)
            sweep = tiny(sweep) if args.tiny else fit(sweep, seconds)
            try:
                run = run_sweep(sweep, store=args.store, root=ROOT, target=target,
                                holding=holding, err=sys.stderr)  # fmt: skip
            except TetherError as exc:  # one failed step must not cost the others
                rows.append({"kind": "sweep", "name": name, "status": f"error: {exc}"[:120]})
                done(step)
                continue
            rows.append(summarize(run))
            done(step)
    print_table(rows)
    print(f"gpu_session: {time.monotonic() - t0:.0f} s; runs in {args.store}")
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
