"""The built-in results table: per arch and cited sweep, one row per cell, sorted by its axes.

Python computes the rows (sorted numerically, so seqlen 64 comes before 128), templates only
format them: ``{% include "tether/results.md.j2" %}`` in any project template renders the
table of the headline sweep (or of ``results_sweep`` where the including template sets it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tether.stats import CellStat

# What the engine records when the device has no allocator counter (the CPU): allocation
# inside the timed region could not be looked for, which the table must say, not imply clean.
NO_ALLOC_COUNTER = "none"


@dataclass(frozen=True)
class Row:
    values: tuple[str, ...]  # the cell's axis values, in the table's axis order
    stat: CellStat  # medians, ratio, floor, band, verdict and flags, from the raw samples


@dataclass(frozen=True)
class ResultsTable:
    arch: str
    sweep: str
    doc: Any  # the arch's tether.render.context.SweepDoc (run, arms, unit, aggregates)
    axes: tuple[str, ...]
    rows: tuple[Row, ...]
    alloc_unchecked: int  # cells whose timed region could not be checked for allocation

    @property
    def measured(self) -> bool:
        return self.doc.run is not None


def axis_sort_key(value: object) -> tuple[int, float, str]:
    """Numbers (and numeric strings) by value before everything else by text."""
    if isinstance(value, bool):
        return (1, 0.0, str(value))
    if isinstance(value, (int, float)):
        return (0, float(value), "")
    try:
        return (0, float(str(value)), "")
    except ValueError:
        return (1, 0.0, str(value))


def _axes(cells: Sequence[CellStat]) -> tuple[str, ...]:
    """Axis names in the order the run's cells list them (the sweep's own order)."""
    names: dict[str, None] = {}
    for stat in cells:
        names.update(dict.fromkeys(stat.key))
    return tuple(names)


def sort_cells(cells: Sequence[CellStat], axes: Sequence[str]) -> list[CellStat]:
    """``cells`` sorted by their axis values, numerically where the values are numbers."""
    return sorted(cells, key=lambda c: tuple(axis_sort_key(c.key.get(a, "")) for a in axes))


def results_table(arch: str, doc: Any, run: Any) -> ResultsTable:
    """The table of one arch's cited run of a sweep (``run`` None: not measured)."""
    axes = _axes(doc.cells)
    rows = tuple(
        Row(tuple(str(c.key.get(a, "")) for a in axes), c) for c in sort_cells(doc.cells, axes)
    )
    unchecked = 0
    if run is not None:
        unchecked = sum(
            1 for cell in run.cells if cell.extra.get("alloc_counter") == NO_ALLOC_COUNTER
        )
    return ResultsTable(arch, doc.name, doc, axes, rows, unchecked)


def table_context(runs: Sequence[Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """``results_tables``: one table per arch document and sweep it cites, in document order."""
    by_id = {r.id: r for r in runs}
    tables = []
    for arch_doc in context["arches"]:
        for doc in arch_doc.sweeps:
            run = by_id.get(doc.run.id) if doc.run is not None else None
            tables.append(results_table(arch_doc.arch, doc, run))
    return {"results_tables": tuple(tables)}
