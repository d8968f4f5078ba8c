"""Generated regions inside hand-written files: find the markers, replace only what lies between.

Python files:   ``# BEGIN GENERATED: <id> (tether render)`` ... ``# END GENERATED: <id>``
Markdown files: ``<!-- BEGIN GENERATED: <id> (tether render) -->`` ... ``<!-- END GENERATED: <id> -->``

The marker lines themselves are kept byte for byte (including their indentation), so the
text a person wrote around a region never changes when the region is re-rendered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tether.errors import TetherError

COMMAND = "tether render"


class RegionError(TetherError):
    """A generated-region marker is missing, duplicated or unbalanced."""

    def __init__(self, path: object, region: str, problem: str) -> None:
        self.path = str(path)
        self.region = region
        super().__init__(f"{self.path}: region {region!r}: {problem}")


@dataclass(frozen=True)
class Syntax:
    begin: re.Pattern[str]
    end: re.Pattern[str]
    begin_fmt: str
    end_fmt: str
    # A line that starts like a marker but does not parse as one: a typo, not prose.
    loose: re.Pattern[str]


_ID = r"(?P<id>[A-Za-z0-9][A-Za-z0-9._:-]*)"
PYTHON = Syntax(
    begin=re.compile(
        r"^(?P<indent>[ \t]*)# BEGIN GENERATED: " + _ID + r"(?: \((?P<cmd>[^)]*)\))?[ \t]*$"
    ),
    end=re.compile(r"^(?P<indent>[ \t]*)# END GENERATED: " + _ID + r"[ \t]*$"),
    begin_fmt="# BEGIN GENERATED: {id} (" + COMMAND + ")",
    end_fmt="# END GENERATED: {id}",
    loose=re.compile(r"^[ \t]*#\s*(?:BEGIN|END)\s+GENERATED"),
)
MARKDOWN = Syntax(
    begin=re.compile(
        r"^(?P<indent>[ \t]*)<!-- BEGIN GENERATED: " + _ID + r"(?: \((?P<cmd>[^)]*)\))? -->[ \t]*$"
    ),
    end=re.compile(r"^(?P<indent>[ \t]*)<!-- END GENERATED: " + _ID + r" -->[ \t]*$"),
    begin_fmt="<!-- BEGIN GENERATED: {id} (" + COMMAND + ") -->",
    end_fmt="<!-- END GENERATED: {id} -->",
    loose=re.compile(r"^[ \t]*<!--\s*(?:BEGIN|END)\s+GENERATED"),
)


def syntax_for(path: Path) -> Syntax:
    if path.suffix == ".py":
        return PYTHON
    if path.suffix == ".md":
        return MARKDOWN
    raise RegionError(path, "*", f"no generated-region syntax for {path.suffix!r} files")


@dataclass(frozen=True)
class Span:
    """Line indices of one region: ``begin`` and ``end`` are the marker lines."""

    id: str
    begin: int
    end: int
    indent: str


def find_regions(text: str, path: Path) -> dict[str, Span]:
    """Every region in ``text``; any stray, nested, duplicated or unclosed marker is an error."""
    syntax = syntax_for(path)
    lines = [ln.removesuffix("\r") for ln in text.split("\n")]  # a CRLF file's markers too
    spans: dict[str, Span] = {}
    open_id: str | None = None
    open_at = 0
    open_indent = ""
    for i, line in enumerate(lines):
        b, e = syntax.begin.match(line), syntax.end.match(line)
        if b:
            rid = b.group("id")
            if open_id is not None:
                raise RegionError(path, rid, f"line {i + 1}: begins inside region {open_id!r}")
            if rid in spans:
                raise RegionError(path, rid, f"line {i + 1}: duplicated region")
            open_id, open_at, open_indent = rid, i, b.group("indent")
        elif e:
            rid = e.group("id")
            if open_id != rid:
                raise RegionError(path, rid, f"line {i + 1}: END without a matching BEGIN")
            spans[rid] = Span(rid, open_at, i, open_indent)
            open_id = None
        elif syntax.loose.match(line):
            raise RegionError(path, "?", f"line {i + 1}: malformed marker: {line.strip()!r}")
    if open_id is not None:
        raise RegionError(path, open_id, f"line {open_at + 1}: BEGIN without END")
    return spans


def _indent_body(body: str, indent: str) -> list[str]:
    if body and not body.endswith("\n"):
        body += "\n"
    return [(indent + ln) if ln else ln for ln in body.split("\n")[:-1]]


def replace_regions(text: str, path: Path, bodies: dict[str, str]) -> str:
    """``text`` with each region in ``bodies`` replaced; every id must occur exactly once."""
    spans = find_regions(text, path)
    missing = sorted(set(bodies) - set(spans))
    if missing:
        raise RegionError(path, missing[0], "marker not found (add BEGIN/END GENERATED lines)")
    lines = text.split("\n")
    # The file's own line endings survive: a CRLF file's lines keep their "\r", and so do
    # the generated ones put between its markers.
    cr = "\r" if "\r\n" in text else ""
    # Replace bottom-up so earlier line indices stay valid.
    for rid in sorted(bodies, key=lambda r: spans[r].begin, reverse=True):
        span = spans[rid]
        new = [ln + cr for ln in _indent_body(bodies[rid], span.indent)]
        lines[span.begin + 1 : span.end] = new
    return "\n".join(lines)


def region_body(text: str, path: Path, region: str) -> str:
    """The current text between the markers of ``region`` (for diffs and tests)."""
    spans = find_regions(text, path)
    if region not in spans:
        raise RegionError(path, region, "marker not found")
    span = spans[region]
    lines = text.split("\n")[span.begin + 1 : span.end]
    return "".join(ln + "\n" for ln in lines)
