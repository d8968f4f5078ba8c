"""Safe-text rules: strings from a run file that may land in Markdown must not restructure it.

A device name such as ``H200 | 9999 |`` would add table columns, ``<script>`` would inject
HTML and ``[x](http://evil)`` a link; all three are refused at load time, naming the field.
Kernel names are C++ signatures full of ``<`` and ``>``, so they follow a looser rule (the
renderer escapes them) that still refuses pipes, newlines and control characters.
"""

from __future__ import annotations

import re
import unicodedata

from tether.errors import UnsafeTextError

# Characters that change Markdown structure (tables, HTML, links, code spans).
FORBIDDEN = frozenset("|\n\r<>[]`")
# Kernel names keep < > [ ] (templates, arrays); the renderer escapes those.
KERNEL_FORBIDDEN = frozenset("|\n\r`")
# Ids become file names and anchors; names are also CLI arguments.
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+-]*")
NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")
MAX_TEXT = 512
MAX_KERNEL = 8192


def _control(ch: str) -> bool:
    # Cc = C0/C1 controls; Cf = format chars (bidi overrides, zero-width) that hide text;
    # Zl/Zp = line and paragraph separators that act like newlines in some renderers.
    return unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")


# ASCII has no Cf, Zl or Zp characters, so an ASCII string is safe exactly when it holds none of
# the forbidden characters and no C0 control or DEL: one regex search instead of a Python loop
# over every character (kernel names run to thousands of characters, and a store holds
# hundreds of thousands of strings, so that loop dominated loading a store).
_ASCII_UNSAFE = re.compile(r"[\x00-\x1f\x7f|<>\[\]`]")
_ASCII_KERNEL_UNSAFE = re.compile(r"[\x00-\x1f\x7f|`]")


def _first_unsafe(value: str, kernel: bool) -> str | None:
    """The first character of ``value`` the rule refuses, or None."""
    if value.isascii():
        m = (_ASCII_KERNEL_UNSAFE if kernel else _ASCII_UNSAFE).search(value)
        return m.group() if m else None
    forbidden = KERNEL_FORBIDDEN if kernel else FORBIDDEN
    for ch in value:
        if ch in forbidden or _control(ch):
            return ch
    return None


def check_safe_text(value: object, what: str = "text", *, kernel: bool = False) -> str:
    """Return ``value`` if it is a string that is safe to place in Markdown, else raise.

    ``kernel=True`` applies the kernel-name rule (angle and square brackets allowed).
    Raises UnsafeTextError naming ``what`` and the offending character.
    """
    if not isinstance(value, str):
        raise UnsafeTextError(f"{what}: expected a string, got {type(value).__name__}")
    limit = MAX_KERNEL if kernel else MAX_TEXT
    if len(value) > limit:
        raise UnsafeTextError(f"{what}: longer than {limit} characters")
    ch = _first_unsafe(value, kernel)
    if ch is not None:
        raise UnsafeTextError(f"{what}: unsafe character {ch!r} in {value[:80]!r}")
    return value


def sanitize(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` made safe under the same rule ``check_safe_text`` enforces, keeping its meaning:
    every forbidden or control character becomes a space, runs of spaces fold, and the result
    is cut to ``limit`` characters. The one place free text (a reason, an error) is cleaned
    before it enters a run."""
    cleaned = "".join(" " if ch in FORBIDDEN or _control(ch) else ch for ch in text)
    return " ".join(cleaned.split())[:limit]


def check_id(value: object, what: str = "id") -> str:
    """Return ``value`` if it is a valid run id (also a file stem), else raise."""
    if not isinstance(value, str) or not ID_RE.fullmatch(value) or len(value) > 255:
        raise UnsafeTextError(f"{what}: {value!r} does not match {ID_RE.pattern}")
    return value


def check_name(value: object, what: str = "name") -> str:
    """Return ``value`` if it is a valid run name, else raise."""
    if not isinstance(value, str) or not NAME_RE.fullmatch(value) or len(value) > 128:
        raise UnsafeTextError(f"{what}: {value!r} does not match {NAME_RE.pattern}")
    return value
