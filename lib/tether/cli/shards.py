"""``tether sweep NAME --shards N``: one sweep split over this host's GPUs, merged into one run.

The parent holds the host (the guard) for the whole sweep; the workers are its descendants, so
their holds nest under it. Each worker is pinned to its GPU through the visibility variables
before it imports torch, takes that GPU's lock, measures its cells (A, A2 and B of a cell
together) and writes a shard file. When every worker is done the shards are merged into one
run, validated by the store's rules, and written to the store. Shards stay on disk either
way, so a failed merge loses nothing that was measured.

A stop signal (SIGINT, SIGTERM, SIGHUP) sent to the parent is forwarded to every worker, as
the guard forwards it to its command: each writes the cells it measured (a rejected shard),
the parent merges them into one run, writes it, and only then exits by the signal. Before,
a SIGTERM or SIGHUP to the parent alone left it dead and its workers measuring on, and even a
Ctrl-C that reached them all left their shards unmerged: measured cells in no run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tether.bench.shard import merge_shards, run_shard
from tether.cli import Context
from tether.cli._bench_host import KNOBS, bench_for
from tether.errors import StoreError
from tether.gpus import hold_gpu_lock, list_gpus, pin_worker
from tether.guard.lock import held_env
from tether.stopping import Interrupted, StopSignals
from tether.store.signing import sign_written


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
    if bench.signals.raised is not None:
        # Stopped mid-grid: the shard holds the cells measured so far; exit by the signal.
        raise Interrupted(bench.signals.raised)
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
        sigs: StopSignals = parent.signals
        sigs.hold()  # a signal while the workers start is forwarded once they all run
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
        codes, stopped = _wait_forwarding(procs, sigs)
        sigs.hold()  # from here to the written run, a signal waits (bench_for raises it)
        if stopped is not None:
            return _merge_stopped(ctx, sweep.name, shard_dir, count, stopped)
        if any(codes):
            print(f"sweep {sweep.name}: worker exit codes {codes}; shards kept in {shard_dir}",
                  file=ctx.err)  # fmt: skip
            return 75 if all(c in (0, 75) for c in codes) else 1
        merged = merge_shards(sorted(Path(shard_dir).glob("*.shard*.json")))
        path = merged.write(ctx.store)
        sign_written(path, merged.digest, ctx.project.allowed_signers)
    print(
        f"sweep {sweep.name}: {merged.status} ({len(merged.cells)} cells, {count} shards, "
        f"guard {merged.guard.mode}) -> {path}",
        file=ctx.out,
    )
    return 0 if merged.status == "ok" else 1


def _wait_forwarding(
    procs: list[subprocess.Popen[bytes]], sigs: StopSignals
) -> tuple[list[int], int | None]:
    """Every worker's exit code, and the first stop signal the parent got meanwhile (None if
    none): each one is forwarded to the workers still running, which then write what they
    measured and exit, instead of measuring on for a parent that is gone."""
    stopped: int | None = None
    try:
        sigs.release()  # one that arrived while they started
    except Interrupted as exc:
        stopped = exc.signum
        _forward(procs, exc.signum)
    codes = []
    for proc in procs:
        while True:
            try:
                codes.append(proc.wait())
                break
            except Interrupted as exc:
                stopped = stopped or exc.signum
                _forward(procs, exc.signum)
    return codes, stopped


def _forward(procs: list[subprocess.Popen[bytes]], signum: int) -> None:
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signum)


def _merge_stopped(ctx: Context, name: str, shard_dir: Path, count: int, signum: int) -> int:
    """A stopped sweep: merge the shards the workers wrote on the way out into one (rejected)
    run and write it, then stop by ``signum``. A worker stopped before it wrote its shard
    leaves nothing to merge with: the shards stay on disk, named."""
    try:
        merged = merge_shards(sorted(Path(shard_dir).glob("*.shard*.json")))
    except StoreError as exc:
        print(f"sweep {name}: stopped; shards not merged ({exc}); kept in {shard_dir}",
              file=ctx.err)  # fmt: skip
    else:
        path = merged.write(ctx.store)
        sign_written(path, merged.digest, ctx.project.allowed_signers)
        print(
            f"sweep {name}: stopped; {merged.status} ({len(merged.cells)} cells, {count} "
            f"shards) -> {path}",
            file=ctx.out,
        )
    raise Interrupted(signum)


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
