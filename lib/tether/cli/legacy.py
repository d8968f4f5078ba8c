"""``tether legacy``: record the store's unsigned runs as legacy, so the act is on record.

    tether legacy --reason "measured before signed evidence was required"
    tether legacy --reason "signed by the leaked key h200-host-2026" RUN ...

Each ``ok`` run of the store with no signature (or each run named, whatever its signature:
the runs of a revoked key) is added to ``.tether/legacy_runs.toml``
(``[tool.tether.signing] legacy``) with its digest, who recorded it, when and why. Nothing in
the store changes (it is append-only). Once ``[tool.tether.signing] require`` is true, a
legacy run is never cited (tether.store.evidence): a document, a threshold or a gate resting
on one needs a signed run measured again. Entries are only added, never removed: the list is
the record of what was set aside.
"""

from __future__ import annotations

import argparse
import getpass
import subprocess

from tether.cli import Context, Subparsers
from tether.cli.store import find_run
from tether.errors import UsageError
from tether.store.evidence import record_legacy
from tether.store.io import load_store

DEFAULT_REASON = "measured before [tool.tether.signing] require; unsigned"


def _who(ctx: Context) -> str:
    """Who records it: git's user (name and email) in the project, else the login name."""
    parts = []
    for key in ("user.name", "user.email"):
        try:
            done = subprocess.run(
                ["git", "config", key], cwd=ctx.root, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            break
        if done.returncode == 0 and done.stdout.strip():
            parts.append(done.stdout.strip())
    if len(parts) == 2:
        return f"{parts[0]} <{parts[1]}>"
    return parts[0] if parts else getpass.getuser()


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    store = ctx.read_store()
    if not args.reason.strip():
        raise UsageError("legacy: --reason must say why (it is the record of the act)")
    if args.runs:
        runs = [find_run(ref, store) for ref in args.runs]
    else:
        runs = load_store(store) if store.is_dir() else []
    by = args.by or _who(ctx)
    added, path = record_legacy(ctx.root, runs, by, args.reason.strip(), named=bool(args.runs))
    for entry in added:
        print(f"legacy: {entry.id}", file=ctx.out)
    print(
        f"legacy: {len(added)} unsigned run(s) recorded in {ctx.project.rel(path)} by {by}"
        + ("" if added else " (none left to record)"),
        file=ctx.err,
    )
    return 0


def register(sub: Subparsers) -> None:
    """Add ``tether legacy`` to the CLI."""
    parser = sub.add_parser(
        "legacy",
        help="record the store's unsigned runs as legacy (never cited once signing is required)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--reason", default=DEFAULT_REASON, help="why they are set aside")
    parser.add_argument("--by", help="who records it (default: git's user.name <user.email>)")
    parser.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="record these runs (ids, prefixes or files) whatever their signature; default: "
        "every unsigned ok run",
    )
    parser.set_defaults(handler=_handle)
