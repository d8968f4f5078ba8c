"""``tether store ls|show|validate|merge|clean``: look at, check, combine and tidy stores.

Every verb reads ``ctx.store`` (``--store`` or the project's store) unless given paths, and
writes only to ``ctx.out``/``ctx.err`` so tests drive it in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.atomic import TEMP_FOLDER, is_temp_name
from tether.cli import Context
from tether.errors import StoreError, UsageError
from tether.stats import judge, key_label
from tether.store import layout
from tether.store.audit import ORPHAN_AGE_S, audit, load_store_checked, orphan_temps, store_root_for
from tether.store.harness import CurrentHarness, is_superseded
from tether.store.io import ENV_MAX_BYTES, load_run, load_store, store_files
from tether.store.layout import run_id_of
from tether.store.merge import merge
from tether.store.model import KINDS, Run
from tether.store.pack import pack_store

LS_COLUMNS = ("id", "kind", "name", "arch", "status", "started", "cells")
SWEEP_ROLES = ("A", "A2", "B")

STORE_DESCRIPTION = """\
Look at, check, combine and tidy results stores.

A store holds one JSON file per run at <store>/<arch>/<id>.json, or the same file gzipped as
<id>.json.gz (`store pack`: every reader reads it as the JSON it holds), and nothing else. Anything
else found there (a run at the store root or in a sub-folder, a .JSON or .bak name, a
symlink, a FIFO) is reported by `store validate` and `tether check`, and refused by every
verb that loads the store. Writers leave a temp file (.<name>.tmp) for a moment; one left by
a killed writer is removed by `store clean --yes`.
"""

STORE_EPILOG = f"""\
settings:
  {ENV_MAX_BYTES}  largest run file accepted, in bytes (default 16 MiB, far above any
                        real run); a larger file is refused before it is read
"""


def register(sub: Any) -> None:
    """Add ``store`` and its verbs to the top-level subparsers."""
    store = sub.add_parser(
        "store",
        help="list, show, validate, merge and clean results stores",
        description=STORE_DESCRIPTION,
        epilog=STORE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = store.add_subparsers(dest="store_command", metavar="VERB")
    store.set_defaults(handler=_usage(store))

    ls = verbs.add_parser("ls", help="one line per run: id, kind, name, arch, status, started")
    ls.add_argument("--kind", choices=KINDS, help="only runs of this kind")
    ls.add_argument("--arch", help="only runs of this arch (sm90, gfx942, cpu, ...)")
    ls.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    ls.set_defaults(handler=_ls)

    show = verbs.add_parser(
        "show",
        help="one run: provenance, and per cell the medians, ratio, noise and verdict",
        description=(
            "Show one run. Per cell: the median seconds per call of each role, the ratio "
            "median(A)/median(B) (above 1: B is faster), the noise (the A/A floor times the "
            "replicate band over the run's blocks and its replicate runs in the store, each "
            "symmetric about 1.0) and the verdict the documents print (faster above the noise, "
            "slower below, level inside; provisional when the band rests on one run), all "
            "recomputed from the raw samples."
        ),
    )
    show.add_argument("run", metavar="RUN", help="a run id, a unique id prefix, or a run file")
    show.add_argument("--json", action="store_true", help="print one JSON document instead")
    show.set_defaults(handler=_show)

    check = verbs.add_parser(
        "validate",
        help="validate the store, or what each PATH holds (a folder at any depth, or a file)",
    )
    check.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="store folders, arch folders or run files (default: the whole store)",
    )
    check.add_argument("--json", action="store_true", help="print one JSON document instead")
    check.set_defaults(handler=_validate)

    mg = verbs.add_parser("merge", help="copy runs of other stores into this one (union)")
    mg.add_argument(
        "sources", nargs="+", type=Path, metavar="SRC", help="store folders or run files"
    )
    mg.add_argument(
        "--into", type=Path, metavar="DEST", help="destination store (default: --store)"
    )
    mg.set_defaults(handler=_merge)

    pk = verbs.add_parser(
        "pack",
        help="gzip every run file in place (<id>.json -> <id>.json.gz), its JSON unchanged",
        description=(
            "Replace each <id>.json of the store by <id>.json.gz holding the same bytes: "
            "written beside it, read back through the store's reader and compared, then the "
            "JSON file is removed. Readers, signatures and tether check take a packed run for "
            "the run it was; a packed run takes a fraction of its room (JSON of numbers "
            "compresses well)."
        ),
    )
    pk.set_defaults(handler=_pack)

    clean = verbs.add_parser(
        "clean",
        help="remove temp files killed writers left in the store (dry run unless --yes)",
        description=(
            "List the temp files that writers killed mid-write left in the store and in the "
            "project's temp folder (<scratch>/tmp, where every writer's temp file goes when "
            "its target lies in the project): older than a minute and not locked by a live "
            "writer. Nothing is deleted without --yes."
        ),
    )
    clean.add_argument("--yes", action="store_true", help="delete them (default: only list)")
    clean.set_defaults(handler=_clean)


def _usage(parser: argparse.ArgumentParser) -> Any:
    def handler(args: argparse.Namespace, ctx: Context) -> int:
        parser.print_help(ctx.out)
        return 2

    return handler


def _dump(doc: Any, ctx: Context) -> None:
    print(json.dumps(doc, indent=1, sort_keys=True, allow_nan=False), file=ctx.out)


def table(rows: Sequence[Sequence[str]], header: Sequence[str]) -> list[str]:
    """Left-aligned columns separated by two spaces; stable for diffs and tests."""
    widths = [len(h) for h in header]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = []
    for row in (header, *rows):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return lines


def _ls(args: argparse.Namespace, ctx: Context) -> int:
    store = ctx.read_store()
    runs = [
        r
        for r in load_store(store)
        if (args.kind is None or r.kind == args.kind) and (args.arch is None or r.arch == args.arch)
    ]
    if args.json:
        _dump(
            [
                {
                    "id": r.id,
                    "kind": r.kind,
                    "name": r.name,
                    "arch": r.arch,
                    "status": r.status,
                    "started": r.started,
                    "cells": len(r.cells),
                    "path": str(r.path) if r.path else None,
                }
                for r in runs
            ],
            ctx,
        )
        return 0
    if not runs:
        print(f"no runs in {store}", file=ctx.err)
        return 0
    rows = [(r.id, r.kind, r.name, r.arch, r.status, r.started, str(len(r.cells))) for r in runs]
    for line in table(rows, LS_COLUMNS):
        print(line, file=ctx.out)
    return 0


def find_run(ref: str, store: Path) -> Run:
    """A run by file path, or by id (or unique id prefix) in ``store``."""
    path = Path(ref)
    named = path.name.lower().endswith((".json", ".json.gz")) or os.sep in ref
    if named and os.path.lexists(path) and not path.is_dir():
        return load_run(path)  # a file named on the command line: read safely, or named
    files = {str(run_id_of(p)): p for p in store_files(store)}
    matches = [files[ref]] if ref in files else [p for i, p in files.items() if i.startswith(ref)]
    if not matches:
        raise UsageError(f"no run {ref!r} in {store} (and no such file)")
    if len(matches) > 1:
        names = ", ".join(str(run_id_of(p)) for p in matches[:5])
        raise UsageError(f"{ref!r} matches {len(matches)} runs in {store}: {names}")
    return load_run(matches[0])


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.4g}"


def cell_rows(run: Run, runs: list[Run] | None = None) -> list[dict[str, Any]]:
    """Per cell, recomputed from the raw samples: sample counts and median seconds per role;
    for cells with A, A2 and B also the ratio, the noise its verdict used and the verdict,
    judged with the run's replicates in ``runs`` (tether.stats.judge, as the docs judge it)."""

    judged = {}
    if run.cells and all(set(SWEEP_ROLES) <= set(c.samples) for c in run.cells):
        judged = {s.label: s for s in judge(run, runs or [])}
    rows = []
    for cell in run.cells:
        label = key_label(cell.key)
        st = judged.get(label)
        rows.append(
            {
                "key": dict(cell.key),
                "label": label,
                "samples": {role: len(v) for role, v in sorted(cell.samples.items())},
                "median_s": {
                    role: float(statistics.median(v)) for role, v in sorted(cell.samples.items())
                },
                "ratio": None if st is None else st.ratio,
                "aa_floor": None if st is None else list(st.floor),
                "band": None if st is None else list(st.band),
                "noise": None if st is None else list(st.noise),
                "runs": None if st is None else st.runs,
                "verdict": None if st is None else st.verdict,
                "word": None if st is None else st.word,
                "flags": list(cell.flags),
            }
        )
    try:  # numbers in numeric order, as tether.stats orders cells
        return sorted(rows, key=lambda r: tuple(sorted(r["key"].items())))
    except TypeError:  # an axis mixing value types: text order is still stable
        return sorted(rows, key=lambda r: r["label"])


def describe(
    run: Run, current_harness: str | CurrentHarness | None = None, runs: list[Run] | None = None
) -> list[str]:
    """Lines of a human summary of ``run``: provenance, then per cell the medians per role
    (microseconds per call), the ratio, the A/A floor and the verdict."""
    prov = run.provenance
    sha = prov.git_sha + (" (dirty)" if prov.git_dirty else "")
    state = ""
    if current_harness is not None and is_superseded(run, current_harness):
        state = "  [superseded: measured by another harness]"
    lines = [
        f"id:       {run.id}",
        f"kind:     {run.kind}    name: {run.name}    arch: {run.arch}",
        f"status:   {run.status}" + (f"    reason: {run.reason}" if run.reason else ""),
        f"when:     {prov.started} .. {prov.ended}",
        f"where:    {prov.host}    device: {prov.device}    driver: {prov.driver}",
        f"git:      {sha}",
        f"harness:  {run.harness_fingerprint}{state}",
        f"kernels:  {prov.kernels_fingerprint}",
        "runtime:  " + ", ".join(f"{k}={v}" for k, v in sorted(prov.runtime.items())),
        f"digest:   {run.digest}",
    ]
    if run.path is not None:
        lines.append(f"file:     {run.path}")
    arms = run.config.get("arms")
    if arms:
        lines.append("arms:     " + ", ".join(f"{k}={v}" for k, v in sorted(arms.items())))
    grid = run.config.get("grid")
    if grid:
        axes = ", ".join(f"{k}={v}" for k, v in grid["axes"].items())
        lines.append(f"grid:     {axes or '(no product)'}    fixed: {grid['fixed']}")
    if run.results:
        lines.append("results:  " + ", ".join(f"{k}={v}" for k, v in sorted(run.results.items())))
    lines.append(
        f"guard:    {run.guard.mode}"
        + (f" ({run.guard.reason})" if run.guard.reason else "")
        + (f", lock {run.guard.lock}" if run.guard.lock else "")
    )
    lines.append(f"cells:    {len(run.cells)}")
    rows = cell_rows(run, runs)
    if not rows:
        return lines
    roles = sorted({role for r in rows for role in r["samples"]})
    judged = any(r["ratio"] is not None for r in rows)
    header = ["key", *(f"{role} us (n)" for role in roles)]
    if judged:
        header += ["ratio A/B", "noise", "verdict"]
    header.append("flags")
    body = []
    for r in rows:
        line = [r["label"]]
        for role in roles:
            n = r["samples"].get(role)
            line.append("-" if n is None else f"{_us(r['median_s'][role])} ({n})")
        if judged:
            noise = r["noise"]
            line += [
                "-" if r["ratio"] is None else f"{r['ratio']:.4f}",
                "-" if noise is None else f"{noise[0]:.4f}-{noise[1]:.4f}",
                r["word"] or "-",
            ]
        line.append(",".join(r["flags"]))
        body.append(line)
    lines += ["  " + line for line in table(body, header)]
    if judged:
        lines.append(
            "  ratio A/B = median(A)/median(B), above 1: B faster; noise = the A/A floor "
            "(median(A)/median(A2) over full sets and even/odd halves) times the replicate band "
            "(blocks and replicate runs), each symmetric about 1.0; faster or slower only "
            "beyond it; provisional: the band rests on one run"
        )
    return lines


def _replicate_pool(store: Path) -> list[Run]:
    """The store's runs that load, for a shown run's replicates: one malformed neighbour must
    not stop ``show`` (``validate`` and ``check`` report it)."""

    if not store.is_dir():
        return []
    return list(load_store_checked(store).runs)


def _show(args: argparse.Namespace, ctx: Context) -> int:
    store = ctx.read_store()
    run = find_run(args.run, store)
    runs = _replicate_pool(store)
    current = CurrentHarness(ctx.root)
    if args.json:
        doc = run.to_json()
        doc.pop("cells")
        doc["path"] = str(run.path) if run.path else None
        doc["superseded"] = is_superseded(run, current)
        doc["cells"] = cell_rows(run, runs)
        _dump(doc, ctx)
        return 0
    for line in describe(run, current, runs):
        print(line, file=ctx.out)
    return 0


def _validate(args: argparse.Namespace, ctx: Context) -> int:

    store = ctx.read_store()
    targets = list(args.paths) or [store]
    results = []
    for target in targets:
        if not os.path.lexists(target):
            raise UsageError(f"{target}: no such file or folder")
        root = store_root_for(target, store)
        same = os.path.realpath(target) == os.path.realpath(root)
        results.append(audit(root, None if same else target))
    problems = [p for a in results for p in a.problems]
    temps = [t for a in results for t in a.temps]
    orphans = orphan_temps(temps)
    checked = sum(a.checked for a in results)
    valid = sum(len(a.runs) for a in results)
    if args.json:
        _dump(
            {
                "checked": checked,
                "valid": valid,
                "problems": [{"path": str(p.path), "what": p.what} for p in problems],
                "temps": [str(t) for t in temps],
                "orphans": [str(t) for t in orphans],
            },
            ctx,
        )
        return 1 if problems else 0
    for problem in problems:
        print(f"bad: {problem}", file=ctx.out)
    print(f"{valid} valid, {checked - valid} bad run file(s)", file=ctx.err, end="")
    others = len(problems) - (checked - valid)
    print(f", {others} other problem(s)" if others else "", file=ctx.err)
    if temps:
        print(
            f"{len(temps)} writer temp file(s), {len(orphans)} orphaned (older than "
            f"{ORPHAN_AGE_S:g} s and unlocked): `tether store clean --yes` removes those",
            file=ctx.err,
        )
    return 1 if problems else 0


def _merge(args: argparse.Namespace, ctx: Context) -> int:
    dest = args.into or ctx.store
    try:
        report = merge(list(args.sources), dest)
    except StoreError as exc:
        print(f"nothing merged: {exc}", file=ctx.err)
        return 1
    for path in report.copied:
        print(f"copied {path}", file=ctx.out)
    print(
        f"{len(report.copied)} copied, {report.skipped} identical skipped into {dest}", file=ctx.err
    )
    return 0


def _pack(args: argparse.Namespace, ctx: Context) -> int:
    report = pack_store(ctx.store)
    print(
        f"packed {len(report.packed)} run file(s) in {report.store} "
        f"({report.already} packed already)",
        file=ctx.out,
    )
    return 0


def _clean(args: argparse.Namespace, ctx: Context) -> int:

    store = ctx.read_store()
    temps = layout.scan(store).temps
    shared = ctx.project.scratch / TEMP_FOLDER
    if shared.is_dir():
        temps += sorted(p for p in shared.iterdir() if is_temp_name(p.name) and p.is_file())
    orphans = orphan_temps(temps)
    kept = len(temps) - len(orphans)
    for path in orphans:
        size = path.stat().st_size if path.exists() else 0
        if args.yes:
            path.unlink(missing_ok=True)
        print(f"{'removed' if args.yes else 'would remove'} {path} ({size} bytes)", file=ctx.out)
    note = f"; {kept} kept (younger than {ORPHAN_AGE_S:g} s or locked by a writer)" if kept else ""
    if orphans and not args.yes:
        print(f"{len(orphans)} orphaned temp file(s){note}; --yes deletes them", file=ctx.err)
    else:
        print(f"{len(orphans)} orphaned temp file(s) removed{note}", file=ctx.err)
    return 0
