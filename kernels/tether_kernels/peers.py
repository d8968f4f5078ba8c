"""FlashInfer, the attention library serving stacks call, as arms: its Hopper FA3 and its FA2 kernel.

Both arms call FlashInfer's public ``single_prefill_with_kv_cache`` (q [qo, hq, d], k/v
[kv, hkv, d], NHD) exactly as a serving stack does, with ``backend`` forced to "fa3" or "fa2"
so FlashInfer cannot pick another kernel. FlashInfer is an optional peer, never a dependency
of tether: where it is not importable the arms refuse with the reason.

Checked against tether's contract (kernels/API.md) in flashinfer-python 0.7.2.post1's own
sources (the files below are inside its wheel, under ``flashinfer/data/include/flashinfer``):

- Causal masks are aligned bottom-right, as tether's: the FA3 mainloop's
  ``col_limit_right(qo_idx) = qo_idx + 1 + kv_len - qo_len`` (attention/hopper/mainloop_mma.cuh)
  and the FA2 mask ``kv_idx + qo_len > kv_len + q_idx`` (attention/prefill.cuh).
- Rows that see no key (causal, qo_len > kv_len) are outside FlashInfer's contract: FA2 raises
  ("kv_len must be greater than or equal to qo_len", prefill.cuh
  SinglePrefillWithKVCacheDispatched) and FA3's tile count ``get_num_kv_tiles``
  (attention/hopper/mainloop.cuh) assumes at least one key per tile. The arms refuse such calls
  instead of trusting an undefined result.
- The LSE comes back in base 2: FA3's ``OnlineSoftmax::finalize`` writes
  ``row_max * sm_scale_log2 + log2(sum)`` (attention/hopper/attention_updater.cuh) and FA2
  ``log2(d) + m`` with m in log2 units (prefill.cuh); the Python side says so too
  (``_finish_lse`` in flashinfer/prefill.py: "Kernels write base-2 LSE"). The arms multiply by
  ln 2 into tether's [batch, hq, qo_len] natural-log layout.
- ``sm_scale`` is the plain softmax scale, default 1/sqrt(head_dim), as tether's.

A ragged batch (``Ragged``: packed requests of their own lengths, ``ragged_prefill``'s call)
goes to FlashInfer's ``BatchPrefillWithRaggedKVCacheWrapper`` with the same backend forced,
as a serving stack calls it: ``plan`` once with the offsets (outside any timed region, in its
CUDA-graph mode with fixed offset buffers, so that ``run`` can be captured), then ``run``
per call. Causal masks there are bottom-right per request, as tether's (the same mainloop).

The first call of a (backend, dtype, head_dim) module in a process JIT-builds it (or loads a
build from FlashInfer's cache); ``prepare`` makes that call outside any timed region and
returns its wall time on the launch callable as ``build_s``.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import time
from collections.abc import Callable
from typing import Any

from tether.errors import ArmUnavailableError

from tether_kernels.serves import Serves
from tether_kernels.shapes import Ragged

# Profiler names of the kernels each backend runs (seen on an H200 with 0.7.2.post1, see
# ../shared/anchors/): FA3 is one warp-specialised CUTLASS kernel; FA2 may split the keys
# over CTAs for small grids and then merges the partial states with a second kernel.
# A ragged batch runs the same kernel template (hopper/prefill_sm90.cuh instantiates
# PrefillWithKVCacheKernel for single and batch calls alike).
FA3_KERNELS = (r"flashinfer::PrefillWithKVCacheKernel<flashinfer::CollectiveMainloop",)
FA2_KERNELS = (r"flashinfer::SinglePrefillWithKVCacheKernel<", r"flashinfer::MergeStates")

HEAD_DIMS = (64, 128, 256)  # what both backends instantiate for equal QK and VO head dims
LN2 = math.log(2.0)


def flashinfer_missing() -> str | None:
    """None where ``flashinfer`` can be found on the path, else why the arms cannot run."""
    if importlib.util.find_spec("flashinfer") is None:
        return (
            "flashinfer is not importable here (an optional peer: the slim build of "
            "shared/tools/flashinfer-slim.sh, installed as its header says)"
        )
    return None


def _available(arch: str) -> str | None:
    return flashinfer_missing()


# Both backends on sm90, under tether's contract (see the module docstring for the sources).
SERVES_SM90 = Serves(
    ("f16", "bf16"),
    HEAD_DIMS,
    "kernel",
    max_batch=1,
    keyless_rows="outside FlashInfer's contract: FA2 raises, FA3 assumes a key per tile",
    lse=True,
    ragged=True,
    why={
        "dtypes": "FlashInfer instantiates f16 and bf16",
        "head_dims": "what both backends instantiate for equal QK and VO head dims",
        "max_batch": "single_prefill_with_kv_cache serves one sequence; a batch of requests "
        "goes to FlashInfer's ragged wrapper as a Ragged call (its uniform batch is not "
        "declared)",
    },
)
# FlashInfer's recommended float workspace for the batch wrappers (their split-KV scratch).
WORKSPACE_BYTES = 128 * 1024 * 1024


def _import_flashinfer() -> Any:
    try:
        import flashinfer
    except Exception as exc:  # an install that is found but does not import is a refusal
        raise ArmUnavailableError(f"flashinfer does not import: {exc!r}") from exc
    return flashinfer


def _ragged_call(fi: Any, backend: str, q, k, v, shape: Ragged, scale: float, lse) -> Any:
    """FlashInfer's ragged wrapper planned for ``shape`` (offsets copied into its fixed
    buffers: its CUDA-graph mode) and a call that runs it, filling ``lse`` ([hq, total], natural
    log: FlashInfer's own "HN" layout in base e) when given."""
    import torch

    dev = q.device
    offsets = [
        torch.tensor([0, *itertools.accumulate(ns)], dtype=torch.int32)
        for ns in (shape.qo_lens, shape.kv_lens)
    ]
    wrapper = fi.prefill.BatchPrefillWithRaggedKVCacheWrapper(
        torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=dev),
        "NHD",
        use_cuda_graph=True,
        qo_indptr_buf=offsets[0].to(dev),
        kv_indptr_buf=offsets[1].to(dev),
        backend=backend,
    )
    wrapper.plan(
        offsets[0],
        offsets[1],
        shape.hq,
        shape.hkv,
        shape.head_dim,
        causal=shape.causal,
        sm_scale=scale,
        q_data_type=q.dtype,
        kv_data_type=k.dtype,
    )
    if lse is None:
        return lambda: wrapper.run(q, k, v)
    return lambda: wrapper.run(q, k, v, lse=lse, return_lse=True, lse_base="ln", lse_layout="HN")


def _prepare(backend: str) -> Callable[..., Callable[[], Any]]:
    def prepare(q, k, v, shape, out, lse, arch, sm_scale=None):
        import torch

        fi = _import_flashinfer()
        if isinstance(shape, Ragged):
            return _prepare_ragged(fi, backend, q, k, v, shape, lse, sm_scale)
        q3, k3, v3 = q[0], k[0], v[0]  # [len, heads, d] views of the batch-1 BSHD tensors
        scale = shape.head_dim**-0.5 if sm_scale is None else sm_scale
        want_lse = lse is not None

        def call() -> Any:
            return fi.single_prefill_with_kv_cache(
                q3,
                k3,
                v3,
                causal=shape.causal,
                kv_layout="NHD",
                sm_scale=scale,
                backend=backend,
                return_lse=want_lse,
            )

        # The first call builds or loads the module: here, outside any timed region, and
        # timed so a sweep can record what the peer's JIT costs.
        t0 = time.perf_counter()
        try:
            call()
            torch.cuda.synchronize()
        except RuntimeError as exc:
            raise ArmUnavailableError(
                f"flashinfer {backend} refused {shape.key()}: {exc}".strip()
            ) from exc
        build_s = time.perf_counter() - t0

        def launch() -> torch.Tensor:
            if not want_lse:
                return call().unsqueeze(0)
            res, lse2 = call()
            # [qo, hq] base 2 -> tether's [hq, qo] natural log (a second, elementwise kernel).
            torch.mul(lse2.t(), LN2, out=lse[0])
            return res.unsqueeze(0)

        launch.build_s = build_s  # type: ignore[attr-defined]
        launch.backend = backend  # type: ignore[attr-defined]
        return launch

    return prepare


def _prepare_ragged(fi: Any, backend: str, q, k, v, shape: Ragged, lse, sm_scale) -> Any:
    """The ragged wrapper planned outside any timed region; its first run builds or loads
    the module (timed, as ``build_s``); the launch returns [total queries, hq, d]."""
    import torch

    scale = shape.head_dim**-0.5 if sm_scale is None else sm_scale
    t0 = time.perf_counter()
    try:
        call = _ragged_call(fi, backend, q, k, v, shape, scale, lse)
        call()
        torch.cuda.synchronize()
    except (RuntimeError, ValueError) as exc:
        raise ArmUnavailableError(
            f"flashinfer {backend} (ragged) refused {shape.key()}: {exc}".strip()
        ) from exc
    build_s = time.perf_counter() - t0

    def launch() -> torch.Tensor:
        res = call()
        return res[0] if lse is not None else res

    launch.build_s = build_s  # type: ignore[attr-defined]
    launch.backend = backend  # type: ignore[attr-defined]
    return launch


# The two backends as arms.py declares them: (arm name, FlashInfer backend, kernel names).
BACKENDS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("flashinfer_fa3", "fa3", FA3_KERNELS),
    ("flashinfer_fa2", "fa2", FA2_KERNELS),
)


def prepare(backend: str) -> Callable[..., Callable[[], Any]]:
    """The arm's prepare for ``backend`` ("fa3" or "fa2")."""
    return _prepare(backend)


def available(arch: str) -> str | None:
    """None where FlashInfer can be found, else why the arms cannot run."""
    return _available(arch)


__all__ = [
    "BACKENDS",
    "FA2_KERNELS",
    "FA3_KERNELS",
    "SERVES_SM90",
    "available",
    "flashinfer_missing",
    "prepare",
]
