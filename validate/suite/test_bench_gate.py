"""Gate logic on the CPU with FIXTURE gates: selection and refusals, a pass, a fail, the run
written, and the verdict recomputed from the run's samples (never stored as written)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from tether import registry
from tether.bench.gate import NO_EVIDENCE, measure_gate, select_gates
from tether.bench.sweep import Bench, Target
from tether.errors import NotRunHereError, UsageError
from tether.policy import Gate
from tether.stats import gate_stat, rate_of
from tether.store import load_store

ROOT = Path(__file__).resolve().parents[2]
CPU = Target("cpu", "cpu", "cpu: test fixture")
QUICK = {"min_sample_s": 2e-4, "min_reps": 3, "max_reps": 3, "warmup_calls": 1}
CALL = {"batch": 1, "qo_len": 32, "kv_len": 32, "hq": 2, "hkv": 2, "head_dim": 16,
        "dtype": "f32", "causal": True}  # fmt: skip


def fixture_gate(threshold: float | None, arch: str = "cpu", **kw: object) -> Gate:
    """A gate that exists only in this test (the real ones live in the policy file)."""
    return Gate(id="fixture-gate", region="fixture", arch=arch, arm="sdpa_math",
                case="attention", call=CALL, threshold=threshold, **kw)  # type: ignore[arg-type]  # fmt: skip


def _bench(store: Path) -> Bench:
    reg = registry.load(["tether_kernels_plugin"])
    return Bench(ROOT, store, reg, CPU, unguarded_reason="FIXTURE: unit test",
                 policy_overrides=QUICK, replicates=2)  # fmt: skip


def test_select_refuses_early_off_arch_and_without_evidence() -> None:
    with pytest.raises(NotRunHereError, match="no gate runs on cpu"):
        select_gates((fixture_gate(1.0, "sm90"),), "cpu", None)
    assert select_gates((fixture_gate(None),), "cpu", None) == []  # unset gates do not run
    with pytest.raises(UsageError, match=NO_EVIDENCE):
        select_gates((fixture_gate(None),), "cpu", "fixture-gate")
    with pytest.raises(UsageError, match="no such gate"):
        select_gates((fixture_gate(1.0),), "cpu", "nope")


def test_a_gate_above_threshold_passes_and_records_a_gate_run(tmp_path: Path) -> None:
    out = measure_gate(_bench(tmp_path), fixture_gate(1.0), "policy.py")
    assert out.status == "passed", out.line()
    (run,) = load_store(tmp_path)
    assert run.kind == "gate" and run.id == out.run_id
    assert "passed" not in run.results and "measured" not in run.results
    stat = gate_stat(run, 1.0)  # recomputed from the samples
    assert stat.passed and stat.rate == pytest.approx(out.rate)
    assert set(run.cells[0].samples) == {"B"} and len(run.cells[0].blocks) == 2


def test_a_gate_below_threshold_fails_and_still_records(tmp_path: Path) -> None:
    out = measure_gate(_bench(tmp_path), fixture_gate(1e18), "policy.py")
    assert out.status == "failed" and out.failed
    assert not gate_stat(load_store(tmp_path)[0], 1e18).passed


def test_a_gate_off_its_arch_is_not_run_here(tmp_path: Path) -> None:
    with pytest.raises(NotRunHereError, match="runs on sm90; this host is cpu"):
        measure_gate(_bench(tmp_path), fixture_gate(1.0, "sm90"), "policy.py")
    assert load_store(tmp_path) == []


def test_gate_command_on_a_host_without_its_gates_exits_77(tmp_path: Path) -> None:
    from tether.cli import main
    from tether.pytest_plugin import current_arch
    from tether.render.policy_file import EMPTY, policy_module_data

    GATES = (policy_module_data(ROOT) or EMPTY).gates
    if any(g.arch == current_arch() for g in GATES):
        pytest.skip("this host is a gate's arch: validate/gates/test_gates.py measures it here")
    out, err = io.StringIO(), io.StringIO()
    code = main(["--root", str(ROOT), "--store", str(tmp_path), "gate"], out, err)
    assert code == 77, err.getvalue()
    assert "no gate runs on" in err.getvalue()
    assert not (tmp_path / "cpu").exists()  # nothing measured, nothing written


def test_a_gate_run_records_its_threshold_and_the_runs_it_was_set_from(tmp_path: Path) -> None:
    gate = fixture_gate(1.0, before_run="before-id", after_run="after-id")
    out = measure_gate(_bench(tmp_path), gate, "kernels/x.py")
    (run,) = load_store(tmp_path)
    assert run.config["gate"] == {
        "id": "fixture-gate",
        "arm": "sdpa_math",
        "threshold": 1.0,
        "unit": "FLOP",
        "before_run": "before-id",
        "after_run": "after-id",
    }
    assert run.results["policy"] == "kernels/x.py GATES fixture-gate"
    assert out.run_id == run.id
    assert rate_of(run, CALL) is not None
