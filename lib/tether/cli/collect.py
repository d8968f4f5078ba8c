"""``tether collect ARTIFACTS``: the nightly's last step, merging every host's runs, then
rendering and checking the documents."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from tether.check import run_check
from tether.cli import Context, Subparsers
from tether.render import write_all
from tether.store.collect import collect


def register(sub: Subparsers) -> None:
    p = sub.add_parser(
        "collect",
        help="merge the nightly's per-host artifacts into the store, then render and check",
        description=__doc__,
    )
    p.add_argument("artifacts", type=Path, help="downloaded artifacts, one folder per host job")
    p.add_argument(
        "--expect",
        default="",
        metavar="ARCH,ARCH",
        help="arches the nightly ran; one that sent nothing is recorded as not measured",
    )
    p.add_argument("--no-render", action="store_true", help="merge only")
    p.set_defaults(handler=_collect)


def _collect(args: argparse.Namespace, ctx: Context) -> int:

    expect = [a for a in args.expect.split(",") if a]
    with tempfile.TemporaryDirectory(prefix="tether-collect-") as tmp:
        by_arch, missing, report = collect(args.artifacts, ctx.root, ctx.store, Path(tmp), expect)
    for arch in sorted(by_arch):
        note = ": no run files arrived; recorded not_measured" if arch in missing else ""
        print(f"collect: {arch}: {len(by_arch[arch])} run(s){note}", file=ctx.out)
    print(
        f"collect: {len(report.copied)} new, {report.skipped} already in {ctx.store}", file=ctx.out
    )
    if args.no_render:
        return 0
    for rel in write_all(ctx.root, ctx.store, err=ctx.err):
        print(f"rendered {rel}", file=ctx.out)
    diffs: list[str] = []
    findings = run_check(ctx.root, ctx.store, diffs, err=ctx.err)
    for finding in findings:
        print(finding, file=ctx.out)
    return 1 if findings else 0
