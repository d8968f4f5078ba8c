"""The ``results`` summary of each run kind, as typed records: one definition per shape.

The schema's per-kind table of required and optional ``results`` fields (``schema.RESULTS``,
``schema.OPTIONAL_RESULTS``) is derived from these dataclasses' fields, so a field is added
in one place. ``from_json`` builds a record from a run's ``results`` (a RunFileError names
the field), ``to_json`` gives the file's form (optional fields left out when absent).

    VerifyResults.from_json(run.results, run.path).passed
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, fields
from typing import Any, ClassVar, TypeVar

from tether.errors import RunFileError

NUM: tuple[type, ...] = (int, float)
# A field's annotation (as written below) -> (accepted JSON types, how an error names them).
_TYPES: dict[str, tuple[tuple[type, ...], str]] = {
    "int": ((int,), "int"),
    "float": (NUM, "number"),
    "str": ((str,), "string"),
    "bool": ((bool,), "bool"),
    "Mapping[str, Any]": ((dict,), "object"),
    "Mapping[str, int]": ((dict,), "object"),
    "tuple[str, ...]": ((list,), "list"),
}

Spec = dict[str, tuple[tuple[type, ...], str]]
R = TypeVar("R", bound="Results")


class Results:
    """Shared behaviour of the typed summaries (a mixin of frozen dataclasses)."""

    KIND: ClassVar[str]
    # Every subclass is a dataclass (declared here so ``fields`` accepts the mixin's types).
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]

    @classmethod
    def required(cls) -> Spec:
        """The fields every ok run of the kind carries, with their JSON types."""
        return {f.name: _TYPES[str(f.type)] for f in fields(cls) if f.default is MISSING}

    @classmethod
    def optional(cls) -> Spec:
        """The fields checked when present (annotated ``X | None = None``)."""
        return {
            f.name: _TYPES[str(f.type).removesuffix(" | None")]
            for f in fields(cls)
            if f.default is not MISSING
        }

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, Any], source: object = "<run>") -> R:
        """The record of a run's ``results``; RunFileError names a missing or mistyped field."""
        values: dict[str, Any] = {}
        for name, (types, desc) in {**cls.required(), **cls.optional()}.items():
            if name not in data:
                if name in cls.required():
                    raise RunFileError(source, f"results.{name}", "missing")
                continue
            value = data[name]
            if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
                raise RunFileError(
                    source, f"results.{name}", f"expected {desc}, got {type(value).__name__}"
                )
            values[name] = tuple(value) if isinstance(value, list) else value
        return cls(**values)

    def to_json(self) -> dict[str, Any]:
        """The ``results`` object of the run file (absent optional fields left out)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.default is not MISSING:
                continue
            out[f.name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclass(frozen=True)
class VerifyResults(Results):
    """What ``tether verify`` recorded: the suite's counts, where and how it ran."""

    KIND: ClassVar[str] = "verify"
    passed: int
    failed: int
    skipped: int
    errors: int
    duration_s: float
    suite: str
    vendor: str  # cuda | rocm | cpu
    workers: int
    complete: bool  # the whole suite ran (not a selection)
    # The routed public-API cases the suite ran, by the arm the router picked.
    routed_cases: Mapping[str, int] | None = None
    selection: tuple[str, ...] | None = None  # extra pytest arguments that narrowed the run
    gpus: int | None = None  # how many GPUs the suite's workers were spread over
    # The failed tests' node ids as the suite reported them (a setup or teardown error with
    # its phase in brackets), also when it was cut off before its summary.
    failures: tuple[str, ...] | None = None
    # pytest ended with a nonzero status that no failed or erroring test explains: interrupted
    # (a deadline's SIGINT, Ctrl-C: its junit xml then holds only the tests run until then),
    # killed before its summary, or an error outside every test. The counts are what ran.
    stopped: bool | None = None


@dataclass(frozen=True)
class GateResults(Results):
    """What a gate run was judged against (its verdict is recomputed from its samples)."""

    KIND: ClassVar[str] = "gate"
    threshold: float  # in the sweep's unit per second
    gate: str
    shape: str
    policy: str  # the file that declares the gate


@dataclass(frozen=True)
class ProbeResults(Results):
    """A probe's bounds, with their raw samples (rates are recomputed)."""

    KIND: ClassVar[str] = "probe"
    bounds: Mapping[str, Any]


@dataclass(frozen=True)
class CompileResults(Results):
    """What the compiler made of every kernel variant of one kernel on one arch."""

    KIND: ClassVar[str] = "compile"
    compiler: str
    compiler_version: str
    target: str
    variants: int
    spills_total: int
    variants_spilling: int
    variants_over_lds: int
    variants_loop_without_matrix: int
    occupancy_min: int
    occupancy_max: int
    occupancy_unit: str
    seconds: float

    @property
    def made_by(self) -> str:
        """The compiler as a run is matched by (``triton 3.6.0``)."""
        return f"{self.compiler} {self.compiler_version}"


# kind -> its typed summary; sweeps and tuning runs carry no summary (every number in them is
# recomputed from their samples).
BY_KIND: dict[str, type[Results]] = {
    cls.KIND: cls for cls in (VerifyResults, GateResults, ProbeResults, CompileResults)
}

__all__ = [
    "BY_KIND",
    "CompileResults",
    "GateResults",
    "ProbeResults",
    "Results",
    "VerifyResults",
]
