"""``tether check``: fail when rendered docs, the store or the policy have drifted."""

from __future__ import annotations

import argparse
import json

from tether import checkcache, snapshot
from tether._scan import scan_tree, write_baseline
from tether.check import FIX_COMMAND, check_append_only
from tether.cli import Context, Subparsers
from tether.errors import UsageError

CHECK_DESCRIPTION = """\
Fail when the rendered docs, the store or the policy have drifted. Read-only, no GPU.

Text targets (README.md, docs/*.md, policy regions) are always re-rendered and diffed.
SVG figures are the slow part (matplotlib), so by default a figure is trusted when the
digest embedded in it (of the plotted data, the drawing code and the matplotlib version)
equals the digest computed from the store and the file's body still matches its own
embedded body digest; any mismatch redraws it and fails. The trade-off: an edit that also
forges both digests passes the default check. --full redraws every figure and compares
bytes, which catches that; CI (.ci/run) runs --full, pre-commit runs the default.

What is judged is what is committed: the index by default (inside a pre-commit hook, the
index being committed), or a revision with --rev; a doc citing a run file the commit lacks
is a finding. --worktree judges the files on disk instead. Outside a git repository the
folder is judged.
"""


def _write_baseline(ctx: Context) -> int:

    findings = scan_tree(ctx.root)
    path = write_baseline(ctx.root, findings)
    print(
        f"tether check: wrote {len(findings)} scan finding(s) to {path}; from now on only new "
        "ones fail",
        file=ctx.out,
    )
    return 0


# How many unstaged files the hint names before it only counts the rest.
UNSTAGED_SHOWN = 5


def _name_unstaged(ctx: Context) -> None:
    """After findings of the index: name the files on disk the index does not hold as they
    are, since a finding may be about one of them ("module not found" of a plugin that exists
    on disk, untracked), and say how to judge them. Asked for only when something failed, so a
    clean check pays no git status."""
    try:
        paths = snapshot.unstaged(ctx.root)
    except UsageError:
        return  # a hint only: a git that fails here must not hide the findings or their code
    if not paths:
        return
    shown = ", ".join(paths[:UNSTAGED_SHOWN])
    more = f" and {len(paths) - UNSTAGED_SHOWN} more" if len(paths) > UNSTAGED_SHOWN else ""
    print(
        f"tether check: judged the index, and {len(paths)} file(s) on disk are not staged "
        f"({shown}{more}): stage them (git add -A), or pass --worktree to judge the files on "
        "disk",
        file=ctx.err,
    )


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    if args.baseline:
        return _write_baseline(ctx)
    store = ctx.read_store()
    outcome = checkcache.check(
        ctx.root,
        store,
        rev=args.rev,
        worktree=args.worktree,
        full=args.full,
        err=ctx.err,
        use_cache=not args.no_cache,
    )
    findings, diffs = outcome.findings, outcome.diffs
    if args.since:
        # Append-only is a question for git about the repository itself, not the snapshot.

        findings = sorted(findings + check_append_only(ctx.root, store, args.since))
    if args.json:
        doc = {
            "clean": not findings,
            "findings": [{"path": f.path, "line": f.line, "what": f.what} for f in findings],
            "diff": "".join(diffs),
            "fix": FIX_COMMAND,
        }
        print(json.dumps(doc, indent=1, sort_keys=True), file=ctx.out)
        return 1 if findings else 0
    for line in diffs:
        ctx.out.write(line)
    for finding in findings:
        print(finding, file=ctx.out)
    if findings:
        print(
            f"tether check: {len(findings)} finding(s); generated text is fixed by "
            f"{FIX_COMMAND}, hand-typed figures by deleting them or rendering them",
            file=ctx.err,
        )
        if args.rev is None and not args.worktree:
            _name_unstaged(ctx)
        return 1
    if not args.quiet:
        print("tether check: clean", file=ctx.out)
    return 0


def register(sub: Subparsers) -> None:
    """Add ``tether check`` to the CLI."""
    parser = sub.add_parser(
        "check",
        help="fail when rendered docs, the store or the policy have drifted (read-only, no GPU)",
        description=CHECK_DESCRIPTION,
        epilog=(
            "settings:\n  TETHER_MAX_RUN_BYTES  largest run file the store loader accepts "
            "(default 16 MiB; see `tether store --help`)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print findings only")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the findings (path, line, what) and the diff as one JSON document",
    )
    parser.add_argument(
        "--full",
        action="store_true",
        help="redraw every SVG figure and compare bytes (slow; CI runs this)",
    )
    judged = parser.add_mutually_exclusive_group()
    judged.add_argument(
        "--rev",
        metavar="REV",
        help="judge this git revision's tree (default: the index, what a commit records)",
    )
    judged.add_argument(
        "--worktree",
        action="store_true",
        help="judge the files on disk, untracked ones included, instead of the index",
    )
    parser.add_argument(
        "--since",
        metavar="REV",
        help="also fail when a run file the store held at the merge-base of REV and HEAD is "
        "modified or gone (the store is append-only; pre-commit and CI pass the main branch)",
    )
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="judge every run and file afresh, reading and writing no cache (the cache, in "
        "the clone's git folder, keys each verdict by the content it was drawn from; "
        "TETHER_NO_CACHE=1 does the same)",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="write the scan's current findings to the baseline file ([tool.tether.scan] "
        "baseline, default tether-scan-baseline.json) and exit; later checks report only new "
        "ones",
    )
    parser.set_defaults(handler=_handle)
