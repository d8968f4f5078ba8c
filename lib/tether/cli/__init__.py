"""tether: measure GPU kernels under a host lock, keep every raw sample, publish only what the
samples show.

Verbs (``tether VERB --help`` for each):

  sweep, gate, probe      measure arms over a grid, a throughput gate, a bound (write a run)
  compare                 two runs cell by cell against both A/A floors and their bands
  demo                    a small guarded sweep and the docs rendered from it
  guard, verify           hold the host for a command; run the test suite held, recorded
  store                   list, show, validate, merge and clean results stores
  render, check           write the docs from the store; fail when anything published drifted
  collect                 merge the nightly's per-host runs, then render and check
  compile                 compile every kernel variant per arch with no GPU (compile runs)
  sign                    sign runs with a host's SSH key (ssh-keygen -Y sign, as git does)
  legacy                  record the store's unsigned runs as legacy (never cited once
                          [tool.tether.signing] require is true)
  init                    set up tether in an existing repository (config, plugin, template)

Global options (--root, --store, --debug) work before or after the verb. Exit codes: 0 ok,
1 failed (a check, a gate, bad data), 2 usage, 70 an internal error (a bug in tether or in a
template; --debug shows the traceback), 74 the system refused a read or write (no space,
read-only, no permission), 75 host busy (nothing measured), 77 not run here (the hardware a
verb needs is absent), 128+N stopped by signal N (130 Ctrl-C, 143 SIGTERM), 141 the reader
closed the pipe (``tether store ls | head``).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import NoReturn, TextIO, TypeAlias

from tether import __version__
from tether import project as project_mod
from tether.errors import (
    BROKEN_PIPE_EXIT,
    OSFailure,
    TetherError,
    UsageError,
    exit_code_for,
)

# Not a TetherError: a bug (in tether, a plugin or a template), reported in one line that names
# where it happened; --debug re-raises it with the traceback (EX_SOFTWARE).
INTERNAL_ERROR_CODE = 70

# Each module registers its verbs (see its ``register``); all of them live in this package.
# A call names one verb, and only that verb's module is imported (with what it imports at its
# top: the timing engine, the renderer, pytest): `tether check`, the pre-commit hook, loads
# no measuring code. Help, or a verb not listed, imports them all.
VERB_MODULES: dict[str, str] = {
    "sweep": "tether.cli.bench",
    "tune": "tether.cli.bench",
    "gate": "tether.cli.bench",
    "probe": "tether.cli.bench",
    "demo": "tether.cli.bench",
    "guard": "tether.cli.guard",
    "verify": "tether.cli.guard",
    "store": "tether.cli.store",  # store ls|show|validate|merge|clean
    "render": "tether.cli.render",
    "check": "tether.cli.check",
    "collect": "tether.cli.collect",
    "compare": "tether.cli.compare",
    "compile": "tether.cli.compile",  # compile evidence, no GPU
    "sign": "tether.cli.sign",  # a measuring host signs its runs
    "legacy": "tether.cli.legacy",  # record unsigned runs as legacy (never cited under require)
    "init": "tether.cli.init",  # adopt tether in an existing repository
}
COMMAND_MODULES: tuple[str, ...] = tuple(dict.fromkeys(VERB_MODULES.values()))
# Global options that take a value, so the verb is not mistaken for it.
_VALUED_GLOBALS = ("--root", "--store")
# Verbs that run before any project exists: they take the working directory (or --root) as
# the project-to-be instead of requiring a [tool.tether] table above it.
NO_PROJECT_VERBS = frozenset({"init"})


@dataclass
class Context:
    """What every handler gets besides its arguments."""

    project: project_mod.Project
    store: Path  # the results store (the project's, unless --store says otherwise)
    out: TextIO
    err: TextIO
    store_given: bool = False  # --store was passed (a verb that reads may require it to exist)

    @property
    def root(self) -> Path:
        return self.project.root

    def read_store(self) -> Path:
        """The store a verb that reads takes: a --store that does not exist is a usage error
        (a typo must not read as an empty store); the project's own may be absent (a fresh
        checkout), which reads as empty."""
        if self.store_given and not self.store.is_dir():
            what = "is not a folder" if self.store.exists() else "does not exist"
            raise UsageError(f"--store {self.store}: {what}; name an existing results store")
        return self.store


@dataclass
class BareContext:
    """What a verb that runs before any project exists gets (``tether init``)."""

    out: TextIO
    err: TextIO


Handler = Callable[[argparse.Namespace, Context], int]
# What each verb module's ``register`` adds its parser to (a string: argparse's class is not
# subscriptable at run time).
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def find_root(start: Path | None = None) -> Path:
    """The configured project at or above ``start`` (see tether.project.find_root)."""
    return project_mod.find_root(start)


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so in-process callers keep control."""

    def error(self, message: str) -> NoReturn:
        # main prints every UsageError after "tether: error: ", so the message names only the
        # verb ("check: argument --rev: ..."), and nothing at the top, never "tether" twice.
        verb = self.prog.removeprefix("tether").strip()
        raise UsageError(f"{verb}: {message}" if verb else message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            self._print_message(message, sys.stderr)
        raise _Exit(status)


class _Exit(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


def _add_globals(parser: argparse.ArgumentParser, top: bool) -> None:
    """--root and --store on ``parser`` and every subparser below it, so they work anywhere.

    Below the top level the default is SUPPRESS: an option left out after the verb never
    overwrites the value given before it.
    """
    default = None if top else argparse.SUPPRESS
    parser.add_argument(
        "--root",
        type=Path,
        default=default,
        help="the project (default: found from the working directory)",
    )
    parser.add_argument(
        "--store",
        type=Path,
        default=default,
        help="results store (default: the project's [tool.tether] store)",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="show the traceback of an unexpected error instead of a one-line message",
    )
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                _add_globals(sub, top=False)


def _describe(parser: argparse.ArgumentParser) -> None:
    """Give every verb below ``parser`` a description: a verb registered with only a one-line
    ``help`` shows that line under ``tether VERB --help`` too, so no help page starts empty."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {a.dest: a.help for a in action._choices_actions}
        for name, sub in action.choices.items():
            if not sub.description and helps.get(name):
                text = str(helps[name])
                sub.description = text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")
            _describe(sub)


def verb_of(argv: Sequence[str]) -> str | None:
    """The verb an argument list names (the first word that is neither an option nor a global
    option's value), or None."""
    args = iter(argv)
    for arg in args:
        if arg in _VALUED_GLOBALS:
            next(args, None)
        elif arg == "--":
            return None
        elif not arg.startswith("-"):
            return arg
    return None


def build_parser(out: TextIO | None = None, verb: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser: with ``verb`` one of VERB_MODULES, only its module's verbs; else all."""
    parser = _Parser(
        prog="tether",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # -V as well: the short form pip, pytest and python answer, and what a user tries first.
    parser.add_argument("-V", "--version", action="version", version=f"tether {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="VERB", parser_class=_Parser)
    modules = (VERB_MODULES[verb],) if verb in VERB_MODULES else COMMAND_MODULES
    for name in modules:
        importlib.import_module(name).register(sub)
    _add_globals(parser, top=True)
    _describe(parser)
    return parser


def _where(tb: TracebackType | None) -> str | None:
    """The innermost template (``*.j2``) or tether frame of a traceback, as ``file:line``:
    jinja2 puts template lines in tracebacks, so a template that raises is named by line."""
    frames = traceback.extract_tb(tb)
    for frame in reversed(frames):
        if frame.filename.endswith(".j2"):
            return f"{frame.filename}:{frame.lineno}"
    for frame in reversed(frames):
        if "/tether/" in frame.filename or "/tether_kernels/" in frame.filename:
            return f"{frame.filename}:{frame.lineno}"
    return None


def _os_failure(exc: OSError, tb: TracebackType | None) -> OSFailure:
    path = exc.filename or _where(tb) or "<unknown file>"
    return OSFailure(path, "read or write it", exc)


def _quiet_broken_pipe(out: TextIO) -> int:
    """The reader of ``out`` went away (``tether store ls | head``): stop without a traceback.

    Python would report the failed flush of stdout again at exit, so the real stdout is
    pointed at /dev/null first (the fix the Python docs give for SIGPIPE)."""
    if out is sys.stdout:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass  # an injected or already-closed stream: nothing to redirect
    return BROKEN_PIPE_EXIT


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run the CLI; returns the exit code instead of exiting so tests can call it."""
    out = out or sys.stdout
    err = err or sys.stderr
    given = list(argv) if argv is not None else sys.argv[1:]
    debug = "--debug" in given
    try:
        parser = build_parser(out, verb_of(given))
        try:
            args = parser.parse_args(given)
        except _Exit as stop:
            return stop.status
        handler: Handler | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help(out)
            return 2
        if args.command in NO_PROJECT_VERBS:
            return handler(args, BareContext(out=out, err=err))  # type: ignore[arg-type]
        root = args.root.resolve() if args.root else project_mod.find_root()
        proj = project_mod.get(root)
        store = args.store.resolve() if args.store else proj.store
        ctx = Context(project=proj, store=store, out=out, err=err, store_given=bool(args.store))
        code = handler(args, ctx)
        out.flush()  # a closed pipe shows here, inside the handler below, not at exit
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe(out)
    except TetherError as exc:
        print(f"tether: error: {exc}", file=err)
        return exit_code_for(exc)
    except KeyboardInterrupt as exc:
        signum = int(getattr(exc, "signum", signal.SIGINT))
        print(f"tether: interrupted ({signal.Signals(signum).name})", file=err)
        return 128 + signum
    except OSError as exc:
        if debug:
            raise
        failure = _os_failure(exc, exc.__traceback__)
        print(f"tether: error: {failure}", file=err)
        return exit_code_for(failure)
    except Exception as exc:
        if debug:
            raise
        where = _where(exc.__traceback__)
        at = f" at {where}" if where else ""
        print(
            f"tether: internal error{at}: {type(exc).__name__}: {exc} "
            "(rerun with --debug for the traceback)",
            file=err,
        )
        return INTERNAL_ERROR_CODE


# Verbs whose process ends with os._exit once its output is flushed (``run``). A check builds
# every run of the store in memory, and an interpreter that exits normally then walks and
# frees all of it (a final garbage collection and every object's deallocation): 0.6 s of a
# warm check of this repository's store, paid after the verdict is printed. A check only reads:
# the files it writes (cache entries) are whole when renamed into place, and its temp copy is
# removed before it returns, so nothing is left for the interpreter's own exit to do. mypy
# ends its command the same way (mypy.util.hard_exit). Verbs that write runs or hold the
# guard exit as usual, so every finaliser and atexit handler of theirs runs.
HARD_EXIT_VERBS = frozenset({"check"})


def run() -> NoReturn:
    """The ``tether`` command (and ``python -m tether``): ``main`` on ``sys.argv``, then exit
    with its code, at once for HARD_EXIT_VERBS (see there) unless a profiler or tracer runs."""
    # A profiler or a tracer (coverage) writes its report at the interpreter's exit.
    watched = sys.getprofile() is not None or sys.gettrace() is not None
    hard = not watched and verb_of(sys.argv[1:]) in HARD_EXIT_VERBS
    if hard:
        # Nothing the process makes needs collecting before os._exit; and a collector paused
        # for the check (tether.checkcache) and enabled again would at once walk every object
        # the check made, none of them ever collected (0.2 s on this repository's store).
        gc.disable()
    code = main()
    if not hard:
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (BrokenPipeError, ValueError):
        pass  # a reader that went away, or a closed stream: the code is what is left to say
    os._exit(code)
