"""The vocabulary of routing policy: populations, evidence predicates, thresholds and gates.

Pure data, no torch: the renderer and ``tether check`` import it on machines without a GPU.
``arch_caps.py`` holds the values; ``tether.stats`` evaluates the predicates against the store.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Comparison operators a population condition may use.
_OPS = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
}


def shape_fields(key: Mapping[str, object], fixed: Mapping[str, object]) -> dict[str, object]:
    """A cell's full shape: its key over the grid's fixed values; axis ``seqlen`` means square."""
    full = {**fixed, **key}
    if "seqlen" in full:
        full.setdefault("qo_len", full["seqlen"])
        full.setdefault("kv_len", full["seqlen"])
    return full


@dataclass(frozen=True)
class Population:
    """A named subset of a sweep's cells, e.g. reachable from single_prefill with qo_len >= 2048."""

    name: str
    entry: str | None = None  # keep cells whose reach.entry_points include this entry point
    # (field, op, value) over shape_fields; a value that names a field compares the two fields
    where: tuple[tuple[str, str, object], ...] = ()

    def admits(self, full_shape: Mapping[str, object], entry_points: tuple[str, ...]) -> bool:
        if self.entry is not None and self.entry not in entry_points:
            return False
        for name, op, value in self.where:
            # A value naming another shape field compares the two fields (kv_len > qo_len).
            if isinstance(value, str) and value in full_shape:
                value = full_shape[value]
            if name not in full_shape or not _OPS[op](full_shape[name], value):
                return False
        return True

    def describe(self) -> str:
        parts = []
        if self.entry:
            parts.append(f"reachable from {self.entry}")
        parts += [f"{n} {op} {v}" for n, op, v in self.where]
        return ", ".join(parts) or "whole map"


WHOLE_MAP = Population(name="whole-map")

# Predicate names tether.stats knows how to evaluate (tether.stats.PREDICATES).
#   "geomean_win": population geomean above 1 and above the population's A/A floor
#   "no_loss_outside_floor": no cell of the population is a loss judged against its own floor
#   "geomean_loss_or_level": the opposite of geomean_win (used to justify *not* routing)
PREDICATE_NAMES = ("geomean_win", "no_loss_outside_floor", "geomean_loss_or_level")


@dataclass(frozen=True)
class Evidence:
    """What a policy rests on: a sweep, a population of its cells, and a predicate over them."""

    sweep: str
    population: Population
    predicates: tuple[str, ...]


@dataclass(frozen=True)
class Threshold:
    """single_prefill takes ``arm`` at or above ``min_qo_len`` on ``arch``; None: never.

    ``region`` names the generated policy-comment region rendered above the value.
    ``chunked_only``: the threshold applies only when kv_len > qo_len (chunked prefill);
    square and shorter-key shapes are left to the arch's other thresholds.
    """

    region: str
    arch: str
    entry: str
    arm: str
    otherwise: str
    min_qo_len: int | None
    evidence: Evidence
    chunked_only: bool = False

    def applies(self, qo_len: int, kv_len: int) -> bool:
        """Whether this threshold speaks for a call of ``qo_len`` queries and ``kv_len`` keys."""
        return not self.chunked_only or kv_len > qo_len

    def takes_arm(self, qo_len: int, kv_len: int) -> bool:
        """Whether the call goes to ``arm``: the threshold applies and ``min_qo_len`` is reached."""
        return (
            self.applies(qo_len, kv_len)
            and self.min_qo_len is not None
            and qo_len >= self.min_qo_len
        )


@dataclass(frozen=True)
class Gate:
    """A throughput gate: ``arm`` on ``shape`` must clear ``threshold_tflops`` on ``arch``.

    The threshold sits between the ``before`` and ``after`` runs it was set from (run ids in
    the store); ``tether check`` verifies that it does. None: no evidence yet, the gate skips.
    """

    id: str
    region: str
    arch: str
    arm: str
    shape: Mapping[str, object]
    threshold_tflops: float | None
    before_run: str | None = None
    after_run: str | None = None
    # Which sample role of each cited run holds the measurement: "B" (the arm under test, as
    # in a probe or gate run) or "A" (the arm a sweep compares against, e.g. the SDPA path a
    # call took before the policy routed it to Triton).
    before_role: str = "B"
    after_role: str = "B"
    notes: tuple[str, ...] = field(default=())


@dataclass(frozen=True)
class CompileGate:
    """A compile gate: every variant of ``kernel`` compiled for ``arch`` must pass it.

    Judged against the newest ``compile`` run named ``kernel`` on ``arch``, whose cells are the
    kernel variants (their ``extra`` holds what the compiler reported). A variant fails when it
    spills more than ``max_spills`` registers, allocates more LDS / shared memory than one
    workgroup may (``lds_bytes`` over ``lds_limit_bytes``), or, for a dtype in
    ``matrix_dtypes`` (None: every dtype), has a main loop without a matrix instruction (a dot
    that fell back to scalar FMAs). ``region`` names the generated comment that cites the run
    above the arch's launch configs (None: no such region).
    """

    id: str
    arch: str
    kernel: str
    matrix_dtypes: tuple[str, ...] | None = None
    max_spills: int = 0
    region: str | None = None
    notes: tuple[str, ...] = field(default=())

    def failures(self, key: Mapping[str, object], extra: Mapping[str, object]) -> tuple[str, ...]:
        """Why one compiled variant (a compile cell's key and extra) fails; () when it passes."""
        out = []
        spills = int(extra["spills"])  # type: ignore[call-overload]
        if spills > self.max_spills:
            out.append(f"spilled registers: {spills}")
        lds, limit = int(extra["lds_bytes"]), int(extra["lds_limit_bytes"])  # type: ignore[call-overload]
        if lds > limit:
            out.append(f"LDS {lds} B over the {limit} B a workgroup may use")
        if self.matrix_dtypes is None or key.get("dtype") in self.matrix_dtypes:
            loops = list(extra["loops"])  # type: ignore[call-overload]
            if not loops:
                out.append("no main loop found in the compiled code")
            bare = [i for i, loop in enumerate(loops) if not loop["matrix"]]
            if bare:
                out.append(f"main loop(s) {bare} without a matrix instruction")
        return tuple(out)

    def judge(self, cells: Iterable[Any]) -> list[tuple[Mapping[str, object], tuple[str, ...]]]:
        """The variants of a compile run (its cells) that fail this gate, each with why."""
        out = []
        for cell in cells:
            key = cell["key"] if isinstance(cell, Mapping) else cell.key
            extra = cell["extra"] if isinstance(cell, Mapping) else cell.extra
            why = self.failures(key, extra)
            if why:
                out.append((key, why))
        return out
