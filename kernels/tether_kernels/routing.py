"""Routing: which arm an entry point takes for a shape on an arch. Pure, no GPU, no torch.

The candidates, in order: the arm the arch's policy picks for the entry point, then the
arch's ``ROUTE_ORDER`` (archs). The first candidate whose declaration (``serves`` in
tether_kernels.arms) covers the call takes it; the declarations are what each arm computes
with the contract in kernels/API.md, so the arm a call gets always meets it. When none
does, ``route`` raises UsageError naming, for each candidate, the constraint it fails.
Nothing here runs an arm: the decision is the same with or without a GPU, and an entry
point never falls back at run time.

Each entry point follows the arch's policy thresholds for it (policy.POLICY), read in
order: the first threshold whose scope holds for the shape (e.g. chunked prefill only) and
whose ``takes`` conditions hold sends the call to its arm; when none does, the call takes the
``otherwise`` arm of the first threshold in scope. A threshold whose ``takes`` is None is not
set and never sends a call to its arm. A call no threshold speaks for takes the route order.
"""

from __future__ import annotations

from tether.errors import UsageError

from tether_kernels.archs import ROUTE_ORDER, check_arch
from tether_kernels.arms import get_arm
from tether_kernels.policy import thresholds_for
from tether_kernels.shapes import Shape

ENTRY_POINTS: tuple[str, ...] = ("single_prefill", "batch_prefill")


def reachable_entry_points(shape: Shape) -> tuple[str, ...]:
    """Entry points that can produce ``shape``: single_prefill only serves batch 1."""
    if shape.batch == 1:
        return ENTRY_POINTS
    return ("batch_prefill",)


def policy_choice(entry: str, shape: Shape, arch: str) -> str | None:
    """The arm the arch's policy thresholds for ``entry`` name for this call, or None."""
    applying = [th for th in thresholds_for(arch, entry) if th.applies(shape.key())]
    for th in applying:
        if th.takes_arm(shape.key()):
            return th.arm
    return applying[0].otherwise if applying else None


def candidates(entry: str, shape: Shape, arch: str) -> tuple[str, ...]:
    """The arms ``route`` tries for this call, in order, without repeats."""
    first = policy_choice(entry, shape, arch)
    order = ((first,) if first else ()) + ROUTE_ORDER[arch]
    return tuple(dict.fromkeys(order))


def route(entry: str, shape: Shape, arch: str, *, return_lse: bool = False) -> str:
    """The arm ``entry`` takes for ``shape`` on ``arch``.

    Raises UnknownArchError for an unknown arch, and UsageError for an unknown entry point,
    one that cannot serve the shape (single_prefill with batch != 1), or a call no arm on
    the arch serves with the library's semantics (the message names each candidate's
    unmet constraint). ``return_lse`` restricts the choice to arms that return the LSE.
    """

    check_arch(arch)
    if entry not in ENTRY_POINTS:
        raise UsageError(f"unknown entry point {entry!r}; known: {', '.join(ENTRY_POINTS)}")
    if entry not in reachable_entry_points(shape):
        raise UsageError(
            f"{entry} serves batch 1 only; got batch {shape.batch} (use batch_prefill)"
        )
    reasons = []
    for name in candidates(entry, shape, arch):
        reason = get_arm(name).supports(shape, arch, need_lse=return_lse)
        if reason is None:
            return name
        reasons.append(f"{name}: {reason}")
    lse = " with return_lse" if return_lse else ""
    raise UsageError(f"{entry}: no arm on {arch} serves {shape.key()}{lse}: " + "; ".join(reasons))
