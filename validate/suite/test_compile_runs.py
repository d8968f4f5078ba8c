"""Compile runs in the store, the check, the docs and the CLI (FIXTURE runs, no compiler).

The runs here are FIXTURES built in memory or in ``tmp_path`` with made-up compiler figures;
the real compile runs are made by ``tether compile`` and judged in validate/gates.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest
from tether.check import check_compile_evidence
from tether.cli import main
from tether.errors import RunFileError
from tether.freshness import CompileFreshness
from tether.policy import CompileGate
from tether.render.compiled import compile_doc, config_evidence
from tether.store import Cell, GuardRecord, load_store, new_run, write_run

REPO = Path(__file__).resolve().parents[2]
STALE = "sha256:" + "0" * 64


def fixture_cell(
    dtype: str = "f16", spills: int = 0, matrix: int = 16, lds: int = 16384, margin: int = 8
) -> Cell:
    return Cell(
        key={"head_dim": 64, "dtype": dtype, "causal": True, "margin": margin, "lse": False,
             "heads": 1, "config": "m64 n32 w4 s1 wpe2"},
        work=0.0,
        samples={},
        kernels={"compiled": ("_attn_fwd",)},
        extra={"spills": spills, "lds_bytes": lds, "lds_limit_bytes": 65536, "vgprs_total": 128,
               "loops": [{"blocks": 1, "matrix": matrix, "fma": 0}] * 2,
               "occupancy": {"waves_per_simd": 4, "limited_by": "registers", "by": {}}},
    )  # fmt: skip


def fixture_run(cells: list[Cell], arch: str = "gfx942", **results: object):
    summary = {
        "compiler": "triton", "compiler_version": "0.0-fixture", "target": f"hip:{arch}:64",
        "variants": len(cells), "spills_total": sum(c.extra["spills"] for c in cells),
        "variants_spilling": sum(1 for c in cells if c.extra["spills"]), "variants_over_lds": 0,
        "variants_loop_without_matrix": 0, "occupancy_min": 4, "occupancy_max": 4,
        "occupancy_unit": "waves per SIMD", "seconds": 1.0, **results,
    }  # fmt: skip
    return new_run(
        "compile",
        "attn-fwd",
        arch=arch,
        device="FIXTURE: no device",
        config={},
        cells=cells,
        results=summary,
        guard=GuardRecord(mode="unguarded", reason="FIXTURE: compiled without a GPU"),
        root=REPO,
        host="fixture-host",
    )


def test_a_compile_run_round_trips(tmp_path: Path) -> None:
    run = fixture_run([fixture_cell(), fixture_cell("bf16")])
    write_run(run, tmp_path)
    (loaded,) = load_store(tmp_path)
    assert loaded.kind == "compile" and loaded.cells[1].key["dtype"] == "bf16"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"work": 1.0}, "cells[0].work", id="work"),
        pytest.param({"samples": {"B": (1.0,)}}, "cells[0].samples", id="samples"),
        pytest.param({"extra": {"spills": 0}}, "cells[0].extra.lds_bytes", id="extra"),
    ],
)
def test_compile_cells_carry_no_timing_and_the_gate_figures(change: dict, field: str) -> None:
    run = fixture_run([fixture_cell()])
    bad = dataclasses.replace(run, cells=(dataclasses.replace(run.cells[0], **change),))
    with pytest.raises(RunFileError, match=field.replace("[", r"\[").replace("]", r"\]")):
        write_run(bad, Path("/nonexistent-store-never-written"))


def test_compile_results_are_required() -> None:
    run = fixture_run([fixture_cell()])
    bad = dataclasses.replace(run, results={k: v for k, v in run.results.items() if k != "target"})
    with pytest.raises(RunFileError, match=r"results\.target"):
        write_run(bad, Path("/nonexistent-store-never-written"))


def test_check_flags_stale_compile_evidence() -> None:
    fresh = fixture_run([fixture_cell()])
    assert check_compile_evidence(REPO, [fresh]) == []
    stale = dataclasses.replace(
        fresh, provenance=dataclasses.replace(fresh.provenance, kernels_fingerprint=STALE)
    )
    (finding,) = check_compile_evidence(REPO, [stale])
    assert "stale compile evidence" in finding.what and "--arch gfx942" in finding.what
    # Only the newest run of an arch counts: a fresh run after a stale one clears it.
    newer = dataclasses.replace(
        fresh, provenance=dataclasses.replace(fresh.provenance, started="2099-01-01T00:00:00Z")
    )
    assert check_compile_evidence(REPO, [stale, newer]) == []


def test_gate_judges_spills_lds_and_matrix_loops() -> None:
    gate = CompileGate("g", "gfx1151", "attn-fwd", matrix_dtypes=("f16", "bf16"))
    cells = [
        fixture_cell(),
        fixture_cell(spills=3),
        fixture_cell(lds=70000),
        fixture_cell(matrix=0),
        fixture_cell("f32", matrix=0),  # f32 is not a matrix dtype of this gate: passes
    ]
    failing = gate.judge(cells)
    reasons = [why for _key, why in failing]
    assert len(failing) == 3
    assert "spilled registers: 3" in reasons[0][0]
    assert "LDS 70000 B over the 65536 B" in reasons[1][0]
    assert "without a matrix instruction" in reasons[2][0]


def test_compile_doc_counts_from_the_cells() -> None:
    gate = CompileGate("g", "gfx942", "attn-fwd", matrix_dtypes=("f16",))
    run = fixture_run(
        [fixture_cell(), fixture_cell("f32", matrix=0), fixture_cell(spills=2, margin=0)]
    )
    doc = compile_doc([run], "gfx942", "attn-fwd", CompileFreshness(REPO), gate)
    assert doc is not None and not doc.stale
    assert (doc.gate_failing, doc.bare_required, doc.bare_exempt) == (1, 0, 1)
    assert doc.exempt_dtypes == ("f32",)
    (f16, f32) = config_evidence(run.cells)
    assert (f16.dtype, f16.variants, f16.spills) == ("f16", 2, 2)
    assert (f32.dtype, f32.loops_without_matrix) == ("f32", 1)


def test_documents_cite_each_compilers_current_run() -> None:
    from tether.render.compiled import also_compiled
    from tether.store import kernels_fingerprint

    current = kernels_fingerprint(REPO)
    fresh = CompileFreshness(REPO)
    gate = CompileGate("g", "gfx942", "attn-fwd", matrix_dtypes=("f16",))

    def at(started: str, version: str, spills: int = 0, fingerprint: str = current):
        run = fixture_run([fixture_cell(spills=spills)], compiler_version=version)
        prov = dataclasses.replace(run.provenance, started=started, kernels_fingerprint=fingerprint)
        return dataclasses.replace(run, provenance=prov)

    newest = at("2099-01-03T00:00:00Z", "3.9.0")
    other_old = at("2099-01-01T00:00:00Z", "3.6.0")
    other = at("2099-01-02T00:00:00Z", "3.6.0", spills=2)
    other_stale = at("2098-12-31T00:00:00Z", "3.5.0", fingerprint=STALE)
    runs = [other_old, newest, other, other_stale]
    doc = compile_doc(runs, "gfx942", "attn-fwd", fresh, gate)
    assert doc is not None and doc.compiler == "triton 3.9.0" and doc.gate_failing == 0
    # The other compiler's newest run of these sources, not its older one; a run of older
    # sources (3.5.0 here) is no evidence about this kernel and is not cited.
    (also,) = also_compiled(runs, doc, fresh, gate)
    assert (also.compiler, also.run_id, also.gate_failing) == ("triton 3.6.0", other.id, 1)


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


def test_compile_verb_rejects_an_arch_without_a_target(tmp_path: Path) -> None:
    code, _, err = _cli("--root", str(REPO), "--store", str(tmp_path), "compile", "--arch", "cpu")
    assert code == 2 and "no compile target for cpu" in err


@pytest.mark.usefixtures("repo_without_signing")  # its FIXTURE run is unsigned
def test_compile_verb_compiles_nothing_when_the_store_is_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether_kernels_plugin import compile as engine

    key = engine.compile_key(REPO)
    version = key["compiler"].split(" ", 1)[1]
    run = fixture_run([fixture_cell()], compiler_version=version)
    write_run(run, tmp_path)

    def no_compile(*_a: object, **_k: object) -> None:
        raise AssertionError("compiled although the store holds a fresh run")

    monkeypatch.setattr(engine, "compile_arch", no_compile)
    code, out, _ = _cli(
        "--root", str(REPO), "--store", str(tmp_path), "compile", "--arch", "gfx942"
    )
    assert code == 0 and f"up to date, {run.id}" in out
    assert "gate compile-gfx942: passes" in out


def test_verify_rocm_without_an_amd_gpu_records_not_measured(tmp_path: Path) -> None:
    from tether.guard.idle import detect_vendor

    if detect_vendor() == "rocm":
        pytest.skip("this host has an AMD GPU: verify --vendor rocm would run the suite")
    committed = tmp_path / "committed"
    code, out, err = _cli(
        "--root", str(REPO), "--store", str(committed), "verify", "--vendor", "rocm"
    )
    assert code == 77, err
    assert "[verify-rocm] NOT MEASURED" in out and "verify --vendor rocm: this host has" in err
    (run,) = load_store(committed)  # --store was given: the refusal goes there
    assert run.kind == "verify" and run.status == "not_measured" and run.name == "verify-rocm"
    assert "this host has" in (run.reason or "")
    assert json.loads(Path(run.path).read_text())["config"]["vendor_requested"] == "rocm"


def test_verify_refusal_stays_out_of_the_committed_store(tmp_path: Path) -> None:
    from tether.guard.idle import detect_vendor

    if detect_vendor() == "rocm":
        pytest.skip("this host has an AMD GPU: verify --vendor rocm would run the suite")
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '# FIXTURE project\n[tool.tether]\nstore = "results"\nscratch = "scratch"\n',
        encoding="utf-8",
    )
    code, out, _ = _cli("--root", str(project), "verify", "--vendor", "rocm")
    assert code == 77
    assert not (project / "results").exists()
    (run,) = load_store(project / "scratch" / "results")
    assert run.status == "not_measured" and str(project / "scratch" / "results") in out
