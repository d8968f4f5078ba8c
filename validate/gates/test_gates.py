"""Throughput gates: one test per gate in the policy, measured with the sweep engine.

Each gate skips with its reason off its arch or while it has no threshold; otherwise it holds
the host (nested under `tether verify`'s hold when run there, which the run records), records
a ``gate`` run to the store ($TETHER_STORE, default the project's) and fails below the
threshold, judged from the run's samples. ``tether gate`` runs the same logic outside pytest.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tether import project, registry
from tether.bench.gate import NO_EVIDENCE, measure_gate
from tether.bench.sweep import Bench, Target
from tether.render.policy_file import EMPTY, policy_module_data

ROOT = Path(__file__).resolve().parents[2]
# The project's gates, read from its policy files as tether check reads them.
GATES = (policy_module_data(ROOT) or EMPTY).gates


@pytest.mark.gate
@pytest.mark.parametrize("gate", [pytest.param(g, id=g.id) for g in GATES])
def test_gate(gate) -> None:
    from tether.guard.api import acquire

    target = Target.detect()
    if gate.arch != target.arch:
        pytest.skip(f"gate {gate.id} runs on {gate.arch}; this host is {target.arch}")
    if gate.threshold is None:
        pytest.skip(f"gate {gate.id}: {NO_EVIDENCE}")
    proj = project.get(ROOT)
    store = Path(os.environ.get("TETHER_STORE", proj.store))
    reg = registry.for_project(proj)
    with acquire(target="auto", wait_s=60.0, purpose=f"gate {gate.id}") as holding:
        bench = Bench(ROOT, store, reg, target, holding=holding)
        outcome = measure_gate(bench, gate, proj.rel(proj.policy))
    assert outcome.status == "passed", outcome.line()
