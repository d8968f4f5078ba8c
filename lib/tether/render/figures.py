"""Figure targets that can be checked without drawing them.

Drawing an SVG with matplotlib is the slow part of a render, so each figure is a ``FigureSpec``:
the digest of its inputs (the plotted data, the source of the module that draws it, the
matplotlib version) and a function that draws it. The drawn SVG carries, in an XML comment
right after the XML declaration, that input digest and a digest of the SVG body itself:

    <!-- tether-figure inputs=<sha256> body=<sha256> -->

``tether check`` compares the digest embedded in the file on disk with the one computed from the
store and redraws only when they differ; the body digest catches a hand edit of the drawing that
left the comment alone. A forger who recomputes both digests is caught by ``tether check --full``
(CI), which redraws every figure and compares bytes.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

_STAMP = re.compile(rb"<!-- tether-figure inputs=([0-9a-f]{64}) body=([0-9a-f]{64}) -->\n")


@cache
def _source_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@cache
def matplotlib_version() -> str:
    """The installed matplotlib's version, read from its metadata (no import of matplotlib)."""
    try:
        return metadata.version("matplotlib")
    except metadata.PackageNotFoundError:
        return "absent"


def inputs_digest(kind: str, data: object, sources: Iterable[str]) -> str:
    """Digest of what a figure is drawn from: ``data`` (JSON-able) and the drawing sources.

    The matplotlib version is not part of it: the fast check must give the same answer in a
    light environment without matplotlib (the pre-commit hook) as in a full one; a drawing
    library that draws other bytes is what ``tether check --full`` catches.
    """
    payload = {
        "kind": kind,
        "data": data,
        "sources": {Path(s).name: _source_digest(s) for s in sorted(sources)},
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _split(svg: bytes) -> tuple[bytes, bytes]:
    """(first line with its newline, the rest) of an SVG document."""
    head, sep, rest = svg.partition(b"\n")
    return head + sep, rest


def stamp(svg: bytes, digest: str) -> bytes:
    """``svg`` with the inputs digest and its body digest embedded after the XML declaration."""
    head, rest = _split(svg)
    body = hashlib.sha256(head + rest).hexdigest()
    return head + f"<!-- tether-figure inputs={digest} body={body} -->\n".encode() + rest


def embedded_digest(svg: bytes) -> str | None:
    """The inputs digest a stamped SVG carries, or None when unstamped or its body was edited."""
    head, rest = _split(svg)
    match = _STAMP.match(rest)
    if match is None:
        return None
    body = head + rest[match.end() :]
    if hashlib.sha256(body).hexdigest() != match.group(2).decode():
        return None
    return match.group(1).decode()


@dataclass(frozen=True)
class FigureSpec:
    """One figure target: its inputs digest and how to draw it (unstamped SVG bytes)."""

    digest: str
    draw_svg: Callable[[], bytes]

    def draw(self) -> bytes:
        return stamp(self.draw_svg(), self.digest)
