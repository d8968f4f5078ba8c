"""Gate logic on the CPU with fixture gates: skip reasons, a pass, a fail, the run written."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from tether.bench.engine import TimingPolicy
from tether.bench.gate import NO_EVIDENCE, measure_gate, run_gates, skip_reason
from tether.bench.sweep import Target
from tether.errors import UsageError
from tether.kernels.policy import Gate
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

    out, err = io.StringIO(), io.StringIO()
    code = main(["--root", str(ROOT), "--store", str(tmp_path), "gate"], out, err)
    assert code == 0, err.getvalue()
    assert "skipped" in out.getvalue()
