"""Benchmark of ``tether check`` on a large FIXTURE store. A script, not a test.

    .venv/bin/python validate/tools/bench_check.py [--runs 1000] [--repeat 5] [--out PATH]

Builds a checkout in a temp dir (the real templates and policy.py), a store of ``--runs``
synthetic sweep runs spread over arches, sweep names and start times, renders the docs from
it so the tree is clean, then times ``python -m tether check`` in a fresh interpreter
``--repeat`` times (what a pre-commit hook pays, interpreter start included). The median and
every timing go to a JSON file: by default in the temp dir, never under results/ (those are
real hardware runs only). The target is recorded next to the figure, not asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tether.store import write_run  # noqa: E402 - the repo root must be importable first

from validate.suite.fixture_project import fixture_project  # noqa: E402
from validate.suite.runfactory import (  # noqa: E402
    CONSERVATIVE_POLICY,
    make_sweep_run,
    resealed,
    write_conservative_policy,
)

ARCHES = ("sm90", "gfx942", "gfx950", "gfx1151")
SWEEPS = ("prefill-vs-sdpa", "chunked-prefill", "deferred-rescale")
TARGET_S = 2.0


def build_checkout(base: Path) -> Path:
    """FIXTURE checkout: templates and policy.py copied from this repository."""
    root = fixture_project(base / "repo", policy=CONSERVATIVE_POLICY)
    shutil.copytree(REPO / "docs_src", root / "docs_src")
    # The fixture store holds none of the runs the real policy cites: start it unset.
    write_conservative_policy(root)
    return root


def build_store(store: Path, root: Path, runs: int) -> None:
    """``runs`` FIXTURE runs: one template per (arch, sweep), re-stamped with new ids and times."""
    templates = {
        (arch, sweep): make_sweep_run(name=sweep, arch=arch, root=root, seed=i)
        for i, (arch, sweep) in enumerate((a, s) for a in ARCHES for s in SWEEPS)
    }
    keys = sorted(templates)
    for i in range(runs):
        arch, sweep = keys[i % len(keys)]
        base = templates[(arch, sweep)]
        day, rest = divmod(i, 24 * 60)
        started = (
            f"2026-{1 + day // 28:02d}-{1 + day % 28:02d}T{rest // 60:02d}:{rest % 60:02d}:00Z"
        )
        write_run(resealed(base, provenance={"started": started, "ended": started}), store)


def time_check(root: Path, store: Path, repeat: int) -> tuple[list[float], int, str]:
    cmd = [sys.executable, "-m", "tether", "--root", str(root), "--store", str(store), "check"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    times, code, said = [], 0, ""
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
        times.append(time.perf_counter() - start)
        code, said = done.returncode, done.stdout + done.stderr
    return times, code, said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, help="JSON file to write (default: in the temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the temp checkout and store")
    args = parser.parse_args(argv)
    if args.out is not None and "results" in args.out.resolve().relative_to("/").parts:
        parser.error(f"--out {args.out}: results/ holds hardware runs only; write elsewhere")
    base = Path(tempfile.mkdtemp(prefix="tether-bench-check-"))
    try:
        root = build_checkout(base)
        store = base / "store"
        built = time.perf_counter()
        build_store(store, root, args.runs)
        built = time.perf_counter() - built
        from tether.render import write_all

        write_all(root, store)
        times, code, said = time_check(root, store, args.repeat)
        report = {
            "what": "tether check wall time, fresh interpreter, FIXTURE store",
            "runs": args.runs,
            "repeat": args.repeat,
            "median_s": statistics.median(times),
            "times_s": times,
            "target_s": TARGET_S,
            "check_exit_code": code,
            "store_build_s": built,
            "python": sys.version.split()[0],
        }
        out = args.out or base / "bench_check.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        print(json.dumps(report, indent=2))
        print(f"wrote {out}")
        if code != 0:
            print(f"tether check did not pass on the FIXTURE tree:\n{said}", file=sys.stderr)
        return 0 if code == 0 else 1
    finally:
        if not args.keep and args.out is not None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
