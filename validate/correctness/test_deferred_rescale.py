"""The deferred rescale branch, made observable by the kernel's debug rescale counter.

A score ramp along the keys moves every row's block max by a fixed step per key block. With
steps larger than the margin each block moves the frame (the deferred branch runs and must
still be exact); with steps that add up to less than the margin only the first block sets
the frame, while the eager kernel (margin 0) moves it on every block.
"""

from __future__ import annotations

import math

import pytest
import torch
from tether.pytest_plugin import current_arch, device
from tether_kernels import Shape
from tether_kernels.arms import prepare_triton_debug, torch_dtype
from tether_kernels.launch_tables import launch_config

from validate.correctness._helpers import assert_within_baseline, fresh_seed, poisoned_like

pytestmark = pytest.mark.triton

MARGIN = 8  # log2 units, the triton arm's margin


def ramp_inputs(shape: Shape, step_log2: float, block_n: int, seed: int):
    """q, k, v whose scaled score (log2 units) rises by ``step_log2`` per key block.

    Scores come from dimension 0 only (q there is 1, k there is the ramp); the other
    dimensions carry small random noise so inputs are fresh but cannot reorder the ramp.
    """
    gen = torch.Generator().manual_seed(seed)
    d = shape.head_dim
    scale_log2 = d**-0.5 * math.log2(math.e)
    q = 1e-2 * torch.randn(shape.batch, shape.qo_len, shape.hq, d, generator=gen)
    k = 1e-2 * torch.randn(shape.batch, shape.kv_len, shape.hkv, d, generator=gen)
    v = torch.randn(shape.batch, shape.kv_len, shape.hkv, d, generator=gen)
    q[..., 0] = 1.0
    block = torch.arange(shape.kv_len) // block_n
    k[..., 0] = (block * step_log2 / scale_log2)[None, :, None]
    dtype = torch_dtype(shape.dtype)
    return (t.to(device=device(), dtype=dtype).contiguous() for t in (q, k, v))


def ramp_shape(dtype: str, causal: bool, hkv: int = 1) -> tuple[Shape, int]:
    """Four key blocks of this arch's launch config, and the block width."""
    block_n = launch_config(current_arch(), 64, dtype).block_n
    return Shape(1, 16, 4 * block_n, 2, hkv, 64, dtype, causal=causal), block_n


def run_counted(shape: Shape, q, k, v, margin: int):
    out = poisoned_like(q)
    counter = torch.full(
        (shape.batch, shape.hq, shape.qo_len), -1, dtype=torch.int32, device=q.device
    )
    prepare_triton_debug(q, k, v, shape, out, counter, margin=margin, arch=current_arch())()
    return out, counter


DTYPES = [pytest.param("f16", id="f16"), pytest.param("f32", id="f32")]


@pytest.mark.parametrize("dtype", DTYPES)
def test_ramp_past_margin_runs_deferred_branch(dtype: str) -> None:
    shape, block_n = ramp_shape(dtype, causal=False)
    blocks = math.ceil(shape.kv_len / block_n)
    seed = fresh_seed()
    q, k, v = ramp_inputs(shape, step_log2=MARGIN + 4, block_n=block_n, seed=seed)
    out, counter = run_counted(shape, q, k, v, margin=MARGIN)
    # Every block's max clears the frame by more than the margin: one frame move per block.
    assert (counter == blocks).all(), f"rescale counts {counter.unique().tolist()} (seed {seed})"
    assert_within_baseline("triton", out, shape, q, k, v, seed)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ramp_inside_margin_keeps_first_frame(dtype: str) -> None:
    shape, block_n = ramp_shape(dtype, causal=False)
    blocks = math.ceil(shape.kv_len / block_n)
    assert blocks >= 3, "the case needs several key blocks to mean anything"
    seed = fresh_seed()
    step = (MARGIN - 1) / blocks  # the whole rise stays inside the margin
    q, k, v = ramp_inputs(shape, step_log2=step, block_n=block_n, seed=seed)
    out, counter = run_counted(shape, q, k, v, margin=MARGIN)
    assert (counter == 1).all(), f"deferred counts {counter.unique().tolist()} (seed {seed})"
    assert_within_baseline("triton", out, shape, q, k, v, seed)
    # The eager kernel (margin 0) moves the frame on every block of the same ramp.
    eager_out, eager_counter = run_counted(shape, q, k, v, margin=0)
    assert (eager_counter == blocks).all(), (
        f"eager counts {eager_counter.unique().tolist()} (seed {seed})"
    )
    assert_within_baseline("triton_eager", eager_out, shape, q, k, v, seed)


def test_causal_ramp_counts_only_visited_blocks() -> None:
    # Bottom-right causal: blocks past a row's diagonal are skipped, so they cannot count.
    shape, block_n = ramp_shape("f32", causal=True, hkv=2)
    seed = fresh_seed()
    q, k, v = ramp_inputs(shape, step_log2=MARGIN + 4, block_n=block_n, seed=seed)
    out, counter = run_counted(shape, q, k, v, margin=MARGIN)
    shift = shape.kv_len - shape.qo_len
    want = torch.tensor(
        [(i + shift) // block_n + 1 for i in range(shape.qo_len)], dtype=torch.int32
    )
    assert torch.equal(counter[0, 0].cpu(), want), f"{counter[0, 0].tolist()} (seed {seed})"
    assert_within_baseline("triton", out, shape, q, k, v, seed)
