"""Run one sweep sharded across this host's GPUs: one worker process per GPU, then one run.

    tether guard --hold -- .venv/bin/python ci/sharded_sweep.py NAME [--shards N]

The guard holds the host for the whole command (the workers inherit it); each worker is
pinned to its GPU through the visibility variables before it imports torch, takes that GPU's
lock (``<host lock>.gpu<N>``), measures its cells (A, A2 and B of a cell together) and writes
a shard file to the shard folder. When every worker is done the shards are merged into one
run, validated by the store's rules, and written to the store. Shards stay on disk either
way, so a failed merge loses nothing that was measured.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path


def _worker(args: argparse.Namespace) -> int:
    from tether.bench.shard import run_shard
    from tether.bench.sweep import Target, load_sweep
    from tether.gpus import hold_gpu_lock

    index = args.worker
    sweep = load_sweep(args.name, args.root)
    # The index among the parent's GPUs: after pinning this process sees one GPU only.
    gpu_index = int(os.environ.get("TETHER_GPU_INDEX", index))
    with hold_gpu_lock(None, gpu_index, holder=f"shard {index}/{args.shards}"):
        target = Target.detect()
        gpu = {
            "index": gpu_index,
            "uuid": os.environ.get("TETHER_GPU_UUID") or None,
            "name": target.device_name,
        }
        path = run_shard(
            sweep, index, args.shards, args.shard_dir, root=args.root, gpu=gpu, target=target
        )
    print(f"shard {index}/{args.shards} on gpu {gpu_index}: {path}")
    return 0


def _launch(args: argparse.Namespace) -> int:
    from tether.bench.shard import merge_shards
    from tether.gpus import list_gpus, pin_worker
    from tether.store import write_run

    gpus = list_gpus()
    count = args.shards or max(1, len(gpus))
    shard_dir = args.shard_dir or Path(tempfile.mkdtemp(prefix=f"tether-shards-{args.name}-"))
    procs = []
    for index in range(count):
        env = dict(os.environ)
        if gpus:
            env.update(pin_worker(f"gw{index}", gpus))
            gpu = gpus[index % len(gpus)]
            env["TETHER_GPU_INDEX"] = str(gpu.index)
            env["TETHER_GPU_UUID"] = gpu.uuid or ""
        else:
            env["TETHER_GPU_INDEX"] = str(index)
        cmd = [sys.executable, __file__, args.name, "--worker", str(index)]
        cmd += ["--shards", str(count), "--shard-dir", str(shard_dir), "--root", str(args.root)]
        procs.append(subprocess.Popen(cmd, env=env))
    codes = [p.wait() for p in procs]
    if any(codes):
        print(f"sharded sweep {args.name}: worker exit codes {codes}; shards kept in {shard_dir}",
              file=sys.stderr)  # fmt: skip
        return 75 if all(c in (0, 75) for c in codes) else 1
    merged = merge_shards(sorted(shard_dir.glob("*.shard*.json")))
    path = write_run(merged, args.store)
    print(
        f"sweep {args.name}: {merged.status} ({len(merged.cells)} cells, {count} shards) -> {path}"
    )
    return 0 if merged.status == "ok" else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="sweep name (validate/sweeps/)")
    parser.add_argument("--shards", type=int, default=0, help="default: one per visible GPU")
    parser.add_argument("--shard-dir", type=Path, help="where shards go (default: a temp dir)")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the tether checkout")
    parser.add_argument("--store", type=Path, help="results store (default: ROOT/results)")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.root = args.root.resolve()
    args.store = (args.store or args.root / "results").resolve()
    if args.worker is not None:
        return _worker(args)
    return _launch(args)


if __name__ == "__main__":
    from tether.errors import TetherError, exit_code_for

    try:
        sys.exit(main())
    except TetherError as exc:
        print(f"sharded_sweep: error: {exc}", file=sys.stderr)
        sys.exit(exit_code_for(exc))
