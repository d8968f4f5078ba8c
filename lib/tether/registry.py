"""Open registries: the arms, cases, sweeps, probes and arches a project gives tether.

tether knows nothing about any project's kernels. A project names, in its ``[tool.tether]``
table, the modules that declare them (``plugins = ["my_kernels.bench"]``); importing those
modules registers their arms, case models, sweeps and probes here, through the functions
below (usable as decorators). Installed packages may add more through the ``tether.plugins``
entry-point group (each entry point names a module to import).

    from tether import registry

    @registry.case("rmsnorm")
    def rmsnorm_case(fields): ...            # fields -> a Case

    registry.arm(MyArm("torch_ops"))         # an object with the Arm protocol
    registry.sweep(Sweep(name="rms", case="rmsnorm", axes=..., arms=..., unit="B"))

The two protocols below are the whole contract between tether's bench and a project.
Thresholds and gates are policy data the check judges; they live in the project's policy file
(``[tool.tether] policy``), not here.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Protocol, TypeVar, runtime_checkable

from tether.arch import check_arch
from tether.errors import ArmUnavailableError, UsageError

ENTRY_POINT_GROUP = "tether.plugins"


@runtime_checkable
class Case(Protocol):
    """One cell of a grid, as the project models it.

    ``work``: what one call does, in the sweep's unit (FLOPs, bytes, rows, ...): the one
    formula every rate is computed from. ``fields()``: the cell's full description (its key
    over the grid's fixed values), which populations and gates match against.
    ``inputs(device, seed)``: allocate and fill everything a call needs, before timing.
    ``reach(arch)``: which public entry points produce this cell and which arm each one's
    router picks there (``{}`` when the project has no router).
    """

    work: float

    def fields(self) -> Mapping[str, Any]: ...

    def inputs(self, device: str, seed: int) -> Any: ...

    def reach(self, arch: str) -> Mapping[str, Any]: ...


@runtime_checkable
class Arm(Protocol):
    """One way to run a case. ``prepare`` allocates what it needs and returns a no-argument
    callable that only launches (the engine times that callable); an arm that cannot serve
    a case raises ``tether.errors.ArmUnavailableError`` with the reason, never falls back.
    ``kernels_on(arch)``: regexes of the profiler kernel names the arm should run there
    (``()``: not checked); ``allowed_kernels``: names tolerated beside them (a memset)."""

    name: str
    allowed_kernels: tuple[str, ...]

    def supports(self, case: Any, arch: str) -> str | None: ...

    def prepare(self, case: Any, inputs: Any, arch: str) -> Callable[[], Any]: ...

    def kernels_on(self, arch: str) -> tuple[str, ...]: ...


@runtime_checkable
class Compiler(Protocol):
    """What ``tether compile`` needs of a project's compiler: the arches it compiles for
    (``targets``), its key (``compiler``: the compiler a stored run must have been made by,
    ``triton 3.6.0``, to stand for this one; tether.freshness then judges whether the run
    still describes the checkout), and one compile run per arch (not yet written). tether
    imports no kernel library itself."""

    name: str
    targets: Mapping[str, Any]

    def key(self, root: Any) -> dict[str, str]: ...

    def compile_arch(
        self, arch: str, root: Any, *, workers: int | None = None, err: Any = None
    ) -> Any: ...


CaseFactory = Callable[[Mapping[str, Any]], Case]
ArmChoice = str | tuple[str, ...]  # one arm, or candidates: the first that serves every cell


@dataclass(frozen=True)
class Sweep:
    """A sweep as data: a grid (free-form axes over fixed values), arms by role, the case
    model that turns a cell's fields into a Case, and the unit its work is counted in.

    Roles: B is the arm under test, A the one it is compared with; the engine adds A2, a
    second instance of A (the A/A control). ``replicates``: how many times the grid is
    measured over the run (replicate blocks, each with fresh inputs), so every verdict can
    be judged against how much a cell moves between blocks. ``published``: the documents
    cite this sweep (a demonstration sweep may set it False).
    """

    name: str
    case: str
    axes: Mapping[str, tuple[Any, ...]]
    fixed: Mapping[str, Any]
    arms: Mapping[str, ArmChoice]
    unit: str = "FLOP"
    entry_points: tuple[str, ...] = ()
    timing: Any = None  # tether.bench.engine.TimingPolicy (None: the engine's defaults)
    needs_gpu: bool = True
    replicates: int = 2
    kind: str = "sweep"  # or "tune": a grid of candidate configs against a reference arm
    published: bool = True
    description: str = ""
    # Axes that stand for other fields, recorded in the run so populations and gates match by
    # the fields they mean: {"seqlen": ("qo_len", "kv_len")} for a square call's length.
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # An axis is a sequence of values: a bare value (head_dim 256 meant as fixed) would
        # otherwise stop the sweep deep in itertools.product, on the GPU host, with a
        # TypeError that names neither the sweep nor the axis.
        for axis, values in self.axes.items():
            if not isinstance(values, tuple | list) or not values:
                raise UsageError(
                    f"sweep {self.name!r}: axis {axis!r} must be a non-empty tuple of values, "
                    f"got {values!r} (a single value belongs in fixed)"
                )

    def keys(self) -> list[dict[str, Any]]:
        names = list(self.axes)
        return [
            dict(zip(names, combo, strict=True)) for combo in itertools.product(*self.axes.values())
        ]

    def replace(self, **changes: Any) -> Sweep:
        return dataclasses.replace(self, **changes)

    def fields(self, key: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.fixed, **key}


@dataclass(frozen=True)
class Bound:
    """A ceiling measured in the same run as a probe: ``prepare(device)`` returns a call that
    does ``work`` units of work (a dense matmul, a device copy), timed by the same engine."""

    label: str
    work: float
    what: str
    prepare: Callable[[str], Callable[[], Any]]


@dataclass(frozen=True)
class Probe:
    """A sweep whose cells are reported as a fraction of bounds measured in the same run;
    a cell is judged against the bound whose label is the value of its ``bound_field``
    (its own dtype's, say), never another's."""

    sweep: Sweep
    bounds: Callable[[str], tuple[Bound, ...]]  # device -> the bounds to measure
    bound_field: str


@dataclass(frozen=True)
class ArchInfo:
    """What a project says about an arch: a readable description for the documents."""

    name: str
    description: str = ""


@dataclass
class Registry:
    arms: dict[str, Arm] = field(default_factory=dict)
    cases: dict[str, CaseFactory] = field(default_factory=dict)
    sweeps: dict[str, Sweep] = field(default_factory=dict)
    probes: dict[str, Probe] = field(default_factory=dict)
    arches: dict[str, ArchInfo] = field(default_factory=dict)
    compilers: dict[str, Compiler] = field(default_factory=dict)
    modules: set[str] = field(default_factory=set)

    def get_arm(self, name: str) -> Arm:

        try:
            return self.arms[name]
        except KeyError:
            known = ", ".join(sorted(self.arms)) or "none registered"
            raise ArmUnavailableError(f"unknown arm {name!r}; known: {known}") from None

    def get_sweep(self, name: str) -> Sweep:
        try:
            return self.sweeps[name]
        except KeyError:
            known = ", ".join(sorted(self.sweeps)) or "none registered"
            raise UsageError(f"sweep {name!r}: not registered (known: {known})") from None

    def get_probe(self, name: str) -> Probe:
        try:
            return self.probes[name]
        except KeyError:
            known = ", ".join(sorted(self.probes)) or "none registered"
            raise UsageError(f"probe {name!r}: not registered (known: {known})") from None

    def make_case(self, name: str, fields: Mapping[str, Any]) -> Case:
        try:
            factory = self.cases[name]
        except KeyError:
            known = ", ".join(sorted(self.cases)) or "none registered"
            raise UsageError(f"case model {name!r}: not registered (known: {known})") from None
        return factory(fields)


REGISTRY = Registry()
T = TypeVar("T")


def _add(table: dict[str, Any], name: str, obj: Any, what: str) -> None:
    old = table.get(name)
    if old is not None and old is not obj and old != obj:
        raise UsageError(f"{what} {name!r} is registered twice")
    table[name] = obj


def arm(obj: T) -> T:
    """Register an arm (an object with the Arm protocol); returns it, so it decorates too."""
    if not isinstance(obj, Arm):
        raise UsageError(f"{obj!r} does not have the Arm protocol (tether.registry.Arm)")
    _add(REGISTRY.arms, obj.name, obj, "arm")
    return obj


def case(name: str) -> Callable[[CaseFactory], CaseFactory]:
    """Decorator: register ``fn(fields) -> Case`` as the case model ``name``."""

    def deco(fn: CaseFactory) -> CaseFactory:
        _add(REGISTRY.cases, name, fn, "case model")
        return fn

    return deco


def sweep(obj: Sweep) -> Sweep:
    """Register a sweep definition."""
    _add(REGISTRY.sweeps, obj.name, obj, "sweep")
    return obj


def probe(obj: Probe) -> Probe:
    """Register a probe (its sweep is registered too)."""
    _add(REGISTRY.probes, obj.sweep.name, obj, "probe")
    return obj


def compiler(obj: T) -> T:
    """Register a compiler (an object with the Compiler protocol) for ``tether compile``."""
    if not isinstance(obj, Compiler):
        raise UsageError(f"{obj!r} does not have the Compiler protocol (tether.registry.Compiler)")
    _add(REGISTRY.compilers, obj.name, obj, "compiler")
    return obj


def arch(name: str, description: str = "") -> ArchInfo:
    """Register what the project says about an arch (its name must be a valid arch name)."""

    info = ArchInfo(check_arch(name), description)
    _add(REGISTRY.arches, name, info, "arch")
    return info


def load(plugins: Iterable[str], *, entry_points: bool = True) -> Registry:
    """Import the project's plugin modules (and the ``tether.plugins`` entry points), so their
    registrations run; returns the registry. A module that fails to import is an error
    naming it, never skipped."""
    names = list(plugins)
    if entry_points:
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            names.append(ep.value.split(":", 1)[0])
    for name in names:
        if name in REGISTRY.modules:
            continue
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise UsageError(
                f"plugin module {name!r} (from [tool.tether] plugins or the "
                f"{ENTRY_POINT_GROUP} entry points) cannot be imported: {exc}"
            ) from exc
        REGISTRY.modules.add(name)
    return REGISTRY


def for_project(project: Any) -> Registry:
    """The registry with ``project``'s plugins loaded, and its headline checked against it.

    Plugins import from the project root first, as they do under ``python -m tether`` run
    there: the ``tether`` console script's sys.path holds only its own folder, so a module in
    a folder that is not an installed package (``benchmark.tether_bench``) would not import.
    """
    root = str(project.root)
    if root not in sys.path:
        sys.path.insert(0, root)
    reg = load(project.plugins)
    headline = getattr(project, "headline", None)
    if headline and headline not in reg.sweeps:
        known = ", ".join(sorted(reg.sweeps)) or "none registered"
        raise UsageError(
            f"{project.root / 'pyproject.toml'}: [tool.tether] headline {headline!r} is not a "
            f"registered sweep (registered by the plugins: {known})"
        )
    return reg
