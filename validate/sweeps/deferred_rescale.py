"""Deferred rescale on the chunked-prefill grid (where the seeds measured it): A eager, B triton.

The renderer cites this one as `deferred-rescale`; `deferred-rescale-square` adds square shapes.
"""

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef

SWEEP = SweepDef(
    name="deferred-rescale",
    axes={"kv_len": (2048, 4096, 8192, 16384), "dtype": ("f16", "bf16")},
    fixed={"batch": 1, "qo_len": 2048, "hq": 32, "hkv": 8, "head_dim": 128, "causal": True},
    arms={"A": "triton_eager", "B": "triton"},
    entry_points=("single_prefill", "batch_prefill"),
    # The engine's default policy; the GPU session scales the per-cell cap to its budget.
    timing=TimingPolicy(),
    description="margin 0 (rescale every block) against the deferred rescale, chunked grid",
)
