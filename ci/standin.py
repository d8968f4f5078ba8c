"""Stand-in hosts: fixture run files shaped like what a nightly host job uploads.

FIXTURES ONLY. Nothing here was measured; every sample is a made-up number so the nightly's
collect, merge and render steps can be exercised without hardware (tests, and a local dry
run of the workflow with ``python ci/standin.py OUT``). The runs follow lib/store/SCHEMA.md.
Never copy these files into results/.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

FIXTURE_DEVICE = {
    "sm90": "NVIDIA H200",
    "gfx942": "AMD Instinct MI300X",
    "gfx950": "AMD Instinct MI350X",
    "gfx1151": "AMD Radeon 8060S",
    "cpu": "cpu: fixture",
}


def _fp(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def fixture_run(
    arch: str,
    kind: str = "sweep",
    name: str = "prefill-triton-vs-sdpa",
    status: str = "ok",
    reason: str | None = None,
    started: str = "2026-11-29T02:00:00Z",
    ended: str = "2026-11-29T02:10:00Z",
    git_sha: str = "0" * 40,
    speedup: float = 1.1,
    results: dict[str, Any] | None = None,
    host: str | None = None,
) -> dict[str, Any]:
    """A FIXTURE run dict per SCHEMA.md (made-up samples; B is ``speedup`` times faster)."""
    stamp = started.replace("-", "").replace(":", "")
    digest = hashlib.sha256(f"{arch}{kind}{name}{started}{git_sha}".encode()).hexdigest()[:8]
    run_id = f"{stamp}-{kind}-{name}-{arch}-{digest}"
    axes: dict[str, list[Any]] = {"hq": [8, 16], "seqlen": [128, 256]} if kind == "sweep" else {}
    cells = []
    if kind == "sweep" and status == "ok":
        for hq, seqlen in itertools.product(axes["hq"], axes["seqlen"]):
            base = 1e-4 * hq * seqlen / 1024
            cells.append(
                {
                    "key": {"hq": hq, "seqlen": seqlen},
                    "flops": 4.0 * hq * seqlen * seqlen * 64,
                    "samples": {
                        "A": [base, base * 1.01, base * 0.99],
                        "A2": [base * 1.005, base * 0.995, base],
                        "B": [base / speedup] * 3,
                    },
                    "kernels": {"A": ["fixture_a"], "A2": ["fixture_a"], "B": ["_attn_fwd"]},
                    "reach": {
                        "entry_points": ["batch_prefill"],
                        "routes": {"batch_prefill": "triton"},
                    },
                    "flags": [],
                    "extra": {},
                }
            )
    if kind == "verify" and results is None:
        results = {
            "passed": 10,
            "failed": 0,
            "skipped": 0,
            "errors": 0,
            "duration_s": 1.0,
            "suite": "validate",
            "vendor": "rocm" if arch.startswith("gfx") else "cuda",
            "workers": 1,
        }
    return {
        "schema": "tether.run/1",
        "id": run_id,
        "kind": kind,
        "name": name,
        "status": status,
        "reason": reason,
        "provenance": {
            "git_sha": git_sha,
            "git_dirty": False,
            "harness_fingerprint": _fp("fixture-harness"),
            "kernels_fingerprint": _fp("fixture-kernels"),
            "host": host or f"standin-{arch}",
            "arch": arch,
            "device": FIXTURE_DEVICE[arch],
            "driver": None,
            "runtime": {
                "python": "3.11.0",
                "torch": None,
                "triton": None,
                "cuda": None,
                "hip": None,
                "cudnn": None,
            },
            "started": started,
            "ended": ended,
        },
        "guard": {},
        "config": {
            "grid": {
                "axes": axes,
                "fixed": {"hkv": 8, "head_dim": 64, "dtype": "f16", "causal": True},
            },
            "arms": {"A": "sdpa_flash", "B": "triton"} if kind == "sweep" else {},
            "entry_points": ["single_prefill", "batch_prefill"],
            "timing": {},
        },
        "cells": cells,
        "results": results or {},
    }


def write_run(store: Path, run: dict[str, Any]) -> Path:
    """Write a FIXTURE run at ``store/<arch>/<id>.json`` (plain write: fixtures only)."""
    path = store / run["provenance"]["arch"] / f"{run['id']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(run, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def build_standin_artifacts(out: Path) -> dict[str, list[Path]]:
    """Three stand-in hosts as downloaded artifacts, ``out/runs-<arch>/<arch>/<id>.json``.

    sm90 is healthy (passing verify and a sweep); gfx942 failed (its verify run has
    failures); gfx950 was busy (the guard recorded a not_measured run). gfx1151 sends nothing.
    """
    written: dict[str, list[Path]] = {}
    ok = out / "runs-sm90"
    written["sm90"] = [
        write_run(ok, fixture_run("sm90", kind="verify", name="validate")),
        write_run(ok, fixture_run("sm90")),
    ]
    bad = out / "runs-gfx942"
    failing = fixture_run("gfx942", kind="verify", name="validate", status="ok")
    failing["results"].update({"passed": 7, "failed": 3})
    written["gfx942"] = [
        write_run(bad, failing),
        write_run(bad, fixture_run("gfx942", speedup=0.9)),
    ]
    busy = out / "runs-gfx950"
    written["gfx950"] = [
        write_run(
            busy,
            fixture_run(
                "gfx950",
                kind="verify",
                name="validate",
                status="not_measured",
                reason="host busy: lock held by another job",
                results={},  # what tether.guard.hold.write_not_measured records: no counts
            ),
        )
    ]
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write the stand-in artifacts into")
    args = parser.parse_args(argv)
    for arch, paths in build_standin_artifacts(args.out).items():
        print(f"{arch}: {len(paths)} fixture run(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
