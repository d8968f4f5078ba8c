"""A progress bar for sweeps: cells done, elapsed, remaining, and the running A/A floor.

The floor shown is the one the docs publish under that name (tether.stats): the A/A floor of
the geomean over the cells done so far, next to that geomean. Drawn with rich on the CLI's
error stream so it never mixes with what a command prints.
"""

from __future__ import annotations

import contextlib
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from tether import stats
from tether.store.model import Cell

ROLES = ("A", "A2", "B")


def running_floor(cells: list[stats.CellStat]) -> str:
    """``geomean G, A/A floor LO-HI`` over ``cells`` (those done), as the docs compute it."""
    if not cells:
        return "A/A floor -"
    agg = stats.aggregate(cells)
    assert agg.geomean is not None and agg.floor is not None
    lo, hi = agg.floor
    return f"geomean {agg.geomean:.3f}, A/A floor {lo:.3f}-{hi:.3f}"


class SweepProgress:
    """Context manager: ``advance(samples)`` after each cell."""

    def __init__(self, total: int, title: str, stream: TextIO | None, enabled: bool = True):
        self.total = total
        self.cells: list[stats.CellStat] = []
        self._progress: Progress | None = None
        self._task: Any = None  # rich's TaskID once the bar has started
        if enabled and stream is not None:
            console = Console(file=stream, stderr=False, highlight=False, soft_wrap=True)
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[floor]}"),
                console=console,
                transient=False,
            )
            self._title = title

    def __enter__(self) -> SweepProgress:
        if self._progress is not None:
            self._progress.start()
            self._task = self._progress.add_task(self._title, total=self.total, floor="A/A -")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def advance(self, samples: dict[str, list[float]]) -> None:
        if all(samples.get(role) for role in ROLES):
            cell = Cell(
                key={"cell": len(self.cells)},
                work=1.0,
                samples={role: tuple(v) for role, v in samples.items()},
            )
            # the bar is a glance; the run file and the check judge every sample
            with contextlib.suppress(ArithmeticError, ValueError):
                self.cells.append(stats.cell_stat(cell, {}))
        if self._progress is None or self._task is None:
            return
        self._progress.update(self._task, advance=1, floor=running_floor(self.cells))
