"""A progress bar for sweeps: cells done, elapsed, remaining, and the running A/A floor.

Drawn with rich on the CLI's error stream so it never mixes with what a command prints.
"""

from __future__ import annotations

import statistics
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def aa_ratio_range(a: list[float], a2: list[float]) -> tuple[float, float]:
    """The A/A control's ratio range over paired samples: min and max of A2/A."""
    ratios = [y / x for x, y in zip(a, a2, strict=False)]
    if not ratios:
        return (1.0, 1.0)
    return (min(ratios), max(ratios))


class SweepProgress:
    """Context manager: ``advance(cell_label, samples)`` after each cell."""

    def __init__(self, total: int, title: str, stream: TextIO | None, enabled: bool = True):
        self.total = total
        self._floors: list[tuple[float, float]] = []
        self._progress: Progress | None = None
        self._task = None
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
        if "A" in samples and "A2" in samples:
            self._floors.append(aa_ratio_range(samples["A"], samples["A2"]))
        if self._progress is None or self._task is None:
            return
        floor = "A/A -"
        if self._floors:
            lo = statistics.median(f[0] for f in self._floors)
            hi = statistics.median(f[1] for f in self._floors)
            floor = f"A/A median floor {lo:.3f}-{hi:.3f}"
        self._progress.update(self._task, advance=1, floor=floor)
