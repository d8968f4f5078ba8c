"""``tether compare RUN_A RUN_B``: two runs cell by cell, each judged against both A/A floors.

For each cell the two runs share, the change is ``ratio(B) / ratio(A)`` (each run's ratio is
median(A arm) / median(B arm) in that run). It agrees when it lies inside the product of the
two cells' A/A floors (each run's own noise, compounded: tether.stats.agreement). A/A floors
measure noise inside one run; runs also move between each other (clocks, placement), so when
there is replicate information a cell also agrees inside the run-to-run band:

- ``--control RUN_C``: a second run set up like RUN_A; the band is how far RUN_A and RUN_C
  differ on their worst cell (tether.stats.run_band);
- runs measured in replicate blocks (cells carrying ``blocks``): each run's band is how far
  its blocks differ from its first block, and the comparison uses the wider of the two.

Exit 0 when every common cell agrees, 1 otherwise, 2 when the runs share no cell.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from tether.cli import Context
from tether.errors import UsageError

ROLES = ("A", "A2", "B")


def _view(run: Any, labels: set[str]) -> dict[str, Any]:
    """``run`` restricted to the cells labelled ``labels`` (tether.stats reads dicts too)."""
    from tether.stats import field_of, key_label

    cells = [c for c in field_of(run, "cells", ()) if key_label(field_of(c, "key", {})) in labels]
    return {"id": field_of(run, "id"), "config": field_of(run, "config", {}), "cells": cells}


def _labels(run: Any) -> set[str]:
    from tether.stats import field_of, key_label

    return {key_label(field_of(c, "key", {})) for c in field_of(run, "cells", ())}


def _require_sweep(run: Any, ref: str) -> None:
    from tether.stats import field_of

    cells = field_of(run, "cells", ()) or ()
    if not cells or any(not set(ROLES) <= set(field_of(c, "samples", {})) for c in cells):
        raise UsageError(
            f"{ref}: run {field_of(run, 'id')} ({field_of(run, 'kind')}, "
            f"{field_of(run, 'status')}) has no cells with A, A2 and B samples; compare "
            "judges sweep runs against their A/A controls"
        )


def _block_view(view: dict[str, Any], j: int) -> dict[str, Any]:
    from tether.stats import field_of

    cells = []
    for cell in view["cells"]:
        sizes = tuple(field_of(cell, "blocks", ()) or ())
        start, n = sum(sizes[:j]), sizes[j]
        samples = field_of(cell, "samples", {})
        cells.append(
            {
                "key": field_of(cell, "key", {}),
                "samples": {role: tuple(v)[start : start + n] for role, v in samples.items()},
            }
        )
    return {"id": f"{view['id']}#block{j}", "config": view["config"], "cells": cells}


def replicate_band(view: dict[str, Any]) -> tuple[float, float] | None:
    """The run-to-run band within one run measured in replicate blocks: the widest
    tether.stats.run_band between its first block and each later one; None without blocks
    (or when its cells disagree on how many blocks they have)."""
    from tether.stats import field_of, run_band

    counts = {len(field_of(c, "blocks", ()) or ()) for c in view["cells"]}
    if len(counts) != 1 or min(counts) < 2:
        return None
    first = _block_view(view, 0)
    bands = [run_band(first, _block_view(view, j)) for j in range(1, counts.pop())]
    if not bands or any(b is None for b in bands):
        return None
    return (min(b[0] for b in bands if b), max(b[1] for b in bands if b))


def compare_runs(a: Any, b: Any, control: Any = None) -> dict[str, Any]:
    """The comparison as a JSON-ready dict (what --json prints; the text is drawn from it)."""
    from tether.stats import agreement, cell_stats, field_of

    la, lb = _labels(a), _labels(b)
    common = la & lb
    if not common:
        raise UsageError(
            f"runs {field_of(a, 'id')} and {field_of(b, 'id')} share no cell; nothing to compare"
        )
    va, vb = _view(a, common), _view(b, common)
    vc = None
    if control is not None:
        if not common <= _labels(control):
            raise UsageError(
                f"control {field_of(control, 'id')} lacks cells both runs have; a control "
                "is a run set up like RUN_A"
            )
        vc = _view(control, common)
    found = agreement(va, vb, vc)
    assert found is not None  # both views hold exactly the common cells
    band, source = found.run_band, "control" if found.run_band is not None else None
    if band is None:
        ba, bb = replicate_band(va), replicate_band(vb)
        if ba is not None and bb is not None:
            band, source = (min(ba[0], bb[0]), max(ba[1], bb[1])), "replicates"
    # in the order of the cells' keys (numbers as numbers), not of their labels as text
    order = {s.label: i for i, s in enumerate(cell_stats(va))}
    cells = []
    for c in sorted(found.cells, key=lambda c: order[c.label]):
        inside_band = None if band is None else band[0] <= c.rel <= band[1]
        cells.append(
            {
                "cell": c.label,
                "ratio_a": c.base_ratio,
                "ratio_b": c.other_ratio,
                "change": c.rel,
                "floors": [c.low, c.high],
                "inside_floors": c.inside,
                "inside_band": inside_band,
                "agree": bool(c.inside or inside_band),
            }
        )
    agree = sum(c["agree"] for c in cells)
    notes = []
    for what in ("arch", "device"):
        pa, pb = (field_of(field_of(r, "provenance", {}), what) for r in (a, b))
        if pa != pb:
            notes.append(f"the runs differ in {what}: {pa} vs {pb}")
    fa, fb = (field_of(field_of(field_of(r, "config", {}), "grid", {}), "fixed") for r in (a, b))
    if fa != fb:
        notes.append(f"the runs' fixed grid settings differ: {fa} vs {fb}")
    return {
        "a": field_of(a, "id"),
        "b": field_of(b, "id"),
        "control": None if control is None else field_of(control, "id"),
        "common": len(common),
        "only_a": sorted(la - lb),
        "only_b": sorted(lb - la),
        "band": None if band is None else list(band),
        "band_source": source,
        "control_agree": found.control_agree,
        "cells": cells,
        "agree": agree,
        "all_agree": agree == len(cells),
        "notes": notes,
    }


def _lines(doc: dict[str, Any], a: Any, b: Any) -> list[str]:
    from tether.cli.store import table

    lines = [
        f"A  {doc['a']}  ({a.provenance['device']}, {a.started})",
        f"B  {doc['b']}  ({b.provenance['device']}, {b.started})",
    ]
    lines += [f"note: {n}" for n in doc["notes"]]
    only = []
    if doc["only_a"]:
        only.append(f"{len(doc['only_a'])} only in A")
    if doc["only_b"]:
        only.append(f"{len(doc['only_b'])} only in B")
    lines.append(f"{doc['common']} common cells" + (f" ({', '.join(only)})" if only else ""))
    band = doc["band"]
    header = ["cell", "ratio A", "ratio B", "B/A", "A/A floors (A x B)"]
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
            f"{c['floors'][0]:.4f}-{c['floors'][1]:.4f}",
        ]
        if band is not None:
            row.append("yes" if c["inside_band"] else "no")
        row.append("agree" if c["agree"] else "DIFFERS")
        rows.append(row)
    lines += ["  " + line for line in table(rows, header)]
    lines.append(
        "ratio = median(A arm)/median(B arm) in each run; B/A = ratio B / ratio A; it agrees "
        "inside the product of the two A/A floors"
        + ("" if band is None else " or inside the run-to-run band")
    )
    if band is not None:
        lines.append(f"run-to-run band ({doc['band_source']}): {band[0]:.4f}-{band[1]:.4f}")
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
