"""Merge the nightly's per-host artifacts into the results store, then render and check.

Input: a folder of downloaded artifacts, one subfolder per host job (``runs-<arch>/``),
each holding that host's run files at any depth. Every run file found is staged at
``<staging>/<arch>/<id>.json`` and the staging folder is merged into the store with
``tether store merge`` (a union: a file already in the store with the same bytes is kept
once, a different run claiming the same id is refused). Two hosts that upload different
runs under one id are refused here already, naming both files, before the store is touched.

An expected arch whose job sent no run file at all (runner offline, artifact lost) gets a
``not_measured`` verify run saying so, so the docs show "not measured" with a reason
instead of silently showing last week's section as if it were tonight's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

RUN_SCHEMA = "tether.run/1"
EX_DATAERR = 1


class CollectError(Exception):
    """A problem in the artifacts; the message names the file."""


def find_runs(host_dir: Path) -> list[Path]:
    """Run files below ``host_dir`` (JSON whose schema is the run schema), sorted."""
    found = []
    for path in sorted(host_dir.rglob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CollectError(f"{path}: not readable JSON: {exc}") from exc
        if isinstance(doc, dict) and doc.get("schema") == RUN_SCHEMA:
            found.append(path)
    return found


def stage(artifacts: Path, staging: Path) -> dict[str, list[str]]:
    """Copy every host's run files into ``staging/<arch>/<id>.json``; returns arch -> ids."""
    if not artifacts.is_dir():
        raise CollectError(f"{artifacts}: artifacts folder does not exist")
    origin: dict[str, Path] = {}
    by_arch: dict[str, list[str]] = {}
    for host_dir in sorted(p for p in artifacts.iterdir() if p.is_dir()):
        for path in find_runs(host_dir):
            doc = json.loads(path.read_text(encoding="utf-8"))
            run_id = doc.get("id")
            arch = (doc.get("provenance") or {}).get("arch")
            if not isinstance(run_id, str) or not isinstance(arch, str):
                raise CollectError(f"{path}: id/provenance.arch: missing")
            if run_id in origin:
                if origin[run_id].read_bytes() != path.read_bytes():
                    raise CollectError(
                        f"{path}: id {run_id}: also claimed by {origin[run_id]} with different content"
                    )
                continue
            origin[run_id] = path
            dest = staging / arch / f"{run_id}.json"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest)
            by_arch.setdefault(arch, []).append(run_id)
    return by_arch


def _git_sha(root: Path) -> str:
    sha = os.environ.get("GITHUB_SHA")
    if sha:
        return sha
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() or "unknown"


def _fingerprints() -> tuple[str, str]:
    try:
        from tether.store import provenance
    except ImportError:
        return ("unknown", "unknown")
    return (provenance.harness_fingerprint(), provenance.kernels_fingerprint())


def missing_host_run(arch: str, root: Path, now: datetime) -> dict[str, Any]:
    """A not_measured verify run for an arch whose nightly job sent nothing."""
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    iso = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    sha = _git_sha(root)
    digest = hashlib.sha256(f"{arch}{iso}{sha}".encode()).hexdigest()[:8]
    harness, kernels = _fingerprints()
    return {
        "schema": RUN_SCHEMA,
        "id": f"{stamp}-verify-nightly-{arch}-{digest}",
        "kind": "verify",
        "name": "nightly",
        "status": "not_measured",
        "reason": f"the nightly job for {arch} sent no run files",
        "provenance": {
            "git_sha": sha,
            "git_dirty": False,
            "harness_fingerprint": harness,
            "kernels_fingerprint": kernels,
            "host": "nightly-collect",
            "arch": arch,
            "device": "unknown",
            "driver": None,
            "runtime": {
                "python": None,
                "torch": None,
                "triton": None,
                "cuda": None,
                "hip": None,
                "cudnn": None,
            },
            "started": iso,
            "ended": iso,
        },
        "guard": {},
        "config": {"grid": {"axes": {}, "fixed": {}}, "arms": {}, "entry_points": [], "timing": {}},
        "cells": [],
        # Nothing ran: no counts, as in the guard's own not_measured verify runs.
        "results": {},
    }


def _tether(args: Sequence[str], root: Path, store: Path, out: TextIO, err: TextIO) -> int:
    # In-process so the same interpreter (and its installed tether) runs every step.
    from tether.cli import main as tether_main

    return tether_main(["--root", str(root), "--store", str(store), *args], out=out, err=err)


def collect(
    artifacts: Path,
    root: Path,
    store: Path,
    expect: Sequence[str] = (),
    render: bool = True,
    out: TextIO | None = None,
    err: TextIO | None = None,
    now: datetime | None = None,
) -> int:
    """Stage, merge, render and check; returns the first failing step's exit code, else 0."""
    out = out or sys.stdout
    err = err or sys.stderr
    with tempfile.TemporaryDirectory(prefix="tether-collect-") as tmp:
        staging = Path(tmp) / "staging"
        staging.mkdir()
        try:
            by_arch = stage(artifacts, staging)
        except CollectError as exc:
            print(f"collect: error: {exc}", file=err)
            return EX_DATAERR
        for arch in expect:
            if arch not in by_arch:
                run = missing_host_run(arch, root, now or datetime.now(timezone.utc))
                dest = staging / arch / f"{run['id']}.json"
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_text(json.dumps(run, indent=1, sort_keys=True) + "\n", encoding="utf-8")
                by_arch[arch] = [run["id"]]
                print(f"collect: {arch}: no run files arrived; recorded not_measured", file=out)
        for arch in sorted(by_arch):
            print(f"collect: {arch}: {len(by_arch[arch])} run(s)", file=out)
        rc = _tether(["store", "merge", str(staging)], root, store, out, err)
        if rc:
            print(f"collect: tether store merge failed with exit {rc}", file=err)
            return rc
    if not render:
        return 0
    rc = _tether(["render"], root, store, out, err)
    if rc:
        print(f"collect: tether render failed with exit {rc}", file=err)
        return rc
    rc = _tether(["check"], root, store, out, err)
    if rc:
        print(f"collect: tether check failed with exit {rc}", file=err)
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifacts", type=Path, help="downloaded artifacts, one folder per host")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the tether checkout")
    parser.add_argument("--store", type=Path, help="results store (default: ROOT/results)")
    parser.add_argument(
        "--expect",
        default="",
        help="comma-separated arches the nightly ran; one that sent nothing is recorded not_measured",
    )
    parser.add_argument("--no-render", action="store_true", help="merge only")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    store = (args.store or root / "results").resolve()
    expect = [a for a in args.expect.split(",") if a]
    return collect(args.artifacts, root, store, expect, render=not args.no_render)


if __name__ == "__main__":
    sys.exit(main())
