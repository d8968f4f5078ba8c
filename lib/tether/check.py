"""``tether check``: the published text, the store and the policy still agree.

Read-only and GPU-free (it must never import torch or triton), so it runs in pre-commit and CI:

1. the store loads and validates (a malformed run fails, naming its file and field);
2. every rendered target is re-rendered in memory from the raw samples and diffed against the
   file on disk, with a unified diff and the command that fixes it; figures are compared by
   their embedded input digest and drawn only when it differs (``--full`` draws them all);
3. every policy threshold and gate is evaluated against the runs it cites: a routing threshold
   whose evidence predicates fail, or that rests on a missing or superseded run, fails; a gate
   whose threshold does not sit strictly between its before and after measurements fails;
4. the newest compile run of each kernel and arch was compiled from this checkout's kernel
   sources (its kernels fingerprint); stale compile evidence fails like a superseded run;
5. every timing run a threshold or gate rests on describes the code: its kernels fingerprint
   is the checkout's, or the kernel files that changed since its commit are none its arms
   use (``tether.freshness``); a stale run the documents cite is rendered marked stale there
   by the same rule (the re-render holds them to it), as a superseded one is;
6. policy evidence is evidence: a threshold's run timed the threshold's arm as B and its
   ``otherwise`` as A, a gate's runs timed its arm; each rests on at least two runs of one
   commit (a verdict resting on one run is provisional); cells flagged ``kernel_mismatch`` or
   ``alloc_in_timed_region`` never count toward a predicate;
7. with ``since`` (``tether check --since REV``), no run file that the store held at the
   merge-base of REV and HEAD is modified or gone: the store is append-only;
8. hand-written text is scanned for performance figures and claim words (``tether._scan``),
   less the findings recorded in the project's scan baseline (``tether check --baseline``);
9. no run started in the future of the machine checking it (a host clock that is wrong);
10. with ``[tool.tether.signing] require``, every run the published text cites is signed by
    an allowed signer and its signature matches its digest (``tether.store.signing``).

Findings print as ``path:line: what``; exit 0 when there are none, 1 otherwise.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tether import project
from tether._scan import Finding, ScanCache, apply_baseline, scan_tree
from tether.atomic import STAMP_FORMAT, utc_stamp
from tether.errors import SigningError, TetherError, UsageError
from tether.freshness import (
    CommitKernels,
    CompileFreshness,
    GitUnavailable,
    store_changes_since,
)
from tether.policy import Condition, TunedChoice, field_value
from tether.render import embedded_digest, render_parts
from tether.render.context import UNKNOWN, kernel_staleness, tuned_doc
from tether.render.context import policy as checkout_policy
from tether.render.env import rate
from tether.render.outlock import tree_lock
from tether.render.policy_file import tuned_choices
from tether.render.targets import missing_tune_regions
from tether.stats import MIN_RUNS, aggregate, cell_stats, evaluate, rate_of
from tether.store.audit import RunCache, load_store_checked
from tether.store.cite import StaleFiles, by_id, cited, latest_ok, siblings
from tether.store.evidence import Barred, barred, citable, verdicts
from tether.store.harness import CurrentHarness, is_superseded
from tether.store.provenance import definition_digests
from tether.store.signing import keygen
from tether.textfile import read_text

if TYPE_CHECKING:
    from tether.policy import Gate, Threshold
    from tether.render import FigureSpec
    from tether.stats import CellStat
    from tether.store.model import Run

# The command that fixes generated text, in every project: tether's own Makefile has a
# `make docs` alias, but an adopting project has no such target.
FIX_COMMAND = "tether render"

__all__ = [
    "FIX_COMMAND",
    "Evidence",
    "Finding",
    "check_compile_evidence",
    "check_gates",
    "check_rendered",
    "check_thresholds",
    "finish_check",
    "judge_evidence",
    "load_checked_store",
    "run_check",
]


def _run_file(run: Run) -> Path:
    """Where a run's file is: its loaded path, else its place in a store."""
    return run.path or Path("results") / run.arch / f"{run.id}.json"


def _rel(path: object, root: Path) -> str:
    try:
        return Path(str(path)).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path)


def load_checked_store(
    store: Path, root: Path, runs_cache: RunCache | None = None
) -> tuple[Any, list[Finding]]:
    """The loaded store, or None and one finding per bad file (every one, not the first):
    malformed runs, misplaced or misnamed files, links, FIFOs, ids claimed twice."""

    found = load_store_checked(store, runs_cache)
    if found.ok:
        return sorted(found.runs, key=lambda r: (r.started, r.id)), []
    findings = []
    for problem in found.problems:
        kind = "malformed run" if problem.path in found.malformed else "store"
        findings.append(Finding(_rel(problem.path, root), 1, f"{kind}: {problem.what}"))
    return None, findings


# -- rendered targets ------------------------------------------------------------------------


def _first_difference(old: list[str], new: list[str]) -> int:
    for number, (a, b) in enumerate(zip(old, new, strict=False), start=1):
        if a != b:
            return number
    return min(len(old), len(new)) + 1


def check_rendered(
    root: Path,
    expected: Mapping[Path, bytes],
    diff_out: list[str],
    also_rendered: Iterable[Path] = (),
    where: str = "on disk",
) -> list[Finding]:
    """Compare rendered content with the files on disk; append unified diffs to ``diff_out``.

    ``also_rendered``: targets checked another way (figures whose digest matched), so they are
    not reported as stale files under docs/. SVG figures get a finding but no diff. ``where``
    names the judged files' place in the diff header ("in the index" when ``root`` is a
    snapshot of it: what is compared is the staged file, not the one on disk).
    """

    proj = project.get(root)
    store = f"{proj.rel(proj.store)}/"  # the configured store, as messages name it
    findings = []
    for rel in sorted(expected, key=lambda p: Path(p).as_posix()):
        name = Path(rel).as_posix()
        path = root / rel
        want = expected[rel]
        if not path.is_file():
            findings.append(Finding(name, 1, f"rendered target is missing; run {FIX_COMMAND}"))
            continue
        have = path.read_bytes()
        if have == want:
            continue
        old = have.decode("utf-8", errors="replace").splitlines(keepends=True)
        new = want.decode("utf-8", errors="replace").splitlines(keepends=True)
        line = _first_difference(old, new)
        findings.append(
            Finding(name, line, f"differs from what {store} renders; run {FIX_COMMAND}")
        )
        if name.endswith(".svg"):
            continue
        diff_out.extend(
            difflib.unified_diff(
                old, new, fromfile=f"{name} ({where})", tofile=f"{name} (rendered from {store})"
            )
        )
        if diff_out and not diff_out[-1].endswith("\n"):
            diff_out[-1] += "\n"
    findings += _stale_docs(root, [*expected, *also_rendered])
    return findings


def figures_to_compare(
    root: Path, figures: Mapping[Path, FigureSpec], full: bool
) -> tuple[dict[Path, bytes], list[Path]]:
    """(figures drawn for a byte comparison, figures whose on-disk digest matched the store).

    Without ``full`` a figure is drawn only when the digest embedded in the file on disk is
    missing, stale, or no longer matches the file's own body (a hand edit); with ``full`` every
    figure is drawn, which is what catches an edit that also forged the embedded digests.
    """

    drawn: dict[Path, bytes] = {}
    matched: list[Path] = []
    for rel, spec in figures.items():
        path = root / rel
        if not full and path.is_file() and embedded_digest(path.read_bytes()) == spec.digest:
            matched.append(rel)
            continue
        try:
            drawn[rel] = spec.draw()
        except ImportError as exc:
            if full:
                raise UsageError(
                    f"check --full draws every figure and needs matplotlib ({exc}); install "
                    "tether[render]"
                ) from exc
            # A light install (the pre-commit hook) cannot draw; the figure's inputs changed,
            # so it has drifted either way: an empty drawing differs from any file on disk.
            drawn[rel] = b""
    return drawn, matched


def _stale_docs(root: Path, expected: Iterable[Path]) -> list[Finding]:
    """Files in the project's figures folder (the one folder render owns) that no target
    renders: left over from an older render, or added by hand."""

    figures = project.get(root).figures
    docs = root / figures if figures else None
    if docs is None or not docs.is_dir():
        return []
    rendered = {Path(p).as_posix() for p in expected}
    stale = []
    for path in sorted(docs.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_file() and rel not in rendered and not path.name.startswith("."):
            stale.append(Finding(rel, 1, "not rendered from results/; remove it or add a target"))
    return stale


# -- policy evidence -------------------------------------------------------------------------


def _policy_files(root: Path) -> tuple[Path, ...]:
    proj = project.get(root)
    return proj.policies or ((proj.policy,) if proj.policy is not None else ())


def _region_place(root: Path, region: str) -> tuple[str, int]:
    """The file (a policy file, else a declared region file) and line of the region's BEGIN
    marker, so a finding points at it."""

    proj = project.get(root)
    needle = f"BEGIN GENERATED: {region}"
    files = _policy_files(root)
    for path in (*files, *(root / rel for rel in sorted(proj.region_files))):
        if path.is_file():
            lines = read_text(path, proj.rel(path)).splitlines()
            for number, line in enumerate(lines, start=1):
                if needle in line:
                    return proj.rel(path), number
    return (proj.rel(files[0]) if files else "pyproject.toml"), 1


def _superseded(run: Run, current: str | CurrentHarness) -> bool:
    return is_superseded(run, current)


def _range_gaps(conditions: tuple[Condition, ...], cells: list[CellStat]) -> list[str]:
    """Where a range a scope states (``field within (lo, hi)``: what the kernel serves, not the
    cells measured) is not spanned by its evidence: a designed sample spans a range when some
    cell sits at each end and some cell strictly inside, so a range is never judged from its
    corners alone nor from one point."""
    gaps = []
    for name, op, value in conditions:
        if op != "within":
            continue
        bounds = tuple(value) if isinstance(value, (tuple, list)) else ()
        lo, hi = bounds if len(bounds) == 2 else (None, None)
        if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)):
            gaps.append(f"{name} within {value!r} is not a range (lo, hi) of numbers")
            continue
        seen = {
            v
            for c in cells
            if isinstance(v := field_value(c.fields, name), (int, float)) and lo <= v <= hi
        }
        missing = [f"{name} = {lo}"] if lo not in seen else []
        missing += [f"{name} = {hi}"] if hi not in seen else []
        if not any(lo < v < hi for v in seen):
            missing.append(f"{name} strictly between {lo} and {hi}")
        if missing:
            gaps.append(
                f"{name} within {lo} to {hi} is routed but the evidence does not span it: no "
                f"cell at {', '.join(missing)}"
            )
    return gaps


def coverage_gaps(th: Threshold, cells: list[CellStat]) -> list[str]:
    """Where ``th`` applies but its evidence has no cell. Each lower bound of its region
    (``field >= v`` or ``field > v``) must be reached by some evidence cell at or below it,
    each range its scope states (``field within (lo, hi)``) spanned (``_range_gaps``), and
    every value its scope names (``field == v``, ``field in (...)``: the dtypes, head dims,
    heads, causality and batch it speaks for), and every combination of those values, must
    be among the evidence cells', or the threshold routes calls that no measurement saw.
    Empty when the region is covered."""
    if th.takes is None:
        return []
    gaps = []
    for name, op, value in th.takes:
        if op not in (">=", ">") or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        seen: list[float] = [
            float(v) for c in cells if isinstance(v := c.fields.get(name), (int, float))
        ]
        if not seen:
            gaps.append(f"no evidence cell has a {name}")
        elif min(seen) > value:
            gaps.append(
                f"{name} {op} {value} starts below the evidence, whose cells begin at "
                f"{name} {min(seen)}"
            )
    gaps += _range_gaps(th.scope + th.takes, cells)
    enumerated: dict[str, tuple[object, ...]] = {}
    for name, op, value in th.scope + th.takes:
        if op == "in":
            wanted = tuple(value) if isinstance(value, (tuple, list)) else (value,)
        elif op == "==" and not (isinstance(value, str) and cells and value in cells[0].fields):
            wanted = (value,)
        else:
            continue
        enumerated[name] = wanted
        have = {field_value(c.fields, name) for c in cells}
        missing = [v for v in wanted if v not in have]
        if missing:
            gaps.append(
                f"{name} {', '.join(map(str, missing))} is routed but no evidence cell has it"
            )
    if gaps or len(enumerated) < 2:
        return gaps
    # Every value seen is not enough: each combination the scope routes (head_dim 64 with
    # heads 8/1, in f16) must be a measured cell, or a call no measurement saw is routed.
    names = list(enumerated)
    measured = {tuple(field_value(c.fields, n) for n in names) for c in cells}
    unseen = [combo for combo in itertools.product(*enumerated.values()) if combo not in measured]
    if unseen:
        shown = "; ".join(
            ", ".join(f"{n}={v}" for n, v in zip(names, combo, strict=True)) for combo in unseen[:3]
        )
        more = f" and {len(unseen) - 3} more" if len(unseen) > 3 else ""
        gaps.append(f"{shown}{more} routed but no evidence cell has that combination")
    return gaps


def check_thresholds(
    root: Path,
    policy: Iterable[Threshold],
    runs: Sequence[Run],
    current: str | CurrentHarness,
    stale: StaleFiles | None = None,
) -> list[Finding]:
    """Each set threshold rests on the cited (guarded, current) run of its sweep, whose
    predicates hold, and applies only where that evidence has cells."""

    findings = []
    stale = stale or kernel_staleness(root, runs)
    for th in policy:
        if not th.is_set:
            continue
        where = _region_place(root, th.region)
        label = (
            f"policy {th.region} ({th.arch} {th.entry} -> {th.arm} where {th.describe_region()})"
        )
        run = cited(runs, "sweep", th.evidence.sweep, th.arch, stale)
        if run is None:
            findings.append(
                Finding(
                    *where,
                    f"{label} rests on sweep {th.evidence.sweep!r} with no guarded ok run "
                    "(unguarded runs are never evidence)",
                )
            )
            continue
        if _superseded(run, current):
            findings.append(
                Finding(
                    *where,
                    f"{label} rests on run {run.id} from a superseded harness; re-measure "
                    "before citing it as current",
                )
            )
            continue
        arms = run.arms
        if arms.get("B") != th.arm or arms.get("A") != th.otherwise:
            findings.append(
                Finding(
                    *where,
                    f"{label}: evidence run {run.id} timed B = {arms.get('B')!r} against "
                    f"A = {arms.get('A')!r}, not the threshold's arm {th.arm!r} against its "
                    f"otherwise {th.otherwise!r}",
                )
            )
        sibs = siblings(runs, run)
        ok, why = evaluate(th.evidence, run, sibs)
        if not ok:
            findings.append(Finding(*where, f"{label}: evidence does not hold: {why}"))
        admitted = list(
            aggregate(cell_stats(run, sibs), th.evidence.population, trusted_only=True).cells
        )
        for gap in coverage_gaps(th, admitted):
            findings.append(
                Finding(*where, f"{label}: applies outside its evidence in run {run.id}: {gap}")
            )
    return findings


def check_front_page(
    root: Path, runs: Sequence[Run], stale: StaleFiles | None = None
) -> list[Finding]:
    """Each front-page comparison ([tool.tether.summary] rows) is what a caller gets: where
    the run it cites declares entry points, its B arm must be one of them. An arm sweep times
    an arm prepared outside the call, not the entry point a caller calls (the seeds' failure:
    a figure describing a population the caller never reaches)."""
    proj = project.get(root)
    config = root / project.CONFIG_FILE
    text = read_text(config, project.CONFIG_FILE).split("\n") if config.is_file() else []
    findings = []
    stale = stale or kernel_staleness(root, runs)
    for row in proj.summary_rows:
        sweep = str(row["sweep"])
        for arch in sorted({r.arch for r in runs if r.kind == "sweep" and r.name == sweep}):
            run = cited(runs, "sweep", sweep, arch, stale)
            entries = run.config.get("entry_points") if run is not None else None
            b = run.arms.get("B") if run is not None else None
            if run is None or not entries or b in entries:
                continue
            cite = f'sweep = "{sweep}"'
            line = next((n for n, t in enumerate(text, 1) if cite in t), 1)
            findings.append(
                Finding(
                    _rel(config, root),
                    line,
                    f"front-page row {row['label']!r} cites sweep {sweep!r}, whose run "
                    f"{run.id} times arm {b!r} as B, not an entry point "
                    f"({', '.join(map(str, entries))}): an arm prepared outside the call is "
                    "not what a caller gets; cite a sweep that times the entry point as called",
                )
            )
    return findings


def _absent(gate: str, role: str, run_id: str | None, bar: Barred | None) -> str:
    """Why a gate's cited run is not among the runs judged: not in the store, or barred."""
    if bar is not None and run_id in bar.legacy:
        return (
            f"gate {gate}: {role} run {run_id} is recorded as legacy (unsigned); signed "
            "evidence is required: measure it again on a signing host"
        )
    if bar is not None and run_id is not None and run_id in bar.refused:
        return (
            f"gate {gate}: {role} run {run_id} {bar.refused[run_id]}; signed evidence is "
            "required ([tool.tether.signing])"
        )
    return f"gate {gate}: {role} run {run_id!r} is not in the store"


def _barred(root: Path, runs: list[Run]) -> tuple[Barred | None, list[Finding]]:
    """Under require, the runs that may not be cited, and a finding for each ``ok`` one that
    is neither signed by an allowed signer nor recorded as legacy: a forgery (re-sealed, an
    unknown key, a copied signature) or a run its host did not sign, in the store even where
    nothing cites it."""
    proj = project.get(root)
    try:
        bar = barred(root, runs)
    except (SigningError, UsageError) as exc:
        return None, [Finding("pyproject.toml", 1, f"[tool.tether.signing] require: {exc}")]
    findings = [
        Finding(
            _rel(_run_file(run), root),
            1,
            f"run {run.id} {bar.refused[run.id]}, and is not recorded as legacy: signed "
            f"evidence is required, so no document may cite it (sign it with tether sign if "
            f"its host measured it, or remove it; allowed signers in "
            f"{proj.rel(proj.allowed_signers or root)})",
        )
        for run in runs
        if run.id in bar.refused and run.status == "ok"
    ]
    return bar, findings


def check_tune_citations(
    root: Path, runs: Sequence[Run], bar: Barred | None = None
) -> list[Finding]:
    """Each ``tune-<id>`` region names a tuning run the store holds and may cite. Under
    [tool.tether.signing] require a run not signed by an allowed signer (``bar.refused``) is
    a finding; a run recorded as legacy (``bar.legacy``) is not: the region renders as set
    aside (tether.render.targets.absent_tune_body), as a legacy run raises no finding."""

    bar = bar or Barred()
    ids = {r.id for r in runs if r.kind == "tune"}
    findings = []
    for rel, region in missing_tune_regions(root, ids):
        run_id = region[len("tune-") :]
        if run_id in bar.legacy:
            continue
        why = bar.refused.get(run_id)
        said = (
            "not in the store"
            if why is None
            else f"which {why}; signed evidence is required, so it may not be cited"
        )
        findings.append(Finding(rel, 1, f"region {region!r} cites tuning run {run_id!r}, {said}"))
    return findings


def check_tuned_choices(
    root: Path,
    tuned: Iterable[TunedChoice],
    runs: Sequence[Run],
    current: str | CurrentHarness,
    stale: StaleFiles | None = None,
) -> list[Finding]:
    """Each tuned choice cites an ok tuning run of its sweep on its arch, the newest one of the
    checkout's kernels, and its chosen candidate holds by the rule (``TunedChoice.judge``) on
    that run. Whether the cited run describes the current kernels is
    ``check_timing_freshness``'s (``evidence_runs``)."""

    findings = []
    stale = stale or kernel_staleness(root, runs)
    for choice in tuned:
        where = _region_place(root, choice.region) if choice.region else ("pyproject.toml", 1)
        doc = tuned_doc(runs, choice, current, stale)
        what = f"tuned choice {choice.id} ({choice.axis} {choice.chosen!r})"
        if doc.tune is None:
            findings.append(
                Finding(*where, f"{what} cites {choice.run!r}, not an ok tuning run of the store")
            )
            continue
        run = by_id(runs, choice.run)
        if run is not None and (run.name != choice.sweep or run.arch != choice.arch):
            findings.append(
                Finding(
                    *where,
                    f"{what} cites {run.id}, a run of {run.name} on {run.arch}, not of "
                    f"{choice.sweep} on {choice.arch}",
                )
            )
            continue
        if doc.newest is not None and doc.newest != choice.run:
            findings.append(
                Finding(
                    *where,
                    f"{what} cites {choice.run}, but {doc.newest} is the newest ok tuning run of "
                    f"{choice.sweep} on {choice.arch} of this checkout's kernels: cite it (a choice "
                    "rests on the newest run that measured the kernels it chooses among)",
                )
            )
        if not doc.holds:
            chosen, best = doc.row(choice.chosen), doc.row(doc.best)
            if chosen is None:
                why = f"the run has no candidate {choice.chosen!r}"
            else:
                lead = best.geomean / chosen.geomean if best is not None else float("nan")
                noise = best.noise_hi if best is not None else None
                why = (
                    f"{doc.best!r} leads it by {lead:.3f}x, beyond the noise of its cells "
                    f"({'unknown' if noise is None else f'up to {noise:.3f}'})"
                )
            findings.append(
                Finding(*where, f"{what} does not hold by its rule on run {choice.run}: {why}")
            )
    return findings


def check_gates(
    root: Path,
    gates: Iterable[Gate],
    runs: Sequence[Run],
    current: str | CurrentHarness,
    bar: Barred | None = None,
) -> list[Finding]:
    """Each set gate sits strictly between its cited before and after measurements, clear of
    both replicate bands; both are guarded, current and unthrottled. ``bar``: the runs
    ``runs`` lacks because signed evidence is required (they are named as such)."""

    findings = []
    for gate in gates:
        if gate.threshold is None:
            continue
        where = _region_place(root, gate.region)
        bands = {}
        cited = (
            ("before", gate.before_run, gate.before_role),
            ("after", gate.after_run, gate.after_role),
        )
        for role, run_id, sample_role in cited:
            run = by_id(runs, run_id)
            if run is None:
                findings.append(Finding(*where, _absent(gate.id, role, run_id, bar)))
                continue
            if not run.evidence_grade:
                findings.append(
                    Finding(
                        *where,
                        f"gate {gate.id}: {role} run {run_id} is not evidence "
                        f"(status {run.status}, guard {run.guard.mode})",
                    )
                )
            if _superseded(run, current):
                findings.append(
                    Finding(
                        *where, f"gate {gate.id}: {role} run {run_id} is from a superseded harness"
                    )
                )
            replicates = len(siblings(runs, run))
            if 1 + replicates < MIN_RUNS:
                findings.append(
                    Finding(
                        *where,
                        f"gate {gate.id}: {role} run {run_id} has no replicate run (same commit, "
                        f"harness and kernels); a band from one run is provisional and sets no "
                        f"gate: measure it {MIN_RUNS} times",
                    )
                )
            timed = run.arms.get(sample_role)
            if role == "after" and timed is not None and timed != gate.arm:
                findings.append(
                    Finding(
                        *where,
                        f"gate {gate.id}: after run {run_id} timed {timed!r} as role "
                        f"{sample_role}, not the gate's arm {gate.arm!r}",
                    )
                )
            stat = rate_of(run, gate.call, sample_role)
            if stat is None:
                findings.append(
                    Finding(
                        *where,
                        f"gate {gate.id}: {role} run {run_id} has no {sample_role} samples "
                        "for the gate's call",
                    )
                )
                continue
            if stat.throttled:
                findings.append(
                    Finding(
                        *where,
                        f"gate {gate.id}: {role} run {run_id}'s cell ran clock throttled; a "
                        "throttled cell is never a gate's before or after",
                    )
                )
            bands[role] = stat.band
        if len(bands) == 2 and not bands["before"][1] < gate.threshold < bands["after"][0]:
            findings.append(
                Finding(
                    *where,
                    f"gate {gate.id}: threshold {rate(gate.threshold, gate.unit)} is not clear of "
                    f"both bands: before up to {rate(bands['before'][1], gate.unit)}, after from "
                    f"{rate(bands['after'][0], gate.unit)}",
                )
            )
    return findings


# -- compile evidence (issue 13) -------------------------------------------------------------


def check_compile_evidence(root: Path, runs: Sequence[Any]) -> list[Finding]:
    """The newest ok compile run of each kernel and arch still describes this checkout: no
    kernel file it compiles from ([tool.tether.fingerprint] compiled) changed in code since
    its commit (``KernelDiff.compile_staleness``). One that did is stale evidence, like a run
    from a superseded harness; a change to another kernel file (the Gluon kernel, the policy)
    leaves the Triton variants it compiled as they were."""

    fresh = CompileFreshness(root)
    pairs = {(r.name, r.arch) for r in runs if r.kind == "compile" and r.status == "ok"}
    findings = []
    for name, arch in sorted(pairs):
        run = latest_ok(runs, "compile", name, arch)
        if run is None:
            continue
        staleness = fresh.staleness(run)
        if not staleness.stale:
            continue
        why = staleness.unknown or "changed since: " + ", ".join(staleness.used)
        findings.append(
            Finding(
                _rel(_run_file(run), root),
                1,
                f"stale compile evidence: compile run {run.id} of {name} on {arch} "
                f"was compiled from other kernel sources than this checkout's ({why}); run "
                f"`tether compile --arch {arch}`",
            )
        )
    return findings


# -- time you can trust (issue 25) ----------------------------------------------------------

# A clock this far ahead of the checking machine's is still honest skew, not a future run.
FUTURE_SLACK_S = 600.0


def check_future_runs(
    root: Path, runs: Iterable[Run], now: datetime | None = None
) -> list[Finding]:
    """A run that started in the future of the machine checking it came from a host whose
    clock is wrong (or was forged); it is a finding whether or not it is cited. ("Newest"
    orders by git history first, so such a run cannot win by its stamp: tether.store.cite.)"""
    return future_runs(((_rel(_run_file(r), root), r.id, r.started) for r in runs), now)


def future_runs(
    started: Iterable[tuple[str, str, str]], now: datetime | None = None
) -> list[Finding]:
    """``check_future_runs`` over (file, run id, started stamp) triples."""
    moment = now or datetime.now(timezone.utc)
    findings = []
    for path, run_id, stamp in started:
        try:
            began = datetime.strptime(stamp, STAMP_FORMAT).replace(tzinfo=timezone.utc)
        except ValueError:
            continue  # validated at load; unreachable for a loaded run
        ahead = (began - moment).total_seconds()
        if ahead > FUTURE_SLACK_S:
            findings.append(
                Finding(
                    path,
                    1,
                    f"run {run_id} started {stamp}, {ahead / 86400:.1f} days in the future "
                    f"of this machine ({utc_stamp(moment)}): the measuring host's clock is wrong",
                )
            )
    return findings


def check_recorded_commits(root: Path, runs: Iterable[Run]) -> list[Finding]:
    """Each run that records a commit and a clean tree carries that commit's kernels
    fingerprint: otherwise it was measured from other sources than it names (a lent host
    whose copy's .git named an older commit, a wrong TETHER_GIT_SHA stamp), and every
    figure from it describes code it did not time. Runs of commits git cannot show are left
    alone (a shallow clone, a squashed history)."""
    at = CommitKernels(root)
    findings = []
    for run in runs:
        prov = run.provenance
        if prov.git_dirty is not False:
            continue
        expected = at.at(prov.git_sha)
        if expected is None or expected == prov.kernels_fingerprint:
            continue
        path = _run_file(run)
        findings.append(
            Finding(
                _rel(path, root),
                1,
                f"run {run.id} records commit {prov.git_sha[:12]} and a clean tree, but its "
                f"kernel sources ({prov.kernels_fingerprint[:15]}) are not that commit's "
                f"({expected[:15]}): it was measured from other code than it names; it is "
                "no evidence (remove it before it lands, or measure again)",
            )
        )
    return findings


# -- signed evidence (issue 25) -------------------------------------------------------------


# How a run id begins (tether.store.provenance.make_id): its start's stamp. Two such stamps
# cannot overlap in a text (a shifted "T" or "Z" would have to be a digit), so a search finds
# every place one begins.
_ID_STAMP = re.compile(rb"[0-9]{8}T[0-9]{6}Z-")


def cited_ids(runs: Iterable[Run], published: Mapping[Path, bytes]) -> list[Run]:
    """The runs the published text cites: those whose id appears in a rendered text target
    (documents and policy regions name every run they rest on by id). An id that begins with
    a stamp is looked for only where its stamp begins in the text (found in one pass), not in
    the whole text: a search of it per run made this grow with the store times the docs."""
    text = b"\n".join(v for k, v in published.items() if not Path(k).as_posix().endswith(".svg"))
    starts: dict[bytes, list[int]] = {}
    for match in _ID_STAMP.finditer(text):
        starts.setdefault(match.group(), []).append(match.start())
    out = []
    for run in runs:
        rid = run.id.encode("utf-8")
        head = rid[:17]
        if _ID_STAMP.fullmatch(head):
            found = any(text.startswith(rid, at) for at in starts.get(head, ()))
        else:
            found = rid in text
        if found:
            out.append(run)
    return out


def check_signatures(root: Path, cited: Iterable[Run]) -> list[Finding]:
    """With ``[tool.tether.signing] require``, each cited run is signed by an allowed signer
    and its signature matches its digest (see tether.store.signing)."""

    proj = project.get(root)
    if not proj.require_signed or proj.allowed_signers is None:
        return []
    allowed = proj.allowed_signers
    where = "pyproject.toml"
    if not allowed.is_file():
        return [
            Finding(
                where,
                1,
                f"[tool.tether.signing] allowed_signers {proj.rel(allowed)} is not in the "
                "tree being checked; cited runs cannot be verified",
            )
        ]
    try:
        keygen()
    except SigningError as exc:
        return [Finding(where, 1, f"[tool.tether.signing] require is set but {exc}")]
    findings = []
    cited = list(cited)
    for run, verdict in zip(cited, verdicts(cited, allowed), strict=True):
        path = _run_file(run)
        if not verdict.ok:
            findings.append(
                Finding(
                    _rel(path, root),
                    1,
                    f"cited run {run.id} {verdict.why}; signed evidence is required "
                    f"([tool.tether.signing], allowed signers in {proj.rel(allowed)})",
                )
            )
    return findings


# -- timing evidence describes the code (issue 21) -------------------------------------------


def evidence_runs(
    runs: Sequence[Run],
    policy: Iterable[Threshold],
    gates: Iterable[Gate],
    tuned: Iterable[TunedChoice] = (),
    stale: StaleFiles | None = None,
) -> list[tuple[Run, str]]:
    """Every timing run a decision rests on, with what rests on it: each set threshold's
    evidence run, each set gate's before and after runs and each tuned choice's tuning run."""

    out: dict[str, tuple[Run, str]] = {}
    for th in policy:
        if th.is_set:
            run = cited(runs, "sweep", th.evidence.sweep, th.arch, stale)
            if run is not None:
                out[run.id] = (run, f"policy {th.region} rests on it")
    for gate in gates:
        if gate.threshold is None:
            continue
        for role, run_id in (("before", gate.before_run), ("after", gate.after_run)):
            run = by_id(runs, run_id)
            if run is not None:
                out[run.id] = (run, f"gate {gate.id} sets its threshold from it ({role})")
    for choice in tuned:
        run = by_id(runs, choice.run)
        if run is not None:
            out.setdefault(run.id, (run, f"tuned choice {choice.id} rests on it"))
    return [out[k] for k in sorted(out)]


def check_timing_freshness(
    root: Path,
    runs: Sequence[Run],
    policy: Iterable[Threshold],
    gates: Iterable[Gate],
    tuned: Iterable[TunedChoice] = (),
    stale: StaleFiles | None = None,
) -> list[Finding]:
    """A timing run a threshold or a gate rests on whose kernels fingerprint is not the
    checkout's is a finding, unless none of the kernel files changed since its commit is one
    its arms use. A run the documents cite as a sweep's newest is rendered marked stale there
    (``SweepDoc.stale``, the same rule), which the re-render holds them to, as it holds
    superseded runs: history in the store stays citable as history, never as current."""

    stale = stale or kernel_staleness(root, runs)
    findings = []
    for run, why in evidence_runs(runs, policy, gates, tuned, stale):
        changed = stale(run)
        if not changed:
            continue
        path = _run_file(run)
        if changed[0].startswith(UNKNOWN):
            what = f"and tether cannot tell which files changed: {changed[0][len(UNKNOWN) :]}"
        else:
            what = "and its arms use changed kernel files: " + ", ".join(changed)
        findings.append(
            Finding(
                _rel(path, root),
                1,
                f"stale timing evidence: run {run.id} ({why}) was measured from other kernel "
                f"sources ({run.provenance.kernels_fingerprint[:15]}) than this checkout's, "
                f"{what}; re-measure it",
            )
        )
    return findings


def check_append_only(root: Path, store: Path, since: str) -> list[Finding]:
    """Run files the store held at the merge-base of ``since`` and HEAD, modified or gone."""

    try:
        changes = store_changes_since(root, store, since)
    except GitUnavailable as exc:
        raise UsageError(f"check --since {since}: git cannot tell ({exc})") from None
    return [
        Finding(path, 1, f"the store is append-only: this run file was {what}")
        for path, what in changes
    ]


# -- the whole check -------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """What the check judged of the evidence (the store, the rendered targets, the policy
    against its runs): a pure function of the judged tree and git's immutable history, so
    ``tether.checkcache`` may keep it by the content of its inputs. Left out, because they
    are not such a function: the scan (cached per file), the configuration's plugins (the
    environment's) and the runs started in the future (the clock's), for which ``started``
    keeps each run's (file, id, stamp)."""

    findings: tuple[Finding, ...]
    diffs: tuple[str, ...]
    started: tuple[tuple[str, str, str], ...]


def run_check(
    root: Path,
    store: Path,
    diff_out: list[str] | None = None,
    *,
    policy: Iterable[Threshold] | None = None,
    gates: Iterable[Gate] | None = None,
    full: bool = False,
    since: str | None = None,
    baseline: bool = True,
    where: str = "on disk",
    err: TextIO | None = None,
    runs_cache: RunCache | None = None,
    scan_cache: ScanCache | None = None,
) -> list[Finding]:
    """Every finding for the checkout at ``root`` against the store at ``store``, sorted.

    ``policy`` and ``gates`` default to the project's policy files; tests pass their own.
    ``full`` redraws every figure and compares bytes (see ``figures_to_compare``). ``since``:
    a git revision; run files held at its merge-base with HEAD must be unchanged.
    ``baseline``: leave out the scan findings the project's scan baseline records.
    ``where``: what ``root`` holds, for the diff headers (``Snapshot.where``).
    ``runs_cache`` and ``scan_cache``: what ``tether.checkcache`` already knows of run files
    and scanned files by their content (None: judge every file afresh).

    The tree is read under the output tree's lock, shared (``tether.render.outlock``): a
    render writing it is waited for (``err`` says so), so the check judges a whole tree.
    """
    with tree_lock(root, shared=True, err=err):
        evidence = judge_evidence(root, store, full, where, policy, gates, runs_cache)
        if diff_out is not None:
            diff_out.extend(evidence.diffs)
        return finish_check(root, evidence, since, baseline, scan_cache, store)


def judge_evidence(
    root: Path,
    store: Path,
    full: bool = False,
    where: str = "on disk",
    policy: Iterable[Threshold] | None = None,
    gates: Iterable[Gate] | None = None,
    runs_cache: RunCache | None = None,
) -> Evidence:
    """The store loaded and validated, the targets re-rendered and diffed, and the policy,
    gates, tuned choices and compile runs judged against the runs they cite."""
    diffs: list[str] = []
    loaded, findings = load_checked_store(store, root, runs_cache)
    runs: tuple[Run, ...] = ()
    if loaded is not None:
        bar, found = _barred(root, loaded)
        findings += found
        # Under [tool.tether.signing] require, what is not signed by an allowed signer is
        # judged as the documents see it: absent (tether.store.evidence).
        # A tuple: one that cannot change is indexed once by setup (tether.store.cite.siblings).
        runs = tuple(citable(root, loaded, bar))
        try:
            expected, figures = render_parts(root, loaded, bar)
            drawn, matched = figures_to_compare(root, figures, full)
            expected.update(drawn)
        except TetherError as exc:
            # A broken marker or template stops the render; report it among the other findings
            # so the scan and the policy checks below still run.
            place = _rel(getattr(exc, "path", project.get(root).templates), root)
            findings.append(Finding(place, 1, f"cannot render: {exc}"))
        else:
            findings += check_rendered(root, expected, diffs, matched, where)
            findings += check_signatures(root, cited_ids(runs, expected))
        own_policy, own_gates = checkout_policy(root) or ((), ())
        # The harness of the checkout being checked, as the renderer judges it: each run by
        # the rule of the format it recorded (tether.store.harness).
        current = CurrentHarness(root)
        the_policy = tuple(own_policy if policy is None else policy)
        the_gates = tuple(own_gates if gates is None else gates)
        # Which kernel files changed since each run: git asked once per commit, for every check.
        stale = kernel_staleness(root, runs)
        findings += check_thresholds(root, the_policy, runs, current, stale)
        findings += check_tune_citations(root, runs, bar)
        findings += check_front_page(root, runs, stale)
        findings += check_gates(root, the_gates, runs, current, bar)
        findings += check_compile_evidence(root, runs)
        findings += check_recorded_commits(root, runs)
        the_tuned = tuned_choices(root)
        findings += check_tuned_choices(root, the_tuned, runs, current, stale)
        findings += check_timing_freshness(root, runs, the_policy, the_gates, the_tuned, stale)
    files = _run_rels(runs, root)
    started = tuple((f, r.id, r.started) for f, r in zip(files, runs, strict=True))
    return Evidence(tuple(findings), tuple(diffs), started)


def _run_rels(runs: Sequence[Run], root: Path) -> list[str]:
    """``_rel(_run_file(run), root)`` of each run, its folder resolved once per folder: a
    loaded run's file is a regular file named by its id (the audit refuses links), so only
    the folders above it can be links. A store of thousands of runs resolved each whole path
    in a tenth of a second or more."""
    base = root.resolve()
    folders: dict[Path, Path] = {}
    out = []
    for run in runs:
        if run.path is None:
            out.append(_rel(_run_file(run), root))
            continue
        path = Path(str(run.path))
        folder = folders.get(path.parent)
        if folder is None:
            folder = folders[path.parent] = path.parent.resolve()
        try:
            out.append((folder / path.name).relative_to(base).as_posix())
        except ValueError:
            out.append(str(run.path))
    return out


def finish_check(
    root: Path,
    evidence: Evidence,
    since: str | None = None,
    baseline: bool = True,
    scan_cache: ScanCache | None = None,
    store: Path | None = None,
) -> list[Finding]:
    """``evidence``'s findings with what is judged afresh on every check: runs started in the
    future of this machine's clock, the append-only rule (``since``, with ``store``), the scan
    of hand-written text less the baseline, and the configuration."""
    findings = list(evidence.findings)
    findings += future_runs(evidence.started)
    if since is not None:
        assert store is not None, "the append-only rule needs the store"
        findings += check_append_only(root, store, since)
    scanned = scan_tree(root, cache=scan_cache)
    if baseline:
        scanned = apply_baseline(root, scanned)
    findings += scanned
    findings += check_config(root)
    return sorted(set(findings))


def check_config(root: Path) -> list[Finding]:
    """Configuration that would otherwise pass silently until a sweep: a plugin module that
    does not exist (found without importing it), and an arch scope that names no definition."""

    proj = project.get(root)
    return (
        [
            Finding(
                "pyproject.toml",
                project.config_line(root, name),
                f"[tool.tether] plugins: module {name!r} not found (a typo?)",
            )
            for name in proj.missing_plugins()
        ]
        + check_arch_scopes(root)
        + check_compiled_inputs(root)
    )


def check_compiled_inputs(root: Path) -> list[Finding]:
    """Each [tool.tether.fingerprint] compiled pattern names kernel files, and only those: a
    pattern that matches nothing would leave compile runs fresh through a change it meant to
    cover, and a file outside the kernels is in no fingerprint git can compare."""

    proj = project.get(root)
    kernel_files = set(proj.kernel_files())
    where = "[tool.tether.fingerprint] compiled"
    findings = []
    for pattern in proj.compiled_globs:
        matched = proj.glob((pattern,))
        line = project.config_line(root, pattern)
        if not matched:
            findings.append(
                Finding("pyproject.toml", line, f"{where}: {pattern!r} matches no file")
            )
        findings += [
            Finding(
                "pyproject.toml",
                line,
                f"{where}: {proj.rel(p)!r} is not one of the kernel files the fingerprint "
                "covers ([tool.tether.fingerprint] kernels)",
            )
            for p in matched
            if p not in kernel_files
        ]
    return findings


def check_arch_scopes(root: Path) -> list[Finding]:
    """Each [tool.tether.fingerprint] arch_scoped entry names a kernel file that parses and a
    top-level definition in it. A typo fails safe for freshness (a change to the definition
    then counts for every arch) but would leave the declaration meaning nothing, silently."""

    proj = project.get(root)
    kernel_files = {p.relative_to(root).as_posix() for p in proj.kernel_files()}
    where = "[tool.tether.fingerprint] arch_scoped"
    findings = []
    for rel, scoped in sorted(proj.arch_scoped.items()):
        path = root / rel
        line = project.config_line(root, rel)
        if rel not in kernel_files:
            findings.append(
                Finding(
                    "pyproject.toml",
                    line,
                    f"{where}: {rel!r} is not one of the kernel files "
                    "the fingerprint covers ([tool.tether.fingerprint] kernels)",
                )
            )
            continue
        defined = definition_digests(read_text(path, rel))
        if defined is None:
            findings.append(Finding("pyproject.toml", line, f"{where}: {rel!r} does not parse"))
            continue
        findings += [
            Finding(
                "pyproject.toml",
                line,
                f"{where}: {rel!r} has no top-level definition "
                f"{name!r} (a typo, or a renamed table?)",
            )
            for name in sorted(scoped)
            if name not in defined  # names are identifiers (project.load), never "" here
        ]
    return findings
