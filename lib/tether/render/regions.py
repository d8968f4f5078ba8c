"""Generated regions inside hand-written files: find the markers, replace only what lies between.

Any file with a line comment syntax can hold regions; the marker is that comment:

- ``#`` files (Python, YAML, TOML, shell, ...): ``# BEGIN GENERATED: <id> (tether render)``
  ... ``# END GENERATED: <id>``
- Markdown and HTML: ``<!-- BEGIN GENERATED: <id> (tether render) -->`` ...
  ``<!-- END GENERATED: <id> -->``
- reStructuredText: ``.. BEGIN GENERATED: <id> (tether render)`` ... ``.. END GENERATED: <id>``
- C-family (``//``), SQL and Lua (``--``), TeX (``%``).

The marker lines themselves, and every byte outside the regions, are kept as they are
(indentation, trailing text, the file's own line endings: a CRLF file stays CRLF, and the
lines rendered into a region take the ending of its BEGIN line), so the text a person wrote
around a region never changes when the region is re-rendered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePath

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


def comment_syntax(opener: str, closer: str = "") -> Syntax:
    """Markers written as the comment ``opener ... closer`` (closer empty for line comments)."""
    o = re.escape(opener)
    c = (" " + re.escape(closer)) if closer else ""
    tail = (" " + closer) if closer else ""
    return Syntax(
        begin=re.compile(
            r"^(?P<indent>[ \t]*)" + o + r" BEGIN GENERATED: " + _ID
            + r"(?: \((?P<cmd>[^)]*)\))?" + c + r"[ \t]*$"
        ),
        end=re.compile(r"^(?P<indent>[ \t]*)" + o + r" END GENERATED: " + _ID + c + r"[ \t]*$"),
        begin_fmt=opener + " BEGIN GENERATED: {id} (" + COMMAND + ")" + tail,
        end_fmt=opener + " END GENERATED: {id}" + tail,
        loose=re.compile(r"^[ \t]*" + o + r"\s*(?:BEGIN|END)\s+GENERATED"),
    )  # fmt: skip


PYTHON = HASH = comment_syntax("#")
MARKDOWN = comment_syntax("<!--", "-->")
RST = comment_syntax("..")
SLASHES = comment_syntax("//")
DASHES = comment_syntax("--")
PERCENT = comment_syntax("%")

# File suffix (lower case) -> its comment syntax. A file type missing here is refused by name
# rather than guessed at: a marker in the wrong comment syntax would corrupt the file.
SUFFIXES: dict[str, Syntax] = {
    **dict.fromkeys(
        (".py", ".pyi", ".pyx", ".sh", ".bash", ".zsh", ".yaml", ".yml", ".toml", ".cfg",
         ".ini", ".conf", ".txt", ".r", ".rb", ".pl", ".cmake", ".mk", ".dockerfile"),
        HASH,
    ),
    **dict.fromkeys((".md", ".markdown", ".html", ".htm", ".xml"), MARKDOWN),
    ".rst": RST,
    **dict.fromkeys(
        (".c", ".h", ".cc", ".cpp", ".cxx", ".hpp", ".cu", ".cuh", ".js", ".ts", ".rs", ".go",
         ".java", ".kt", ".swift", ".scala", ".mlir"),
        SLASHES,
    ),
    **dict.fromkeys((".sql", ".lua", ".hs"), DASHES),
    **dict.fromkeys((".tex", ".sty"), PERCENT),
}  # fmt: skip
# Files known by name, with no suffix.
NAMES: dict[str, Syntax] = {"Makefile": HASH, "Dockerfile": HASH, "CMakeLists.txt": HASH}


def syntax_for(path: PurePath | str) -> Syntax:
    """The comment syntax of ``path``'s markers, by its name or suffix."""
    path = PurePath(path)
    if path.name in NAMES:
        return NAMES[path.name]
    found = SUFFIXES.get(path.suffix.lower())
    if found is None:
        raise RegionError(
            path,
            "*",
            f"no generated-region syntax for {path.suffix or path.name!r} files (known: "
            f"{', '.join(sorted(SUFFIXES))})",
        )
    return found


def _lines(text: str) -> list[str]:
    """``text`` split on LF; a CR before the LF stays on its line (see ``_bare``)."""
    return text.split("\n")


def _bare(line: str) -> str:
    """``line`` without the CR of a CRLF ending, for matching markers."""
    return line[:-1] if line.endswith("\r") else line


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
    lines = _lines(text)
    spans: dict[str, Span] = {}
    open_id: str | None = None
    open_at = 0
    open_indent = ""
    for i, raw in enumerate(lines):
        line = _bare(raw)
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


def _indent_body(body: str, indent: str, eol: str = "") -> list[str]:
    """The lines of ``body`` indented like the markers; ``eol`` is "\\r" in a CRLF file (the
    split on LF leaves it to each line), so rendered lines end as the file's own do."""
    if body and not body.endswith("\n"):
        body += "\n"
    body = body.replace("\r\n", "\n")
    return [((indent + ln) if ln else ln) + eol for ln in body.split("\n")[:-1]]


def replace_regions(text: str, path: Path, bodies: dict[str, str]) -> str:
    """``text`` with each region in ``bodies`` replaced; every id must occur exactly once."""
    spans = find_regions(text, path)
    missing = sorted(set(bodies) - set(spans))
    if missing:
        raise RegionError(path, missing[0], "marker not found (add BEGIN/END GENERATED lines)")
    lines = _lines(text)
    # Replace bottom-up so earlier line indices stay valid.
    for rid in sorted(bodies, key=lambda r: spans[r].begin, reverse=True):
        span = spans[rid]
        eol = "\r" if lines[span.begin].endswith("\r") else ""
        new = _indent_body(bodies[rid], span.indent, eol)
        lines[span.begin + 1 : span.end] = new
    return "\n".join(lines)


def region_body(text: str, path: Path, region: str) -> str:
    """The current text between the markers of ``region`` (for diffs and tests)."""
    spans = find_regions(text, path)
    if region not in spans:
        raise RegionError(path, region, "marker not found")
    span = spans[region]
    lines = _lines(text)[span.begin + 1 : span.end]
    return "".join(ln + "\n" for ln in lines)
