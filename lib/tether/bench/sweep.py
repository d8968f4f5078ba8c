"""Run a sweep definition (data, in ``validate/sweeps/``) into one run of the store.

A sweep is a grid (axes x fixed values), arms by role (A, B; A2 is always A again, with its
own inputs and its own graph: the A/A control), the entry points whose reach is recorded, and
a timing policy. Each cell is prepared, timed by the engine, profiled once for arm fidelity,
and its reach is taken from calling the router. The grid stays exact: an arm that cannot serve
a cell makes the whole run ``rejected`` with the reason.

Ctrl-C: the cells measured so far are written as a ``rejected`` run whose reason says
"interrupted after k of n cells" (its grid axes emptied to ``{}`` so it validates as a partial
record), then the interrupt propagates. Nothing is written as ``ok`` that is not the full grid.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import math
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tether.bench.engine import Probes, TimingPolicy, measure
from tether.bench.fidelity import Profile, check_arms
from tether.bench.progress import SweepProgress
from tether.errors import ArmUnavailableError, UsageError

ROLES = ("A", "A2", "B")
ArmChoice = (
    str | tuple[str, ...]
)  # one arm, or candidates: the first that serves the whole grid wins


@dataclass(frozen=True)
class SweepDef:
    """A sweep as data. ``axes`` are ordered; a ``seqlen`` axis means qo_len == kv_len."""

    name: str
    axes: Mapping[str, tuple[Any, ...]]
    fixed: Mapping[str, Any]
    arms: Mapping[str, ArmChoice]
    entry_points: tuple[str, ...] = ("single_prefill", "batch_prefill")
    timing: TimingPolicy = field(default_factory=TimingPolicy)
    needs_gpu: bool = True
    description: str = ""

    def keys(self) -> list[dict[str, Any]]:
        names = list(self.axes)
        return [
            dict(zip(names, combo, strict=True)) for combo in itertools.product(*self.axes.values())
        ]

    def replace(self, **changes: Any) -> SweepDef:
        return dataclasses.replace(self, **changes)


def shape_of(key: Mapping[str, Any], fixed: Mapping[str, Any]) -> Any:
    """The kernel Shape of one cell (``seqlen`` expands to qo_len and kv_len)."""
    from tether_kernels import Shape

    from tether.policy import shape_fields

    full = shape_fields(key, fixed)
    full.pop("seqlen", None)
    try:
        return Shape(**full)
    except TypeError as exc:
        raise UsageError(f"sweep cell {dict(key)}: not a shape: {exc}") from exc


def sweeps_dir(root: Path) -> Path:
    return root / "validate" / "sweeps"


def load_sweep(name: str, root: Path) -> SweepDef:
    """The ``SWEEP`` of ``validate/sweeps/<name with - as _>.py`` under ``root``."""
    path = sweeps_dir(root) / f"{name.replace('-', '_')}.py"
    if not path.is_file():
        known = ", ".join(list_sweeps(root)) or "none"
        raise UsageError(f"sweep {name!r}: no file {path} (known: {known})")
    spec = importlib.util.spec_from_file_location(f"tether_sweep_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise UsageError(f"sweep {name!r}: cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sweep = getattr(module, "SWEEP", None)
    if not isinstance(sweep, SweepDef):
        raise UsageError(f"{path}: SWEEP is missing or not a SweepDef")
    return sweep


def list_sweeps(root: Path) -> list[str]:
    folder = sweeps_dir(root)
    if not folder.is_dir():
        return []
    return sorted(p.stem.replace("_", "-") for p in folder.glob("*.py") if p.stem[0] != "_")


ArmLookup = Callable[[str], Any]  # arm name -> arm (tether_kernels.arms.get_arm, or a fake)


def _default_lookup() -> ArmLookup:
    from tether_kernels.arms import get_arm

    return get_arm


def resolve_arms(
    sweep: SweepDef, shapes: list[Any], arch: str, get_arm: ArmLookup | None = None
) -> dict[str, str]:
    """Role -> arm name; for candidates, the first arm that serves all the cells on ``arch``."""
    get_arm = get_arm or _default_lookup()
    chosen: dict[str, str] = {}
    for role, choice in sweep.arms.items():
        candidates = (choice,) if isinstance(choice, str) else tuple(choice)
        reasons = []
        for name in candidates:
            arm = get_arm(name)
            why = next((r for s in shapes if (r := arm.supports(s, arch)) is not None), None)
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


_TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}
# Device tensors of a role start on 2 MiB boundaries (the allocator's large-segment and huge
# page granule), so every role's inputs are placed alike; see the engine's docstring.
SLAB_ALIGN = {"cpu": 64}
DEVICE_ALIGN = 2 * 1024 * 1024


def make_inputs(shape: Any, device: str, seed: int) -> tuple[Any, Any, Any, Any]:
    """q [b, qo, hq, d], k and v [b, kv, hkv, d] and an output like q, all allocated now.

    The four live in one slab, each starting on an aligned address, so every role and buffer
    set gets the same layout: the same relative placement of q, k, v and the output.
    """
    import torch

    dtype = getattr(torch, _TORCH_DTYPES[shape.dtype])
    item = torch.empty((), dtype=dtype).element_size()
    align = SLAB_ALIGN.get(device, DEVICE_ALIGN) // item
    q_dims = (shape.batch, shape.qo_len, shape.hq, shape.head_dim)
    kv_dims = (shape.batch, shape.kv_len, shape.hkv, shape.head_dim)
    dims = (q_dims, kv_dims, kv_dims, q_dims)
    sizes = [int(math.prod(d)) for d in dims]
    starts, total = [], 0
    for n in sizes:
        starts.append(total)
        total += -(-n // align) * align
    # One spare granule, so the slab's own start can be moved onto an aligned address whatever
    # the allocator handed out.
    raw = torch.empty(total + align, dtype=dtype, device=device)
    shift = (-raw.data_ptr() % (align * item)) // item
    slab = raw[shift : shift + total]
    q, k, v, out = (slab[s : s + n].view(d) for s, n, d in zip(starts, sizes, dims, strict=True))
    # Generated on the device: the largest cells hold about a GiB of inputs per role.
    gen = torch.Generator(device=device).manual_seed(seed)
    for t in (q, k, v):
        t.normal_(generator=gen)
    out.zero_()
    return q, k, v, out


def reach_of(shape: Any, entry_points: tuple[str, ...], arch: str) -> dict[str, Any]:
    """Which of the sweep's entry points reach this cell, and the arm the router picks there."""
    from tether_kernels import reachable_entry_points, route

    reached = [e for e in reachable_entry_points(shape) if e in entry_points]
    return {"entry_points": reached, "routes": {e: route(e, shape, arch) for e in reached}}


@dataclass
class Target:
    """Where a sweep runs: the arch name the store files it under and the torch device."""

    arch: str
    device: str
    device_name: str
    driver: str | None = None
    runtime: dict[str, str | None] = field(default_factory=dict)

    @staticmethod
    def detect() -> Target:
        import torch
        from tether_kernels.arch_caps import detect_arch

        arch = detect_arch()
        if arch == "cpu" or not torch.cuda.is_available():
            import platform

            return Target("cpu", "cpu", f"cpu: {platform.processor() or platform.machine()}")
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        runtime = {
            "cuda": torch.version.cuda,
            "hip": getattr(torch.version, "hip", None),
            "cudnn": str(torch.backends.cudnn.version()),
        }
        return Target(arch, "cuda", props.name, _driver(), runtime)


def _driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # no NVML (ROCm, CPU): the driver is simply not known
        return None


def measure_cell(
    sweep: SweepDef,
    key: Mapping[str, Any],
    arms: Mapping[str, str],
    target: Target,
    *,
    index: int,
    probes: Probes | None = None,
    profiler: Profile | None = None,
    holding: Any = None,
    get_arm: ArmLookup | None = None,
) -> Any:
    """Prepare, time and profile one cell; returns a ``tether.store`` Cell."""
    from tether_kernels import flops

    from tether.store.model import Cell

    get_arm = get_arm or _default_lookup()

    shape = shape_of(key, sweep.fixed)
    role_arm = {"A": arms["A"], "A2": arms["A"], "B": arms["B"]} if "A" in arms else dict(arms)
    # Every role gets buffer_sets instances of its call on distinct, identically laid-out
    # inputs; the engine rotates them (A and A2 never share one: see the engine docstring).
    fns: dict[str, list[Callable[[], object]]] = {role: [] for role in role_arm}
    for copy in range(sweep.timing.buffer_sets):
        for n, (role, name) in enumerate(role_arm.items()):
            q, k, v, out = make_inputs(shape, target.device, seed=1000 * index + 100 * copy + n)
            fns[role].append(get_arm(name).prepare(q, k, v, shape, out=out, arch=target.arch))
    seed = sweep.timing.seed + index
    around = holding.arm(f"{sweep.name}[{index}]") if holding is not None else nullcontext()
    with around as check:
        timing = measure(fns, sweep.timing, device=target.device, probes=probes, seed=seed)
    flags = list(timing.flags)
    extra = dict(timing.extra)
    if check is not None and getattr(check, "contaminated", False):
        flags.append("contaminated")
    expected = {role: _expected(get_arm(name), target.arch) for role, name in role_arm.items()}
    first = {role: calls[0] for role, calls in fns.items()}
    kernels, strays = check_arms(first, expected, target.device, profiler)
    unchecked = sorted(r for r, pats in expected.items() if not pats)
    for role in unchecked:  # the arm declares nothing here: recorded, not judged
        strays.pop(role, None)
    if unchecked:
        extra["kernels_unchecked"] = unchecked
    if strays:
        flags.append("kernel_mismatch")
        extra["unexpected_kernels"] = strays
    return Cell(
        key=dict(key),
        flops=flops(shape),
        samples={r: tuple(s) for r, s in timing.samples.items()},
        kernels={r: tuple(k) for r, k in kernels.items()},
        reach=reach_of(shape, sweep.entry_points, target.arch),
        flags=tuple(flags),
        extra=extra,
    )


def _expected(arm: Any, arch: str) -> tuple[str, ...]:
    """Regexes an arm may run on ``arch``: its kernels there plus what it allows everywhere."""
    on = getattr(arm, "expected_kernels_on", None)
    pats = tuple(on(arch)) if callable(on) else tuple(arm.expected_kernels)
    if not pats:
        return ()
    return pats + tuple(getattr(arm, "allowed_kernels", ()))


def run_sweep(
    sweep: SweepDef,
    *,
    store: Path,
    root: Path,
    target: Target | None = None,
    holding: Any = None,
    err: TextIO | None = None,
    probes: Probes | None = None,
    profiler: Profile | None = None,
    kind: str = "sweep",
    write: bool = True,
    get_arm: ArmLookup | None = None,
    results: dict[str, Any] | Callable[[list[Any]], dict[str, Any]] | None = None,
    config_extra: dict[str, Any] | None = None,
) -> Any:
    """Measure the cells of ``sweep`` and write one run; returns the ``tether.store`` Run.

    ``kind`` and ``results`` let probes and gates reuse the same loop (see SCHEMA.md);
    ``config_extra`` adds free-form keys to the run's config (a gate records its policy there).
    """
    from tether.store import new_run, write_run

    target = target or Target.detect()
    if sweep.needs_gpu and target.device == "cpu":
        raise UsageError(f"sweep {sweep.name} needs a GPU; this host is {target.device_name}")
    keys = sweep.keys()
    shapes = [shape_of(k, sweep.fixed) for k in keys]
    started = time.time()
    status, reason, cells = "ok", None, []
    arms: dict[str, str] = {}
    interrupted = False
    try:
        arms = resolve_arms(sweep, shapes, target.arch, get_arm)
        with SweepProgress(len(keys), sweep.name, err) as bar:
            for index, key in enumerate(keys):
                cell = measure_cell(
                    sweep, key, arms, target, index=index, probes=probes,
                    profiler=profiler, holding=holding, get_arm=get_arm,
                )  # fmt: skip
                cells.append(cell)
                bar.advance({r: list(s) for r, s in cell.samples.items()})
    except ArmUnavailableError as exc:
        status, reason = "rejected", f"arm unavailable: {exc}"
    except KeyboardInterrupt:
        status, reason = "rejected", f"interrupted after {len(cells)} of {len(keys)} cells"
        interrupted = True
    axes = {k: list(v) for k, v in sweep.axes.items()} if status == "ok" else {}
    config = {
        "grid": {"axes": axes, "fixed": dict(sweep.fixed)},
        "arms": dict(arms or {r: c if isinstance(c, str) else c[0] for r, c in sweep.arms.items()}),
        "entry_points": list(sweep.entry_points),
        "timing": sweep.timing.to_json(),
        **(config_extra or {}),
    }
    evidence = holding.evidence() if holding is not None else {}
    if callable(results):
        results = results(cells) if status == "ok" else {}
    run = new_run(
        kind, sweep.name, arch=target.arch, device=target.device_name, config=config,
        status=status, reason=_safe_reason(reason), guard=evidence, cells=cells,
        results=dict(results or {}), started=_stamp(started), ended=_stamp(time.time()), root=root,
        runtime=target.runtime, driver=target.driver,
    )  # fmt: skip
    if write:
        write_run(run, store)
    if interrupted:
        raise KeyboardInterrupt
    return run


def _stamp(seconds: float) -> str:
    from datetime import datetime, timezone

    return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _safe_reason(reason: str | None) -> str | None:
    """Reasons reach Markdown: keep them on one line and free of table/markup characters."""
    if reason is None:
        return None
    for bad in "|<>[]`\r\n":
        reason = reason.replace(bad, " ")
    return " ".join(reason.split())[:500] or "rejected"
