"""``tether sign``: a measuring host signs the runs it wrote (see tether.store.signing).

    tether sign --key /etc/tether/host_ed25519 --principal h200-lab RUN ...
    tether sign --key /etc/tether/host_ed25519 --principal h200-lab --unsigned

Needs only python and ssh-keygen (the GPU host has no network). Each signature is written as
``<store>/<arch>/<run-id>.sig`` beside its run; a run already signed is left alone (a sidecar
is never overwritten). When the project names an allowed-signers file, each new signature must
verify there for ``--principal`` before it is written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tether.cli import Context, Subparsers
from tether.cli.store import find_run
from tether.errors import UsageError
from tether.store.io import load_run, store_files
from tether.store.model import Run
from tether.store.signing import NAMESPACE, sidecar, sign_run_file

SIGN_DESCRIPTION = f"""\
Sign runs of the store with an SSH key (ssh-keygen -Y sign, namespace {NAMESPACE}), the way
git signs commits. The signed message is the run's digest; the signature is written beside the
run as <run-id>.sig. With [tool.tether.signing] require = true, `tether check` fails on a cited
run that is unsigned, signed by a key the allowed-signers file does not list, or whose
signature does not match its digest.
"""


def _targets(args: argparse.Namespace, store: Path) -> list[Run]:
    if args.unsigned:
        if args.runs:
            raise UsageError("sign: name runs or pass --unsigned, not both")
        runs = [load_run(p) for p in store_files(store)]
        return [r for r in runs if r.path is not None and not sidecar(r.path).exists()]
    if not args.runs:
        raise UsageError("sign: name the runs to sign (ids or files), or pass --unsigned")
    return [find_run(ref, store) for ref in args.runs]


def _handle(args: argparse.Namespace, ctx: Context) -> int:
    store = ctx.read_store()
    key = Path(args.key)
    if not key.is_file():
        raise UsageError(f"--key {key}: no such private key file")
    allowed = ctx.project.allowed_signers
    if allowed is not None and not allowed.is_file():
        raise UsageError(
            f"[tool.tether.signing] allowed_signers {ctx.project.rel(allowed)}: no such file"
        )
    signed = skipped = 0
    for run in _targets(args, store):
        assert run.path is not None  # loaded from a file
        if sidecar(run.path).exists():
            print(f"already signed: {sidecar(run.path)}", file=ctx.err)
            skipped += 1
            continue
        path = sign_run_file(run.path, run.digest, key, args.principal, allowed)
        print(f"signed {path}", file=ctx.out)
        signed += 1
    note = "" if allowed is not None else " (no allowed-signers file configured to check them)"
    print(
        f"{signed} run(s) signed as {args.principal}, {skipped} already signed{note}", file=ctx.err
    )
    return 0


def register(sub: Subparsers) -> None:
    """Add ``tether sign`` to the CLI."""
    parser = sub.add_parser(
        "sign",
        help="sign runs with an SSH key (a measuring host's), as git signs commits",
        description=SIGN_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--key", required=True, help="the SSH private key file to sign with")
    parser.add_argument(
        "--principal",
        required=True,
        help="the signer's name in the allowed-signers file (checked there before writing)",
    )
    parser.add_argument("runs", nargs="*", metavar="RUN", help="run ids (or prefixes) or files")
    parser.add_argument(
        "--unsigned", action="store_true", help="sign every run of the store that has no signature"
    )
    parser.set_defaults(handler=_handle)
