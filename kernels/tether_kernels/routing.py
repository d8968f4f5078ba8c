"""Routing: which arm an entry point takes for a shape on an arch. Pure, no GPU, no torch.

single_prefill follows the arch's policy thresholds (arch_caps.POLICY), read in order: the
first threshold whose scope holds for the shape (e.g. chunked prefill only) and whose
``takes`` conditions hold sends the call to its arm; when none does, the call takes the
``otherwise`` arm of the first threshold in scope. A threshold whose ``takes`` is None is not
set and never sends a call to its arm. batch_prefill is its own path: the arch's preferred
SDPA arm.
When the chosen arm cannot serve the shape (say cuDNN for f32), routing walks the arch's
SDPA preference order, a documented choice made here, not a fallback inside an arm.
"""

from __future__ import annotations

from tether.errors import ArmUnavailableError, UsageError

from tether_kernels.arch_caps import SDPA_PREFERENCE, check_arch, thresholds_for
from tether_kernels.shapes import Shape

ENTRY_POINTS: tuple[str, ...] = ("single_prefill", "batch_prefill")


def reachable_entry_points(shape: Shape) -> tuple[str, ...]:
    """Entry points that can produce ``shape``: single_prefill only serves batch 1."""
    if shape.batch == 1:
        return ENTRY_POINTS
    return ("batch_prefill",)


def _first_supported(candidates: tuple[str, ...], shape: Shape, arch: str, need_lse: bool) -> str:
    from tether_kernels.arms import get_arm

    reasons = []
    for name in candidates:
        arm = get_arm(name)
        reason = arm.supports(shape, arch)
        if reason is None and need_lse and not arm.returns_lse:
            reason = "does not return the log-sum-exp"
        if reason is None:
            return name
        reasons.append(f"{name}: {reason}")
    raise ArmUnavailableError(f"no arm serves {shape.key()} on {arch}: " + "; ".join(reasons))


def route(entry: str, shape: Shape, arch: str, *, return_lse: bool = False) -> str:
    """The arm ``entry`` takes for ``shape`` on ``arch``.

    Raises UnknownArchError for an unknown arch, UsageError for an unknown entry point or
    one that cannot serve the shape (single_prefill with batch != 1), ArmUnavailableError
    when no arm on the arch serves it. ``return_lse`` restricts the choice to arms that
    return the log-sum-exp (the Triton arms).
    """
    check_arch(arch)
    if entry not in ENTRY_POINTS:
        raise UsageError(f"unknown entry point {entry!r}; known: {', '.join(ENTRY_POINTS)}")
    if entry not in reachable_entry_points(shape):
        raise UsageError(
            f"{entry} serves batch 1 only; got batch {shape.batch} (use batch_prefill)"
        )
    sdpa = SDPA_PREFERENCE[arch]
    if return_lse:
        return _first_supported(("triton",), shape, arch, need_lse=True)
    if entry == "single_prefill":
        applying = [th for th in thresholds_for(arch, entry) if th.applies(shape.key())]
        for th in applying:
            if th.takes_arm(shape.key()):
                return _first_supported((th.arm, *sdpa), shape, arch, need_lse=False)
        if applying:
            return _first_supported((applying[0].otherwise, *sdpa), shape, arch, need_lse=False)
    return _first_supported(sdpa, shape, arch, need_lse=False)
