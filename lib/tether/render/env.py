"""The jinja2 environment every tether document is rendered with, and its formatting filters.

Templates only format: numbers arrive computed, claims arrive as booleans with their evidence.
The environment is strict (an undefined name or a missing template is an error) and has no
clock or randomness, so the same store always renders to the same bytes.
"""

from __future__ import annotations

import math
import os
import posixpath
from collections.abc import Callable
from pathlib import Path

import jinja2
from jinja2.bccache import Bucket
from jinja2.loaders import split_template_path

from tether import cache
from tether.errors import TetherError, UnsafeTextError
from tether.textfile import read_text

# Characters that would change Markdown structure or inject markup, and their escapes.
_MD_ESCAPES = {
    "\\": "\\\\",
    "<": "&lt;",
    ">": "&gt;",
    "[": "\\[",
    "]": "\\]",
    "`": "\\`",
    "*": "\\*",
    "_": "\\_",
}
_MD_FORBIDDEN = ("|", "\n", "\r")


class TemplateError(TetherError):
    """A template is missing, refers to an undefined name, or fails to render."""


def md_cell(value: object) -> str:
    """A value made safe for a Markdown table cell; a pipe or a line break is refused."""
    text = str(value)
    for bad in _MD_FORBIDDEN:
        if bad in text:
            raise UnsafeTextError(f"value {text!r} contains {bad!r}; refused in a Markdown table")
    if any(ord(ch) < 32 for ch in text):
        raise UnsafeTextError(f"value {text!r} contains a control character")
    return "".join(_MD_ESCAPES.get(ch, ch) for ch in text)


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TemplateError(f"filter {what}: expected a number, got {value!r}")
    x = float(value)
    if not math.isfinite(x):
        raise TemplateError(f"filter {what}: non-finite value {value!r}")
    return x


def ratio(value: object) -> str:
    """A speedup ratio, three decimals."""
    return f"{_number(value, 'ratio'):.3f}"


_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def rate(value: object, unit: str = "FLOP") -> str:
    """Work per second with an SI prefix and the unit (the FLOP count 5.3e14 per second reads
    as 530.0 with the tera prefix).

    One decimal at the chosen prefix; the unit is the sweep's work unit (FLOP, B, rows, ...).
    """
    x = _number(value, "rate")
    for scale, prefix in _PREFIXES:
        if abs(x) >= scale:
            return f"{x / scale:.1f} {prefix}{unit}/s"
    return f"{x:.1f} {unit}/s"


def ms(value: object) -> str:
    """Seconds rendered as milliseconds, four significant figures."""
    return f"{_number(value, 'ms') * 1e3:.4g}"


def pct(value: object) -> str:
    """A fraction rendered as a percentage, one decimal."""
    return f"{_number(value, 'pct') * 100:.1f}"


def floor_range(value: object) -> str:
    """A relative range ``(lo, hi)`` (an A/A floor, a replicate band) as ``lo-hi``."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TemplateError(f"filter floor_range: expected (lo, hi), got {value!r}")
    return f"{ratio(value[0])}-{ratio(value[1])}"


FILTERS = {
    "md_cell": md_cell,
    "ratio": ratio,
    "rate": rate,
    "ms": ms,
    "pct": pct,
    "floor_range": floor_range,
}


# tether's own partials (``{% include "tether/results.md.j2" %}``), beside the project's.
BUILTIN_TEMPLATES = Path(__file__).resolve().parent / "templates"
BUILTIN_PREFIX = "tether/"


class TextLoader(jinja2.FileSystemLoader):
    """jinja2's folder loader, reading through ``tether.textfile``: a template that is not
    UTF-8, or binary, or that the system refuses to read is an error naming the file (jinja2's
    own loader lets the UnicodeDecodeError out, which names no file). ``label`` is how
    messages name the folder."""

    def __init__(self, folder: Path, label: str) -> None:
        super().__init__(str(folder), encoding="utf-8")
        self.label = label

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        pieces = split_template_path(template)  # refuses ".." out of the folder, as jinja2 does
        filename = posixpath.join(self.searchpath[0], *pieces)
        if not os.path.isfile(filename):
            raise jinja2.TemplateNotFound(template)
        contents = read_text(filename, posixpath.join(self.label, *pieces))
        mtime = os.path.getmtime(filename)

        def uptodate() -> bool:
            try:
                return os.path.getmtime(filename) == mtime
            except OSError:
                return False

        return contents, os.path.normpath(filename), uptodate


# The kind of cache entry KeptBytecode keeps (tether.cache).
JINJA_CODE = "jinja-code"


class KeptBytecode(jinja2.BytecodeCache):
    """Compiled templates kept in the check's cache (``tether.cache.current``), so a check
    whose templates did not change does not compile them again. Keyed by the template's name
    and the SHA-1 jinja takes of its source, not by its file name: a check reads its
    templates from a new snapshot folder each time. An entry is checksummed like every
    other (``tether.cache``), and jinja refuses one of another Python's marshal format.
    Outside a check (no active cache) it keeps nothing."""

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return cache.digest(name)

    def load_bytecode(self, bucket: Bucket) -> None:
        kept = cache.current()
        if kept is None:
            return
        data = kept.get(JINJA_CODE, cache.digest(bucket.key, bucket.checksum), bytes)
        if data is not None:
            bucket.bytecode_from_string(data)

    def dump_bytecode(self, bucket: Bucket) -> None:
        kept = cache.current()
        if kept is None or bucket.code is None:
            return
        key = cache.digest(bucket.key, bucket.checksum)
        kept.put(JINJA_CODE, key, bucket.bytecode_to_string())


def make_env(templates: Path, label: str | None = None) -> jinja2.Environment:
    """The strict environment over the folder ``templates`` (the project's configured
    ``templates``), plus tether's built-in partials under ``tether/``. ``label`` is how messages
    name the folder (its path relative to the project root; default: as given)."""
    label = label or str(templates)
    if not templates.is_dir():
        raise TemplateError(f"{label}: template folder not found ([tool.tether] templates)")
    env = jinja2.Environment(
        loader=jinja2.ChoiceLoader(
            [
                jinja2.PrefixLoader(
                    {
                        BUILTIN_PREFIX.rstrip("/"): TextLoader(
                            BUILTIN_TEMPLATES, f"tether's built-in {BUILTIN_PREFIX.rstrip('/')}"
                        )
                    }
                ),
                TextLoader(templates, label),
            ]
        ),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=True,
        lstrip_blocks=True,
        newline_sequence="\n",
        auto_reload=False,
        bytecode_cache=KeptBytecode(),
    )
    env.filters.update(FILTERS)
    env.globals["tether_templates"] = label  # where the project's templates live, for messages
    return env


def _where(env: jinja2.Environment, name: str) -> str:
    if name.startswith(BUILTIN_PREFIX):
        return f"tether's built-in {name}"
    return f"{env.globals.get('tether_templates', 'docs_src')}/{name}"


def render_template(env: jinja2.Environment, name: str, context: dict[str, object]) -> str:
    """Render ``name``; every jinja failure becomes a TemplateError naming the template."""
    try:
        return env.get_template(name).render(**context)
    except jinja2.TemplateNotFound as exc:
        raise TemplateError(f"{_where(env, name)}: template not found ({exc.name})") from exc
    except jinja2.UndefinedError as exc:
        raise TemplateError(f"{_where(env, name)}: undefined value: {exc.message}") from exc
    except jinja2.TemplateSyntaxError as exc:
        raise TemplateError(
            f"{_where(env, exc.name or name)}:{exc.lineno}: template syntax: {exc.message}"
        ) from exc
