"""One reader for every text file tether renders from or judges: templates, region files, the
project config, policy files, render data and the files the check scans.

A file that is not text is the file's error, not tether's: ``read_text`` raises a
``TextFileError`` naming the file and the line (not UTF-8, or a NUL byte, which is what a
binary file looks like), and an ``OSFailure`` naming it when the system refuses the read. Both
map to exit codes in ``tether.errors``; neither is an internal error (rc 70). A missing file
stays ``FileNotFoundError``: what a missing file means (a typo, an optional file) is for the
caller to say.
"""

from __future__ import annotations

from pathlib import Path

from tether.errors import OSFailure, TextFileError


def _line_of(raw: bytes, offset: int) -> int:
    return raw.count(b"\n", 0, offset) + 1


def decode_text(raw: bytes, label: object) -> str:
    """``raw`` as UTF-8 text, line endings as they are; TextFileError naming ``label`` (the
    file as messages should name it) when it is binary or not UTF-8."""
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise TextFileError(label, "a NUL byte: a binary file, not text", _line_of(raw, nul))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        byte = raw[exc.start : exc.start + 1].hex()
        raise TextFileError(
            label, f"not UTF-8 text (byte 0x{byte}: {exc.reason})", _line_of(raw, exc.start)
        ) from None


def read_text(path: Path | str, label: object = None, *, exact: bool = False) -> str:
    """The UTF-8 text of ``path``. ``exact`` keeps the line endings as they are (a file whose
    bytes a render rewrites must keep its CRLF); otherwise they read as ``\\n``, as
    ``Path.read_text`` reads them. ``label`` is how errors name the file (default: the path)."""
    where = path if label is None else label
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise OSFailure(where, "read it", exc) from None
    text = decode_text(raw, where)
    return text if exact else text.replace("\r\n", "\n").replace("\r", "\n")
