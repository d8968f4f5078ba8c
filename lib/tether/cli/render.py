"""``tether render``: write README.md, docs/ and the policy regions from the results store."""

from __future__ import annotations

import argparse
from pathlib import Path

from tether.cli import Context, Subparsers
from tether.errors import UsageError
from tether.render import render_builtin, write_all
from tether.store.io import store_files

RENDER_DESCRIPTION = """\
Write README.md, docs/ and the generated policy regions from the results store.

Everything is rendered in memory first; nothing is written when a template or a run fails.
A store with no runs (missing, empty, or a --store typo) is refused before anything is
written when it would wipe measured documents: --store must name an existing store with runs,
and the project's own store may be empty only while no figures exist yet (a new project).
"""


PR_COMMENT = "pr_comment.md.j2"


def refuse_empty_store(ctx: Context, store: Path, dest: Path) -> None:
    """UsageError when rendering ``store`` would replace measured docs with "not measured"
    and delete figures it cannot redraw: an explicit --store without runs, or the project's
    store without runs while figures exist under ``dest``."""

    if store_files(store):
        return
    owned = ctx.project.figures
    figures = sorted((dest / owned).glob("*.svg")) if owned else []
    if ctx.store_given:
        raise UsageError(
            f"--store {store} holds no runs; rendering from it would mark every document "
            f"'not measured' and delete {len(figures)} figure(s); name the store with the runs"
        )
    if figures:
        rel = ctx.project.rel(store)
        if not store.exists():
            fix = (
                f"the store {rel!r} ([tool.tether] store in pyproject.toml) does not exist: "
                f"fix that setting if it is a typo, restore the folder if it was deleted, or "
                f"pass --store"
            )
        else:
            fix = f"restore the store's runs from git (git checkout -- {rel}) or pass --store"
        raise UsageError(
            f"the store {store} holds no runs but {len(figures)} figure(s) exist under "
            f"{dest / str(owned)}; rendering would delete what it cannot redraw. {fix}"
        )


def _handle(args: argparse.Namespace, ctx: Context) -> int:

    store = ctx.read_store()
    if args.pr_comment:
        ctx.out.write(render_builtin(ctx.root, store, PR_COMMENT))
        return 0
    out_root: Path | None = args.out.resolve() if args.out else None
    where = out_root or ctx.root
    refuse_empty_store(ctx, store, where)
    changed = write_all(ctx.root, store, out_root=out_root, err=ctx.err)
    for rel in changed:
        print(f"rendered {where / rel}", file=ctx.out)
    if not changed:
        print(f"up to date: {where}", file=ctx.out)
    return 0


def register(sub: Subparsers) -> None:
    parser = sub.add_parser(
        "render",
        help="write README.md, docs/ and generated policy regions from the results store",
        description=RENDER_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="render into DIR instead of the checkout (e.g. the demo's scratch folder)",
    )
    parser.add_argument(
        "--pr-comment",
        action="store_true",
        help="print a Markdown summary of the cited runs for a pull-request comment (writes "
        "nothing; e.g. `tether render --pr-comment | gh pr comment N --body-file -`)",
    )
    parser.set_defaults(handler=_handle)
