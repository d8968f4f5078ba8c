"""The launch configs chosen from compile evidence compute the right answer.

Those are the AMD tables (launch_tables.AMD_CONFIGS) and sm90's f32 tiles (launch_tables.SM90_F32),
none of them timed. No AMD host is at hand, so each tile runs in the Triton interpreter (or on
whatever GPU this is) at small shapes with tails and a chunked
diagonal, at the head dims and dtypes it is chosen for (its tile width and a head dim padded
onto it), against the f32 reference. Warps,
stages and waves_per_eu change the schedule, not what the interpreter computes, so configs
that differ only there are run once. bf16 is left to a GPU (the interpreter's bf16 dot).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from tether_kernels import Shape
from tether_kernels.launch_tables import AMD_CONFIGS, SM90_F32, LaunchConfig
from tether_kernels.triton.attn_fwd import attn_fwd_launcher

from validate.correctness._helpers import (
    assert_within_baseline,
    fresh_seed,
    make_qkv,
    poisoned_like,
)

pytestmark = pytest.mark.triton


def _cases() -> list[pytest.param]:
    # Each table entry at its tile width and at the widest head dim padded onto it (issue 24:
    # the same tile with the head-dim masks), once per distinct tile and options.
    seen: dict[tuple[str, int, str], LaunchConfig] = {}
    for table in (*(AMD_CONFIGS[a] for a in sorted(AMD_CONFIGS)), SM90_F32):
        for (d, dtype), cfg in sorted(table.items()):
            if dtype == "bf16":
                continue
            label = _label(cfg)
            seen.setdefault((label, d, dtype), cfg)
            seen.setdefault((label, d - 8, dtype), cfg)
    return [
        pytest.param(cfg, d, dtype, id=f"{label}-d{d}-{dtype}")
        for (label, d, dtype), cfg in sorted(seen.items())
    ]


def _label(cfg: LaunchConfig) -> str:
    """The tile and the options that change what the kernel computes (not warps or stages)."""
    label = f"m{cfg.block_m}n{cfg.block_n}"
    if cfg.q_chunk:
        label += f"-qc{cfg.q_chunk}"
    if cfg.split_head_dim != 1:
        label += f"-split{cfg.split_head_dim}"
    return label


@pytest.mark.slow
@pytest.mark.parametrize(("config", "head_dim", "dtype"), _cases())
@pytest.mark.parametrize(
    "causal", [pytest.param(True, id="causal"), pytest.param(False, id="full")]
)
def test_chosen_config_is_correct(
    config: LaunchConfig, head_dim: int, dtype: str, causal: bool
) -> None:
    # A query block of the largest tile plus a tail, and a chunk whose diagonal is offset.
    for shape in (Shape(1, 136, 136, 2, 1, head_dim, dtype, causal),
                  Shape(1, 40, 200, 2, 1, head_dim, dtype, causal)):  # fmt: skip
        seed = fresh_seed()
        q, k, v = make_qkv(shape, seed)
        out = poisoned_like(q)
        attn_fwd_launcher(q, k, v, out, _for_device(config, q), causal=causal)()
        assert_within_baseline(_label(config), out, shape, q, k, v, seed)


def _for_device(config: LaunchConfig, q: torch.Tensor) -> LaunchConfig:
    """``config`` as it can launch where ``q`` is: waves_per_eu is an option of Triton's AMD
    backend only, which NVIDIA's refuses, so on an NVIDIA GPU the tile runs without it."""
    if q.is_cuda and not torch.version.hip:
        return replace(config, waves_per_eu=None)
    return config
