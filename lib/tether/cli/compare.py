"""``tether compare RUN_A RUN_B``: two runs cell by cell, each judged against both runs' noise.

For each cell the two runs share, the change is ``ratio(B) / ratio(A)`` (each run's ratio is
median(A arm) / median(B arm) in that run). It agrees when it lies inside the product of the
two cells' A/A floors and replicate bands (each run's own noise, within a pass and between
its replicate blocks, compounded: tether.stats.agreement). With ``--control RUN_C`` (a second
run set up like RUN_A) a cell also agrees inside the run-to-run band of RUN_A and RUN_C
(tether.stats.run_band).

Exit 0 when every common cell agrees, 1 otherwise, 2 when the runs share no cell.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from tether.cli import Context
from tether.errors import UsageError
from tether.store.model import Run

ROLES = ("A", "A2", "B")


def _view(run: Run, labels: set[str]) -> Run:
    """``run`` restricted to the cells labelled ``labels``."""
    from tether.stats import key_label

    return dataclasses.replace(run, cells=tuple(c for c in run.cells if key_label(c.key) in labels))


def _labels(run: Run) -> set[str]:
    from tether.stats import key_label

    return {key_label(c.key) for c in run.cells}


def _require_sweep(run: Run, ref: str) -> None:
    if not run.cells or any(not set(ROLES) <= set(c.samples) for c in run.cells):
        raise UsageError(
            f"{ref}: run {run.id} ({run.kind}, {run.status}) has no cells with A, A2 and B "
            "samples; compare judges sweep runs against their A/A controls"
        )


def compare_runs(a: Run, b: Run, control: Run | None = None) -> dict[str, Any]:
    """The comparison as a JSON-ready dict (what --json prints; the text is drawn from it)."""
    from tether.stats import agreement, cell_stats

    la, lb = _labels(a), _labels(b)
    common = la & lb
    if not common:
        raise UsageError(f"runs {a.id} and {b.id} share no cell; nothing to compare")
    va, vb = _view(a, common), _view(b, common)
    vc = None
    if control is not None:
        if not common <= _labels(control):
            raise UsageError(
                f"control {control.id} lacks cells both runs have; a control is a run set up "
                "like RUN_A"
            )
        vc = _view(control, common)
    found = agreement(va, vb, vc)
    assert found is not None  # both views hold exactly the common cells
    band = found.run_band
    # in the order of the cells' keys (numbers as numbers), not of their labels as text
    order = {s.label: i for i, s in enumerate(cell_stats(va))}
    cells = []
    for c in sorted(found.cells, key=lambda c: order[c.label]):
        cells.append(
            {
                "cell": c.label,
                "ratio_a": c.base_ratio,
                "ratio_b": c.other_ratio,
                "change": c.rel,
                "noise": [c.low, c.high],
                "inside_noise": c.inside,
                "inside_band": c.inside_run,
                "agree": bool(c.inside or c.inside_run),
            }
        )
    agree = sum(c["agree"] for c in cells)
    notes = []
    for what in ("arch", "device", "git_sha", "harness_fingerprint", "kernels_fingerprint"):
        pa, pb = (getattr(r.provenance, what) for r in (a, b))
        if pa != pb:
            notes.append(f"the runs differ in {what}: {pa} vs {pb}")
    if a.fixed != b.fixed:
        notes.append(f"the runs' fixed grid settings differ: {dict(a.fixed)} vs {dict(b.fixed)}")
    return {
        "a": a.id,
        "b": b.id,
        "control": None if control is None else control.id,
        "common": len(common),
        "only_a": sorted(la - lb),
        "only_b": sorted(lb - la),
        "band": None if band is None else list(band),
        "control_agree": found.control_agree,
        "cells": cells,
        "agree": agree,
        "all_agree": agree == len(cells),
        "notes": notes,
    }


def _lines(doc: dict[str, Any], a: Any, b: Any) -> list[str]:
    from tether.cli.store import table

    lines = [
        f"A  {doc['a']}  ({a.provenance.device}, {a.started}, guard {a.guard.mode})",
        f"B  {doc['b']}  ({b.provenance.device}, {b.started}, guard {b.guard.mode})",
    ]
    lines += [f"note: {n}" for n in doc["notes"]]
    only = []
    if doc["only_a"]:
        only.append(f"{len(doc['only_a'])} only in A")
    if doc["only_b"]:
        only.append(f"{len(doc['only_b'])} only in B")
    lines.append(f"{doc['common']} common cells" + (f" ({', '.join(only)})" if only else ""))
    band = doc["band"]
    header = ["cell", "ratio A", "ratio B", "B/A", "noise (A x B)"]
    if band is not None:
        header.append("in band")
    header.append("verdict")
    rows = []
    for c in doc["cells"]:
        row = [
            c["cell"],
            f"{c['ratio_a']:.4f}",
            f"{c['ratio_b']:.4f}",
            f"{c['change']:.4f}",
            f"{c['noise'][0]:.4f}-{c['noise'][1]:.4f}",
        ]
        if band is not None:
            row.append("yes" if c["inside_band"] else "no")
        row.append("agree" if c["agree"] else "DIFFERS")
        rows.append(row)
    lines += ["  " + line for line in table(rows, header)]
    lines.append(
        "ratio = median(A arm)/median(B arm) in each run; B/A = ratio B / ratio A; it agrees "
        "inside the product of the two runs' A/A floors and replicate bands"
        + ("" if band is None else " or inside the control's run-to-run band")
    )
    if band is not None:
        lines.append(f"run-to-run band (control): {band[0]:.4f}-{band[1]:.4f}")
    lines.append(f"{doc['agree']} of {doc['common']} common cells agree")
    return lines


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from tether.cli.store import find_run

    store = ctx.read_store()
    a, b = find_run(args.run_a, store), find_run(args.run_b, store)
    _require_sweep(a, args.run_a)
    _require_sweep(b, args.run_b)
    control = None
    if args.control:
        control = find_run(args.control, store)
        _require_sweep(control, args.control)
    doc = compare_runs(a, b, control)
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True, allow_nan=False), file=ctx.out)
    else:
        for line in _lines(doc, a, b):
            print(line, file=ctx.out)
    return 0 if doc["all_agree"] else 1


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "compare",
        help="two runs cell by cell against both A/A floors (and a run-to-run band)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_a", metavar="RUN_A", help="run id, unique id prefix, or run file")
    parser.add_argument("run_b", metavar="RUN_B", help="run id, unique id prefix, or run file")
    parser.add_argument(
        "--control",
        metavar="RUN_C",
        help="a replicate of RUN_A (same cells, commit and harness): adds its run-to-run band",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead")
    parser.set_defaults(handler=_handle)
