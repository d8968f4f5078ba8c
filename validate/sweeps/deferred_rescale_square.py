"""Deferred rescale on square causal shapes: the eager-rescale kernel (A) against triton (B)."""

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef

SWEEP = SweepDef(
    name="deferred-rescale-square",
    axes={"batch": (1, 4), "hq": (16, 32, 64), "seqlen": (512, 2048, 8192, 16384)},
    fixed={"hkv": 8, "head_dim": 128, "dtype": "bf16", "causal": True},
    arms={"A": "triton_eager", "B": "triton"},
    entry_points=("single_prefill", "batch_prefill"),
    # The engine's default policy; the GPU session scales the per-cell cap to its budget.
    timing=TimingPolicy(),
    description="margin 0 (rescale every block) against the deferred rescale",
)
