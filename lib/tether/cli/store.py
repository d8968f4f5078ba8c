"""``tether store ls|show|validate|merge``: look at, check and combine results stores.

Every verb reads ``ctx.store`` (``--store`` or ``ROOT/results``) unless given paths, and
writes only to ``ctx.out``/``ctx.err`` so tests drive it in-process.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.cli import Context
from tether.errors import RunFileError, StoreError, UsageError
from tether.store.io import load_run, load_store, store_files
from tether.store.merge import merge
from tether.store.model import KINDS, Run
from tether.store.provenance import harness_fingerprint

LS_COLUMNS = ("id", "kind", "name", "arch", "status", "started", "cells")


def register(sub: Any) -> None:
    """Add ``store`` and its verbs to the top-level subparsers."""
    store = sub.add_parser("store", help="list, show, validate and merge results stores")
    verbs = store.add_subparsers(dest="store_command", metavar="VERB")
    store.set_defaults(handler=_usage(store))

    ls = verbs.add_parser("ls", help="one line per run: id, kind, name, arch, status, started")
    ls.add_argument("--kind", choices=KINDS)
    ls.add_argument("--arch", help="only runs of this arch (sm90, gfx942, cpu, ...)")
    ls.set_defaults(handler=_ls)

    show = verbs.add_parser("show", help="a readable summary of one run")
    show.add_argument("run", metavar="ID|PATH")
    show.set_defaults(handler=_show)

    check = verbs.add_parser("validate", help="validate the store or the given files/folders")
    check.add_argument("paths", nargs="*", type=Path, metavar="PATH")
    check.set_defaults(handler=_validate)

    mg = verbs.add_parser("merge", help="copy runs of other stores into this one (union)")
    mg.add_argument("sources", nargs="+", type=Path, metavar="SRC")
    mg.add_argument(
        "--into", type=Path, metavar="DEST", help="destination store (default: --store)"
    )
    mg.set_defaults(handler=_merge)


def _usage(parser: argparse.ArgumentParser) -> Any:
    def handler(args: argparse.Namespace, ctx: Context) -> int:
        parser.print_help(ctx.out)
        return 2

    return handler


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
    runs = [
        r
        for r in load_store(ctx.store)
        if (args.kind is None or r.kind == args.kind) and (args.arch is None or r.arch == args.arch)
    ]
    if not runs:
        print(f"no runs in {ctx.store}", file=ctx.err)
        return 0
    rows = [(r.id, r.kind, r.name, r.arch, r.status, r.started, str(len(r.cells))) for r in runs]
    for line in table(rows, LS_COLUMNS):
        print(line, file=ctx.out)
    return 0


def find_run(ref: str, store: Path) -> Run:
    """A run by file path, or by id (or unique id prefix) in ``store``."""
    path = Path(ref)
    if path.suffix == ".json" and path.is_file():
        return load_run(path)
    matches = [p for p in store_files(store) if p.stem == ref] or [
        p for p in store_files(store) if p.stem.startswith(ref)
    ]
    if not matches:
        raise UsageError(f"no run {ref!r} in {store} (and no such file)")
    if len(matches) > 1:
        names = ", ".join(p.stem for p in matches[:5])
        raise UsageError(f"{ref!r} matches {len(matches)} runs in {store}: {names}")
    return load_run(matches[0])


def describe(run: Run, current_harness: str | None = None) -> list[str]:
    """Lines of a human summary of ``run`` with per-cell sample counts."""
    prov = run.provenance
    sha = prov.git_sha + (" (dirty)" if prov.git_dirty else "")
    state = ""
    if current_harness is not None and run.harness_fingerprint != current_harness:
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
    roles = sorted({role for cell in run.cells for role in cell.samples})
    rows = []
    for cell in run.cells:
        key = " ".join(f"{k}={v}" for k, v in cell.key.items())
        counts = [str(len(cell.samples.get(role, ()))) for role in roles]
        rows.append((key, *counts, ",".join(cell.flags)))
    if rows:
        lines += ["  " + line for line in table(rows, ("key", *roles, "flags"))]
    return lines


def _show(args: argparse.Namespace, ctx: Context) -> int:
    run = find_run(args.run, ctx.store)
    for line in describe(run, harness_fingerprint(ctx.root)):
        print(line, file=ctx.out)
    return 0


def _validate(args: argparse.Namespace, ctx: Context) -> int:
    files: list[Path] = []
    for target in args.paths or [ctx.store]:
        if target.is_dir():
            files += store_files(target)
        elif target.is_file():
            files.append(target)
        else:
            raise UsageError(f"{target}: no such file or folder")
    bad = 0
    for path in files:
        try:
            load_run(path)
        except RunFileError as exc:
            bad += 1
            print(f"bad: {exc}", file=ctx.out)
    print(f"{len(files) - bad} valid, {bad} bad run file(s)", file=ctx.err)
    return 1 if bad else 0


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
