"""One root for every error tether raises, and the one table that maps them to exit codes.

Exit codes (kept in ``EXIT_CODES`` only): 0 clean, 1 drift / check / gate failed or bad data
(a run file, or a template or other text file that is not UTF-8 text), 2 usage, 74 the system refused a read or write (EX_IOERR: no space, read-only, no permission),
75 host busy or not measured (EX_TEMPFAIL, so schedulers can retry), 77 not run here
(the hardware a verb needs is absent: neither a pass nor a fail). ``tether guard status``
answers with ``GUARD_STATUS_CODES``: 0 free, 75 held or busy, 69 unknown (EX_UNAVAILABLE).
"""

from __future__ import annotations


class TetherError(Exception):
    """Root of every error tether raises on purpose."""


class UsageError(TetherError):
    """The command line or an API call was used wrongly."""


class NotAProjectError(UsageError):
    """A pyproject.toml with no [tool.tether] table: the folder is no tether project (yet)."""


class RunFileError(TetherError):
    """A run file is malformed. Names the file and the field so the reader can fix it."""

    def __init__(self, path: object, field: str, problem: str) -> None:
        self.path = str(path)
        self.field = field
        self.problem = problem
        super().__init__(f"{self.path}: {field}: {problem}")


class StoreError(TetherError):
    """The store as a whole is inconsistent (an id claimed twice, a write refused)."""


class SigningError(TetherError):
    """A run's signature cannot be made, read or checked (no ssh-keygen, a bad key or file)."""


class OSFailure(TetherError):
    """The operating system refused a read or a write (no space, read-only, no permission):
    names the file, what was being done and the cause. Not drift: its own exit code (74)."""

    def __init__(self, path: object, doing: str, exc: OSError | str) -> None:
        self.path = str(path)
        self.doing = doing
        cause = exc if isinstance(exc, str) else (exc.strerror or str(exc))
        self.cause = cause
        super().__init__(f"{self.path}: cannot {doing}: {cause}")


class TextFileError(TetherError):
    """A file tether reads as text (a template, a region file, the config, a scanned file) is
    not: it is not UTF-8, or it holds a NUL byte (binary). Names the file, and the line where
    it can tell, so the reader can fix it; not an internal error."""

    def __init__(self, path: object, problem: str, line: int | None = None) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        super().__init__(f"{where}: {problem}")


class UnsafeTextError(TetherError):
    """A string from a run file would change the structure of the Markdown it lands in."""


class NotMeasuredError(TetherError):
    """The host could not be had in time (busy, locked); nothing was measured."""


class HostBusyError(NotMeasuredError):
    """The guard lock is held or the GPU is in use by a foreign process."""


class GuardError(TetherError):
    """The guard refused to run (unsafe lock path, unexpected owner, ...)."""


class UnknownArchError(TetherError):
    """An architecture name that tether does not know."""


class ArmUnavailableError(TetherError):
    """An arm cannot serve this shape on this device. Never answered by a silent fallback."""


class NotRunHereError(TetherError):
    """The hardware a verb needs is absent on this host: nothing ran, nothing passed or failed."""


class WrongVendorError(NotRunHereError):
    """A vendor-specific command ran on the other vendor's GPU (or none)."""


# The only place an exception becomes an exit code. Order matters: first match wins.
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (OSFailure, 74),
    (NotMeasuredError, 75),
    (NotRunHereError, 77),
    (UsageError, 2),
    (TetherError, 1),
)


# The reader of tether's output closed the pipe (``tether store ls | head``): 128 + SIGPIPE,
# what a shell reports for a process the signal ended, but without a traceback.
BROKEN_PIPE_EXIT = 141


def exit_code_for(exc: BaseException) -> int:
    """Exit code for ``exc``; anything tether did not raise on purpose is 1."""
    for cls, code in EXIT_CODES:
        if isinstance(exc, cls):
            return code
    return 1


# `tether guard status`: the host's state as its exit code, so a script can branch on it.
# held/busy share 75 with HostBusyError (the host cannot be had now); unknown (a probe that
# cannot answer, a lock that cannot be inspected) is neither free nor held.
GUARD_STATUS_CODES: dict[str, int] = {"free": 0, "held": 75, "busy": 75, "unknown": 69}


def guard_status_code(state: str) -> int:
    """Exit code of ``tether guard status`` for a host ``state`` (free, held, busy, unknown)."""
    return GUARD_STATUS_CODES.get(state, GUARD_STATUS_CODES["unknown"])
