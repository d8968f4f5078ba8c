"""``tether compare RUN_A RUN_B``: two runs cell by cell, judged against the run-to-run band.

For each cell the two runs share, the change is ``ratio(B) / ratio(A)`` (each run's ratio is
median(A arm) / median(B arm) in that run). A cell agrees when the change lies inside the
product of the two cells' noise (A/A floors and replicate bands, each made symmetric:
tether.stats.agreement) or inside the run-to-run band: how far RUN_A and a replicate of it
(``--control``, else the newest replicate of RUN_A in the store) differ on any cell.

Two runs of one setup (same sweep, arch, commit, harness and kernels) are replicates: a cell
outside their noise is "too noisy to judge", never "DIFFERS", because what separates them is
the noise being measured. A cell of two different setups outside that noise DIFFERS.

Each run's own verdict per cell is printed too (tether.stats.judge: the word the documents
and ``store show`` print for the same cell).

A run is named by id (or unique id prefix), by run file, by ``latest`` (the newest
evidence-grade run of the other argument's sweep and arch), or by ``@REV`` (the newest
evidence-grade run of that sweep and arch measured at git revision REV).

Exit 0 when no cell DIFFERS (with ``--threshold``: when no cell DIFFERS by a regression
larger than it), 1 otherwise, 2 on a usage error (the runs share no cell, a bad reference, a
``--control`` that is not a replicate of RUN_A).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

from tether.cli import Context, Subparsers
from tether.cli.store import find_run, table
from tether.errors import UsageError
from tether.render.context import load_runs
from tether.stats import DIFFERS, agreement, judge, key_label
from tether.store.cite import matching, siblings
from tether.store.model import Run

ROLES = ("A", "A2", "B")


def _view(run: Run, labels: set[str]) -> Run:
    """``run`` restricted to the cells labelled ``labels``."""

    return dataclasses.replace(run, cells=tuple(c for c in run.cells if key_label(c.key) in labels))


def _labels(run: Run) -> set[str]:

    return {key_label(c.key) for c in run.cells}


def _require_sweep(run: Run, ref: str) -> None:
    if not run.cells or any(not set(ROLES) <= set(c.samples) for c in run.cells):
        raise UsageError(
            f"{ref}: run {run.id} ({run.kind}, {run.status}) has no cells with A, A2 and B "
            "samples; compare judges sweep runs against their A/A controls"
        )


def replicate_problems(base: Run, control: Run) -> list[str]:
    """Why ``control`` is not a replicate of ``base`` (same sweep, arch, commit, harness,
    kernels and grid, and a separate run); [] when it is."""
    problems = []
    if control.id == base.id:
        problems.append("it is RUN_A itself (a replicate is a separate run)")
    for what in ("kind", "name", "arch"):
        if getattr(base, what) != getattr(control, what):
            problems.append(f"{what} {getattr(control, what)} is not {getattr(base, what)}")
    pa, pc = base.provenance, control.provenance
    for what in ("git_sha", "git_dirty", "harness_fingerprint", "kernels_fingerprint"):
        if getattr(pa, what) != getattr(pc, what):
            problems.append(f"{what} {getattr(pc, what)} is not {getattr(pa, what)}")
    if base.fixed != control.fixed or _labels(base) != _labels(control):
        problems.append("its grid (cells or fixed settings) differs")
    if base.sharded != control.sharded:
        problems.append("one run is sharded and the other is not")
    return problems


def compare_runs(
    a: Run,
    b: Run,
    control: Run | None = None,
    runs: list[Run] | None = None,
    threshold: float | None = None,
) -> dict[str, Any]:
    """The comparison as a JSON-ready dict (what --json prints; the text is drawn from it).

    ``runs``: the store, for each run's replicates (their verdicts and, without ``control``,
    RUN_A's newest replicate as the control). ``threshold``: a relative regression (0.05 for
    5%) a differing cell must exceed to fail.
    """

    store = list(runs or [])
    if control is not None:
        problems = replicate_problems(a, control)
        if problems:
            raise UsageError(
                f"--control {control.id} is not a replicate of RUN_A {a.id}: " + "; ".join(problems)
            )
    else:
        reps = [r for r in siblings(store, a) if r.id != b.id]
        control = reps[-1] if reps else None
    la, lb = _labels(a), _labels(b)
    common = la & lb
    if not common:
        raise UsageError(f"runs {a.id} and {b.id} share no cell; nothing to compare")
    va, vb = _view(a, common), _view(b, common)
    vc = _view(control, common) if control is not None else None
    found = agreement(va, vb, vc)
    assert found is not None  # both views hold exactly the common cells
    band = found.run_band
    judged_a = {s.label: s for s in judge(a, store)}
    judged_b = {s.label: s for s in judge(b, store)}
    order = {key_label(c.key): i for i, c in enumerate(a.cells)}
    ordered = {s.label: i for i, s in enumerate(judged_a.values())}
    cells = []
    for c in sorted(found.cells, key=lambda c: (ordered.get(c.label, order[c.label]), c.label)):
        fails = c.verdict == DIFFERS and (threshold is None or c.rel < 1.0 / (1.0 + threshold))
        cells.append(
            {
                "cell": c.label,
                "ratio_a": c.base_ratio,
                "ratio_b": c.other_ratio,
                "change": c.rel,
                "noise": [c.low, c.high],
                "inside_noise": c.inside,
                "inside_band": c.inside_run,
                "agree": c.verdict == "agree",
                "verdict": c.verdict,
                "verdict_a": judged_a[c.label].word,
                "verdict_b": judged_b[c.label].word,
                "fails": fails,
            }
        )
    notes = []
    for what in ("arch", "device", "git_sha", "harness_fingerprint", "kernels_fingerprint"):
        pa, pb = (getattr(r.provenance, what) for r in (a, b))
        if pa != pb:
            notes.append(f"the runs differ in {what}: {pa} vs {pb}")
    if a.fixed != b.fixed:
        notes.append(f"the runs' fixed grid settings differ: {dict(a.fixed)} vs {dict(b.fixed)}")
    if found.cells and found.cells[0].replicate:
        notes.append("the runs are replicates of one setup: their spread is noise, not a change")
    if band is None:
        notes.append(
            "no replicate of RUN_A in the store and no --control: judged against the two runs' "
            "within-run noise only (measure RUN_A's sweep again at its commit for a band)"
        )
    agree = sum(bool(c["agree"]) for c in cells)
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
        "too_noisy": sum(c["verdict"] == "too noisy to judge" for c in cells),
        "differs": sum(c["verdict"] == DIFFERS for c in cells),
        "failing": sum(c["fails"] for c in cells),
        "threshold": threshold,
        "all_agree": agree == len(cells),
        "notes": notes,
    }


def _rows(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    band = doc["band"]
    header = ["cell", "ratio A", "ratio B", "B/A", "noise (A x B)"]
    if band is not None:
        header.append("in band")
    header += ["run A", "run B", "comparison"]
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
        row += [c["verdict_a"], c["verdict_b"], c["verdict"]]
        rows.append(row)
    return header, rows


def _tally(doc: dict[str, Any]) -> str:
    out = (
        f"{doc['agree']} of {doc['common']} common cells agree, {doc['too_noisy']} too noisy "
        f"to judge, {doc['differs']} differ"
    )
    if doc["threshold"] is not None:
        out += f"; {doc['failing']} regress by more than {doc['threshold']:.1%}"
    return out


def _lines(doc: dict[str, Any], a: Any, b: Any) -> list[str]:
    lines = [
        f"A  {doc['a']}  ({a.provenance.device}, {a.started}, guard {a.guard.mode})",
        f"B  {doc['b']}  ({b.provenance.device}, {b.started}, guard {b.guard.mode})",
    ]
    if doc["control"]:
        lines.append(f"control  {doc['control']}  (a replicate of A: the run-to-run band)")
    lines += [f"note: {n}" for n in doc["notes"]]
    only = []
    if doc["only_a"]:
        only.append(f"{len(doc['only_a'])} only in A")
    if doc["only_b"]:
        only.append(f"{len(doc['only_b'])} only in B")
    lines.append(f"{doc['common']} common cells" + (f" ({', '.join(only)})" if only else ""))
    header, rows = _rows(doc)
    lines += ["  " + line for line in table(rows, header)]
    lines.append(
        "ratio = median(A arm)/median(B arm) in each run; B/A = ratio B / ratio A; a cell "
        "agrees inside the product of the two runs' noise (A/A floors and replicate bands)"
        + ("" if doc["band"] is None else " or inside the run-to-run band")
    )
    if doc["band"] is not None:
        lines.append(f"run-to-run band (control): {doc['band'][0]:.4f}-{doc['band'][1]:.4f}")
    lines.append(_tally(doc))
    return lines


def markdown(doc: dict[str, Any]) -> str:
    """The comparison as a Markdown comment for a pull request."""
    header, rows = _rows(doc)
    out = [f"**tether compare** `{doc['a']}` (A) against `{doc['b']}` (B): {_tally(doc)}.", ""]
    out += [f"- {n}" for n in doc["notes"]]
    if doc["band"] is not None:
        out.append(
            f"- run-to-run band from control `{doc['control']}`: "
            f"{doc['band'][0]:.4f}-{doc['band'][1]:.4f}"
        )
    out.append("")
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + " --- |" * len(header))
    for row in rows:
        out.append("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |")
    return "\n".join(out) + "\n"


def _git_sha(root: Path, rev: str) -> str:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--verify", f"{rev}^{{commit}}"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UsageError(f"@{rev}: cannot ask git for the revision: {exc}") from None
    if done.returncode != 0:
        raise UsageError(f"@{rev}: not a git revision here ({done.stderr.strip()})")
    return done.stdout.strip()


def resolve(ref: str, other: Run | None, runs: list[Run], store: Path, root: Path) -> Run:
    """A run named by id, file, ``latest`` or ``@REV`` (see the module doc)."""

    if ref != "latest" and not ref.startswith("@"):
        return find_run(ref, store)
    if other is None:
        raise UsageError(
            f"{ref!r} names a run relative to the other one; give the other as a run id or file"
        )
    pool = [r for r in matching(runs, other.kind, other.name, other.arch) if r.evidence_grade]
    if ref.startswith("@"):
        sha = _git_sha(root, ref[1:])
        pool = [r for r in pool if r.provenance.git_sha == sha]
        what = f"at git {sha[:12]}"
    else:
        pool = [r for r in pool if r.id != other.id]
        what = "other than the given one"
    if not pool:
        raise UsageError(
            f"{ref!r}: no evidence-grade run of {other.kind} {other.name} on {other.arch} {what}"
        )
    return pool[-1]


def _threshold(text: str) -> float:
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100.0 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UsageError(
            f"--threshold {text!r}: give a fraction (0.05) or a percent (5%)"
        ) from None
    if not 0.0 <= value < 10.0:
        raise UsageError(f"--threshold {text!r}: out of range")
    return value


def _handle(args: argparse.Namespace, ctx: Context) -> int:

    store = ctx.read_store()
    runs = load_runs(store)
    fixed = [r for r in (args.run_a, args.run_b) if r != "latest" and not r.startswith("@")]
    if not fixed:
        raise UsageError("at least one of RUN_A and RUN_B must be a run id or a run file")
    anchor = resolve(fixed[0], None, runs, store, ctx.root)
    a = resolve(args.run_a, anchor, runs, store, ctx.root)
    b = resolve(args.run_b, anchor, runs, store, ctx.root)
    _require_sweep(a, args.run_a)
    _require_sweep(b, args.run_b)
    control = None
    if args.control:
        control = resolve(args.control, a, runs, store, ctx.root)
        _require_sweep(control, args.control)
    threshold = None if args.threshold is None else _threshold(args.threshold)
    doc = compare_runs(a, b, control, runs, threshold)
    if args.json:
        print(json.dumps(doc, indent=1, sort_keys=True, allow_nan=False), file=ctx.out)
    elif args.markdown:
        ctx.out.write(markdown(doc))
    else:
        for line in _lines(doc, a, b):
            print(line, file=ctx.out)
    return 1 if doc["failing"] else 0


def register(sub: Subparsers) -> None:
    parser = sub.add_parser(
        "compare",
        help="two runs cell by cell against their noise and the run-to-run band",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "run_a", metavar="RUN_A", help="run id, unique id prefix, run file, latest or @REV"
    )
    parser.add_argument(
        "run_b", metavar="RUN_B", help="run id, unique id prefix, run file, latest or @REV"
    )
    parser.add_argument(
        "--control",
        metavar="RUN_C",
        help="a replicate of RUN_A (same sweep, commit, harness, kernels and grid): its "
        "run-to-run band (default: RUN_A's newest replicate in the store)",
    )
    parser.add_argument(
        "--threshold",
        metavar="PCT",
        help="fail (exit 1) only on cells that differ by a regression larger than this "
        "(5%% or 0.05)",
    )
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print one JSON document instead")
    out.add_argument("--markdown", action="store_true", help="print a pull-request comment")
    parser.set_defaults(handler=_handle)
