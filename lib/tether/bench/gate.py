"""Throughput gates: measure a gate's shape with the timing engine, record a ``gate`` run.

The thresholds live in the policy (``tether_kernels.arch_caps.GATES``) with the before/after
runs they were set from; this module only measures and judges. The pytest gates
(``validate/gates/``) and ``tether gate`` both call ``measure_gate`` so they cannot disagree.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef, Target, run_sweep
from tether.errors import UsageError

GATE_TIMING = TimingPolicy()  # the engine's defaults: the same policy the sweeps use
NO_EVIDENCE = "no evidence yet: set from a before/after pair of runs"


@dataclass
class GateOutcome:
    """What one gate did: passed, failed or skipped (with the reason), and the run it wrote."""

    gate_id: str
    status: str  # passed | failed | skipped | rejected
    reason: str
    measured_tflops: float | None = None
    threshold_tflops: float | None = None
    run_id: str | None = None

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "rejected")

    def line(self) -> str:
        if self.measured_tflops is None:
            return f"gate {self.gate_id}: {self.status}: {self.reason}"
        return (
            f"gate {self.gate_id}: {self.status}: measured {self.measured_tflops:.2f} against "
            f"threshold {self.threshold_tflops} TFLOP/s (run {self.run_id})"
        )


def skip_reason(gate: Any, arch: str) -> str | None:
    """Why ``gate`` cannot be judged on ``arch`` (None when it can)."""
    if gate.arch != arch:
        return f"gate {gate.id} runs on {gate.arch}; this host is {arch}"
    if gate.threshold_tflops is None:
        return NO_EVIDENCE
    return None


def shape_text(shape: dict[str, Any]) -> str:
    """One safe line naming the gate's shape (no Markdown structure characters)."""
    return " ".join(f"{k}={shape[k]}" for k in sorted(shape))


def gate_record(gate: Any) -> dict[str, Any]:
    """What a gate run records of its policy: the threshold and the runs it was set from."""
    return {
        "id": gate.id,
        "arm": gate.arm,
        "threshold_tflops": gate.threshold_tflops,
        "before_run": gate.before_run,
        "after_run": gate.after_run,
        "policy": f"tether_kernels.arch_caps.GATES {gate.id}",
    }


def gate_sweep(gate: Any, policy: TimingPolicy = GATE_TIMING) -> SweepDef:
    """The gate's single cell as a one-cell grid, with the gated arm as role B."""
    return SweepDef(
        name=gate.id,
        axes={k: (v,) for k, v in gate.shape.items()},
        fixed={},
        arms={"B": gate.arm},
        entry_points=("single_prefill", "batch_prefill"),
        timing=policy,
        needs_gpu=gate.arch != "cpu",
        description=f"throughput gate {gate.id}",
    )


def measure_gate(
    gate: Any,
    *,
    store: Path,
    root: Path,
    target: Target | None = None,
    holding: Any = None,
    policy: TimingPolicy = GATE_TIMING,
    err: TextIO | None = None,
) -> GateOutcome:
    """Measure ``gate`` on this host, write its ``gate`` run, and judge it."""
    target = target or Target.detect()
    why = skip_reason(gate, target.arch)
    if why is not None:
        return GateOutcome(gate.id, "skipped", why, threshold_tflops=gate.threshold_tflops)
    threshold = float(gate.threshold_tflops)

    def results(cells: list[Any]) -> dict[str, Any]:
        (cell,) = cells
        measured = cell.flops / statistics.median(cell.samples["B"]) / 1e12
        return {
            "threshold_tflops": threshold,
            "measured_tflops": measured,
            "passed": measured >= threshold,
            "shape": shape_text(dict(gate.shape)),
            "policy": f"tether_kernels.arch_caps.GATES {gate.id}",
        }

    run = run_sweep(
        gate_sweep(gate, policy), store=store, root=root, target=target, holding=holding,
        err=err, kind="gate", results=results, config_extra={"gate": gate_record(gate)},
    )  # fmt: skip
    if run.status != "ok":
        return GateOutcome(gate.id, "rejected", str(run.reason), None, threshold, run.id)
    measured = float(run.results["measured_tflops"])
    status = "passed" if run.results["passed"] else "failed"
    reason = "at or above threshold" if status == "passed" else "below threshold"
    return GateOutcome(gate.id, status, reason, measured, threshold, run.id)


def run_gates(
    store: Path,
    root: Path,
    *,
    gate_id: str | None = None,
    gates: tuple[Any, ...] | None = None,
    target: Target | None = None,
) -> list[GateOutcome]:
    """Measure every gate (or only ``gate_id``) that applies to this host."""
    if gates is None:
        from tether_kernels.arch_caps import GATES

        gates = GATES
    chosen = [g for g in gates if gate_id is None or g.id == gate_id]
    if gate_id is not None and not chosen:
        known = ", ".join(g.id for g in gates) or "none"
        raise UsageError(f"tether gate --id {gate_id}: no such gate (known: {known})")
    target = target or Target.detect()
    return [measure_gate(g, store=store, root=root, target=target) for g in chosen]
