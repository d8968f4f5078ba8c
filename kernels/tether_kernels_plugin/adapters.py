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
from tether_kernels import batch_prefill, ragged_prefill, single_prefill
from tether_kernels.archs import PER_REQUEST
from tether_kernels.arms import ARMS, Arm, get_arm, prepare_triton_config
from tether_kernels.gluon.arm import prepare_gluon
from tether_kernels.launch_tables import LaunchConfig
from tether_kernels.paged import paged_prefill, route_paged
from tether_kernels.peers import (
    FA3_KERNELS,
    WORKSPACE_BYTES,
    _import_flashinfer,
    flashinfer_missing,
)
from tether_kernels.prefill import plan_per_request
from tether_kernels.routing import ENTRY_POINTS, per_request_refusal, reachable_entry_points, route

from tether_kernels_plugin.cases import AttentionCase, PagedCase, RaggedCase


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


# What per_request launches besides its requests' kernels: each request's output (and LSE)
# copied into its rows of the packed result (on the H200 a "Memcpy DtoD" the profiler lists,
# or a copy kernel for a strided source); on the CPU, whose profiler lists operators, the
# packed result's allocation too (on a GPU it launches nothing).
_PER_REQUEST_COPIES = (r"(?i)memcpy|copy", r"^aten::empty$")


def _per_request_kernels(case: RaggedCase, arch: str) -> tuple[str, ...]:
    """The kernels per_request runs for the cell: each request's routed arm's, and the copies
    into the packed output."""
    found: list[str] = []
    for _, request in case.shape.distinct():
        arm = get_arm(route("single_prefill", request, arch))
        found += [
            k for k in (*arm.expected_kernels_on(arch), *arm.allowed_kernels) if k not in found
        ]
    return (*found, *_PER_REQUEST_COPIES)


@dataclass(frozen=True)
class RaggedEntryArm:
    """ragged_prefill as an arm: the cell's packed tensors and its offsets, held on the host as
    a caller holds them, passed to the public function; as ``EntryArm``, everything the call
    does happens inside the timed call. The kernels it should launch are those of its route:
    the one-launch arm, or each request's under per_request."""

    name: str = "ragged_prefill"

    kind = "entry"
    allowed_kernels: tuple[str, ...] = ()

    def supports(self, case: Any, arch: str) -> str | None:
        if not isinstance(case, RaggedCase):
            return f"{self.name} takes a ragged batch (the ragged case)"
        try:
            arm = route(self.name, case.shape, arch)
        except Exception as exc:  # route refuses with UsageError naming every candidate
            return str(exc)
        if arm == PER_REQUEST:
            return per_request_refusal(case.shape, arch)
        return get_arm(arm).supports(case.shape, arch)

    def prepare(self, case: RaggedCase, inputs: Any, arch: str) -> Callable[[], Any]:
        reason = self.supports(case, arch)
        if reason is not None:
            raise ArmUnavailableError(f"entry {self.name}: {reason}")
        q, k, v, _ = inputs  # the entry allocates its own output
        qo, kv = case.offsets()
        causal = case.shape.causal

        def call() -> Any:
            return ragged_prefill(q, k, v, qo, kv, causal=causal)

        return call

    def kernels_on(self, arch: str) -> tuple[str, ...]:
        return ()  # depends on the cell: see kernels_for

    def kernels_for(self, case: RaggedCase, arch: str) -> tuple[str, ...]:
        arm = route(self.name, case.shape, arch)
        if arm == PER_REQUEST:
            return _per_request_kernels(case, arch)
        found = get_arm(arm)
        return tuple(found.expected_kernels_on(arch)) + tuple(found.allowed_kernels)


@dataclass(frozen=True)
class PerRequestArm:
    """``per_request`` as an arm: a ragged batch run one request at a time, each by the plan
    single_prefill makes for it (tether_kernels.prefill.plan_per_request), planned outside the
    timed call as every arm is. One launch per request is its design, so its cells carry
    ``kernel_repeated`` wherever two requests take the same kernel."""

    name: str = PER_REQUEST

    kind = "arm"
    allowed_kernels: tuple[str, ...] = ()

    def supports(self, case: Any, arch: str) -> str | None:
        if not isinstance(case, RaggedCase):
            return f"{self.name} runs the requests of a ragged batch (the ragged case)"
        return per_request_refusal(case.shape, arch)

    def prepare(self, case: RaggedCase, inputs: Any, arch: str) -> Callable[[], Any]:
        q, k, v, _ = inputs
        return plan_per_request(case.shape, arch, q, k, v)

    def kernels_on(self, arch: str) -> tuple[str, ...]:
        return ()  # depends on the cell: see kernels_for

    def kernels_for(self, case: RaggedCase, arch: str) -> tuple[str, ...]:
        return _per_request_kernels(case, arch)


# What paged_prefill's gather route launches besides the ragged route's kernels: the indexed
# copies of the requests' pages into packed k and v (and on the CPU their operators).
_GATHER_COPIES = (r"(?i)index|gather|copy|memcpy", r"^aten::")


@dataclass(frozen=True)
class PagedEntryArm:
    """paged_prefill as an arm: the cell's packed queries, its paged caches and FlashInfer's
    page table (on the host, as a serving engine holds it) passed to the public function. As
    ``EntryArm``, everything the call does happens inside the timed call: its first call
    plans (the table checked and copied to the device once), later calls only launch."""

    name: str = "paged_prefill"

    kind = "entry"
    allowed_kernels: tuple[str, ...] = ()

    def supports(self, case: Any, arch: str) -> str | None:
        return self.declared_refusal(case, arch)

    def declared_refusal(self, case: Any, arch: str) -> str | None:
        """Why paged_prefill takes no route for the cell on ``arch`` (route_paged's answer)."""
        if not isinstance(case, PagedCase):
            return f"{self.name} takes a paged batch (the paged case)"
        try:
            route_paged(case.shape, arch)
        except Exception as exc:  # route_paged refuses with UsageError naming each route
            return str(exc)
        return None

    def prepare(self, case: PagedCase, inputs: Any, arch: str) -> Callable[[], Any]:
        reason = self.supports(case, arch)
        if reason is not None:
            raise ArmUnavailableError(f"entry {self.name}: {reason}")
        q, k_cache, v_cache, _ = inputs  # the entry allocates its own output
        qo = case.qo_indptr()
        indptr, indices, last = case.table()
        layout, causal = case.shape.kv_layout, case.shape.causal

        def call() -> Any:
            return paged_prefill(
                q, k_cache, v_cache, qo, indptr, indices, last, kv_layout=layout, causal=causal
            )

        return call

    def kernels_on(self, arch: str) -> tuple[str, ...]:
        return ()  # depends on the cell: see kernels_for

    def kernels_for(self, case: PagedCase, arch: str) -> tuple[str, ...]:
        if route_paged(case.shape, arch) == "triton":
            return (r"_paged_fwd",)
        ragged = get_arm(route("ragged_prefill", case.shape.ragged, arch))
        return (*ragged.expected_kernels_on(arch), *ragged.allowed_kernels, *_GATHER_COPIES)


@dataclass(frozen=True)
class FlashInferPagedArm:
    """FlashInfer's ``BatchPrefillWithPagedKVCacheWrapper`` with its Hopper FA3 backend forced,
    as a serving engine calls it: planned once per batch outside the timed region, in its
    CUDA-graph mode (the page table copied into fixed device buffers), then ``run`` per call
    on the same caches and table paged_prefill is given. Causal masks are bottom-right per
    request, as tether's (the FA3 mainloop's, see tether_kernels.peers). Declared here, beside
    the case it times, rather than in tether_kernels.peers: it is a peer for the bench only."""

    name: str = "flashinfer_fa3_paged"

    kind = "arm"
    allowed_kernels: tuple[str, ...] = ()

    def supports(self, case: Any, arch: str) -> str | None:
        return self.declared_refusal(case, arch) or flashinfer_missing()

    def declared_refusal(self, case: Any, arch: str) -> str | None:
        """``supports`` by FlashInfer's contract alone, whether it imports here left out (as
        a host that does not run it judges a session's sweeps)."""
        if not isinstance(case, PagedCase):
            return f"{self.name} takes a paged batch (the paged case)"
        if arch != "sm90":
            return f"{self.name}: FlashInfer's FA3 backend runs on sm90 only"
        p = case.shape
        if p.dtype not in ("f16", "bf16") or p.head_dim not in (64, 128, 256):
            return f"{self.name}: FlashInfer's FA3 instantiates f16/bf16 at head_dim 64/128/256"
        if p.causal and any(q > k for q, k in zip(p.qo_lens, p.kv_lens, strict=True)):
            return f"{self.name}: rows that see no key are outside FlashInfer's contract"
        return None

    def prepare(self, case: PagedCase, inputs: Any, arch: str) -> Callable[[], Any]:
        reason = self.supports(case, arch)
        if reason is not None:
            raise ArmUnavailableError(reason)
        import torch

        flashinfer = _import_flashinfer()
        q, k_cache, v_cache, _ = inputs
        p, dev = case.shape, q.device
        indptr, indices, last = case.table()
        host = [
            torch.tensor(x, dtype=torch.int32) for x in (case.qo_indptr(), indptr, indices, last)
        ]
        try:
            wrapper = flashinfer.prefill.BatchPrefillWithPagedKVCacheWrapper(
                torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev),
                p.kv_layout,
                use_cuda_graph=True,
                qo_indptr_buf=host[0].to(dev),
                paged_kv_indptr_buf=host[1].to(dev),
                paged_kv_indices_buf=host[2].to(dev),
                paged_kv_last_page_len_buf=host[3].to(dev),
                backend="fa3",
            )
            wrapper.plan(
                *host,
                p.hq,
                p.hkv,
                p.head_dim,
                p.page_size,
                causal=p.causal,
                sm_scale=p.head_dim**-0.5,
                q_data_type=q.dtype,
                kv_data_type=k_cache.dtype,
            )
            wrapper.run(q, (k_cache, v_cache))  # builds or loads the module, untimed
            torch.cuda.synchronize()
        except (RuntimeError, ValueError) as exc:
            raise ArmUnavailableError(f"flashinfer fa3 (paged) refused {p.key()}: {exc}") from exc

        def call() -> Any:
            return wrapper.run(q, (k_cache, v_cache))

        return call

    def kernels_on(self, arch: str) -> tuple[str, ...]:
        # The FA3 kernel template of every FlashInfer Hopper prefill (its paged mainloop is
        # another template argument, so the name is matched up to it).
        return (FA3_KERNELS[0].split("<", 1)[0] + "<",)


def register() -> None:
    """Register every kernel-library arm, the entry points, per_request, paged_prefill and
    its FlashInfer peer with tether's bench."""
    for arm in ARMS.values():
        registry.arm(AttentionArm(arm))
    for entry in ENTRY_POINTS:
        registry.arm(RaggedEntryArm() if entry == "ragged_prefill" else EntryArm(entry))
    registry.arm(PerRequestArm())
    registry.arm(PagedEntryArm())
    registry.arm(FlashInferPagedArm())


register()
