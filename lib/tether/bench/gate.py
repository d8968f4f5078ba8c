"""Throughput gates: measure a gate's call with the timing engine, record a ``gate`` run.

The thresholds live in the project's policy file (``GATES``) with the before/after runs they
were set from; this module only measures. The verdict is never stored as written: the check,
the docs and the pytest gates recompute it from the run's samples (``tether.stats.gate_stat``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import Bench
from tether.errors import NotRunHereError, UsageError
from tether.registry import Sweep
from tether.render.env import rate as fmt
from tether.stats import gate_stat
from tether.store.results import GateResults

GATE_TIMING = TimingPolicy()  # the engine's defaults: the same policy the sweeps use
NO_EVIDENCE = "no evidence yet: set from a guarded before/after pair of runs"


@dataclass
class GateOutcome:
    """What one gate did: passed, failed or rejected (with the reason), and the run it wrote."""

    gate_id: str
    status: str  # passed | failed | rejected
    reason: str
    rate: float | None = None  # work per second, recomputed from the samples
    band: tuple[float, float] | None = None  # the rate's replicate band
    threshold: float | None = None
    unit: str = "FLOP"
    run_id: str | None = None

    @property
    def failed(self) -> bool:
        return self.status in ("failed", "rejected")

    def line(self) -> str:
        if self.rate is None or self.threshold is None:
            return f"gate {self.gate_id}: {self.status}: {self.reason}"

        band = (
            f" (band {fmt(self.band[0], self.unit)} to {fmt(self.band[1], self.unit)})"
            if self.band
            else ""
        )
        return (
            f"gate {self.gate_id}: {self.status}: measured {fmt(self.rate, self.unit)}{band} "
            f"against threshold {fmt(self.threshold, self.unit)} (run {self.run_id})"
        )


def call_text(call: dict[str, Any]) -> str:
    """One safe line naming the gate's call (no Markdown structure characters)."""
    return " ".join(f"{k}={call[k]}" for k in sorted(call))


def gate_sweep(gate: Any, timing: TimingPolicy = GATE_TIMING) -> Sweep:
    """The gate's single call as a one-cell grid, with the gated arm as role B."""
    return Sweep(
        name=gate.id,
        case=gate.case,
        axes={k: (v,) for k, v in gate.call.items()},
        fixed={},
        arms={"B": gate.arm},
        unit=gate.unit,
        timing=timing,
        needs_gpu=gate.arch != "cpu",
        kind="gate",
        description=f"throughput gate {gate.id}",
    )


def measure_gate(bench: Bench, gate: Any, policy_file: str) -> GateOutcome:
    """Measure ``gate`` on this host, write its ``gate`` run, and judge it from its samples."""

    if gate.arch != bench.target.arch:
        raise NotRunHereError(
            f"gate {gate.id} runs on {gate.arch}; this host is {bench.target.arch}"
        )
    if gate.threshold is None:
        raise UsageError(f"gate {gate.id}: {NO_EVIDENCE}")
    results = GateResults(
        threshold=float(gate.threshold),
        gate=gate.id,
        shape=call_text(dict(gate.call)),
        policy=f"{policy_file} GATES {gate.id}",
    ).to_json()
    record = {
        "id": gate.id,
        "arm": gate.arm,
        "threshold": gate.threshold,
        "unit": gate.unit,
        "before_run": gate.before_run,
        "after_run": gate.after_run,
    }
    run = bench.sweep(gate_sweep(gate), kind="gate", results=results, config_extra={"gate": record})
    if run.status != "ok":
        return GateOutcome(
            gate.id, "rejected", str(run.reason), threshold=gate.threshold, run_id=run.id
        )
    stat = gate_stat(run, float(gate.threshold))
    status = "passed" if stat.passed else "failed"
    reason = stat.verdict
    return GateOutcome(
        gate.id, status, reason, stat.rate, stat.band, gate.threshold, gate.unit, run.id
    )


def select_gates(gates: tuple[Any, ...], arch: str, gate_id: str | None) -> list[Any]:
    """The gates to measure on ``arch`` (or only ``gate_id``); refuses early and fast when none
    applies here (NotRunHereError: exit 77) or the named one is unknown (UsageError)."""
    if gate_id is not None:
        chosen = [g for g in gates if g.id == gate_id]
        if not chosen:
            known = ", ".join(g.id for g in gates) or "none"
            raise UsageError(f"tether gate --id {gate_id}: no such gate (known: {known})")
    else:
        chosen = list(gates)
    here = [g for g in chosen if g.arch == arch]
    if not here:
        where = ", ".join(sorted({g.arch for g in chosen})) or "no arch"
        raise NotRunHereError(f"no gate runs on {arch} (gates run on: {where})")
    unset = [g.id for g in here if g.threshold is None]
    if unset and gate_id is not None:
        raise UsageError(f"gate {gate_id}: {NO_EVIDENCE}")
    return [g for g in here if g.threshold is not None]
