"""Render tether's documents from the results store: README.md, docs/, figures, policy regions.

``render_all`` is pure and in memory (``tether check`` diffs it against the files on disk);
``write_all`` writes what changed. Neither imports torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TextIO

import tomllib

from tether import project
from tether.atomic import write_atomic
from tether.errors import UsageError
from tether.render.context import build_context, load_runs
from tether.render.env import BUILTIN_PREFIX, TemplateError, make_env, render_template
from tether.render.figures import FigureSpec, embedded_digest
from tether.render.outlock import tree_lock
from tether.render.regions import RegionError
from tether.render.summary import summary_context
from tether.render.tables import table_context
from tether.render.targets import figure_specs, render_files, render_regions
from tether.store.evidence import Barred, barred, citable, signing_summary
from tether.textfile import read_text

__all__ = [
    "FigureSpec",
    "RegionError",
    "TemplateError",
    "cited_context",
    "embedded_digest",
    "render_all",
    "render_builtin",
    "render_data",
    "render_parts",
    "write_all",
]


def extra_context(
    runs: Any, context: dict[str, Any], proj: Any, stored: Any = None
) -> dict[str, Any]:
    """What the built-in results table (``results_tables``) and the front page's per-arch
    table (``summary``) need, computed from the context ``build_context`` made. ``stored``:
    every run of the store, the ones not cited included (default ``runs``), for the signing
    page, which states the store as it is, not as the documents cite it."""

    return {
        **table_context(runs, context),
        **summary_context(context, proj.summary_rows, proj.headline),
        "data": render_data(proj),
        "signing": signing_summary(proj.root, runs if stored is None else stored),
    }


def cited_context(root: Path, store: Path | Any, bar: Barred | None = None) -> dict[str, Any]:
    """The full render context of the store at ``store`` (a results folder or loaded runs).

    Under [tool.tether.signing] require only runs signed by an allowed signer are cited
    (``bar``: the runs barred, if already computed). The runs set aside are named in the
    context, so a region citing one says why it cites nothing (``set_aside``: run id -> why;
    ``legacy``: the ids recorded in the project's legacy file)."""

    loaded = load_runs(store)
    bar = barred(root, loaded) if bar is None else bar
    # A tuple: one that cannot change is indexed once by setup (tether.store.cite.siblings).
    runs = tuple(citable(root, loaded, bar))
    context = build_context(root, runs)
    proj = project.get(root)
    context.update(extra_context(runs, context, proj, loaded))
    context["set_aside"] = {
        **dict(bar.refused),
        **{run_id: "legacy" for run_id in bar.legacy},
    }
    return context


def render_data(proj: Any) -> dict[str, Any]:
    """The project's ``[tool.tether.render] data`` files, parsed, by name (``data.<name>``).
    A missing or malformed file is a UsageError naming it: a table rendered from half a file,
    or from none, would publish a catalog the project does not hold."""

    out: dict[str, Any] = {}
    for name, rel in proj.render_data.items():
        path = proj.root / rel
        try:
            out[name] = tomllib.loads(read_text(path, rel))
        except FileNotFoundError:
            raise UsageError(f"{rel}: [tool.tether.render] data {name!r} names no file") from None
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(f"{rel}: render data {name!r} is not valid TOML: {exc}") from None
    return out


def render_builtin(root: Path, store: Path | Any, name: str) -> str:
    """One of tether's built-in templates (``tether/<name>``) rendered with the project's full
    context, written nowhere (``tether render --pr-comment``)."""

    root = Path(root)
    context = cited_context(root, store)
    proj = project.get(root)
    env = make_env(proj.templates, proj.rel(proj.templates))
    return render_template(env, BUILTIN_PREFIX + name, context)


def render_parts(
    root: Path, store: Path | Any, bar: Barred | None = None
) -> tuple[dict[Path, bytes], dict[Path, FigureSpec]]:
    """The text targets rendered, and the figure targets undrawn (each with its inputs digest).

    ``store`` is a results folder (loaded and validated here) or an already loaded store,
    every run of it: under [tool.tether.signing] require only the runs signed by an allowed
    signer are cited (``bar``: the runs barred, when the caller has judged them already).
    """
    root = Path(root)
    context = cited_context(root, store, bar)
    proj = project.get(root)
    env = make_env(proj.templates, proj.rel(proj.templates))
    texts: dict[Path, bytes] = {}
    texts.update(render_files(env, context, dict(proj.render_files)))
    texts.update(render_regions(root, env, context))
    return dict(sorted(texts.items())), figure_specs(context)


def render_all(root: Path, store: Path | Any) -> dict[Path, bytes]:
    """Every target's full expected content, figures drawn, keyed by path relative to ``root``."""
    texts, figures = render_parts(root, store)
    out = dict(texts)
    try:
        out.update({path: spec.draw() for path, spec in figures.items()})
    except ImportError as exc:
        raise UsageError(
            f"tether render draws the SVG figures with matplotlib ({exc}); install tether[render]"
        ) from exc
    return dict(sorted(out.items()))


def write_all(
    root: Path, store: Path | Any, out_root: Path | None = None, err: TextIO | None = None
) -> list[Path]:
    """Write every target whose content changed under ``out_root`` (default ``root``).

    Everything is rendered before anything is written, so a failing template leaves every
    file as it was. Figures under docs/figures/ that no target produces any more are removed.
    Returns the paths written or removed, relative to the output root.

    The output tree's lock (``tether.render.outlock``) is held from the first read to the
    last write: renders serialize (the second renders from what the first wrote, region files
    included), and no check reads the tree half written. ``err``: where waiting is said.
    """
    root = Path(root)
    dest = Path(out_root) if out_root is not None else root
    with tree_lock(root, dest, err=err):
        return _write_all(root, store, dest)


def _write_all(root: Path, store: Path | Any, dest: Path) -> list[Path]:
    rendered = render_all(root, store)
    changed: list[Path] = []
    for rel, data in rendered.items():
        path = dest / rel
        if path.is_file() and path.read_bytes() == data:
            continue
        write_atomic(path, data)
        changed.append(rel)

    owned = project.get(root).figures
    figures = dest / owned if owned else None
    if figures is not None and figures.is_dir():
        for svg in sorted(figures.glob("*.svg")):
            rel = svg.relative_to(dest)
            if rel not in rendered:
                svg.unlink(missing_ok=True)  # a concurrent render may have removed it
                changed.append(rel)
    return changed
