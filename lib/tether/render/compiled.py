"""Compile evidence in the documents: what the newest compile run of each arch says.

A compile run (kind ``compile``) records what the compiler made of every kernel variant with
no GPU; the documents cite, per arch and kernel, the newest ``ok`` one. Everything here is
counted from its cells: variants, spills, LDS, main loops without matrix instructions, the
occupancy range, and per launch config the same figures, plus the project's compile gates
(``COMPILE_GATES`` beside ``GATES`` in the policy file) judged on it. A run that no longer
describes the checkout (a kernel file it compiles from changed: tether.freshness) is
*stale*: rendered as such, and ``tether check`` fails.

Compilers differ (a config clean under one Triton may spill under another), so beside the
newest run the documents also cite the newest run of each other compiler version that still
describes the checkout (``compiled_also``); stale runs of another compiler are no evidence
about this kernel and are not cited.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.freshness import CompileFreshness, fresh_compile_run
from tether.policy import CompileGate
from tether.render.policy_file import EMPTY, policy_module_data
from tether.store.cite import latest_ok
from tether.store.results import CompileResults


@dataclass(frozen=True)
class ConfigEvidence:
    """The variants of one launch config (head_dim, dtype, config label) in a compile run."""

    head_dim: object
    dtype: object
    config: str
    variants: int
    regs_max: int  # VGPRs (+ AGPRs) per lane on AMD, registers per thread on sm90
    spills: int
    lds_max: int
    occupancy_min: int
    occupancy_max: int
    loops_without_matrix: int


@dataclass(frozen=True)
class CompileDoc:
    """The compile evidence of one kernel on one arch."""

    arch: str
    kernel: str
    run_id: str
    date: str
    git_sha: str
    git_dirty: bool
    compiler: str  # "triton 3.9.0"
    target: str
    results: dict[str, Any]
    stale: bool  # the kernel sources changed since the run
    reg_unit: str
    configs: tuple[ConfigEvidence, ...]
    gate: CompileGate | None
    gate_failing: int  # variants that fail the gate (0 when there is no gate)
    # Variants with a main loop without matrix instructions, in the dtypes the gate requires
    # matrix instructions for, and in the others (dots on FMAs by design), with those dtypes.
    bare_required: int = 0
    bare_exempt: int = 0
    exempt_dtypes: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        r = self.results
        return not (
            r["spills_total"] or r["variants_over_lds"] or r["variants_loop_without_matrix"]
        )


def compile_gates(root: Path) -> tuple[CompileGate, ...]:
    """COMPILE_GATES of the project's policy file (() when it declares none), read by
    ``tether.render.policy_file`` exactly as POLICY and GATES are."""

    return tuple((policy_module_data(root) or EMPTY).compile_gates)


def _occ(extra: dict[str, Any]) -> int:
    occ = extra["occupancy"]
    return int(occ.get("waves_per_simd", occ.get("blocks_per_sm", 0)))


def _regs(extra: dict[str, Any]) -> int:
    return int(extra.get("vgprs_total", extra.get("n_regs", 0)))


def _bare_loops(extra: dict[str, Any]) -> bool:
    loops = extra["loops"]
    return not loops or any(not loop["matrix"] for loop in loops)


def config_evidence(cells: Iterable[Any]) -> tuple[ConfigEvidence, ...]:
    """Per (head_dim, dtype, config): how its variants compiled."""
    groups: dict[tuple[Any, Any, str], list[dict[str, Any]]] = {}
    for cell in cells:
        key = cell.key
        gid = (key.get("head_dim"), key.get("dtype"), str(key.get("config")))
        groups.setdefault(gid, []).append(cell.extra)
    out = []
    for (d, dtype, config), extras in groups.items():
        out.append(
            ConfigEvidence(
                head_dim=d,
                dtype=dtype,
                config=config,
                variants=len(extras),
                regs_max=max(_regs(e) for e in extras),
                spills=sum(int(e["spills"]) for e in extras),
                lds_max=max(int(e["lds_bytes"]) for e in extras),
                occupancy_min=min(_occ(e) for e in extras),
                occupancy_max=max(_occ(e) for e in extras),
                loops_without_matrix=sum(1 for e in extras if _bare_loops(e)),
            )
        )
    order = {"f16": 0, "bf16": 1, "f32": 2}
    return tuple(sorted(out, key=lambda c: (c.head_dim, order.get(str(c.dtype), 9), c.config)))


def compile_doc(
    runs: Sequence[Any], arch: str, kernel: str, fresh: CompileFreshness, gate: CompileGate | None
) -> CompileDoc | None:
    """The newest ok compile run of ``kernel`` on ``arch``, as the documents cite it."""

    run = latest_ok(runs, "compile", kernel, arch)
    if run is None:
        return None
    return _doc(run, arch, kernel, fresh, gate)


def _compiler(run: Any) -> str:
    return CompileResults.from_json(run.results, run.path).made_by


def also_compiled(
    runs: Sequence[Any], primary: CompileDoc, fresh: CompileFreshness, gate: CompileGate | None
) -> tuple[CompileDoc, ...]:
    """The newest ok compile run of each compiler other than ``primary``'s, of the same kernel
    and arch, that still describes the checkout, by compiler."""
    compilers = {
        _compiler(run)
        for run in runs
        if run.kind == "compile" and run.status == "ok" and run.name == primary.kernel
    } - {primary.compiler}
    found = (fresh_compile_run(fresh, runs, primary.kernel, primary.arch, c) for c in compilers)
    return tuple(
        _doc(run, primary.arch, primary.kernel, fresh, gate)
        for run in sorted((r for r in found if r is not None), key=_compiler)
    )


def _doc(
    run: Any, arch: str, kernel: str, fresh: CompileFreshness, gate: CompileGate | None
) -> CompileDoc:
    results = dict(run.results)
    cells = run.cells
    started = run.started
    amd = results.get("occupancy_unit") == "waves per SIMD"
    required = gate.matrix_dtypes if gate is not None else None
    bare = [str(c.key.get("dtype")) for c in cells if _bare_loops(c.extra)]
    exempt = [d for d in bare if required is not None and d not in required]
    return CompileDoc(
        arch=arch,
        kernel=kernel,
        run_id=run.id,
        date=started[:10],
        git_sha=run.provenance.git_sha[:12],
        git_dirty=bool(run.provenance.git_dirty),
        compiler=_compiler(run),
        target=str(results["target"]),
        results=results,
        stale=fresh.stale(run),
        reg_unit="VGPRs" if amd else "registers per thread",
        configs=config_evidence(cells),
        gate=gate,
        gate_failing=len(gate.judge(cells)) if gate is not None else 0,
        bare_required=len(bare) - len(exempt),
        bare_exempt=len(exempt),
        exempt_dtypes=tuple(sorted(set(exempt))),
    )


def compile_context(root: Path, runs: Sequence[Any], arches: Iterable[str]) -> dict[str, Any]:
    """``compiled``: arch -> CompileDoc or None for each document arch (the kernel of that
    arch's compile gate, else the newest compile run's); ``compiled_also``: arch -> the other
    compilers' CompileDocs (see ``also_compiled``); ``compile_regions``: region ->
    {"doc", "also", "gate"} for each compile gate that names a region."""

    gates = compile_gates(root)
    current = CompileFreshness(root)
    compiled: dict[str, CompileDoc | None] = {}
    also: dict[str, tuple[CompileDoc, ...]] = {}
    for arch in arches:
        gate = next((g for g in gates if g.arch == arch), None)
        kernel = gate.kernel if gate is not None else _newest_kernel(runs, arch)
        doc = compile_doc(runs, arch, kernel, current, gate) if kernel else None
        compiled[arch] = doc
        also[arch] = also_compiled(runs, doc, current, gate) if doc is not None else ()
    regions: dict[str, dict[str, Any]] = {}
    for gate in gates:
        if gate.region is not None:
            doc = compile_doc(runs, gate.arch, gate.kernel, current, gate)
            others = also_compiled(runs, doc, current, gate) if doc is not None else ()
            regions[gate.region] = {"doc": doc, "also": others, "gate": gate}
    return {"compiled": compiled, "compiled_also": also, "compile_regions": regions}


def _newest_kernel(runs: Sequence[Any], arch: str) -> str | None:
    pool = [r for r in runs if r.kind == "compile" and r.arch == arch and r.status == "ok"]
    best = max(pool, key=lambda r: (r.started, r.id), default=None)
    return best.name if best is not None else None
