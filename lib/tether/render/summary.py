"""The front page's small table per arch: each comparison a project declares, one row each.

``[tool.tether.summary] rows`` lists the comparisons (a label and the sweep that answers it),
in order; without it the one row is the headline sweep. An arch where none of them ran shows its
own headline (its first measured sweep) instead. Python picks each row's sweep, its
aggregate and its verdict here; the README template only formats ``summary``:

    summary: tuple[SummaryArch, ...]    one per document arch, in document order
    SummaryArch.arch: str
    SummaryArch.kernel: str | None      the B arm of the first measured row (None: none is)
    SummaryArch.rows: tuple[SummaryRow, ...]
    SummaryArch.doc: ArchDoc            the arch's full document (why not measured, ...)
    SummaryArch.attempt: RunRef | None  the newest failed attempt at a row's sweep
    SummaryRow.label: str               what the row compares, as configured
    SummaryRow.sweep: str               the sweep it cites
    SummaryRow.doc: SweepDoc | None     None when the arch has no run of that sweep
    SummaryRow.whole: Aggregate | None  the whole map of the cited run
    SummaryRow.region: Aggregate | None the policy's region of it: the cells its policy sends to
                                        tether's kernels (context._region_of)
Each aggregate carries its own verdict (``Aggregate.word``, tether.stats' one rule): both
populations are shown side by side, neither picked because it reads better.

Run ids and every cell stay on the detail page (docs/backends.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class SummaryRow:
    label: str
    sweep: str
    doc: Any
    whole: Any
    region: Any

    @property
    def measured(self) -> bool:
        return self.doc is not None and self.doc.run is not None

    @property
    def superseded(self) -> bool:
        return self.measured and bool(self.doc.run.superseded)


@dataclass(frozen=True)
class SummaryArch:
    arch: str
    kernel: str | None
    rows: tuple[SummaryRow, ...]
    doc: Any

    @property
    def measured(self) -> bool:
        return any(r.measured for r in self.rows)

    @property
    def attempt(self) -> Any:
        """The newest failed attempt at a row's sweep (a RunRef with its reason), or None."""
        return next((r.doc.attempt for r in self.rows if r.doc is not None and r.doc.attempt), None)

    @property
    def tritons(self) -> tuple[str, ...]:
        """The Triton releases the measured rows' runs ran under, sorted ("not recorded" for a
        run whose process had none): the section says which release its figures hold for."""
        return tuple(sorted({r.doc.run.triton or "not recorded" for r in self.rows if r.measured}))


def _row(arch_doc: Any, spec: Mapping[str, Any]) -> SummaryRow:
    doc = arch_doc.sweep(spec["sweep"])
    if doc is None or doc.run is None:
        return SummaryRow(spec["label"], spec["sweep"], doc, None, None)
    return SummaryRow(spec["label"], spec["sweep"], doc, doc.whole, doc.gate)


def summary_context(
    context: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], headline: str | None
) -> dict[str, Any]:
    """``summary`` for the templates, from the configured rows (or the headline sweep)."""
    specs = list(rows) or ([{"label": "headline", "sweep": headline}] if headline else [])
    out = []
    for arch_doc in context["arches"]:
        built = tuple(_row(arch_doc, spec) for spec in specs)
        if not any(r.measured for r in built):
            # No configured comparison ran here (a CPU demo store): the arch's own headline,
            # its first measured sweep, is what it has to show. A listed arch lists the
            # project's headline sweep whether or not it ran, so an unmeasured one is passed.
            own = arch_doc.headline(headline)
            if own is None or own.run is None:
                own = next((s for s in arch_doc.sweeps if s.run is not None), None)
            if own is not None and own.name not in {r.sweep for r in built}:
                built = (_row(arch_doc, {"label": own.name, "sweep": own.name}),)
        kernel = next((str(r.doc.arms.get("B")) for r in built if r.measured), None)
        out.append(SummaryArch(arch_doc.arch, kernel, built, arch_doc))
    return {"summary": tuple(out)}
