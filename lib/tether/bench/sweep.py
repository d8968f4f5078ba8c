"""Measuring a grid: every cell of a sweep, in replicate blocks, into one run of the store.

A ``Bench`` is where measurements happen: the project and its registry, the device (the
``Target``), the host hold (``Holding``, from the guard), and the store runs go to. Its
``sweep`` method measures a registered sweep; gates, probes and tuning grids use the same loop
(``measure_grid``) and the same run builder (``Run.new``).

Replicate blocks: the grid is measured ``replicates`` times over the run, each pass with fresh
inputs and freshly prepared (and captured) arms, so a cell's ratio can be judged against how
much it moves between passes (allocation placement, clocks, power), not only against its
within-pass A/A floor. A cell's samples are its blocks' samples in time order.

The grid stays exact: an arm that cannot serve a cell makes the run ``rejected`` with the
reason. Ctrl-C writes what was measured as a ``rejected`` run ("interrupted after k of n
cells", axes emptied so it validates as a partial record) and re-raises.
"""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from tether.arch import from_compute_capability, parse_gcn_arch
from tether.bench.engine import Probes, TimingPolicy, measure
from tether.bench.fidelity import Profile, check_launches
from tether.bench.progress import SweepProgress
from tether.errors import ArmUnavailableError, NotRunHereError, UsageError
from tether.registry import Registry, Sweep
from tether.store.model import CONTROL, UNGUARDED, Cell, GuardRecord, Run
from tether.store.safe import sanitize

ROLES = ("A", CONTROL, "B")


@dataclass(frozen=True)
class CellMeasurement:
    """One cell measured once (one replicate block): what ``Bench.measure_cell`` returns."""

    samples: dict[str, list[float]]  # seconds per call, by role
    flags: list[str]
    extra: dict[str, Any]
    kernels: dict[str, list[str]]  # what each role launched ({} when not profiled)


@dataclass(frozen=True)
class GridMeasurement:
    """A grid measured in replicate blocks: what ``Bench.measure_grid`` returns."""

    status: str  # "ok" or "rejected"
    reason: str | None
    arms: dict[str, str]  # by role
    cells: list[Cell]
    interrupted: bool  # stopped by Ctrl-C (the caller writes the run, then re-raises)


@dataclass
class _Blocks:
    """One cell's replicate blocks as they accumulate over the grid's passes."""

    samples: dict[str, list[float]] = field(default_factory=dict)
    blocks: list[int] = field(default_factory=list)  # samples per block
    flags: set[str] = field(default_factory=set)
    extra: list[dict[str, Any]] = field(default_factory=list)
    kernels: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Target:
    """Where a measurement runs: the arch name the store files it under and the torch device."""

    arch: str
    device: str  # "cuda" (CUDA or HIP through torch) or "cpu"
    device_name: str
    driver: str | None = None
    runtime: dict[str, str | None] = field(default_factory=dict)
    index: int | None = None  # the GPU index used (None on the CPU)

    @staticmethod
    def detect(index: int | None = None) -> Target:
        """The first visible GPU (or ``index``), else the CPU."""

        import torch

        if not torch.cuda.is_available():
            if index is not None:
                raise NotRunHereError(f"--device {index}: no GPU is visible on this host")
            return Target("cpu", "cpu", f"cpu: {platform.processor() or platform.machine()}")
        count = torch.cuda.device_count()
        if index is not None:
            if not 0 <= index < count:
                raise UsageError(f"--device {index}: this host has {count} visible GPU(s)")
            torch.cuda.set_device(index)

        current = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(current)
        if getattr(torch.version, "hip", None):
            arch = parse_gcn_arch(getattr(props, "gcnArchName", ""))
        else:
            arch = from_compute_capability(*torch.cuda.get_device_capability(current))
        runtime = {
            "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None),
            "cudnn": str(torch.backends.cudnn.version()),
        }
        return Target(arch, "cuda", props.name, _driver(), runtime, current)


def _driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no NVML (ROCm, CPU): the driver is simply not known
        return None


def guard_record(holding: Any) -> GuardRecord:
    """The run's guard record from a live ``Holding`` (rechecked now: the ``after`` evidence)."""
    if holding is None:
        return UNGUARDED
    holding.recheck()
    return record_of(holding.evidence())


def record_of(ev: Mapping[str, Any]) -> GuardRecord:
    """A guard record from a Holding's ``evidence()`` dictionary."""
    return GuardRecord(
        mode="nested" if ev["nested"] else "held",
        lock=ev["lock"],
        holder=ev["holder"],
        before=ev["before"],
        after=ev["after"],
        arms=tuple(ev["arms"]),
        waited_s=float(ev["waited_s"]),
    )


def resolve_arms(sweep: Sweep, cases: list[Any], arch: str, registry: Registry) -> dict[str, str]:
    """Role -> arm name; for candidates, the first arm that serves every cell on ``arch``."""
    chosen: dict[str, str] = {}
    for role, choice in sweep.arms.items():
        candidates = (choice,) if isinstance(choice, str) else tuple(choice)
        reasons = []
        for name in candidates:
            try:
                arm = registry.get_arm(name)
            except ArmUnavailableError as exc:  # not registered here (an optional peer)
                reasons.append(f"{name}: {exc}")
                continue
            why = next((r for c in cases if (r := arm.supports(c, arch)) is not None), None)
            if why is None:
                chosen[role] = name
                break
            reasons.append(f"{name}: {why}")
        else:
            raise ArmUnavailableError(
                f"sweep {sweep.name}: no arm for role {role} serves every cell on {arch}: "
                + "; ".join(reasons)
            )
    if "B" not in chosen:
        raise UsageError(f"sweep {sweep.name}: arms must name role B (and A, except probes)")
    return chosen


def _expected(arm: Any, arch: str, case: Any = None) -> tuple[str, ...]:
    """The kernel names an arm should launch for ``case`` on ``arch``: an arm whose kernels
    depend on the cell (an entry point, which launches what its route picks) says so through
    ``kernels_for(case, arch)``; others through ``kernels_on(arch)``."""
    by_case = getattr(arm, "kernels_for", None)
    pats = tuple(by_case(case, arch)) if by_case is not None and case is not None else ()
    pats = pats or tuple(arm.kernels_on(arch))
    return pats + tuple(arm.allowed_kernels) if pats else ()


@dataclass
class Bench:
    """Where measurements happen, and where their runs go."""

    root: Path
    store: Path
    registry: Registry
    target: Target
    holding: Any = None  # tether.guard.api.Holding; None only when run --unguarded
    unguarded_reason: str | None = None
    err: TextIO | None = None
    probes: Probes | None = None
    profiler: Profile | None = None
    write: bool = True
    policy_overrides: Mapping[str, Any] = field(default_factory=dict)
    replicates: int | None = None  # overrides every sweep's replicate count

    # -- one cell ------------------------------------------------------------------------

    def measure_cell(
        self,
        sweep: Sweep,
        case: Any,
        arms: Mapping[str, str],
        timing: TimingPolicy,
        *,
        seed: int,
        label: str,
        profile: bool,
    ) -> CellMeasurement:
        """Prepare, time (and on the first block profile) one cell once."""
        target = self.target
        role_arm = (
            {"A": arms["A"], CONTROL: arms["A"], "B": arms["B"]} if "A" in arms else dict(arms)
        )
        # Every role gets buffer_sets instances of its call on distinct, identically laid-out
        # inputs; the engine rotates them (A and A2 never share one: see the engine docstring).
        fns: dict[str, list[Callable[[], object]]] = {role: [] for role in role_arm}
        for copy in range(timing.buffer_sets):
            for n, (role, name) in enumerate(role_arm.items()):
                inputs = case.inputs(target.device, seed=1000 * seed + 100 * copy + n)
                fns[role].append(self.registry.get_arm(name).prepare(case, inputs, target.arch))
        around = self.holding.arm(label) if self.holding is not None else nullcontext()
        with around as check:
            timing_out = measure(fns, timing, device=target.device, probes=self.probes, seed=seed)
        flags = list(timing_out.flags)
        extra = dict(timing_out.extra)
        build = {r: getattr(f[0], "build_s", None) for r, f in fns.items()}
        if any(v is not None for v in build.values()):
            # Arms that compile on first use (a JIT build) did so in prepare, outside timing.
            extra["build_s"] = {r: v for r, v in build.items() if v is not None}
        if check is not None and getattr(check, "contaminated", False):
            flags.append("contaminated")
        kernels: dict[str, list[str]] = {}
        if profile:
            expected = {
                role: _expected(self.registry.get_arm(name), target.arch, case)
                for role, name in role_arm.items()
            }
            first = {role: calls[0] for role, calls in fns.items()}
            kernels, strays, repeats = check_launches(first, expected, target.device, self.profiler)
            if repeats:
                flags.append("kernel_repeated")
                extra["repeated_kernels"] = repeats
            unchecked = sorted(r for r, pats in expected.items() if not pats)
            for role in unchecked:  # the arm declares nothing here: recorded, not judged
                strays.pop(role, None)
            if unchecked:
                extra["kernels_unchecked"] = unchecked
            if strays:
                flags.append("kernel_mismatch")
                extra["unexpected_kernels"] = strays
        return CellMeasurement(timing_out.samples, flags, extra, kernels)

    # -- a grid --------------------------------------------------------------------------

    def timing_of(self, sweep: Sweep) -> TimingPolicy:
        base = sweep.timing if sweep.timing is not None else TimingPolicy()
        if not self.policy_overrides:
            return base
        return TimingPolicy(**{**base.to_json(), **self.policy_overrides})

    def measure_grid(
        self, sweep: Sweep, only: Callable[[int], bool] | None = None
    ) -> GridMeasurement:
        """Measure every cell of ``sweep`` in replicate blocks (or, for a shard, the cells whose
        grid index ``only`` accepts; arms are resolved over the whole grid either way, and a
        cell's seeds come from its place in the whole grid, so shards compare with unsharded
        runs cell by cell).
        """

        if sweep.needs_gpu and self.target.device == "cpu":
            raise NotRunHereError(
                f"{sweep.kind} {sweep.name} needs a GPU; this host is {self.target.device_name}"
            )
        keys = sweep.keys()
        cases = [self.registry.make_case(sweep.case, sweep.fields(k)) for k in keys]
        mine = [i for i in range(len(keys)) if only is None or only(i)]
        timing = self.timing_of(sweep)
        blocks = max(1, self.replicates if self.replicates is not None else sweep.replicates)
        per_cell = [_Blocks() for _ in keys]
        status: str = "ok"
        reason: str | None = None
        arms: dict[str, str] = {}
        done = 0
        interrupted = False
        try:
            arms = resolve_arms(sweep, cases, self.target.arch, self.registry)
            with SweepProgress(len(mine) * blocks, sweep.name, self.err) as bar:
                for block in range(blocks):
                    for index in mine:
                        case = cases[index]
                        got = self.measure_cell(
                            sweep, case, arms, timing,
                            seed=timing.seed + index + 7919 * block,
                            label=f"{sweep.name}[{index}]#{block}",
                            profile=block == 0,
                        )  # fmt: skip
                        acc = per_cell[index]
                        for role, vals in got.samples.items():
                            acc.samples.setdefault(role, []).extend(vals)
                        acc.blocks.append(len(next(iter(got.samples.values()))))
                        acc.flags.update(got.flags)
                        acc.extra.append(got.extra)
                        acc.kernels = acc.kernels or got.kernels
                        done += 1
                        bar.advance({r: list(s) for r, s in got.samples.items()})
        except ArmUnavailableError as exc:
            status, reason = "rejected", f"arm unavailable: {exc}"
        except KeyboardInterrupt:
            status = "rejected"
            reason = f"interrupted after {done} of {len(mine) * blocks} cell blocks"
            interrupted = True
        cells = []
        for key, case, acc in zip(keys, cases, per_cell, strict=True):
            if not acc.blocks:
                continue
            cells.append(
                Cell(
                    key=dict(key),
                    work=float(case.work),
                    samples={r: tuple(v) for r, v in acc.samples.items()},
                    blocks=tuple(acc.blocks) if len(acc.blocks) > 1 else (),
                    kernels={r: tuple(k) for r, k in acc.kernels.items()},
                    reach=dict(case.reach(self.target.arch)),
                    flags=tuple(sorted(acc.flags)),
                    extra=_merge_extra(acc.extra),
                )
            )
        if status == "ok" and len(cells) != len(mine):
            status, reason = "rejected", f"{len(mine) - len(cells)} cells not measured"
        return GridMeasurement(status, reason, arms, cells, interrupted)

    # -- runs ----------------------------------------------------------------------------

    def guard(self) -> GuardRecord:
        if self.holding is None:
            return GuardRecord(mode="unguarded", reason=self.unguarded_reason or "run unguarded")
        return guard_record(self.holding)

    def write_run(self, run: Run) -> Run:
        if self.write:
            path = run.write(self.store)
            return run.with_path(path)
        return run

    def new_run(self, kind: str, name: str, **kwargs: Any) -> Run:
        """The one run builder for every measurement kind, with this bench's provenance."""
        return Run.new(
            kind, name, arch=self.target.arch, device=self.target.device_name,
            guard=self.guard(), root=self.root, runtime=self.target.runtime,
            driver=self.target.driver, **kwargs,
        )  # fmt: skip

    def sweep(
        self,
        sweep: Sweep,
        *,
        kind: str | None = None,
        results: Mapping[str, Any] | Callable[[list[Cell]], Mapping[str, Any]] | None = None,
        config_extra: Mapping[str, Any] | None = None,
    ) -> Run:
        """Measure ``sweep`` and write one run (kind ``sweep.kind`` unless given)."""
        started = time.time()
        grid = self.measure_grid(sweep)
        status, cells = grid.status, grid.cells
        axes = {k: list(v) for k, v in sweep.axes.items()} if status == "ok" else {}
        timing = self.timing_of(sweep)
        config = {
            "grid": {"axes": axes, "fixed": dict(sweep.fixed)},
            "arms": dict(
                grid.arms or {r: c if isinstance(c, str) else c[0] for r, c in sweep.arms.items()}
            ),
            "case": sweep.case,
            "unit": sweep.unit,
            "entry_points": list(sweep.entry_points),
            "timing": timing.to_json(),
            "replicates": max(
                1, self.replicates if self.replicates is not None else sweep.replicates
            ),
            "device_index": self.target.index,
            # The axes that stand for other fields (seqlen for qo_len and kv_len): without
            # them a population or a threshold on qo_len finds no cell of the run.
            **(
                {"aliases": {k: list(v) for k, v in sweep.aliases.items()}} if sweep.aliases else {}
            ),
            **(config_extra or {}),
        }
        if callable(results):
            results = results(cells) if status == "ok" else {}
        run = self.new_run(
            kind or sweep.kind, sweep.name, config=config, status=status,
            reason=_safe_reason(grid.reason), cells=cells, results=dict(results or {}),
            started=_stamp(started), ended=_stamp(time.time()),
        )  # fmt: skip
        run = self.write_run(run)
        if grid.interrupted:
            raise KeyboardInterrupt
        return run


def _merge_extra(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """One block's extra as is; several: the first block's, plus each block's own detail."""
    if not blocks:
        return {}
    if len(blocks) == 1:
        return dict(blocks[0])
    merged = dict(blocks[0])
    merged["blocks"] = [dict(b) for b in blocks]
    clocks = [b["clock_mhz"] for b in blocks if "clock_mhz" in b]
    if clocks:
        merged["clock_mhz"] = {
            "min": min(c["min"] for c in clocks),
            "max": max(c["max"] for c in clocks),
            "throttled": sum(c.get("throttled", 0) for c in clocks),
            "device_max": max(c.get("device_max", 0) for c in clocks),
        }
    return merged


def _stamp(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _safe_reason(reason: str | None) -> str | None:
    """Reasons reach Markdown: keep them on one line and free of table/markup characters."""

    return None if reason is None else sanitize(reason, 500) or "rejected"


def cell_rate(cell: Cell, role: str = "B") -> float:
    """Work per second of ``role`` in ``cell`` (median of its samples)."""

    return cell.work / statistics.median(cell.samples[role])


__all__ = [
    "ROLES",
    "Bench",
    "CellMeasurement",
    "GridMeasurement",
    "Target",
    "cell_rate",
    "guard_record",
    "resolve_arms",
]
