"""Validation of ``tether.run/2``: every failure names the file and the field path.

``run_from_json`` is the only way a dict becomes a ``Run``; ``write_run`` and ``new_run``
round-trip through it, so a run that could not be loaded back is never written. A file whose
``digest`` does not match its content was edited after it was written, and is refused.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from tether.arch import ARCH_RE
from tether.errors import RunFileError, UnsafeTextError
from tether.store.model import (
    CELL_KEYS,
    CONTROL,
    GUARD_KEYS,
    GUARD_MODES,
    ID_DIGITS,
    KINDS,
    PROVENANCE_KEYS,
    PROVENANCE_OPTIONAL,
    SCHEMA,
    STATUSES,
    TOP_KEYS,
    Cell,
    GuardRecord,
    Provenance,
    Run,
    digest_of,
    id_tail,
    remember_digest,
)
from tether.store.results import BY_KIND
from tether.store.safe import check_id, check_name, check_safe_text

SHA_RE = re.compile(r"[0-9a-f]{40}")
FINGERPRINT_RE = re.compile(r"sha256:[0-9a-f]{64}")
# A harness fingerprint by definition (tether.store.harness): what it covers, then its hash.
_COVER = r"(?:engine|(?:case|arm|bound)=[A-Za-z_][A-Za-z0-9_]*)"
HARNESS_RE = re.compile(rf"harness/2:((?:{_COVER}(?:,{_COVER})*)?):([0-9a-f]{{64}})")
STAMP_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
AXIS_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A grid axis: an identifier, or a pair of them (``hq/hkv``: tether.policy's pair fields).
GRID_AXIS_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*")
ENV_KEY_RE = AXIS_RE  # provenance.environment keys: variable names and counters
VENDORS = ("cuda", "rocm", "cpu")
# kind -> {field: (types, description)} of ``results`` when a run is ok, and the optional
# fields checked when present: derived from the typed summaries (tether.store.results), so a
# field is declared once. Sweeps and tuning runs carry no summary.
NUM = (int, float)
RESULTS: dict[str, dict[str, tuple[tuple[type, ...], str]]] = {
    kind: {} for kind in ("sweep", "tune", "gate", "probe", "verify", "compile")
}
OPTIONAL_RESULTS: dict[str, dict[str, tuple[tuple[type, ...], str]]] = {}
for _kind, _summary in BY_KIND.items():
    RESULTS[_kind] = _summary.required()
    if _summary.optional():
        OPTIONAL_RESULTS[_kind] = _summary.optional()
# Roles each ok cell must carry samples for.
REQUIRED_ROLES = {
    "sweep": ("A", CONTROL, "B"),
    "tune": ("A", CONTROL, "B"),
    "gate": ("B",),
    "probe": ("B",),
    "verify": (),
    "compile": (),
}

# -- compile runs (issue 13) -------------------------------------------------------------------
# A compile run records what the compiler made of each kernel variant, with no GPU: its cells
# are the variants, with no timing samples and no FLOPs (0), and each cell's ``extra`` carries
# the compiler's figures that the compile gates (tether.policy.CompileGate) read.
REQUIRED_ROLES["compile"] = ()
COMPILE_EXTRA: dict[str, tuple[type, ...]] = {
    "spills": (int,),
    "lds_bytes": (int,),
    "lds_limit_bytes": (int,),
    "loops": (list,),
    "occupancy": (dict,),
}


def _check_compile_cells(c: _Checker, cells: tuple[Cell, ...], ok: bool) -> None:
    """Compile cells: no samples, zero work, and the compiler figures the gates read."""
    for i, cell in enumerate(cells):
        at = f"cells[{i}]"
        if cell.samples:
            c.fail(f"{at}.samples", "a compile cell has no timing samples")
        if cell.work != 0:
            c.fail(f"{at}.work", "a compile cell does no work (0): nothing ran")
        for name, types in COMPILE_EXTRA.items():
            if name not in cell.extra:
                c.fail(f"{at}.extra.{name}", "missing key")
            value = cell.extra[name]
            if not isinstance(value, types) or isinstance(value, bool):
                c.fail(f"{at}.extra.{name}", f"expected {types[0].__name__}")
        for j, loop in enumerate(cell.extra["loops"]):
            if not isinstance(loop, dict) or not isinstance(loop.get("matrix"), int):
                c.fail(f"{at}.extra.loops[{j}].matrix", "expected an int")
    if ok and not cells:
        c.fail("cells", "an ok compile run has at least one cell (variant)")


class _Checker:
    def __init__(self, source: object, *, parsed: bool = False) -> None:
        self.source = source
        # True when the data is parse_json_text's output: JSON text holds nothing but JSON data
        # with string keys, and a non-finite float there (an overflow) fails the digest's
        # canonical JSON, which allows none, so the free-form trees need no walk of their own
        # (every sample of every cell, walked a second time).
        self.parsed = parsed
        # Per grid axis, its values in _canon form: built once per run, not once per cell.
        self.axis_values: dict[str, set[tuple[str, object]]] = {}

    def fail(self, field: str, problem: str) -> NoReturn:
        raise RunFileError(self.source, field, problem)

    def obj(self, value: object, field: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(field, f"expected an object, got {type(value).__name__}")
        return value

    def keys(self, value: Mapping[str, Any], field: str, expected: tuple[str, ...]) -> None:
        prefix = f"{field}." if field else ""
        for k in value:
            if k not in expected:
                self.fail(f"{prefix}{k}", "unknown key")
        for k in expected:
            if k not in value:
                self.fail(f"{prefix}{k}", "missing key")

    def text(self, value: object, field: str, *, kernel: bool = False) -> str:
        try:
            return check_safe_text(value, field, kernel=kernel)
        except UnsafeTextError as exc:
            self.fail(field, str(exc).split(": ", 1)[-1])

    def number(self, value: object, field: str, *, positive: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, NUM):
            self.fail(field, f"expected a number, got {type(value).__name__}")
        if not math.isfinite(value):
            self.fail(field, f"not finite ({value})")
        if positive and value <= 0:
            self.fail(field, f"must be > 0, got {value}")
        return float(value)

    def finite_tree(self, value: object, field: str) -> None:
        """Free-form JSON must still be JSON: no NaN or infinity hiding in floats."""
        if self.parsed:
            return
        self._finite_tree(value, field)

    def _finite_tree(self, value: object, field: str) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            self.fail(field, f"not finite ({value})")
        elif isinstance(value, dict):
            for k, v in value.items():
                if not isinstance(k, str):
                    self.fail(field, "object keys must be strings")
                self._finite_tree(v, f"{field}.{k}")
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                self._finite_tree(v, f"{field}[{i}]")
        elif value is not None and not isinstance(value, (str, int, float, bool)):
            self.fail(field, f"not JSON data ({type(value).__name__})")

    def scalar(self, value: object, field: str) -> object:
        if isinstance(value, str):
            return self.text(value, field)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, NUM):
            return self.number(value, field)
        self.fail(field, f"expected a string, number or bool, got {type(value).__name__}")

    def text_list(self, value: object, field: str, *, kernel: bool = False) -> tuple[str, ...]:
        if not isinstance(value, (list, tuple)):
            self.fail(field, f"expected a list, got {type(value).__name__}")
        return tuple(self.text(v, f"{field}[{i}]", kernel=kernel) for i, v in enumerate(value))


_SECONDS = frozenset((int, float))


def _canon(value: object) -> tuple[str, object]:
    # 1, 1.0 and True compare equal in Python; a key must match its axis value's JSON type.
    return (type(value).__name__, value)


# Deepest nesting of arrays and objects a run file may have. Real runs are about ten deep;
# json.loads recurses once per level, so a hostile file of a million brackets would end in a
# RecursionError that names no file. The depth is measured before parsing.
MAX_DEPTH = 64
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[``/``{`` in JSON ``text``, brackets inside strings ignored.

    Runs in C-level loops (regex, map, accumulate), so even a file at the size limit costs
    well under a second.
    """
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


# Every byte but the brackets and the quote, for bytes.translate to delete; braces map to
# square brackets (for depth the kind does not matter, and valid JSON pairs them).
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')
_SQUARE = bytes.maketrans(b"{}", b"[]")
_BYTE_STRING = re.compile(rb'"[^"]*"')


def json_depth(text: str) -> int:
    """``nesting_depth`` of valid JSON, in passes of bytes.replace and bytes.translate over the
    UTF-8 text, which cost less than the regex pass over real stores.

    ``\\`` and ``\"`` are taken out first, left to right as JSON reads them, so every quote
    left opens or closes a string; then everything but brackets and quotes, then the strings.
    What is left is bracket pairs: each pass of ``replace(b"[]", b"")`` removes the innermost
    pairs, one level, so the passes count the depth. Text that does not reduce that way (not
    JSON) or is deeper than MAX_DEPTH gets the exact count of ``nesting_depth``.
    """
    raw = text.encode("utf-8", "surrogatepass")
    left = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    left = left.translate(_SQUARE, _NOT_STRUCTURE).replace(b'""', b"")
    if b'"' in left:
        left = _BYTE_STRING.sub(b"", left)
    depth = 0
    while left:
        shorter = left.replace(b"[]", b"")
        if len(shorter) == len(left) or depth > MAX_DEPTH:
            return nesting_depth(text)
        left, depth = shorter, depth + 1
    return depth


MAX_INT_DIGITS = 64


def parse_json_text(text: str, source: object) -> dict[str, Any]:
    """Parse a run file's text, refusing NaN/Infinity tokens, duplicated object keys, integers
    of more than MAX_INT_DIGITS digits and nesting deeper than MAX_DEPTH. A float that
    overflows parses as infinity; run_from_json refuses it."""
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise RunFileError(
            source, "json", f"nested {depth} levels deep; a run file nests at most {MAX_DEPTH}"
        )

    def reject_constant(token: str) -> NoReturn:
        raise RunFileError(source, "json", f"{token} is not allowed (JSON has no {token})")

    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs):
            seen: set[str] = set()
            for k, _ in pairs:
                if k in seen:
                    raise RunFileError(source, "json", f"duplicated key {k!r}")
                seen.add(k)
        return out

    def bounded_int(token: str) -> int:
        # Python refuses to convert integers past 4300 digits with a bare ValueError (and a
        # long one costs quadratic time before that); no count in a run needs more than this.
        if len(token) > MAX_INT_DIGITS and (digits := len(token.lstrip("-"))) > MAX_INT_DIGITS:
            raise RunFileError(
                source,
                "json",
                f"an integer of {digits} digits; a run file's integers have at most "
                f"{MAX_INT_DIGITS}",
            )
        return int(token)

    try:
        data = json.loads(
            text,
            parse_constant=reject_constant,
            object_pairs_hook=no_duplicates,
            parse_int=bounded_int,
            # The C scanner's own float (a hook costs a Python call per sample): a number that
            # overflows to infinity is refused by run_from_json, which finds every non-finite
            # value (the samples' own check, and the digest's canonical JSON allows no NaN).
            parse_float=float,
        )
    except json.JSONDecodeError as exc:
        raise RunFileError(
            source, "json", f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:  # unbalanced brackets can hide depth from the count above
        raise RunFileError(source, "json", "nested too deeply to parse") from None
    if not isinstance(data, dict):
        raise RunFileError(source, "json", "the top level must be an object")
    return data


def _provenance(c: _Checker, value: object) -> Provenance:
    prov = c.obj(value, "provenance")
    c.keys(
        {k: v for k, v in prov.items() if k not in PROVENANCE_OPTIONAL},
        "provenance",
        PROVENANCE_KEYS,
    )
    sha = prov["git_sha"]
    if not (sha == "unknown" or (isinstance(sha, str) and SHA_RE.fullmatch(sha))):
        c.fail("provenance.git_sha", f"expected 40 lowercase hex or 'unknown', got {sha!r}")
    if prov["git_dirty"] is not None and not isinstance(prov["git_dirty"], bool):
        c.fail("provenance.git_dirty", "expected true, false or null")
    harness = prov["harness_fingerprint"]
    if not (
        isinstance(harness, str)
        and (FINGERPRINT_RE.fullmatch(harness) or HARNESS_RE.fullmatch(harness))
    ):
        c.fail(
            "provenance.harness_fingerprint",
            f"expected sha256:<64 hex> or harness/2:<covers>:<64 hex>, got {harness!r}",
        )
    kernels = prov["kernels_fingerprint"]
    if not (isinstance(kernels, str) and FINGERPRINT_RE.fullmatch(kernels)):
        c.fail("provenance.kernels_fingerprint", f"expected sha256:<64 hex>, got {kernels!r}")
    c.text(prov["host"], "provenance.host")
    c.text(prov["device"], "provenance.device")
    if not (isinstance(prov["arch"], str) and ARCH_RE.fullmatch(prov["arch"])):
        c.fail(
            "provenance.arch",
            f"{prov['arch']!r} is not an arch name (sm<major><minor>, gfx<target> or cpu)",
        )
    if prov["driver"] is not None:
        c.text(prov["driver"], "provenance.driver")
    runtime = c.obj(prov["runtime"], "provenance.runtime")
    for k, v in runtime.items():
        if not AXIS_RE.fullmatch(k):
            c.fail(f"provenance.runtime.{k}", "bad key")
        if v is not None:
            c.text(v, f"provenance.runtime.{k}")
    environment = None
    if "environment" in prov:
        environment = c.obj(prov["environment"], "provenance.environment")
        for k, v in environment.items():
            if not ENV_KEY_RE.fullmatch(k):
                c.fail(f"provenance.environment.{k}", "bad key")
            if v is not None:
                c.text(v, f"provenance.environment.{k}")
        environment = dict(environment)
    for stamp in ("started", "ended"):
        if not (isinstance(prov[stamp], str) and STAMP_RE.fullmatch(prov[stamp])):
            c.fail(f"provenance.{stamp}", f"expected YYYY-MM-DDTHH:MM:SSZ, got {prov[stamp]!r}")
    if prov["ended"] < prov["started"]:
        c.fail("provenance.ended", "earlier than provenance.started")
    return Provenance(
        git_sha=sha,
        git_dirty=prov["git_dirty"],
        harness_fingerprint=prov["harness_fingerprint"],
        kernels_fingerprint=prov["kernels_fingerprint"],
        host=prov["host"],
        arch=prov["arch"],
        device=prov["device"],
        driver=prov["driver"],
        runtime=dict(runtime),
        started=prov["started"],
        ended=prov["ended"],
        environment=environment,
    )


def _guard(c: _Checker, value: object, kind: str, status: str) -> GuardRecord:
    g = c.obj(value, "guard")
    c.keys(g, "guard", GUARD_KEYS)
    mode = g["mode"]
    if mode not in GUARD_MODES:
        c.fail("guard.mode", f"{mode!r} is not one of {', '.join(GUARD_MODES)}")
    if g["lock"] is not None:
        c.text(g["lock"], "guard.lock")
    for part in ("holder", "before", "after"):
        if g[part] is not None:
            c.obj(g[part], f"guard.{part}")
            c.finite_tree(g[part], f"guard.{part}")
    if not isinstance(g["arms"], list):
        c.fail("guard.arms", "expected a list")
    arms = tuple(c.obj(a, f"guard.arms[{i}]") for i, a in enumerate(g["arms"]))
    c.finite_tree(list(arms), "guard.arms")
    waited = c.number(g["waited_s"], "guard.waited_s")
    if waited < 0:
        c.fail("guard.waited_s", "must not be negative")
    if g["reason"] is not None:
        c.text(g["reason"], "guard.reason")
    if mode == "refused" and status == "ok":
        c.fail("guard.mode", "an ok run cannot have been refused the host")
    if mode in ("held", "nested"):
        if g["holder"] is None or g["before"] is None:
            c.fail("guard", f"a {mode} run records the holder and the idle evidence before it")
    elif not g["reason"]:
        c.fail("guard.reason", f"a {mode} run says why (non-empty string)")
    return GuardRecord(
        mode=mode,
        lock=g["lock"],
        holder=g["holder"],
        before=g["before"],
        after=g["after"],
        arms=arms,
        waited_s=waited,
        reason=g["reason"],
    )


def _grid(c: _Checker, config: dict[str, Any]) -> dict[str, list[Any]] | None:
    if "grid" not in config:
        return None
    grid = c.obj(config["grid"], "config.grid")
    c.keys(grid, "config.grid", ("axes", "fixed"))
    axes = c.obj(grid["axes"], "config.grid.axes")
    for name, values in axes.items():
        field = f"config.grid.axes.{name}"
        if not GRID_AXIS_RE.fullmatch(name):
            c.fail(field, "axis names must be identifiers, or identifiers joined by /")
        if not isinstance(values, list) or not values:
            c.fail(field, "expected a non-empty list")
        seen = set()
        for i, v in enumerate(values):
            c.scalar(v, f"{field}[{i}]")
            if _canon(v) in seen:
                c.fail(f"{field}[{i}]", f"duplicated value {v!r}")
            seen.add(_canon(v))
    for name, v in c.obj(grid["fixed"], "config.grid.fixed").items():
        c.scalar(v, f"config.grid.fixed.{name}")
    return axes


def _config(c: _Checker, value: object, kind: str, ok: bool) -> dict[str, Any]:
    config = c.obj(value, "config")
    if "arms" in config:
        for role, arm in c.obj(config["arms"], "config.arms").items():
            if not AXIS_RE.fullmatch(role):
                c.fail(f"config.arms.{role}", "role names must be identifiers")
            c.text(arm, f"config.arms.{role}")
    if "entry_points" in config:
        c.text_list(config["entry_points"], "config.entry_points")
    for k in ("timing",):
        if k in config:
            c.obj(config[k], f"config.{k}")
    if "unit" in config:
        unit = c.text(config["unit"], "config.unit")
        if not AXIS_RE.fullmatch(unit):
            c.fail("config.unit", f"{unit!r}: a unit is an identifier (FLOP, B, rows, ...)")
    c.finite_tree(config, "config")
    if kind in ("sweep", "tune") and ok:
        arms = config.get("arms")
        if not isinstance(arms, dict) or not {"A", "B"} <= set(arms):
            c.fail("config.arms", f"a {kind} names arms for roles A and B")
        if "grid" not in config:
            c.fail("config.grid", "missing key")
    return config


def _cell(
    c: _Checker, value: object, i: int, axes: dict[str, list[Any]] | None, kind: str = "sweep"
) -> Cell:
    at = f"cells[{i}]"
    raw = c.obj(value, at)
    c.keys(raw, at, CELL_KEYS)
    key = c.obj(raw["key"], f"{at}.key")
    for k, v in key.items():
        c.scalar(v, f"{at}.key.{k}")
    if axes:
        if set(key) != set(axes):
            c.fail(f"{at}.key", f"axes {sorted(key)} differ from the grid's {sorted(axes)}")
        for k, v in key.items():
            allowed = c.axis_values.get(k)
            if allowed is None:
                allowed = c.axis_values[k] = {_canon(a) for a in axes[k]}
            if _canon(v) not in allowed:
                c.fail(f"{at}.key.{k}", f"{v!r} is not a value of the grid axis")
    work = c.number(raw["work"], f"{at}.work", positive=kind != "compile")
    samples: dict[str, tuple[float, ...]] = {}
    for role, vals in c.obj(raw["samples"], f"{at}.samples").items():
        field = f"{at}.samples.{role}"
        if not AXIS_RE.fullmatch(role):
            c.fail(field, "role names must be identifiers")
        if not isinstance(vals, (list, tuple)) or not vals:
            c.fail(field, "expected a non-empty list of seconds")
        # The common case in C-level loops (every value a positive finite int or float); the
        # per-value checks below only run to name the value that is not.
        if set(map(type, vals)) <= _SECONDS and min(vals) > 0 and all(map(math.isfinite, vals)):
            samples[role] = tuple(map(float, vals))
        else:
            samples[role] = tuple(
                c.number(v, f"{field}[{j}]", positive=True) for j, v in enumerate(vals)
            )
    if not isinstance(raw["blocks"], list):
        c.fail(f"{at}.blocks", "expected a list of sample counts")
    blocks = []
    for j, n in enumerate(raw["blocks"]):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            c.fail(f"{at}.blocks[{j}]", f"expected a positive int, got {n!r}")
        blocks.append(n)
    if blocks:
        for role, vals in samples.items():
            if len(vals) != sum(blocks):
                c.fail(
                    f"{at}.samples.{role}",
                    f"{len(vals)} samples, but the blocks hold {sum(blocks)}",
                )
    kernels = {
        role: c.text_list(names, f"{at}.kernels.{role}", kernel=True)
        for role, names in c.obj(raw["kernels"], f"{at}.kernels").items()
    }
    reach = c.obj(raw["reach"], f"{at}.reach")
    for k in reach:
        if k not in ("entry_points", "routes"):
            c.fail(f"{at}.reach.{k}", "unknown key")
    if "entry_points" in reach:
        c.text_list(reach["entry_points"], f"{at}.reach.entry_points")
    for ep, arm in c.obj(reach.get("routes", {}), f"{at}.reach.routes").items():
        c.text(ep, f"{at}.reach.routes")
        c.text(arm, f"{at}.reach.routes.{ep}")
    flags = c.text_list(raw["flags"], f"{at}.flags")
    extra = c.obj(raw["extra"], f"{at}.extra")
    c.finite_tree(extra, f"{at}.extra")
    return Cell(key, work, samples, tuple(blocks), kernels, reach, flags, extra)


def _results(c: _Checker, value: object, kind: str, ok: bool) -> dict[str, Any]:
    results = c.obj(value, "results")
    spec = RESULTS[kind]
    optional = OPTIONAL_RESULTS.get(kind, {})
    for k, (types, desc) in optional.items():
        if k in results and not isinstance(results[k], types):
            c.fail(f"results.{k}", f"expected {desc}, got {type(results[k]).__name__}")
    if kind == "verify" and isinstance(results.get("routed_cases"), dict):
        for arm, n in results["routed_cases"].items():
            if not arm.isidentifier():
                c.fail("results.routed_cases", f"arm names are identifiers, got {arm!r}")
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                c.fail(f"results.routed_cases.{arm}", f"expected a non-negative int, got {n!r}")
    if kind == "probe" and isinstance(results.get("bounds"), dict):
        _bounds(c, results["bounds"])
    # A run that is not ok may have no summary at all; if it has one, it is a whole one.
    if spec and (ok or results):
        c.keys(results, "results", tuple(spec) + tuple(k for k in optional if k in results))
        for k, (types, desc) in spec.items():
            v = results[k]
            if not isinstance(v, types) or (isinstance(v, bool) and bool not in types):
                c.fail(f"results.{k}", f"expected {desc}, got {type(v).__name__}")
            if isinstance(v, str):
                c.text(v, f"results.{k}")
            elif isinstance(v, (dict, list)):
                c.finite_tree(v, f"results.{k}")
            elif not isinstance(v, bool) and c.number(v, f"results.{k}") < 0:
                c.fail(f"results.{k}", "must not be negative")
        if kind == "verify" and results["vendor"] not in VENDORS:
            c.fail("results.vendor", f"expected one of {', '.join(VENDORS)}")
    if "routed_cases" in optional and "routed_cases" in results:
        for arm, n in c.obj(results["routed_cases"], "results.routed_cases").items():
            field = f"results.routed_cases.{arm}"
            if not AXIS_RE.fullmatch(arm):
                c.fail(field, "arm names must be identifiers")
            if isinstance(n, bool) or not isinstance(n, int) or n < 0:
                c.fail(field, f"expected a non-negative int, got {n!r}")
    c.finite_tree(results, "results")
    return results


def _bounds(c: _Checker, bounds: dict[str, Any]) -> None:
    """A probe's bounds: per label, the work one call does, its raw seconds and what it is."""
    for label, b in bounds.items():
        at = f"results.bounds.{label}"
        if not AXIS_RE.fullmatch(label):
            c.fail(at, "bound labels must be identifiers")
        b = c.obj(b, at)
        c.keys(b, at, ("work", "samples", "what"))
        c.number(b["work"], f"{at}.work", positive=True)
        if not isinstance(b["samples"], list) or not b["samples"]:
            c.fail(f"{at}.samples", "expected a non-empty list of seconds")
        for j, v in enumerate(b["samples"]):
            c.number(v, f"{at}.samples[{j}]", positive=True)
        c.text(b["what"], f"{at}.what")


def run_from_json(
    data: object,
    source: object,
    *,
    stem: str | None = None,
    arch_dir: str | None = None,
    path: Path | None = None,
    parsed: bool = False,
) -> Run:
    """Validate ``data`` (a parsed run file) and build the Run; RunFileError names the field.

    ``stem``/``arch_dir`` are the file's name and folder when it comes from a store.
    ``parsed`` says ``data`` is ``parse_json_text``'s output, so it holds only JSON data and
    the free-form trees are not walked (the digest still refuses any non-finite value).
    """
    c = _Checker(source, parsed=parsed)
    top = c.obj(data, "json")
    if top.get("schema") == "tether.run/1":
        c.fail(
            "schema",
            "tether.run/1 is retired: such runs carry no digest and no guard record, so they "
            "cannot be evidence (they remain in the git history)",
        )
    if top.get("schema") != SCHEMA:
        c.fail("schema", f"expected {SCHEMA!r}, got {top.get('schema')!r}")
    c.keys(top, "", TOP_KEYS)
    try:
        run_id = check_id(top["id"])
        name = check_name(top["name"])
    except UnsafeTextError as exc:
        c.fail(str(exc).split(":", 1)[0], str(exc).split(": ", 1)[-1])
    if stem is not None and run_id != stem:
        c.fail("id", f"{run_id!r} differs from the file name {stem!r}")
    kind, status = top["kind"], top["status"]
    if kind not in KINDS:
        c.fail("kind", f"{kind!r} is not one of {', '.join(KINDS)}")
    if status not in STATUSES:
        c.fail("status", f"{status!r} is not one of {', '.join(STATUSES)}")
    ok = status == "ok"
    reason = top["reason"]
    if ok and reason is not None:
        c.fail("reason", "must be null when status is ok")
    if not ok and (not isinstance(reason, str) or not reason.strip()):
        c.fail("reason", f"a {status} run says why (non-empty string)")
    if reason is not None:
        c.text(reason, "reason")
    prov = _provenance(c, top["provenance"])
    if arch_dir is not None and prov.arch != arch_dir:
        c.fail("provenance.arch", f"{prov.arch!r} differs from its folder {arch_dir!r}")
    guard = _guard(c, top["guard"], kind, status)
    config = _config(c, top["config"], kind, ok)
    axes = _grid(c, config)
    if not isinstance(top["cells"], list):
        c.fail("cells", "expected a list")
    cells = tuple(_cell(c, raw, i, axes, kind) for i, raw in enumerate(top["cells"]))
    _check_cells(c, cells, kind, ok, axes, config)
    if kind == "compile":
        _check_compile_cells(c, cells, ok)
    results = _results(c, top["results"], kind, ok)
    # Last: every field is valid, so a mismatch here means the content was edited (a valid
    # number changed, a cell dropped) rather than malformed.
    if not (isinstance(top["digest"], str) and FINGERPRINT_RE.fullmatch(top["digest"])):
        c.fail("digest", f"expected sha256:<64 hex>, got {top['digest']!r}")
    try:
        want = digest_of(top)
    except (TypeError, ValueError) as exc:
        c.fail(
            "json",
            f"not canonical JSON data ({exc}): a value is not finite (NaN, infinity or a "
            "number too large for a float), or is not JSON data",
        )
    if top["digest"] != want:
        c.fail(
            "digest",
            "does not match the file's content: a sample or field was edited after the run "
            "was written (runs are immutable; measure again instead)",
        )
    if isinstance(top["id"], str) and not top["id"].endswith("-" + id_tail(want)):
        c.fail(
            "id",
            f"does not end with its digest's first {ID_DIGITS} hex digits ({id_tail(want)}): "
            "ids are content-addressed",
        )
    run = Run(run_id, kind, name, status, reason, prov, guard, config, cells, results, path)
    remember_digest(run, want)  # verified just now: the statistics' cache key costs nothing
    return run


def _check_cells(
    c: _Checker,
    cells: tuple[Cell, ...],
    kind: str,
    ok: bool,
    axes: dict[str, list[Any]] | None,
    config: dict[str, Any],
) -> None:
    seen: dict[tuple[Any, ...], int] = {}
    for i, cell in enumerate(cells):
        ident = tuple(sorted((k, _canon(v)) for k, v in cell.key.items()))
        if ident in seen:
            c.fail(f"cells[{i}].key", f"duplicates cells[{seen[ident]}]")
        seen[ident] = i
        if ok:
            for role in REQUIRED_ROLES[kind]:
                if role not in cell.samples:
                    what = "missing A/A control" if role == "A2" else f"missing role {role}"
                    c.fail(f"cells[{i}].samples.{role}", what)
        arms = config.get("arms")
        if isinstance(arms, dict) and arms:
            for role in cell.samples:
                base = "A" if role == "A2" else role
                if base not in arms:
                    c.fail(f"cells[{i}].samples.{role}", "role not named in config.arms")
    if axes and ok:
        names = list(axes)
        want = {
            tuple(sorted((n, _canon(v)) for n, v in zip(names, values, strict=True)))
            for values in itertools.product(*(axes[n] for n in names))
        }
        missing = want - set(seen)
        if missing:
            example = dict((k, v[1]) for k, v in sorted(missing)[0])
            c.fail("cells", f"{len(missing)} grid cell(s) missing, e.g. {example}")
    if ok and kind in ("gate", "probe") and not cells:
        c.fail("cells", f"an ok {kind} run has at least one cell")


def validate_run(run: Run, source: object = "<run>") -> None:
    """Validate an in-memory Run by the same rules as a file (a JSON round trip)."""
    try:
        # NaN is let through here so that the field check below names the exact field.
        body = json.loads(json.dumps(run.body(), allow_nan=True))
    except (TypeError, ValueError) as exc:
        raise RunFileError(source, "json", f"not JSON data: {exc}") from None
    try:
        body["digest"] = digest_of(body)
    except ValueError:
        # A NaN somewhere: leave the digest unset so the field checks name the exact field.
        body["digest"] = "sha256:" + "0" * 64
        _Checker(source).finite_tree(body, "json")
    run_from_json(body, source)
