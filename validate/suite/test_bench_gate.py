"""Gate logic on the CPU with fixture gates: skip reasons, a pass, a fail, the run written."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from tether.bench.engine import TimingPolicy
from tether.bench.gate import NO_EVIDENCE, measure_gate, run_gates, skip_reason
from tether.bench.sweep import Target
from tether.errors import UsageError
from tether.policy import Gate
from tether.store import load_store

ROOT = Path(__file__).resolve().parents[2]
CPU = Target("cpu", "cpu", "cpu: test fixture")
QUICK = TimingPolicy(min_sample_s=2e-4, min_reps=3, max_reps=3, warmup_calls=1)
SHAPE = {"batch": 1, "qo_len": 32, "kv_len": 32, "hq": 2, "hkv": 2, "head_dim": 16,
         "dtype": "f32", "causal": True}  # fmt: skip


def fixture_gate(threshold: float | None, arch: str = "cpu") -> Gate:
    """A gate that exists only in this test (the real ones live in arch_caps.GATES)."""
    return Gate(id="fixture-gate", region="fixture", arch=arch, arm="sdpa_math",
                shape=SHAPE, threshold_tflops=threshold)  # fmt: skip


def test_skip_reasons_name_the_arch_or_the_missing_evidence() -> None:
    assert "runs on sm90; this host is cpu" in skip_reason(fixture_gate(1.0, "sm90"), "cpu")
    assert skip_reason(fixture_gate(None), "cpu") == NO_EVIDENCE
    assert skip_reason(fixture_gate(1.0), "cpu") is None


def test_a_gate_above_threshold_passes_and_records_a_gate_run(tmp_path: Path) -> None:
    out = measure_gate(fixture_gate(1e-9), store=tmp_path, root=ROOT, target=CPU, policy=QUICK)
    assert out.status == "passed", out.line()
    (run,) = load_store(tmp_path)
    assert run.kind == "gate" and run.id == out.run_id
    assert run.results["passed"] is True
    assert run.results["measured_tflops"] == pytest.approx(out.measured_tflops)
    assert set(run.cells[0].samples) == {"B"}


def test_a_gate_below_threshold_fails_and_still_records(tmp_path: Path) -> None:
    out = measure_gate(fixture_gate(1e9), store=tmp_path, root=ROOT, target=CPU, policy=QUICK)
    assert out.status == "failed" and out.failed
    assert load_store(tmp_path)[0].results["passed"] is False


def test_unknown_gate_id_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such gate"):
        run_gates(tmp_path, ROOT, gate_id="nope", gates=(fixture_gate(1.0),), target=CPU)


def test_gate_command_skips_policy_gates_on_this_host(tmp_path: Path) -> None:
    from tether.cli import main
    from tether.pytest_plugin import current_arch
    from tether_kernels.arch_caps import GATES

    if any(g.arch == current_arch() for g in GATES):
        pytest.skip("this host is a gate's arch: validate/gates/test_gates.py measures it here")

    out, err = io.StringIO(), io.StringIO()
    code = main(["--root", str(ROOT), "--store", str(tmp_path), "gate"], out, err)
    assert code == 0, err.getvalue()
    assert "skipped" in out.getvalue()


def test_a_gate_run_records_its_threshold_and_the_runs_it_was_set_from(tmp_path: Path) -> None:
    gate = Gate(id="fixture-gate", region="fixture", arch="cpu", arm="sdpa_math", shape=SHAPE,
                threshold_tflops=1e-9, before_run="before-id", after_run="after-id")  # fmt: skip
    out = measure_gate(gate, store=tmp_path, root=ROOT, target=CPU, policy=QUICK)
    (run,) = load_store(tmp_path)
    assert run.config["gate"] == {
        "id": "fixture-gate",
        "arm": "sdpa_math",
        "threshold_tflops": 1e-9,
        "before_run": "before-id",
        "after_run": "after-id",
        "policy": "tether_kernels.arch_caps.GATES fixture-gate",
    }
    assert {"threshold_tflops", "measured_tflops", "passed"} <= set(run.results)
    assert out.run_id == run.id


def test_check_reads_a_measurement_from_gate_and_sweep_runs(tmp_path: Path) -> None:
    from tether.bench.sweep import SweepDef, run_sweep
    from tether.stats import measured_tflops

    gate_out = measure_gate(fixture_gate(1e-9), store=tmp_path, root=ROOT, target=CPU,
                            policy=QUICK)  # fmt: skip
    gate_run = next(r for r in load_store(tmp_path) if r.id == gate_out.run_id)
    assert measured_tflops(gate_run, SHAPE) == pytest.approx(gate_out.measured_tflops)
    # A sweep (or probe) run whose grid holds the gate's shape, with the gated arm as B.
    axes = {"kv_len": (16, SHAPE["kv_len"])}
    fixed = {k: v for k, v in SHAPE.items() if k != "kv_len"}
    sweep = SweepDef(name="fixture-sweep", axes=axes, fixed=fixed,
                     arms={"A": "sdpa_math", "B": "sdpa_math"}, timing=QUICK,
                     needs_gpu=False)  # fmt: skip
    run = run_sweep(sweep, store=tmp_path, root=ROOT, target=CPU, write=False)
    value = measured_tflops(run, SHAPE)
    assert value is not None and value > 0
    assert measured_tflops(run, {**SHAPE, "kv_len": 999}) is None
