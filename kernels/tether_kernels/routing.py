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

``ragged_prefill`` takes a ``Ragged`` call (requests of their own lengths, packed). Its
candidates are the policy's pick and the route order, as above, where an arm declares that it
takes a ragged batch in one launch (``Serves.ragged``), and last ``per_request``: each request
routed and run as ``single_prefill`` would (one launch per request), which serves the batch
when every request is served. Thresholds read the batch's envelope (``Ragged.key``: the batch
and the longest request's lengths).
"""

from __future__ import annotations

from tether.errors import UsageError

from tether_kernels.archs import PER_REQUEST, ROUTE_ORDER, check_arch
from tether_kernels.arms import get_arm
from tether_kernels.policy import thresholds_for
from tether_kernels.shapes import Call, Ragged

ENTRY_POINTS: tuple[str, ...] = ("single_prefill", "batch_prefill", "ragged_prefill")


def reachable_entry_points(shape: Call) -> tuple[str, ...]:
    """Entry points that can produce ``shape``: single_prefill only serves batch 1, a batch of
    one length is batch_prefill's, and requests of their own lengths (packed) ragged_prefill's."""
    if isinstance(shape, Ragged):
        return ("ragged_prefill",)
    if shape.batch == 1:
        return ("single_prefill", "batch_prefill")
    return ("batch_prefill",)


def _unreachable(entry: str, shape: Call) -> str:
    if isinstance(shape, Ragged):
        return (
            f"{entry} takes one length for every request; requests of their own lengths are "
            "ragged_prefill's"
        )
    if entry == "ragged_prefill":
        return "ragged_prefill takes a Ragged call (requests of their own lengths, packed)"
    return f"{entry} serves batch 1 only; got batch {shape.batch} (use batch_prefill)"


def per_request_refusal(shape: Ragged, arch: str, need_lse: bool = False) -> str | None:
    """None when every request of ``shape`` has a single_prefill route on ``arch``, else the
    first request's refusal, named."""
    for i, request in shape.distinct():
        try:
            route("single_prefill", request, arch, return_lse=need_lse)
        except UsageError as exc:
            return f"request {i} ({request.qo_len} x {request.kv_len}): {exc}"
    return None


def policy_choice(entry: str, shape: Call, arch: str) -> str | None:
    """The arm the arch's policy thresholds for ``entry`` name for this call, or None."""
    applying = [th for th in thresholds_for(arch, entry) if th.applies(shape.key())]
    for th in applying:
        if th.takes_arm(shape.key()):
            return th.arm
    return applying[0].otherwise if applying else None


def candidates(entry: str, shape: Call, arch: str) -> tuple[str, ...]:
    """The arms ``route`` tries for this call, in order, without repeats (a ragged call's
    last is ``per_request``)."""
    first = policy_choice(entry, shape, arch)
    order = ((first,) if first else ()) + ROUTE_ORDER[arch]
    if isinstance(shape, Ragged):
        order += (PER_REQUEST,)
    return tuple(dict.fromkeys(order))


def refusal(name: str, shape: Call, arch: str, *, need_lse: bool = False) -> str | None:
    """None when candidate ``name`` (an arm, or ``per_request``) serves the call on ``arch``,
    else the constraint it fails."""
    if name == PER_REQUEST:
        if not isinstance(shape, Ragged):
            return "per_request runs the requests of a ragged batch"
        return per_request_refusal(shape, arch, need_lse)
    return get_arm(name).supports(shape, arch, need_lse=need_lse)


def route(entry: str, shape: Call, arch: str, *, return_lse: bool = False) -> str:
    """The arm ``entry`` takes for ``shape`` on ``arch``.

    Raises UnknownArchError for an unknown arch, and UsageError for an unknown entry point,
    one that cannot serve the shape (single_prefill with batch != 1, a ``Ragged`` call
    anywhere but ragged_prefill), or a call no arm on the arch serves with the library's
    semantics (the message names each candidate's unmet constraint). ``return_lse``
    restricts the choice to arms that return the LSE.
    """

    check_arch(arch)
    if entry not in ENTRY_POINTS:
        raise UsageError(f"unknown entry point {entry!r}; known: {', '.join(ENTRY_POINTS)}")
    if entry not in reachable_entry_points(shape):
        raise UsageError(_unreachable(entry, shape))
    reasons = []
    for name in candidates(entry, shape, arch):
        reason = refusal(name, shape, arch, need_lse=return_lse)
        if reason is None:
            return name
        reasons.append(f"{name}: {reason}")
    lse = " with return_lse" if return_lse else ""
    raise UsageError(f"{entry}: no arm on {arch} serves {shape.key()}{lse}: " + "; ".join(reasons))
