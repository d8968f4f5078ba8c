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
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.arch import ARCH_RE
from tether.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

CONFIG_FILE = "pyproject.toml"
TABLE = "tool.tether"
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
    },
    "fingerprint": {"harness", "kernels"},
    "render": {"files", "figures", "regions"},
    "scan": {"include", "exclude", "baseline", "claim_words", "allow_words"},
    "signing": {"allowed_signers", "require"},
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
    region_files: tuple[str, ...]  # hand-written files holding generated regions
    scan_include: tuple[str, ...]  # globs of Markdown/Python files scanned for stray figures
    scan_exclude: tuple[str, ...]  # fixtures and other files excepted by declaration
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False)
    # [tool.tether.signing]: the allowed-signers file (ssh-keygen's format) that says whose
    # signatures count, and whether cited evidence must carry one (tether.store.signing).
    allowed_signers: Path | None = None
    require_signed: bool = False
    # Python files declaring POLICY, GATES, COMPILE_GATES (data the check judges), read in
    # order: routing thresholds beside the kernels they route to, gates where setting them
    # changes no kernel source. [tool.tether] policy may name one file or a list.
    policies: tuple[Path, ...] = ()

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

    def scanned(self, rel: str) -> bool:
        """Whether the root-relative path ``rel`` is scanned for stray figures."""
        if any(_match(rel, pat) for pat in self.scan_exclude):
            return False
        return any(_match(rel, pat) for pat in self.scan_include)


def _match(rel: str, pattern: str) -> bool:
    """Glob match where a leading ``**/`` also matches no folder at all (``**/*.md`` matches
    ``NOTES.md``), as in git and most tools."""
    if fnmatch.fnmatchcase(rel, pattern):
        return True
    return pattern.startswith("**/") and fnmatch.fnmatchcase(rel, pattern[3:])


def _table(data: Mapping[str, Any], path: Path) -> dict[str, Any]:
    node: Any = data
    for part in TABLE.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise UsageError(f"{path}: no [{TABLE}] table; this is not a tether project")
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


def load(root: Path) -> Project:
    """The project at ``root`` (its pyproject.toml must hold a [tool.tether] table)."""
    root = Path(root).resolve()
    path = root / CONFIG_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
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
    for region_file in regions:
        _inside(root, region_file, "render.regions entry", path)
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
        render_files=dict(sorted(files.items())),
        figures=figures,
        region_files=regions,
        scan_include=_strings(scan.get("include"), "scan.include", path)
        or ("**/*.md", "**/*.py", "**/*.j2"),
        scan_exclude=_strings(scan.get("exclude"), "scan.exclude", path),
        raw=table,
        allowed_signers=_inside(root, allowed, "signing.allowed_signers", path)
        if allowed
        else None,
        require_signed=require,
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
                data = tomllib.loads(path.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError):
                continue
            if isinstance(data.get("tool"), Mapping) and "tether" in data["tool"]:
                return cand
    raise UsageError(
        f"not inside a tether project: no {CONFIG_FILE} with a [{TABLE}] table at or above "
        f"{here}; run inside one, pass --root, or set TETHER_ROOT"
    )


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
