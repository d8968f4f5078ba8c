"""What gets rendered where: whole files, SVG figures, and named regions inside source files.

Every target is produced in memory as bytes keyed by its path relative to the repository
root; writing is a separate step (``tether.render.write_all``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import jinja2

from tether import trends
from tether.render import plots
from tether.render.env import TemplateError, render_template
from tether.render.figures import FigureSpec, inputs_digest
from tether.render.regions import replace_regions

THRESHOLD_TEMPLATE = "policy_threshold.py.j2"
GATE_TEMPLATE = "policy_gate.py.j2"
COMPILE_TEMPLATE = "compile_evidence.py.j2"
PY_REGION_WIDTH = 100


@dataclass(frozen=True)
class RegionTarget:
    """One generated region: which file, which marker id, which template and its context."""

    path: str
    region: str
    template: str
    context: dict[str, Any]


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
            if trend is not None and len(trend["points"]) >= 2:
                digest = inputs_digest("trend", trend, [trends.__file__])
                out[Path("docs") / trend["figure"]] = FigureSpec(
                    digest, partial(_trend_bytes, trend)
                )
    return dict(sorted(out.items()))


def _trend_bytes(trend: dict[str, Any]) -> bytes:
    return trends.trend_svg(trend).encode("utf-8")


def render_figures(context: dict[str, Any]) -> dict[Path, bytes]:
    """Every figure drawn (slow: matplotlib); ``tether check`` draws only what drifted."""
    return {path: spec.draw() for path, spec in figure_specs(context).items()}


def region_targets(context: dict[str, Any], policy_file: str | None) -> list[RegionTarget]:
    """Regions from the policy: one per Threshold and one per Gate in the policy file."""
    if policy_file is None:
        return []
    targets = [
        RegionTarget(policy_file, region, THRESHOLD_TEMPLATE, {"doc": doc})
        for region, doc in sorted(context["thresholds"].items())
    ]
    targets += [
        RegionTarget(policy_file, region, GATE_TEMPLATE, {"doc": doc})
        for region, doc in sorted(context["gates"].items())
    ]
    return targets + compile_region_targets(context, policy_file)


def compile_region_targets(context: dict[str, Any], policy_file: str) -> list[RegionTarget]:
    """One region per compile gate that names one: the compile run above the arch's configs."""
    return [
        RegionTarget(policy_file, region, COMPILE_TEMPLATE, dict(entry))
        for region, entry in sorted(context.get("compile_regions", {}).items())
    ]


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


def render_regions(
    root: Path, env: jinja2.Environment, context: dict[str, Any]
) -> dict[Path, bytes]:
    """Each file holding regions, as it reads with every region re-rendered."""
    from tether import project

    proj = project.get(root)
    policy_file = proj.rel(proj.policy) if proj.policy else None
    by_file: dict[str, dict[str, str]] = {}
    for target in region_targets(context, policy_file):
        body = render_template(env, target.template, {**context, **target.context})
        if not body.endswith("\n"):
            body += "\n"
        if target.path.endswith(".py"):
            _check_python_region(target.path, target.region, body)
        by_file.setdefault(target.path, {})[target.region] = body
    out: dict[Path, bytes] = {}
    for rel, bodies in sorted(by_file.items()):
        source = root / rel
        try:
            text = source.read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise TemplateError(f"{rel}: file with generated regions not found") from exc
        out[Path(rel)] = replace_regions(text, Path(rel), bodies).encode("utf-8")
    return out
