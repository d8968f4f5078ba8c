"""``tether sweep NAME --shards N``: one sweep split over this host's GPUs, merged into one run.

The parent holds the host (the guard) for the whole sweep; the workers are its descendants, so
their holds nest under it. Each worker is pinned to its GPU through the visibility variables
before it imports torch, takes that GPU's lock, measures its cells (A, A2 and B of a cell
together) and writes a shard file. When every worker is done the shards are merged into one
run, validated by the store's rules, and written to the store. Shards stay on disk either
way, so a failed merge loses nothing that was measured.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tether.bench.shard import merge_shards, run_shard
from tether.cli import Context
from tether.cli._bench_host import KNOBS, bench_for
from tether.gpus import hold_gpu_lock, list_gpus, pin_worker
from tether.guard.lock import held_env


def _worker(args: argparse.Namespace, ctx: Context, sweep: Any) -> int:

    index = args.shard_worker
    gpu_index = int(os.environ.get("TETHER_GPU_INDEX", index))
    with (
        hold_gpu_lock(None, gpu_index, holder=f"shard {index}/{args.shards}"),
        bench_for(
            ctx, args, f"tether sweep {sweep.name} shard {index}", "sweep", sweep.name
        ) as bench,
    ):
        gpu = {
            "index": gpu_index,
            "uuid": os.environ.get("TETHER_GPU_UUID") or None,
            "name": bench.target.device_name,
        }
        path = run_shard(bench, sweep, index, args.shards, args.shard_dir, gpu=gpu)
    print(f"shard {index}/{args.shards} on gpu {gpu_index}: {path}", file=ctx.out)
    return 0


def run_sharded(args: argparse.Namespace, ctx: Context, sweep: Any) -> int:
    """The parent: hold the host, launch one worker per shard, merge and write the run."""
    if args.shard_worker is not None:
        return _worker(args, ctx, sweep)

    gpus = list_gpus()
    count = args.shards or max(1, len(gpus))
    shard_dir = args.shard_dir or Path(tempfile.mkdtemp(prefix=f"tether-shards-{sweep.name}-"))
    with bench_for(
        ctx, args, f"tether sweep {sweep.name} --shards {count}", "sweep", sweep.name
    ) as parent:
        procs = []
        for index in range(count):
            env = dict(os.environ)
            if parent.holding is not None and parent.holding.lock.fd is not None:
                # The workers are this process's children: their holds nest under this one.
                env.update(held_env(parent.holding.lock))
            if gpus:
                env.update(pin_worker(f"gw{index}", gpus))
                gpu = gpus[index % len(gpus)]
                env["TETHER_GPU_INDEX"] = str(gpu.index)
                env["TETHER_GPU_UUID"] = gpu.uuid or ""
            else:
                env["TETHER_GPU_INDEX"] = str(index)
            cmd = [sys.executable, "-m", "tether", "--root", str(ctx.root), "sweep", sweep.name,
                   "--shards", str(count), "--shard-worker", str(index),
                   "--shard-dir", str(shard_dir), "--no-progress"]  # fmt: skip
            cmd += _knobs(args)
            procs.append(subprocess.Popen(cmd, env=env))
        codes = [p.wait() for p in procs]
    if any(codes):
        print(f"sweep {sweep.name}: worker exit codes {codes}; shards kept in {shard_dir}",
              file=ctx.err)  # fmt: skip
        return 75 if all(c in (0, 75) for c in codes) else 1
    merged = merge_shards(sorted(Path(shard_dir).glob("*.shard*.json")))
    path = merged.write(ctx.store)
    print(
        f"sweep {sweep.name}: {merged.status} ({len(merged.cells)} cells, {count} shards, "
        f"guard {merged.guard.mode}) -> {path}",
        file=ctx.out,
    )
    return 0 if merged.status == "ok" else 1


def _knobs(args: argparse.Namespace) -> list[str]:
    """The parent's measuring options, handed to every worker unchanged."""

    out: list[str] = []
    for name in KNOBS:
        value = getattr(args, name, None)
        if value is not None:
            out += [f"--{name.replace('_', '-')}", str(value)]
    if getattr(args, "replicates", None) is not None:
        out += ["--replicates", str(args.replicates)]
    for item in getattr(args, "axis", []):
        out += ["--axis", item]
    for item in getattr(args, "fixed", []):
        out += ["--fixed", item]
    if args.unguarded:
        out.append("--unguarded")
    return out
