"""The harness fingerprint per run: what gives that run's samples their meaning, by definition.

A run's ``provenance.harness_fingerprint`` names the measurement harness that produced it; a
run whose value differs from what the checkout's harness gives that same run is *superseded*
(rendered marked, never evidence the check accepts as current). Two formats live in the store:

``sha256:<hex>`` (runs recorded before this module)
    One hash over whole files: tether's bench modules and the project's declared harness
    files ([tool.tether.fingerprint] harness; tether.store.provenance.harness_fingerprint).
    A run that carries it is still judged by that rule, so introducing the format below
    supersedes nothing by itself.

``harness/2:<covers>:<hex>``
    A hash over *definitions*, not files. ``covers`` (comma separated) names what gives the
    run's samples their meaning:

    - ``engine``: every top-level definition of tether's timing engine (its bench modules,
      presentation aside; tether.store.provenance.MEASUREMENT_SOURCES);
    - ``case=<name>``: the function or class registered as the run's case model (the cell's
      fields -> a Case: its inputs, its work);
    - ``arm=<name>``: the class of each arm adapter the run timed;
    - ``bound=<name>``: a probe's bound maker (the ceilings it is reported against).

    A project cover is hashed with every definition it names, transitively, among the
    modules of the folders that hold the declared harness files (for tether: the plugin
    package). A name defined nowhere there is not followed: the kernel library's code is the
    kernels fingerprint's, and tether's own outside the engine (tether.policy) is covered by
    neither format, as before. Each definition counts by its name and its code (docstrings,
    comments and formatting aside), never by the file that holds it: moving a function to
    another module supersedes nothing, adding a sweep or editing a grid supersedes nothing (a
    sweep declaration is no cover and nothing a cover names), and changing an input maker
    supersedes exactly the runs whose case model reaches it.

By kind: sweep, tune, gate and probe runs name a case model and arms in their config and
cover the engine, the case model and the arms' adapters (a probe its bounds too); a verify
run covers the engine (the gates it runs time through it); a compile run covers nothing,
since it times nothing: its freshness is the kernel files it compiles from, unchanged since
its commit, and its compiler (tether.freshness.CompileFreshness). Where a cover cannot be named or found as a top-level
definition (a lambda registered as a case model, an adapter defined outside the harness
folders), the run records the whole-file fingerprint: the old rule supersedes too much, but
never misses a change.

Resolution is by name and static (no import: the check judges a copy of the index or of a
revision and imports no GPU code), so it errs towards superseding: two definitions of one name
in the harness folders are both covered, and a name that is also an attribute
(``cases.make_inputs``) counts as a use.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether import cache, project
from tether.registry import REGISTRY
from tether.store.model import Run
from tether.store.provenance import (
    _canonical,
    _strip_docstrings,
    bench_dir,
    engine_files,
    fingerprint,
    harness_files,
)
from tether.store.schema import HARNESS_RE

PREFIX = "harness/2"
ENGINE = "engine"


@dataclass(frozen=True)
class Definition:
    """One top-level statement of a module: the names it binds (none for a bare call), its
    code as canonical text, and the names it uses."""

    names: tuple[str, ...]
    code: str
    uses: frozenset[str]


def _bound_names(node: ast.stmt) -> tuple[str, ...]:
    """The module-level names a top-level statement binds (not the locals of what it
    defines, nor a comprehension's variables)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return (node.name,)
    targets: list[ast.AST] = []
    nested: list[ast.stmt] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        targets, nested = [node.target], [*node.body, *node.orelse]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [i.optional_vars for i in node.items if i.optional_vars is not None]
        nested = list(node.body)
    elif isinstance(node, (ast.If, ast.While)):
        nested = [*node.body, *node.orelse]
    elif isinstance(node, ast.Try):
        nested = [*node.body, *node.orelse, *node.finalbody]
        nested += [s for h in node.handlers for s in h.body]
    names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    for stmt in nested:
        names.update(_bound_names(stmt))
    return tuple(sorted(names))


def _uses(node: ast.AST) -> frozenset[str]:
    """The names ``node`` reads that it does not bind itself: the other definitions it may
    use. A local that shares a top-level name elsewhere must not count, or every function
    with a ``k`` would cover whatever module binds ``k``."""
    loads: set[str] = set()
    attrs: list[tuple[str, str]] = []
    bound: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            (loads if isinstance(n.ctx, ast.Load) else bound).add(n.id)
            continue
        if isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, ast.ExceptHandler):
            bound.update([n.name] if n.name is not None else [])
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n is not node:
            bound.add(n.name)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
            # ``module.name`` reaches a definition of another module; ``self.x`` (a bound
            # base) reaches nothing.
            attrs.append((n.value.id, n.attr))
    found = loads - bound
    found.update(attr for base, attr in attrs if base not in bound)
    return frozenset(found)


def module_definitions(text: str) -> tuple[list[Definition], dict[str, str]]:
    """The top-level definitions of a module's source (imports and docstrings left out: they
    say where code lives, not what it does) and its import aliases (``as`` name -> name).
    An unparsable module (mid-edit) is one anonymous definition of its raw text, so any
    change to it changes every hash that covers it."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return [Definition((), "unparsable:" + text, frozenset())], {}
    _strip_docstrings(tree)
    assert isinstance(tree, ast.Module)
    defs: list[Definition] = []
    aliases: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.asname is not None:
                    aliases[alias.asname] = alias.name.rsplit(".", 1)[-1]
            continue
        if isinstance(node, ast.Pass):
            continue  # what a docstring-only module body leaves
        defs.append(Definition(_bound_names(node), _canonical(node), _uses(node)))
    return defs, aliases


# raw-bytes sha256 -> (definitions, aliases): the check judges many runs against one tree.
_PARSED: dict[bytes, tuple[list[Definition], dict[str, str]]] = {}


def _parsed(path: Path) -> tuple[list[Definition], dict[str, str]]:
    raw = path.read_bytes()
    key = hashlib.sha256(raw).digest()
    if key not in _PARSED:
        text = raw.decode("utf-8", errors="surrogateescape")
        _PARSED[key] = cache.kept_by_text("module-definitions", text, module_definitions, (tuple,))
    return _PARSED[key]


def harness_scope(root: Path) -> list[Path]:
    """The project modules a cover's definitions are looked up in: the declared harness files
    and every module beside them (a definition moved to a new module in the same package is
    still found)."""
    declared = project.get(root).harness_files()
    folders = sorted({p.parent for p in declared})
    return sorted({*declared, *(p for d in folders for p in d.glob("*.py") if p.is_file())})


@dataclass
class Definitions:
    """A tree's harness as definitions: the engine's, and the project's by name."""

    engine: list[Definition]
    by_name: dict[str, list[Definition]] = field(default_factory=dict)
    aliases: dict[str, set[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, root: Path, engine: Path) -> Definitions:
        own: list[Definition] = []
        for path in engine_files(engine):
            own += _parsed(path)[0]
        table = cls(own)
        for path in harness_scope(root):
            defs, aliases = _parsed(path)
            for d in defs:
                for name in d.names:
                    table.by_name.setdefault(name, []).append(d)
            for alias, name in aliases.items():
                table.aliases.setdefault(alias, set()).add(name)
        return table

    def has(self, name: str) -> bool:
        return name in self.by_name

    def closure(self, names: Iterable[str]) -> list[Definition]:
        """Every project definition the names reach, directly or through the ones reached."""
        seen: dict[int, Definition] = {}
        todo = list(names)
        visited: set[str] = set()
        while todo:
            name = todo.pop()
            if name in visited:
                continue
            visited.add(name)
            todo += sorted(self.aliases.get(name, ()))
            for d in self.by_name.get(name, ()):
                if id(d) not in seen:
                    seen[id(d)] = d
                    todo += sorted(d.uses)
        return list(seen.values())

    def digest(self, covers: tuple[str, ...]) -> str:
        """The hex hash of what ``covers`` names in this tree."""
        h = hashlib.sha256()

        def add(label: str, defs: Iterable[Definition]) -> None:
            h.update(label.encode() + b"\0")
            for names, code in sorted({(d.names, d.code) for d in defs}):
                h.update(",".join(names).encode() + b"\0")
                h.update(code.encode("utf-8", errors="surrogateescape") + b"\0")

        for cover in covers:
            if cover == ENGINE:
                add(cover, self.engine)
                continue
            _, _, name = cover.partition("=")
            # A cover the tree no longer defines hashes as missing: its runs are superseded.
            add(cover if self.has(name) else cover + "!missing", self.closure([name]))
        return h.hexdigest()


def value(covers: Iterable[str], table: Definitions) -> str:
    """``harness/2:<covers>:<hex>`` of ``table`` for ``covers`` (sorted, unique)."""
    ordered = tuple(sorted(set(covers)))
    return f"{PREFIX}:{','.join(ordered)}:{table.digest(ordered)}"


def parse(recorded: str) -> tuple[str, ...] | None:
    """The covers of a harness/2 value; None for the whole-file format (or anything else)."""
    found = HARNESS_RE.fullmatch(recorded)
    if found is None:
        return None
    return tuple(c for c in found.group(1).split(",") if c)


def _top_name(obj: Any) -> str | None:
    """The name ``obj`` is defined under at a module's top level, or None (a lambda, a nested
    function, a partial: nothing a static lookup can find)."""
    qualname = getattr(obj, "__qualname__", None)
    if not isinstance(qualname, str) or not qualname.isidentifier():
        return None
    return qualname


def run_covers(
    kind: str, name: str, config: Mapping[str, Any], registry: Any = None
) -> tuple[str, ...] | None:
    """What gives a new run's samples their meaning, from the registry of the process that
    measures it (see the module docstring); None where that cannot be named statically."""
    if kind == "compile":
        return ()
    case = config.get("case")
    if not isinstance(case, str):
        return (ENGINE,)
    if registry is None:
        registry = REGISTRY
    factory = registry.cases.get(case)
    factory_name = _top_name(factory) if factory is not None else None
    if factory_name is None:
        return None
    covers = [ENGINE, f"case={factory_name}"]
    arms = config.get("arms")
    for arm_name in (arms or {}).values() if isinstance(arms, Mapping) else ():
        arm = registry.arms.get(arm_name) if isinstance(arm_name, str) else None
        if arm is None:
            return None
        adapter = _top_name(type(arm))
        if adapter is None:
            return None
        covers.append(f"arm={adapter}")
    if kind == "probe":
        probe = registry.probes.get(name)
        bounds = _top_name(probe.bounds) if probe is not None else None
        if bounds is None:
            return None
        covers.append(f"bound={bounds}")
    return tuple(sorted(set(covers)))


def recorded_value(
    kind: str,
    name: str,
    config: Mapping[str, Any],
    root: Path,
    engine: Path,
    registry: Any = None,
) -> str | None:
    """The harness/2 value a new run records, or None: the run records the whole-file
    fingerprint instead (a cover that is not a top-level definition of the tree).
    ``registry``: the measuring process's (tether.registry.REGISTRY unless given)."""
    covers = run_covers(kind, name, config, registry)
    if covers is None:
        return None
    table = Definitions.of(root, engine)
    if any(c != ENGINE and not table.has(c.partition("=")[2]) for c in covers):
        return None
    return value(covers, table)


class CurrentHarness:
    """The harness of the tree at ``root``, judging runs: a run is current when its recorded
    fingerprint equals what this tree gives it in the format it was recorded in."""

    def __init__(self, root: Path, engine: Path | None = None):
        self.root = root.resolve()
        self.engine = engine if engine is not None else bench_dir(self.root)
        self._legacy: str | None = None
        self._table: Definitions | None = None
        self._values: dict[tuple[str, ...], str] = {}

    @property
    def legacy(self) -> str:
        """The whole-file fingerprint (the rule for runs recorded in the ``sha256:`` format)."""
        if self._legacy is None:
            self._legacy = fingerprint(harness_files(self.root, self.engine), self.root)
        return self._legacy

    def of(self, recorded: str) -> str:
        """The tree's fingerprint in the format of ``recorded`` (and over what it covers)."""
        covers = parse(recorded)
        if covers is None:
            return self.legacy
        if covers not in self._values:
            if self._table is None:
                self._table = Definitions.of(self.root, self.engine)
            self._values[covers] = value(covers, self._table)
        return self._values[covers]

    def superseded(self, run: Run) -> bool:
        return run.harness_fingerprint != self.of(run.harness_fingerprint)


def is_superseded(run: Run, current: str | CurrentHarness) -> bool:
    """Whether ``run`` came from another harness than ``current``: the checkout's harness, or
    one fingerprint (then compared as recorded, whatever its format)."""
    if isinstance(current, CurrentHarness):
        return current.superseded(run)
    return run.harness_fingerprint != current
