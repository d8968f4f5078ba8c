"""tether_kernels' arms and public entry points as arms of tether's bench (its Arm protocol).

Two kinds of arm. ``AttentionArm`` wraps one arm of the kernel library: its ``prepare``
allocates up front and returns a call that only launches, so a sweep of arms times kernels.
``EntryArm`` is a public entry point (``single_prefill``, ``batch_prefill``) timed exactly as a
caller calls it: the call passes the cell's tensors to the public function, and validation,
routing, any copy the routed arm needs, the allocation of the output and the launch all happen
inside the timed call. What the documents say a caller gets comes from entry arms.

This module decides what a sample means, so it is part of the harness fingerprint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tether import registry
from tether.errors import ArmUnavailableError
from tether_kernels import batch_prefill, single_prefill
from tether_kernels.arms import ARMS, Arm, get_arm, prepare_triton_config
from tether_kernels.gluon.arm import prepare_gluon
from tether_kernels.launch_tables import LaunchConfig
from tether_kernels.routing import ENTRY_POINTS, reachable_entry_points, route

from tether_kernels_plugin.cases import AttentionCase


@dataclass(frozen=True)
class AttentionArm:
    """A tether_kernels arm as tether's bench sees it (the tether.registry.Arm protocol)."""

    arm: Arm

    kind = "arm"

    @property
    def name(self) -> str:
        return str(self.arm.name)

    @property
    def allowed_kernels(self) -> tuple[str, ...]:
        return tuple(self.arm.allowed_kernels)

    def supports(self, case: AttentionCase, arch: str) -> str | None:
        return self.arm.supports(case.shape, arch)

    def prepare(self, case: AttentionCase, inputs: Any, arch: str) -> Callable[[], Any]:
        q, k, v, out = inputs
        if case.launch is not None and self.name in ("triton", "triton_eager"):
            if not isinstance(case.launch, LaunchConfig):
                raise ArmUnavailableError(f"arm {self.name}: {case.config_name} is not its config")
            return prepare_triton_config(q, k, v, case.shape, out, case.launch, self.name, arch)
        if case.launch is not None and self.name == "gluon":
            if isinstance(case.launch, LaunchConfig):
                raise ArmUnavailableError(
                    f"arm gluon: {case.config_name} is not one of its variants"
                )
            reason = self.arm.supports(case.shape, arch)
            if reason is not None:
                raise ArmUnavailableError(f"arm gluon: {reason}")
            return prepare_gluon(case.launch)(q, k, v, case.shape, out, None, arch)
        return self.arm.prepare(q, k, v, case.shape, out=out, arch=arch)

    def kernels_on(self, arch: str) -> tuple[str, ...]:
        try:
            return tuple(self.arm.expected_kernels_on(arch))
        except Exception:  # an arch the kernel library does not know: nothing to expect
            return ()


_ENTRY_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "single_prefill": single_prefill,
    "batch_prefill": batch_prefill,
}


@dataclass(frozen=True)
class EntryArm:
    """A public entry point as an arm: the cell's call made through the public function.

    ``prepare`` only binds the cell's input tensors (single_prefill takes the batch-1 views
    ``q[0]``, ``k[0]``, ``v[0]``, as a caller holding [len, heads, head_dim] tensors passes them);
    the output is allocated by the entry point inside every timed call. The kernels one call
    should launch are those of the arm ``route`` picks for the cell (``kernels_for``), so a
    call that launches a second attention kernel or builds a mask is flagged.
    """

    name: str

    kind = "entry"
    allowed_kernels: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.name not in ENTRY_POINTS:
            raise ValueError(f"EntryArm: {self.name!r} is not an entry point {ENTRY_POINTS}")

    def routed(self, case: AttentionCase, arch: str) -> str:
        """The arm the entry point takes for the cell (UsageError where none serves it)."""
        return route(self.name, case.shape, arch)

    def supports(self, case: AttentionCase, arch: str) -> str | None:
        if case.launch is not None:
            return f"{self.name} takes no tuning candidate ({case.config_name})"
        if self.name not in reachable_entry_points(case.shape):
            return f"{self.name} cannot make batch {case.shape.batch}"
        try:
            arm = self.routed(case, arch)
        except Exception as exc:  # route refuses with UsageError naming every candidate
            return str(exc)
        return get_arm(arm).supports(case.shape, arch)

    def prepare(self, case: AttentionCase, inputs: Any, arch: str) -> Callable[[], Any]:
        reason = self.supports(case, arch)
        if reason is not None:
            raise ArmUnavailableError(f"entry {self.name}: {reason}")
        q, k, v, _ = inputs  # the slab's output buffer is not used: the entry allocates its own
        fn = _ENTRY_FUNCTIONS[self.name]
        causal = case.shape.causal
        if self.name == "single_prefill":
            q, k, v = q[0], k[0], v[0]

        def call() -> Any:
            return fn(q, k, v, causal=causal)

        return call

    def kernels_on(self, arch: str) -> tuple[str, ...]:
        return ()  # depends on the cell: see kernels_for

    def kernels_for(self, case: AttentionCase, arch: str) -> tuple[str, ...]:
        """The kernels (and tolerated names) of the arm the entry routes this cell to."""
        arm = get_arm(self.routed(case, arch))
        return tuple(arm.expected_kernels_on(arch)) + tuple(arm.allowed_kernels)


def register() -> None:
    """Register every kernel-library arm and both entry points with tether's bench."""
    for arm in ARMS.values():
        registry.arm(AttentionArm(arm))
    for entry in ENTRY_POINTS:
        registry.arm(EntryArm(entry))


register()
