"""The project tether works on: its ``[tool.tether]`` table, read once into one ``Project``.

Every module takes its paths from here (the store, the templates, the render targets, the
files whose code is fingerprinted, the policy file, the plugin modules that register arms,
sweeps and gates), so tether serves any kernel repository that declares itself, and tether's
own repository is configured the same way (see its pyproject.toml).

Root discovery: ``$TETHER_ROOT``, else the nearest folder at or above the working directory
whose ``pyproject.toml`` has a ``[tool.tether]`` table. Outside such a folder it is an error:
tether never falls back to its own installed checkout, which would render into the wrong tree.
"""

from __future__ import annotations

import fnmatch
import importlib.util
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.arch import ARCH_RE
from tether.errors import NotAProjectError, OSFailure, UsageError
from tether.textfile import read_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

CONFIG_FILE = "pyproject.toml"
TABLE = "tool.tether"
# Where `tether legacy` records the runs that predate signed evidence ([tool.tether.signing]
# legacy overrides it).
DEFAULT_LEGACY = ".tether/legacy_runs.toml"
# Keys of [tool.tether] and its sub-tables; anything else is a typo and refused by name.
_KEYS = {
    "": {
        "store",
        "scratch",
        "templates",
        "policy",
        "plugins",
        "doc_arches",
        "headline",
        "fingerprint",
        "render",
        "scan",
        "notes",
        "signing",
        "summary",
    },
    "fingerprint": {"harness", "kernels", "arch_scoped", "compiled", "routing"},
    "render": {"files", "figures", "regions", "region_templates", "data"},
    "scan": {
        "include",
        "exclude",
        "baseline",
        "claim_words",
        "allow_words",
        "subjects",
        "support_names",
    },
    "signing": {"allowed_signers", "require", "legacy"},
    "summary": {"rows"},
}


@dataclass(frozen=True)
class Project:
    """One configured project. Paths are absolute; ``rel`` turns them back for messages."""

    root: Path
    store: Path
    scratch: Path
    templates: Path
    policy: Path | None  # the first policy file (see ``policies``)
    plugins: tuple[str, ...]  # modules whose import registers arms, sweeps, gates, arches
    doc_arches: tuple[str, ...]  # arches the documents always list, measured or not
    headline: str | None  # the sweep the README's headline cites
    harness_globs: tuple[str, ...]  # project code that decides what a sample means
    kernel_globs: tuple[str, ...]  # the kernels whose change makes compile evidence stale
    render_files: Mapping[str, str]  # output path -> template, both relative
    figures: str | None  # folder (relative) holding rendered figures, owned by render
    region_files: tuple[str, ...]  # hand-written files holding generated regions (all of them)
    # Hand-written file -> {region id -> template}: regions a project renders from its own
    # templates into any file with a comment syntax ([tool.tether.render] region_templates).
    region_templates: Mapping[str, Mapping[str, str]]
    scan_include: tuple[str, ...]  # globs of Markdown/Python files scanned for stray figures
    scan_exclude: tuple[str, ...]  # fixtures and other files excepted by declaration
    # The front page's comparisons per arch ([tool.tether.summary] rows): label, sweep, and
    # whole = true to report the whole map instead of the headline population.
    summary_rows: tuple[Mapping[str, Any], ...] = ()
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # [tool.tether.signing]: the allowed-signers file (ssh-keygen's format) that says whose
    # signatures count, and whether cited evidence must carry one (tether.store.signing).
    allowed_signers: Path | None = None
    require_signed: bool = False
    # The runs recorded as legacy (unsigned, measured before signatures were required): never
    # cited under require (tether.store.evidence). Written by `tether legacy`.
    legacy_runs: Path | None = None
    # Python files declaring POLICY, GATES, COMPILE_GATES (data the check judges), read in
    # order: routing thresholds beside the kernels they route to, gates where setting them
    # changes no kernel source. [tool.tether] policy may name one file or a list.
    policies: tuple[Path, ...] = ()
    # [tool.tether.fingerprint] arch_scoped: kernel file (root-relative) -> {top-level name ->
    # the arches it serves}. A change confined to such definitions stales only those arches'
    # timing runs (tether.freshness): a launch table of one arch shapes no other arch's call.
    arch_scoped: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    # [tool.tether.fingerprint] routing: kernel file (root-relative) -> the arms that read it
    # (the entry points its thresholds route, and any arm that routes as they do). A file that
    # only decides which arm a call takes shapes no arm timed by itself, so a change to it
    # stales only runs that time one of those arms (and verify runs: tether.freshness).
    routing: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # [tool.tether.fingerprint] compiled: the kernel files compile runs compile from (the
    # kernels they compile and what enumerates their variants); empty: every kernel file. A
    # change to another kernel file leaves compile runs fresh (tether.freshness).
    compiled_globs: tuple[str, ...] = ()
    # [tool.tether.render] data: name -> a TOML file (root-relative) the templates read as
    # ``data.<name>``: project facts that are not measurements (a model catalog), kept in one
    # data file so a table of them is rendered rather than typed.
    render_data: Mapping[str, str] = field(default_factory=dict)

    def templates_rel(self, name: str) -> str:
        """A template's path as the project configured it (``benchmark/docs_src/x.j2``)."""
        return f"{self.rel(self.templates)}/{name}"

    def rel(self, path: Path | str) -> str:
        """``path`` relative to the root when it lies inside, else as given."""
        p = Path(path)
        try:
            return p.resolve().relative_to(self.root.resolve()).as_posix()
        except ValueError:
            return str(path)

    def glob(self, patterns: tuple[str, ...]) -> list[Path]:
        """Files under the root matching any of ``patterns`` (root-relative globs), sorted."""
        found: set[Path] = set()
        for pattern in patterns:
            found.update(p for p in self.root.glob(pattern) if p.is_file())
        return sorted(found)

    def harness_files(self) -> list[Path]:
        return self.glob(self.harness_globs)

    def kernel_files(self) -> list[Path]:
        return self.glob(self.kernel_globs)

    def compiled_files(self) -> list[Path]:
        """The kernel files compile runs compile from (every one where none is declared)."""
        if not self.compiled_globs:
            return self.kernel_files()
        return self.glob(self.compiled_globs)

    def missing_plugins(self) -> list[str]:
        """The configured plugin modules that cannot be found (a typo), without importing any."""
        return [name for name in self.plugins if not locate_module(name, self.root)]

    def excluded(self, rel: str) -> bool:
        """Whether the root-relative path ``rel`` is excepted from the scan by declaration."""
        return any(_match(rel, pat) for pat in self.scan_exclude)

    def scanned(self, rel: str) -> bool:
        """Whether the root-relative path ``rel`` is scanned for stray figures."""
        if any(_match(rel, pat) for pat in self.scan_exclude):
            return False
        return any(_match(rel, pat) for pat in self.scan_include)


def locate_module(name: str, root: Path) -> bool:
    """Whether the module ``name`` can be found from ``root`` (the project root, first on the
    path the plugins import from) or the installed packages, without importing anything: the
    check must not run a plugin's imports (torch, a GPU stack) to see that it exists."""

    top, *rest = name.split(".")
    places: list[Path] = []
    if (root / top).is_dir() or (root / f"{top}.py").is_file():
        places = [root / top] if (root / top).is_dir() else []
        if not rest:
            return True
    else:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return False
        if spec is None:
            return False
        if not rest:
            return True
        places = [Path(p) for p in (spec.submodule_search_locations or [])]
    for i, part in enumerate(rest):
        last = i == len(rest) - 1
        found = [d / part for d in places if (d / part).is_dir()]
        if last and (found or any((d / f"{part}.py").is_file() for d in places)):
            return True
        places = found
    return False


def _match(rel: str, pattern: str) -> bool:
    """Glob match where a leading ``**/`` also matches no folder at all (``**/*.md`` matches
    ``NOTES.md``), as in git and most tools."""
    if fnmatch.fnmatchcase(rel, pattern):
        return True
    if pattern.startswith("**/") and fnmatch.fnmatchcase(rel, pattern[3:]):
        return True
    # ``docs_src/**/*.j2`` matches ``docs_src/README.md.j2`` too: a ``/**/`` inside a pattern
    # also stands for no folder (git's rule), or the templates at a folder's top go unscanned.
    return "/**/" in pattern and fnmatch.fnmatchcase(rel, pattern.replace("/**/", "/", 1))


def _table(data: Mapping[str, Any], path: Path) -> dict[str, Any]:
    node: Any = data
    for part in TABLE.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise NotAProjectError(f"{path}: no [{TABLE}] table; this is not a tether project")
        node = node[part]
    if not isinstance(node, Mapping):
        raise UsageError(f"{path}: [{TABLE}] must be a table")
    return dict(node)


def _check_keys(table: Mapping[str, Any], path: Path) -> None:
    for sub, allowed in _KEYS.items():
        node = table if not sub else table.get(sub, {})
        if not isinstance(node, Mapping):
            raise UsageError(f"{path}: [{TABLE}.{sub}] must be a table")
        for key in node:
            if key not in allowed:
                where = f"{TABLE}.{sub}" if sub else TABLE
                raise UsageError(
                    f"{path}: [{where}] has unknown key {key!r} (known: {', '.join(sorted(allowed))})"
                )


def _strings(value: Any, what: str, path: Path) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{path}: {what} must be a list of strings")
    return tuple(value)


def _opt_str(value: Any, what: str, path: Path) -> str | None:
    if value is not None and not isinstance(value, str):
        raise UsageError(f"{path}: {what} must be a string")
    return value


def _inside(root: Path, value: str, what: str, path: Path, base: Path | None = None) -> Path:
    """``value`` (relative to ``base``, the root by default) resolved, refused by name unless
    it lies inside the project root: an absolute path, ``..`` or a symlink out of the
    project would let rendering (or a check) write or read outside it."""
    if not value or Path(value).is_absolute() or value.startswith("~"):
        raise UsageError(
            f"{path}: {what} {value!r} must be a path relative to the project, inside it"
        )
    resolved = ((base or root) / value).resolve()
    if resolved != root and root not in resolved.parents:
        raise UsageError(
            f"{path}: {what} {value!r} resolves to {resolved}, outside the project {root}; "
            "every path the config names stays inside the project"
        )
    return resolved


def _globs_inside(patterns: tuple[str, ...], what: str, path: Path) -> tuple[str, ...]:
    for pattern in patterns:
        if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            raise UsageError(
                f"{path}: {what} {pattern!r} must be a pattern inside the project (no absolute "
                "path, no '..')"
            )
    return patterns


def _routing(value: Any, path: Path) -> dict[str, tuple[str, ...]]:
    """[tool.tether.fingerprint] routing: {file: [arm, ...]}, checked."""
    where = f"{path}: [{TABLE}.fingerprint] routing"
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(f"{where} must map kernel files to lists of the arms that read them")
    out: dict[str, tuple[str, ...]] = {}
    for rel, arms in sorted(value.items()):
        _globs_inside((rel,), "fingerprint.routing file", path)
        if (
            not isinstance(arms, list | tuple)
            or not arms
            or not all(isinstance(a, str) and a.strip() for a in arms)
        ):
            raise UsageError(
                f"{where}: {rel!r} = {arms!r}: expected a non-empty list of arm names (the "
                "entry points and arms that route by it)"
            )
        out[rel] = tuple(arms)
    return out


def _arch_scoped(value: Any, path: Path) -> dict[str, dict[str, tuple[str, ...]]]:
    """[tool.tether.fingerprint] arch_scoped: {file: {name: arch or [arches]}}, checked."""
    where = f"{path}: [{TABLE}.fingerprint] arch_scoped"
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(f"{where} must map kernel files to {{name = arch or [arches]}} tables")
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for rel, names in sorted(value.items()):
        _globs_inside((rel,), "fingerprint.arch_scoped file", path)
        if not isinstance(names, Mapping) or not names:
            raise UsageError(f"{where}: {rel!r} must map top-level names to arches")
        scoped: dict[str, tuple[str, ...]] = {}
        for name, arches in sorted(names.items()):
            listed = (arches,) if isinstance(arches, str) else arches
            if (
                not name.isidentifier()
                or not isinstance(listed, list | tuple)
                or not listed
                or not all(isinstance(a, str) and ARCH_RE.fullmatch(a) for a in listed)
            ):
                raise UsageError(
                    f"{where}: {rel!r} {name!r} = {arches!r}: the name must be a Python "
                    "identifier and its value an arch name (sm<major><minor>, gfx<target> or "
                    "cpu) or a list of them"
                )
            scoped[name] = tuple(listed)
        out[rel] = scoped
    return out


def _region_templates(value: Any, path: Path) -> dict[str, dict[str, str]]:
    where = f"{path}: [{TABLE}.render] region_templates"
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(f"{where} must map hand-written files to {{region = template}} tables")
    out: dict[str, dict[str, str]] = {}
    for rel, regions in sorted(value.items()):
        if not isinstance(regions, Mapping) or not regions:
            raise UsageError(f"{where}: {rel!r} must map region ids to template names")
        for region, template in regions.items():
            if not isinstance(template, str) or not template:
                raise UsageError(f"{where}: {rel!r}.{region} must name a template (a string)")
        out[rel] = dict(sorted(regions.items()))
    return out


def _summary_rows(value: Any, path: Path) -> tuple[dict[str, Any], ...]:
    where = f"{path}: [{TABLE}.summary] rows"
    if value is None:
        return ()
    if not isinstance(value, list):
        raise UsageError(f"{where} must be a list of {{ label, sweep }} tables")
    out = []
    for i, row in enumerate(value):
        if not isinstance(row, Mapping) or set(row) - {"label", "sweep"}:
            raise UsageError(f"{where}[{i}]: a table of label and sweep")
        if not all(isinstance(row.get(k), str) and row.get(k) for k in ("label", "sweep")):
            raise UsageError(f"{where}[{i}]: label and sweep must be non-empty strings")
        out.append(dict(row))
    return tuple(out)


def load(root: Path) -> Project:
    """The project at ``root`` (its pyproject.toml must hold a [tool.tether] table)."""
    root = Path(root).resolve()
    path = root / CONFIG_FILE
    try:
        data = tomllib.loads(read_text(path))
    except FileNotFoundError:
        raise UsageError(f"{path}: not found; a tether project declares [{TABLE}] there") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from None
    table = _table(data, path)
    _check_keys(table, path)
    fp = table.get("fingerprint", {})
    render = table.get("render", {})
    scan = table.get("scan", {})
    files = render.get("files", {})
    if not isinstance(files, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in files.items()
    ):
        raise UsageError(f"{path}: [{TABLE}.render] files must map output paths to templates")
    raw_policy = table.get("policy")
    policies = (
        _strings(raw_policy, "policy", path)
        if isinstance(raw_policy, list)
        else tuple(p for p in (_opt_str(raw_policy, "policy", path),) if p)
    )
    signing = table.get("signing", {})
    allowed = _opt_str(signing.get("allowed_signers"), "signing.allowed_signers", path)
    require = signing.get("require", False)
    if not isinstance(require, bool):
        raise UsageError(f"{path}: [{TABLE}.signing] require must be true or false")
    if require and not allowed:
        raise UsageError(
            f"{path}: [{TABLE}.signing] require = true needs allowed_signers, the file that "
            "says whose signatures count"
        )
    legacy = _opt_str(signing.get("legacy"), "signing.legacy", path) or DEFAULT_LEGACY
    templated = _region_templates(render.get("region_templates"), path)

    def under(name: str, default: str) -> Path:
        value = _opt_str(table.get(name), name, path) or default
        return _inside(root, value, name, path)

    templates = under("templates", "docs_src")
    for out, template in files.items():
        _inside(root, out, "[tool.tether.render] files target", path)
        _inside(root, template, f"[tool.tether.render] files template for {out!r}", path, templates)
    figures = _opt_str(render.get("figures"), "render.figures", path)
    if figures is not None:
        _inside(root, figures, "render.figures", path)
    regions = _strings(render.get("regions"), "render.regions", path)
    data_files = render.get("data", {})
    if not isinstance(data_files, Mapping) or not all(
        isinstance(k, str) and k.isidentifier() and isinstance(v, str) and v.endswith(".toml")
        for k, v in data_files.items()
    ):
        raise UsageError(
            f"{path}: [{TABLE}.render] data must map names (identifiers) to .toml files"
        )
    for data_file in data_files.values():
        _inside(root, data_file, "render.data file", path)
    for region_file in regions:
        _inside(root, region_file, "render.regions entry", path)
    for region_file, named in templated.items():
        _inside(root, region_file, "render.region_templates file", path)
        for template in named.values():
            _inside(
                root,
                template,
                f"render.region_templates template for {region_file!r}",
                path,
                templates,
            )
    doc_arches = _strings(table.get("doc_arches"), "doc_arches", path)
    for arch in doc_arches:
        if not ARCH_RE.fullmatch(arch):
            raise UsageError(
                f"{path}: doc_arches entry {arch!r} is not an arch name "
                "(sm<major><minor>, gfx<target> or cpu)"
            )

    return Project(
        root=root,
        store=under("store", "results"),
        scratch=under("scratch", "scratch"),
        templates=templates,
        policy=_inside(root, policies[0], "policy", path) if policies else None,
        policies=tuple(_inside(root, p, "policy", path) for p in policies),
        plugins=_strings(table.get("plugins"), "plugins", path),
        doc_arches=doc_arches,
        headline=_opt_str(table.get("headline"), "headline", path),
        harness_globs=_globs_inside(
            _strings(fp.get("harness"), "fingerprint.harness", path), "fingerprint.harness", path
        ),
        kernel_globs=_globs_inside(
            _strings(fp.get("kernels"), "fingerprint.kernels", path), "fingerprint.kernels", path
        ),
        arch_scoped=_arch_scoped(fp.get("arch_scoped"), path),
        routing=_routing(fp.get("routing"), path),
        compiled_globs=_globs_inside(
            _strings(fp.get("compiled"), "fingerprint.compiled", path),
            "fingerprint.compiled",
            path,
        ),
        render_files=dict(sorted(files.items())),
        figures=figures,
        region_files=tuple(sorted(set(regions) | set(templated))),
        region_templates=templated,
        render_data=dict(sorted(data_files.items())),
        summary_rows=_summary_rows(table.get("summary", {}).get("rows"), path),
        scan_include=_strings(scan.get("include"), "scan.include", path)
        or ("**/*.md", "**/*.py", "**/*.j2"),
        scan_exclude=_strings(scan.get("exclude"), "scan.exclude", path),
        raw=table,
        allowed_signers=_inside(root, allowed, "signing.allowed_signers", path)
        if allowed
        else None,
        require_signed=require,
        legacy_runs=_inside(root, legacy, "signing.legacy", path),
    )


def find_root(start: Path | None = None) -> Path:
    """$TETHER_ROOT, else the nearest folder at or above ``start`` configured for tether."""
    env = os.environ.get("TETHER_ROOT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for cand in (here, *here.parents):
        path = cand / CONFIG_FILE
        if path.is_file():
            try:
                text = read_text(path)
            except (OSError, OSFailure):
                continue  # unreadable here: look further up (a binary one is this one's error)
            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                # A broken pyproject.toml is the nearest project's own error, not a reason to
                # look further up (or to say there is no project here).
                raise UsageError(f"{path}: not valid TOML: {exc}") from None
            if isinstance(data.get("tool"), Mapping) and "tether" in data["tool"]:
                return cand
    raise UsageError(
        f"not inside a tether project: no {CONFIG_FILE} with a [{TABLE}] table at or above "
        f"{here}; run inside one, pass --root, or set TETHER_ROOT"
    )


_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]")


def config_line(root: Path, value: str) -> int:
    """The line of ``root``'s pyproject.toml that writes ``value`` as a string inside the
    [tool.tether] tables (the first such line), so a finding about a configured name points
    at it; 1 when it is not found there."""
    try:
        text = (Path(root) / CONFIG_FILE).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return 1
    quoted = (f'"{value}"', f"'{value}'")
    inside = False
    for number, line in enumerate(text.splitlines(), 1):
        header = _HEADER.match(line)
        if header and not line.lstrip().startswith(('["', "['")):
            name = header.group(1).replace(" ", "")
            inside = name == TABLE or name.startswith(f"{TABLE}.")
        elif inside and any(q in line for q in quoted):
            return number
    return 1


def is_project(folder: Path) -> bool:
    """Whether ``folder``'s pyproject.toml has a [tool.tether] table (False when it has none,
    cannot be read, or is not valid TOML: the question is asked by tools that must not fail)."""
    try:
        data = tomllib.loads((Path(folder) / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    tool = data.get("tool")
    return isinstance(tool, Mapping) and "tether" in tool


_CACHE: dict[tuple[Path, float], Project] = {}


def get(root: Path | None = None) -> Project:
    """The project at ``root`` (found from the working directory when None), cached per
    config file modification time so tests that write a fixture project see it."""
    base = Path(root).resolve() if root is not None else find_root()
    cfg = base / CONFIG_FILE
    try:
        stamp = cfg.stat().st_mtime
    except OSError:
        stamp = -1.0
    key = (base, stamp)
    if key not in _CACHE:
        _CACHE[key] = load(base)
    return _CACHE[key]
