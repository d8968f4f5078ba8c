"""The ``gluon`` arm: tether's Gluon forward kernel for Hopper (``attn_fwd_sm90.py``).

Declared for sm90 only; it refuses with the reason where the Triton has no Gluon Hopper module,
for f32, and for head dims other than 64, 96, 128 and 256. What arms.py needs to declare the arm lives
here (its declaration, kernel names, prepare and plan); this module does not import arms.py.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from tether.errors import ArmUnavailableError

from tether_kernels.gluon.launch import (
    HEAD_DIMS,
    GluonConfig,
    GluonPlan,
    attn_fwd_sm90_launcher,
    gluon_triton_reason,
)
from tether_kernels.serves import INT32_ELEMENTS, Serves
from tether_kernels.shapes import TORCH_DTYPES, Ragged


@functools.lru_cache(maxsize=1)
def _triton_reason() -> str | None:
    return gluon_triton_reason()


def available(arch: str) -> str | None:
    # The installed Triton's version, not an import: route() stays pure and cheap, and a
    # process that imported Triton under TRITON_INTERPRET=1 cannot break it.
    return _triton_reason()


# What the kernel serves on sm90 under the contract in kernels/API.md: it masks bottom-right
# itself, gives a row with no key 0 and lse -inf (the kernel's docstring), serves GQA through
# GROUP, and returns the LSE. The routed-API grid runs it wherever the policy routes it. A
# ragged batch (ragged_prefill) runs in one launch: each program reads its request's offsets.
SERVES_SM90 = Serves(
    ("f16", "bf16"),
    HEAD_DIMS,
    "kernel",
    max_elements=INT32_ELEMENTS,
    lse=True,
    ragged=True,
    why={
        "dtypes": "wgmma takes f16 and bf16 operands here; f32 is not instantiated",
        "head_dims": "register tiles are powers of two: 64, 128 and 256 (a narrower key tile "
        "there, default_config), and 96 as two parts of 64 and 32 (head_part)",
        "max_elements": "the kernel computes output and LSE offsets in 32 bits",
    },
)


def prepare_gluon(config: GluonConfig | None) -> Callable[..., Callable[[], Any]]:
    """The arm's prepare for one variant (the GPU session times several side by side); None:
    the variant ``default_config`` picks for the call's head_dim."""

    def prepare(q, k, v, shape, out, lse, arch, sm_scale=None):
        if isinstance(shape, Ragged):
            # The lengths are the plan's key, not the tensors' shapes: the entry points' plan,
            # bound to these tensors.
            run = plan_gluon(config)(shape, arch, sm_scale, lse is not None)
            return lambda: run(q, k, v, out, lse)
        try:
            return attn_fwd_sm90_launcher(
                q, k, v, out, config, causal=shape.causal, sm_scale=sm_scale, lse=lse
            )
        except ValueError as exc:
            raise ArmUnavailableError(f"arm gluon: {exc}") from exc

    return prepare


def plan_gluon(config: GluonConfig | None) -> Callable[..., Callable[..., Any]]:
    """The entry points' launcher of one variant (None: ``default_config``'s for the head_dim):
    a GluonPlan once per key, then launches. A ``Ragged`` call's plan is the ragged launch
    (its lengths are the key's)."""

    def plan(shape, arch, sm_scale, want_lse):
        import torch

        lens = None
        if isinstance(shape, Ragged):
            lens = (shape.qo_lens, shape.kv_lens)
            dims = (1, shape.total_qo, shape.total_kv, shape.hq, shape.hkv, shape.head_dim)
        else:
            dims = (shape.batch, shape.qo_len, shape.kv_len, shape.hq, shape.hkv, shape.head_dim)
        dtype = getattr(torch, TORCH_DTYPES[shape.dtype])
        built: dict[object, GluonPlan] = {}

        def per_call(q, k, v, out, lse):
            found = built.get(q.device)
            if found is None:
                try:
                    found = built[q.device] = GluonPlan(
                        dims, dtype, q.device, config, shape.causal, sm_scale, want_lse,
                        lens=lens,
                    )  # fmt: skip
                except ValueError as exc:
                    raise ArmUnavailableError(f"arm gluon: {exc}") from exc
            return found.launch(q, k, v, out, lse)

        return per_call

    return plan


# Profiler names of what the arm runs: the kernel, and the merge after a split-KV launch.
KERNELS = {"sm90": (r"attn_fwd_sm90", r"merge_splits")}
# The tuned variant where it fits, a narrower key tile at head_dim 256 (default_config).
PREPARE = prepare_gluon(None)
PLAN = plan_gluon(None)

__all__ = ["KERNELS", "PLAN", "PREPARE", "SERVES_SM90", "available", "plan_gluon", "prepare_gluon"]
