"""``tether render``: write README.md, docs/ and the policy regions from the results store."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tether.cli import Context


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    from tether.render import write_all

    out_root: Path | None = args.out.resolve() if args.out else None
    changed = write_all(ctx.root, ctx.store, out_root=out_root)
    where = out_root or ctx.root
    for rel in changed:
        print(f"rendered {where / rel}", file=ctx.out)
    if not changed:
        print(f"up to date: {where}", file=ctx.out)
    return 0


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "render",
        help="write README.md, docs/ and generated policy regions from the results store",
        description=__doc__,
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="DIR",
        help="render into DIR instead of the checkout (e.g. the demo's scratch folder)",
    )
    parser.set_defaults(handler=_handle)
