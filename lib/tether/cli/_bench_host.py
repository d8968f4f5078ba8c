"""The bench a measuring verb holds the host with: timing knobs, the guard, the store's preflight.

Shared by ``tether sweep|tune|probe|gate|demo`` (cli/bench.py) and the sharded sweep's parent
and workers (cli/shards.py), so neither verb module imports the other. The timing engine and
the stop-signal wrapper are imported inside ``bench_for``: the verbs' parsers import this
module for KNOBS, and help must work without rich or torch (the base install).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tether import registry
from tether.cli import Context
from tether.errors import NotRunHereError
from tether.guard.api import HostUnavailable, acquire
from tether.guard.hold import write_not_measured
from tether.store.io import preflight
from tether.store.signing import configured_signer

# Timing knobs: option -> TimingPolicy field (see tether.bench.engine.TimingPolicy).
KNOBS = {
    "warmup": ("warmup_calls", int, "warm-up calls per arm before any timing"),
    "min_reps": ("min_reps", int, "fewest interleaved repetitions per cell"),
    "max_reps": ("max_reps", int, "most interleaved repetitions per cell"),
    "min_sample_s": ("min_sample_s", float, "shortest sample in seconds (calls are batched)"),
    "noise_target": ("noise_target", float, "stop a cell once every arm's IQR/median is below"),
    "cap_s": ("cell_cap_s", float, "stop a cell after sampling this many seconds"),
    "throttle_ratio": ("throttle_ratio", float, "flag samples under this fraction of max SM clock"),
}


def overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The timing policy fields the command line set (KNOBS), by field name."""
    out = {}
    for name, (field, _, _) in KNOBS.items():
        value = getattr(args, name, None)
        if value is not None:
            out[field] = value
    return out


def _not_measured(ctx: Context, exc: Any, kind: str, name: str) -> Path:
    """Record a refused attempt: in the scratch store unless --store named a store."""

    store = ctx.store if ctx.store_given else ctx.project.scratch / "results"
    return write_not_measured(exc, store, ctx.root, name=name, kind=kind)


@contextlib.contextmanager
def bench_for(
    ctx: Context,
    args: argparse.Namespace,
    purpose: str,
    kind: str,
    name: str,
    needs_gpu: bool = False,
) -> Iterator[Any]:
    """A Bench on this host, holding the guard unless --unguarded; refuses with exit 77 before
    taking anything when ``needs_gpu`` and the host has none."""
    from tether.bench.sweep import Target
    from tether.stopping import SafeBench, StopSignals

    # Before the host is held and anything measured: a store that cannot take the run
    # (read-only, full, another user's) is found now, not after the whole grid.
    preflight(ctx.store)
    configured_signer()  # a signing key set wrongly is said now, not after the grid
    reg = registry.for_project(ctx.project)
    target = Target.detect(getattr(args, "device", None))
    if needs_gpu and target.device == "cpu":
        raise NotRunHereError(f"{kind} {name} needs a GPU; this host is {target.device_name}")
    bench = SafeBench(
        root=ctx.root,
        store=ctx.store,
        registry=reg,
        target=target,
        err=None if getattr(args, "no_progress", False) else ctx.err,
        policy_overrides=overrides(args),
        replicates=getattr(args, "replicates", None),
    )
    # SIGINT, SIGTERM and SIGHUP unwind like Ctrl-C (a rejected run of the cells so far, then
    # the lock released and the holder record removed), however the verb is stopped; a signal
    # after the last cell waits until the run is written (tether.stopping).
    with StopSignals() as sigs:
        bench.signals = sigs
        try:
            if args.unguarded:
                bench.unguarded_reason = "run with --unguarded"
                print(
                    f"{kind} {name}: unguarded: the run is marked and is never evidence",
                    file=ctx.err,
                )
                yield bench
            else:
                with _held(
                    ctx, args, purpose, kind, name, target.device, acquire, HostUnavailable
                ) as holding:
                    bench.holding = holding
                    yield bench
            sigs.release()
        except KeyboardInterrupt as exc:
            raise sigs.as_raised(exc) from None


@contextlib.contextmanager
def _held(
    ctx: Context,
    args: argparse.Namespace,
    purpose: str,
    kind: str,
    name: str,
    device: str,
    acquire: Any,
    unavailable: type[Exception],
) -> Iterator[Any]:
    """The guard's hold for the block; a refusal is recorded as a not_measured run."""
    try:
        cm = acquire(
            target="cpu" if device == "cpu" else "auto",
            wait_s=args.wait,
            purpose=purpose,
            err=ctx.err,
        )
        holding = cm.__enter__()
    except unavailable as exc:
        path = _not_measured(ctx, exc, kind, name)
        print(f"{kind} {name}: not measured ({exc}); recorded {path}", file=ctx.err)
        raise
    try:
        yield holding
    finally:
        cm.__exit__(None, None, None)
