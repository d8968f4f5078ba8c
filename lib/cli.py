"""The ``tether`` command: small verbs, each registered by the module that owns it.

Command modules are imported here by name; each keeps its heavy imports (torch, triton)
inside its handlers so that ``tether check`` and ``tether render`` never load GPU code.
Every handler writes to the injected streams in ``Context`` so tests run the CLI in-process.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tether.errors import TetherError, UsageError, exit_code_for

# module -> it registers these verbs (see each module's ``register``)
COMMAND_MODULES: tuple[str, ...] = (
    "tether.store.cli",  # store ls|show|validate|merge
    "tether.render.cli",  # render
    "tether.check",  # check
    "tether.guard.cli",  # guard status|hold, verify
    "tether.bench.cli",  # sweep, gate, probe, demo
)


@dataclass
class Context:
    """What every handler gets besides its arguments."""

    root: Path  # the repository: docs_src/, docs/, kernels/, README.md
    store: Path  # the results store (``root/results`` unless --store says otherwise)
    out: TextIO
    err: TextIO


Handler = Callable[[argparse.Namespace, Context], int]


def find_root(start: Path | None = None) -> Path:
    """The tether checkout containing ``start``: $TETHER_ROOT, else the nearest parent with docs_src/."""
    env = os.environ.get("TETHER_ROOT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for cand in (here, *here.parents):
        if (cand / "docs_src").is_dir() and (cand / "pyproject.toml").is_file():
            return cand
    # Installed without a checkout: the package's own source tree, when it is one.
    pkg = Path(__file__).resolve().parent.parent
    if (pkg / "docs_src").is_dir():
        return pkg
    raise UsageError(
        f"no tether checkout found at or above {here}; run inside one or set TETHER_ROOT"
    )


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so in-process callers keep control."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> None:  # type: ignore[override]
        if message:
            self._print_message(message, sys.stderr)
        raise _Exit(status)


class _Exit(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


def build_parser(out: TextIO) -> argparse.ArgumentParser:
    parser = _Parser(prog="tether", description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, help="the tether checkout (default: found from cwd)")
    parser.add_argument("--store", type=Path, help="results store (default: ROOT/results)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:  # a real missing dependency inside the module: say so
                raise
            continue  # a verb family not built yet
        module.register(sub)
    return parser


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the CLI; returns the exit code instead of exiting so tests can call it."""
    out = out or sys.stdout
    err = err or sys.stderr
    try:
        parser = build_parser(out)
        try:
            args = parser.parse_args(list(argv) if argv is not None else None)
        except _Exit as stop:
            return stop.status
        handler: Handler | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(out)
            return 2
        root = args.root.resolve() if args.root else find_root()
        store = args.store.resolve() if args.store else root / "results"
        return handler(args, Context(root=root, store=store, out=out, err=err))
    except TetherError as exc:
        print(f"tether: error: {exc}", file=err)
        return exit_code_for(exc)
    except KeyboardInterrupt:
        print("tether: interrupted", file=err)
        return 130
