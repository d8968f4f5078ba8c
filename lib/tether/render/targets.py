"""What gets rendered where: whole files, SVG figures, and named regions inside source files.

Every target is produced in memory as bytes keyed by its path relative to the repository
root; writing is a separate step (``tether.render.write_all``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import jinja2

from tether import project, trends
from tether.render import plots
from tether.render.env import TemplateError, render_template
from tether.render.figures import FigureSpec, inputs_digest
from tether.render.regions import RegionError, find_regions, replace_regions, syntax_for
from tether.textfile import read_text

THRESHOLD_TEMPLATE = "policy_threshold.py.j2"
GATE_TEMPLATE = "policy_gate.py.j2"
TUNE_TEMPLATE = "tune_outcome.md.j2"
TUNED_TEMPLATE = "tuned_choice.py.j2"
COMPILE_TEMPLATE = "compile_evidence.py.j2"
PY_REGION_WIDTH = 100


def render_files(
    env: jinja2.Environment, context: dict[str, Any], files: dict[str, str]
) -> dict[Path, bytes]:
    """The project's whole-file targets ([tool.tether.render] files: output -> template)."""
    return {
        Path(out): render_template(env, tpl, context).encode("utf-8")
        for out, tpl in sorted(files.items())
    }


def _curve_data(sweep: Any, title: str, arms: tuple[str, str]) -> dict[str, Any]:
    points = [
        {
            "axis": p.axis,
            "value": p.value,
            "geomean": p.aggregate.geomean,
            "floor": list(p.aggregate.floor) if p.aggregate.floor else None,
            "band": list(p.aggregate.band) if p.aggregate.band else None,
        }
        for p in sweep.curve
    ]
    return {
        "title": title,
        "arms": list(arms),
        "superseded": sweep.run.superseded,
        "points": points,
    }


def figure_specs(context: dict[str, Any]) -> dict[Path, FigureSpec]:
    """Every figure target, undrawn: one curve per cited sweep that has one, and one trend per
    sweep and arch with two or more runs."""
    out: dict[Path, FigureSpec] = {}
    for arch_doc in context["arches"]:
        for sweep in arch_doc.sweeps:
            if sweep.figure is not None and sweep.run is not None:
                arms = (sweep.arms.get("A", "A"), sweep.arms.get("B", "B"))
                title = f"{arch_doc.arch} {sweep.name}\nrun {sweep.run.id}"
                digest = inputs_digest("curve", _curve_data(sweep, title, arms), [plots.__file__])
                out[Path(sweep.figure)] = FigureSpec(
                    digest,
                    partial(plots.curve_svg, sweep.curve, title, arms, sweep.run.superseded),
                )
            trend = sweep.trend
            if trend is not None and len(trend["points"]) >= 2 and trend.get("figure_path"):
                data = {k: v for k, v in trend.items() if k != "figure_path"}
                digest = inputs_digest("trend", data, [trends.__file__])
                out[Path(trend["figure_path"])] = FigureSpec(digest, partial(_trend_bytes, data))
    return dict(sorted(out.items()))


def _trend_bytes(trend: dict[str, Any]) -> bytes:
    return trends.trend_svg(trend).encode("utf-8")


def region_bodies(context: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """Every region the context can render: ``{region id: (template, extra context)}``.

    Thresholds, gates and tuned choices (from the policy files) and tuning runs
    (``tune-<run id>``); a project places the markers of the ones it wants in its declared
    region files.
    """
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for region, doc in sorted(context["thresholds"].items()):
        out[region] = (THRESHOLD_TEMPLATE, {"doc": doc})
    for region, doc in sorted(context["gates"].items()):
        out[region] = (GATE_TEMPLATE, {"doc": doc})
    for region, doc in sorted(context.get("tunes", {}).items()):
        out[region] = (TUNE_TEMPLATE, {"doc": doc})
    for region, doc in sorted(context.get("tuned", {}).items()):
        out[region] = (TUNED_TEMPLATE, {"doc": doc})
    for region, entry in sorted(context.get("compile_regions", {}).items()):
        out[region] = (COMPILE_TEMPLATE, dict(entry))
    for region, (template, extra) in sorted(context.get("regions", {}).items()):
        out[region] = (template, dict(extra))
    return out


def _check_python_region(path: str, region: str, body: str) -> None:
    """A Python region is comments only and short lines, so ``ruff format`` leaves it alone."""
    for n, line in enumerate(body.split("\n")[:-1], 1):
        if not line.startswith("#"):
            raise TemplateError(f"{path}: region {region!r} line {n}: not a comment: {line!r}")
        if len(line) > PY_REGION_WIDTH:
            raise TemplateError(
                f"{path}: region {region!r} line {n}: {len(line)} characters, over "
                f"{PY_REGION_WIDTH}"
            )
        if line != line.rstrip():
            raise TemplateError(f"{path}: region {region!r} line {n}: trailing whitespace")


TUNE_PREFIX = "tune-"


def read_text_exact(path: Path, label: str | None = None) -> str:
    """The file's text with its line endings as they are (``read_text`` would turn CRLF into
    LF, and a render would then rewrite every line of a CRLF file); a file that is not UTF-8
    text is a TextFileError naming ``label`` (default: the path)."""
    return read_text(path, label, exact=True)


def missing_tune_regions(root: Path, run_ids: set[str]) -> list[tuple[str, str]]:
    """(file, region) for each ``tune-<id>`` marker in a declared region file whose run is not
    among ``run_ids``: a document citing a tuning run the store does not hold."""

    found = []
    for rel in sorted(project.get(root).region_files):
        path = root / rel
        if not path.is_file():
            continue
        for region in find_regions(read_text_exact(path, rel), Path(rel)):
            if region.startswith(TUNE_PREFIX) and region[len(TUNE_PREFIX) :] not in run_ids:
                found.append((rel, region))
    return found


def absent_tune_body(run_id: str, context: Mapping[str, Any], proj: Any) -> str:
    """What a ``tune-<id>`` region says when its run is not cited: set aside under
    [tool.tether.signing] require (recorded as legacy, or not signed by an allowed signer;
    ``context["set_aside"]``), or not in this store at all."""

    why = context.get("set_aside", {}).get(run_id)
    if why is None:
        return f"Run `{run_id}` is not in this store.\n"
    if why == "legacy":
        legacy = proj.rel(proj.legacy_runs) if proj.legacy_runs is not None else "the legacy file"
        return (
            f"Run `{run_id}` is not cited: it is recorded as legacy in `{legacy}` (unsigned, "
            "measured before signed evidence was required), and `[tool.tether.signing] "
            "require` is on; what it measured needs a signed run measured again.\n"
        )
    return f"Run `{run_id}` is not cited: it {why}, and `[tool.tether.signing] require` is on.\n"


def render_regions(
    root: Path, env: jinja2.Environment, context: dict[str, Any]
) -> dict[Path, bytes]:
    """Each declared region file as it reads with every region re-rendered.

    Every marker in a declared file must name a region the context renders or one the project
    declared with its template ([tool.tether.render] region_templates; a marker no target
    renders is an error), every declared region must have its markers, and every threshold and
    gate region must have its marker in the policy file.
    """

    proj = project.get(root)
    available = region_bodies(context)
    # Each threshold and gate region belongs in the policy file that declares it; with several
    # policy files, the one holding its marker (the first, which then reports it missing).
    policy_files = [proj.rel(p) for p in (proj.policies or ((proj.policy,) if proj.policy else ()))]
    texts = {rel: read_text(root / rel, rel) for rel in policy_files if (root / rel).is_file()}

    def home(region: str) -> str:
        needle = f"BEGIN GENERATED: {region} "
        return next((rel for rel in policy_files if needle in texts.get(rel, "")), policy_files[0])

    regions = (*context["thresholds"], *context["gates"])
    required = {r: home(r) for r in regions} if policy_files else {}
    out: dict[Path, bytes] = {}
    files = sorted(set(proj.region_files) | set(required.values()))
    for rel in files:
        source = root / rel
        try:
            text = read_text_exact(source, rel)
        except FileNotFoundError as exc:
            raise TemplateError(f"{rel}: declared region file not found") from exc
        declared: dict[str, Any] = {
            r: (t, {}) for r, t in proj.region_templates.get(rel, {}).items()
        }
        here = {**available, **declared}
        spans = find_regions(text, Path(rel))
        # A tuning run's region whose run this store lacks (a fixture store, a store copied
        # partly) renders as saying so; `tether check` reports it as a citation of a missing run.
        missing = {r for r in set(spans) - set(here) if r.startswith(TUNE_PREFIX)}
        unknown = sorted(set(spans) - set(here) - missing)
        if unknown:
            raise RegionError(
                rel,
                unknown[0],
                "no target renders this region (a marker must name a threshold, a gate, a "
                "tuning run of the store, or a region declared with its template in "
                f'[tool.tether.render.region_templates] "{rel}")',
            )
        absent = sorted(set(declared) - set(spans))
        if absent:
            syntax = syntax_for(Path(rel))
            raise RegionError(
                rel,
                absent[0],
                "declared in [tool.tether.render.region_templates] but its markers are not in "
                f"the file; add the lines {syntax.begin_fmt.format(id=absent[0])!r} and "
                f"{syntax.end_fmt.format(id=absent[0])!r}",
            )
        wanted = set(spans) | {r for r, f in required.items() if f == rel}
        bodies = {}
        for region in sorted(wanted):
            if region in missing:
                bodies[region] = absent_tune_body(region[len(TUNE_PREFIX) :], context, proj)
                continue
            template, extra = here[region]
            body = render_template(env, template, {**context, **extra})
            if not body.endswith("\n"):
                body += "\n"
            if rel.endswith(".py"):
                _check_python_region(rel, region, body)
            bodies[region] = body
        out[Path(rel)] = replace_regions(text, Path(rel), bodies).encode("utf-8")
    return out
