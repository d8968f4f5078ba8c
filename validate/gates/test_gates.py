"""Throughput gates: one test per gate in the policy, measured with the sweep engine.

Each gate skips with its reason off its arch or while it has no threshold; otherwise it
records a ``gate`` run to the store ($TETHER_STORE, default ROOT/results) and fails below
the threshold. ``tether gate`` runs the same logic outside pytest.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tether.bench.gate import measure_gate, skip_reason
from tether_kernels.arch_caps import GATES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gate
@pytest.mark.parametrize("gate", [pytest.param(g, id=g.id) for g in GATES])
def test_gate(gate) -> None:
    from tether.bench.sweep import Target

    target = Target.detect()
    why = skip_reason(gate, target.arch)
    if why is not None:
        pytest.skip(why)
    store = Path(os.environ.get("TETHER_STORE", ROOT / "results"))
    outcome = measure_gate(gate, store=store, root=ROOT, target=target)
    assert outcome.status == "passed", outcome.line()
