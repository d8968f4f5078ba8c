"""Chunked prefill: one 2K-token query chunk against a growing key cache (bottom-right causal)."""

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef

SWEEP = SweepDef(
    name="chunked-prefill",
    axes={"kv_len": (2048, 4096, 8192, 16384), "dtype": ("f16", "bf16")},
    fixed={"batch": 1, "qo_len": 2048, "hq": 32, "hkv": 8, "head_dim": 128, "causal": True},
    # A must serve bottom-right causal; an arm that builds the mask inside its call is
    # still flagged kernel_mismatch by the fidelity check, not trusted.
    arms={"A": ("sdpa_flash", "sdpa_cudnn", "sdpa_efficient"), "B": "triton"},
    entry_points=("single_prefill", "batch_prefill"),
    # The engine's default policy; the GPU session scales the per-cell cap to its budget.
    timing=TimingPolicy(),
    description="qo_len 2048 against kv_len 2K to 16K, f16 and bf16",
)
