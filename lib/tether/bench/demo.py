"""``tether demo``: measure a small sweep under the guard, then render the docs from it.

Without a GPU it runs the ``cpu-demo`` sweep into a scratch store (``./scratch/results``) and
renders into ``./scratch/docs``, so a newcomer sees the whole pipeline (guard, engine with its
A/A control, store, render) in well under a minute. On a GPU host it runs the main GPU sweep
into the repository's store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tether.errors import TetherError

CPU_SWEEP = "cpu-demo"
GPU_SWEEP = "prefill-triton-vs-sdpa"


@dataclass
class DemoResult:
    run: Any
    store: Path
    docs: Path | None
    written: list[Path]


def _acquire() -> Any:
    try:
        from tether.guard import acquire
    except ImportError:
        try:
            from tether.guard.api import acquire
        except ImportError as exc:
            raise TetherError(f"tether demo needs the guard (tether.guard.acquire): {exc}") from exc
    return acquire


def run_demo(
    root: Path,
    *,
    store: Path | None = None,
    docs: Path | None = None,
    target: Any = None,
    err: TextIO | None = None,
    lock_path: Path | None = None,
    wait_s: float = 30.0,
) -> DemoResult:
    """Run the demo sweep for this host under the guard and render docs from its store."""
    from tether.bench.sweep import Target, load_sweep, run_sweep

    acquire = _acquire()
    target = target or Target.detect()
    on_cpu = target.device == "cpu"
    sweep = load_sweep(CPU_SWEEP if on_cpu else GPU_SWEEP, root)
    store = store or (root / "scratch" / "results" if on_cpu else root / "results")
    docs = docs or (root / "scratch" / "docs" if on_cpu else None)
    kwargs: dict[str, Any] = {"target": "cpu" if on_cpu else "auto", "wait_s": wait_s}
    kwargs.update(purpose=f"tether demo {sweep.name}", err=err)
    if lock_path is not None:
        kwargs["lock_path"] = lock_path
    with acquire(**kwargs) as holding:
        run = run_sweep(sweep, store=store, root=root, target=target, holding=holding, err=err)
    written: list[Path] = []
    if docs is not None:
        from tether.render import write_all

        written = list(write_all(root, store, out_root=docs))
    return DemoResult(run=run, store=store, docs=docs, written=written)
