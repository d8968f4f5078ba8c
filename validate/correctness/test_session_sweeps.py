"""Every sweep an H200 evidence session runs can run there, by the arms' declarations.

A sweep whose role has no arm that serves every cell is rejected whole on the host
(``tether.bench.sweep.resolve_arms``), after the session has paid for the call: a head_dim
axis of 96 on a FlashInfer fa3 sweep (fa3 instantiates 64, 128 and 256 only) was one commit
away from that. This checks the same thing on the CPU, from the declarations (``Serves``, the
arch tables, routing), leaving out only whether an optional peer is importable here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from tether import registry
from tether_kernels.archs import PER_REQUEST
from tether_kernels.arms import get_arm
from tether_kernels.routing import per_request_refusal, reachable_entry_points, route

ROOT = Path(__file__).resolve().parents[2]
SESSION = ROOT / "ci" / "h200-session.sh"
ARCH = "sm90"
# Beside the session's sweep list: the tuning grid its TUNE=1 step runs.
EXTRA = ("tune-gluon-sm90",)


def session_sweeps() -> list[str]:
    """The sweeps ``ci/h200-session.sh`` runs by default (its API_SWEEPS list)."""
    text = SESSION.read_text()
    found = re.search(r'API_SWEEPS=\$\{SWEEPS:-"([^"]*)"\}', text)
    assert found, f"{SESSION}: no API_SWEEPS default list"
    return found.group(1).split() + list(EXTRA)


def role_refusal(reg: Any, arm_name: str, case: Any, arch: str) -> str | None:
    """Why the arm ``arm_name`` (an entry point: the arm it routes the cell to) does not serve
    the cell on ``arch`` by its declaration; whether a peer is importable here is left out."""
    adapter = reg.get_arm(arm_name)
    declared = getattr(adapter, "declared_refusal", None)
    if declared is not None:  # a bench arm of its own case (the paged ones) declares its own
        return declared(case, arch)
    if getattr(adapter, "kind", None) == "entry":
        entry = adapter.name
        if entry not in reachable_entry_points(case.shape):
            return f"{entry} cannot make that call"
        try:
            arm_name = route(entry, case.shape, arch)
        except Exception as exc:  # no arm serves it: the message names each one's constraint
            return str(exc)
    if arm_name == PER_REQUEST:
        return per_request_refusal(case.shape, arch)
    return get_arm(arm_name).declared_refusal(case.shape, arch)


@pytest.mark.parametrize("sweep_name", session_sweeps())
def test_every_role_has_an_arm_that_serves_every_cell(sweep_name: str) -> None:
    reg = registry.load(["tether_kernels_plugin"])
    sweep = reg.get_sweep(sweep_name)
    grid = sweep.keys()  # the cells' keys (a Sweep method, not a mapping's)
    cases = [reg.make_case(sweep.case, sweep.fields(k)) for k in grid]
    for role, choice in sweep.arms.items():
        candidates = (choice,) if isinstance(choice, str) else tuple(choice)
        reasons = {}
        for name in candidates:
            why = next(
                (r for c in cases if (r := role_refusal(reg, name, c, ARCH)) is not None), None
            )
            if why is None:
                break
            reasons[name] = why
        else:
            pytest.fail(f"sweep {sweep_name}, role {role}: no arm serves every cell: {reasons}")


def test_the_session_list_is_read() -> None:
    names = session_sweeps()
    assert "api-breadth-fa3" in names and "policy-wide-sm90" in names
    assert "api-ragged-fa3" in names and "policy-ragged-sm90" in names
