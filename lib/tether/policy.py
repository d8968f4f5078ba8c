"""The vocabulary of policy: populations, evidence, routing thresholds, gates and tuned choices.

Pure data, no torch: the renderer and ``tether check`` read a project's policy file (its
``[tool.tether] policy``) on machines without a GPU. The project holds the values; tether
evaluates them against the store (``tether.stats``) and judges them (``tether.check``).

Conditions are ``(field, op, value)`` over a cell's fields (its key over the grid's fixed
values); a value that names another field compares the two fields (``("kv_len", ">",
"qo_len")``). A field named ``a/b`` is the pair of fields a and b, written ``"x/y"``
(``("hq/hkv", "in", ("32/8", "8/1"))``): a sweep axis of that name sets both fields at once,
so a grid can hold the head counts a model uses without their cross product. A field named
``a//b`` is a's value divided by b's where b divides it exactly (``hq//hkv``, the GQA group
size), missing otherwise, so a scope can state a ratio the kernel serves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.errors import UsageError

# Comparison operators a condition may use (operands are a cell's fields and the policy's
# values: whatever JSON or the policy file holds).
OPS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
    # membership in a listed set of values (a scope naming the dtypes or head dims it covers)
    "in": lambda a, b: a in b,
    # an inclusive range (lo, hi): a scope stating what a kernel serves (group sizes 1 to 16)
    "within": lambda a, b: b[0] <= a <= b[1],
}
Condition = tuple[str, str, object]


# A field name joining several fields (``hq/hkv``), and the value it has (``32/8``).
PAIR = "/"
# A field name dividing one field by another (``hq//hkv``): defined only where it divides.
RATIO = "//"
_MISSING = object()


def field_value(fields: Mapping[str, object], name: str) -> object:
    """The value of field ``name`` in ``fields``; for a pair ``a/b`` not itself present, the
    fields' values joined (``"32/8"``); ``_MISSING`` when a field is absent."""
    if name in fields:
        return fields[name]
    if RATIO in name:
        num, _, den = name.partition(RATIO)
        a, b = fields.get(num), fields.get(den)
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in (a, b))
        if not ok or b <= 0 or a % b:  # type: ignore[operator]
            return _MISSING
        return a // b  # type: ignore[operator]
    if PAIR in name:
        parts = name.split(PAIR)
        if all(p in fields for p in parts):
            return PAIR.join(str(fields[p]) for p in parts)
    return _MISSING


def holds(conditions: tuple[Condition, ...], fields: Mapping[str, object]) -> bool:
    """Whether every condition holds on ``fields`` (a missing field fails its condition)."""
    for name, op, value in conditions:
        if op != "in" and isinstance(value, str) and value in fields:
            value = fields[value]
        have = field_value(fields, name)
        if have is _MISSING:
            return False
        try:
            if not OPS[op](have, value):
                return False
        except TypeError:
            return False
    return True


def _part(text: str) -> object:
    try:
        return int(text)
    except ValueError:
        return text


def _value(value: object, op: str = "in") -> str:
    if op == "within" and isinstance(value, (tuple, list)) and len(value) == 2:
        return f"{value[0]} to {value[1]}"
    if isinstance(value, (tuple, list)):
        return "(" + " or ".join(str(v) for v in value) + ")"
    return str(value)


def describe(conditions: tuple[Condition, ...]) -> str:
    return ", ".join(f"{n} {op} {_value(v, op)}" for n, op, v in conditions)


def shape_fields(
    key: Mapping[str, object],
    fixed: Mapping[str, object],
    aliases: Mapping[str, Iterable[str]] | None = None,
) -> dict[str, object]:
    """A cell's fields: its key over the grid's fixed values, plus the fields its sweep declares
    as aliases of an axis (``{"seqlen": ["qo_len", "kv_len"]}``: a square call's length
    stands for both), so populations and gates match cells by the fields they mean. A pair
    axis ``a/b`` with value ``"x/y"`` sets a = x and b = y (ints where they parse)."""
    full = {**fixed, **key}
    for axis, names in (aliases or {}).items():
        if axis in full:
            for name in names:
                full.setdefault(name, full[axis])
    for axis, value in list(full.items()):
        if PAIR not in axis:
            continue
        names, parts = axis.split(PAIR), str(value).split(PAIR)
        if len(names) != len(parts) or not all(names) or not all(parts):
            raise UsageError(
                f"field {axis!r}: value {value!r} does not give one value per field "
                f"(write {PAIR.join('x' for _ in names)!r})"
            )
        for name, part in zip(names, parts, strict=True):
            if full.setdefault(name, _part(part)) != _part(part):
                raise UsageError(
                    f"field {axis!r} = {value!r} sets {name} = {part}, but {name} is "
                    f"{full[name]!r} already"
                )
    return full


@dataclass(frozen=True)
class Population:
    """A named subset of a sweep's cells, e.g. reachable from single_prefill with qo_len >= 2048.

    ``any_of``, when given, also requires one of its condition sets to hold: the union of
    several regions (the calls a policy's thresholds send to tether's kernels); empty, it
    admits no cell."""

    name: str
    entry: str | None = None  # keep cells whose reach.entry_points include this entry point
    where: tuple[Condition, ...] = ()
    any_of: tuple[tuple[Condition, ...], ...] | None = None

    def admits(self, fields: Mapping[str, object], entry_points: tuple[str, ...]) -> bool:
        if self.entry is not None and self.entry not in entry_points:
            return False
        if self.any_of is not None and not any(holds(c, fields) for c in self.any_of):
            return False
        return holds(self.where, fields)

    def describe(self) -> str:
        parts = [f"reachable from {self.entry}"] if self.entry else []
        if self.where:
            parts.append(describe(self.where))
        if self.any_of is not None:
            parts.append(
                "where "
                + (" or ".join(f"({describe(c) or 'every call'})" for c in self.any_of) or "none")
            )
        return ", ".join(parts) or "whole map"


def routed_population(entry: str, thresholds: Iterable[Threshold]) -> Population:
    """The cells a call of ``entry`` would be sent to tether's kernels for: the union of the
    set thresholds' regions for it (scope and takes)."""
    regions = tuple(
        th.scope + th.takes for th in thresholds if th.entry == entry and th.takes is not None
    )
    return Population(name=f"routed-{entry}", entry=entry, any_of=regions)


WHOLE_MAP = Population(name="whole-map")

# Predicate names tether.stats knows how to evaluate (tether.stats.PREDICATES).
#   "geomean_win": population geomean above 1 and above the population's noise (A/A floor and
#     replicate band)
#   "no_loss_outside_floor": no cell of the population is a loss judged against its own noise
#   "geomean_loss_or_level": the opposite of geomean_win (used to justify *not* routing)
PREDICATE_NAMES = ("geomean_win", "no_loss_outside_floor", "geomean_loss_or_level")


@dataclass(frozen=True)
class Evidence:
    """What a policy rests on: a sweep, a population of its cells, and predicates over them."""

    sweep: str
    population: Population
    predicates: tuple[str, ...]


@dataclass(frozen=True)
class Threshold:
    """An entry point takes ``arm`` on ``arch`` for calls where ``takes`` holds; else
    ``otherwise``.

    ``scope``: the calls this threshold speaks for at all (e.g. chunked prefill only,
    ``(("kv_len", ">", "qo_len"),)``); calls outside it are left to the arch's other
    thresholds. ``takes``: within the scope, the conditions that send a call to ``arm``;
    None means the threshold is not set (no call goes to ``arm``: the conservative start of
    every arch). The check requires ``scope + takes`` to lie inside the cells its evidence
    covers. ``region`` names the generated comment region rendered above the value.
    """

    region: str
    arch: str
    entry: str
    arm: str
    otherwise: str
    evidence: Evidence
    takes: tuple[Condition, ...] | None = None
    scope: tuple[Condition, ...] = ()

    def applies(self, fields: Mapping[str, object]) -> bool:
        """Whether this threshold speaks for a call with these fields."""
        return holds(self.scope, fields)

    def takes_arm(self, fields: Mapping[str, object]) -> bool:
        """Whether the call goes to ``arm``: in scope, set, and every ``takes`` condition holds."""
        return self.takes is not None and self.applies(fields) and holds(self.takes, fields)

    @property
    def is_set(self) -> bool:
        return self.takes is not None

    def describe_region(self) -> str:
        if self.takes is None:
            return "not set"
        return describe(self.scope + self.takes) or "every call"

    def region_lines(self) -> list[str]:
        """The region one condition a line (a generated comment stays within its width)."""
        if self.takes is None:
            return ["not set"]
        return [describe((c,)) for c in self.scope + self.takes] or ["every call"]


@dataclass(frozen=True)
class Gate:
    """A throughput gate: ``arm`` on the call ``call`` must do at least ``threshold`` units of
    work per second on ``arch`` (``unit`` as the case model counts work: FLOP, B, ...).

    The threshold sits between the ``before`` and ``after`` runs it was set from (run ids in
    the store, guarded, unthrottled) and clear of their replicate bands; ``tether check``
    verifies that it does. None: no evidence yet, the gate does not run.
    """

    id: str
    region: str
    arch: str
    arm: str
    case: str  # the project's case model (tether.registry.case) that builds ``call``
    call: Mapping[str, Any]
    threshold: float | None
    unit: str = "FLOP"
    before_run: str | None = None
    after_run: str | None = None
    # Which sample role of each cited run holds the measurement: "B" (the arm under test, as
    # in a probe or gate run) or "A" (the arm a sweep compares against, e.g. the path a call
    # took before the policy routed it elsewhere).
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

    def failures(self, key: Mapping[str, object], extra: Mapping[str, Any]) -> tuple[str, ...]:
        """Why one compiled variant (a compile cell's key and extra) fails; () when it passes."""
        out = []
        spills = int(extra["spills"])
        if spills > self.max_spills:
            out.append(f"spilled registers: {spills}")
        lds, limit = int(extra["lds_bytes"]), int(extra["lds_limit_bytes"])
        if lds > limit:
            out.append(f"LDS {lds} B over the {limit} B a workgroup may use")
        if self.matrix_dtypes is None or key.get("dtype") in self.matrix_dtypes:
            loops = list(extra["loops"])
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


@dataclass(frozen=True)
class TunedChoice:
    """A default a project picks from a tuning run (kind ``tune``) by a stated rule, which
    ``tether check`` holds: ``chosen``, one candidate of the run's ``axis``, must be the rule's
    pick from run ``run``, which must be the newest ok tuning run of ``sweep`` on ``arch`` and
    describe the current kernels, like any evidence a decision rests on.

    The rule (``judge``): the best candidate is the one whose geomean of B over A (the tuned
    arm over the run's reference arm, across its cells) is highest. The chosen one holds when
    it is the best, or when the best leads it by no more than the noise of the best's cells
    (the upper end of their A/A floor times their replicate band): a default changes only for
    a lead that clears the noise measured between replicates, never for one inside it.
    ``region`` names the generated comment that renders the outcome beside the default."""

    id: str
    arch: str
    sweep: str
    chosen: str
    run: str
    axis: str = "config"
    region: str | None = None

    def judge(self, rows: Iterable[tuple[str, float, float | None]]) -> tuple[str | None, bool]:
        """``(best, holds)`` over rows of ``(candidate, geomean B over A, noise upper end or
        None)``: the best candidate (ties go to the first by name) and whether ``chosen``
        holds by the rule; ``(None, False)`` when there are no rows."""
        table = {name: (geomean, noise) for name, geomean, noise in rows}
        if not table:
            return None, False
        best = max(sorted(table), key=lambda name: table[name][0])
        if best == self.chosen:
            return best, True
        if self.chosen not in table:
            return best, False
        lead, noise = table[best][0] / table[self.chosen][0], table[best][1]
        return best, noise is not None and lead <= noise
