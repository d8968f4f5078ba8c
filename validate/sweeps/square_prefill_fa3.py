"""Square causal prefill against the peer serving stacks call: FlashInfer's FA3 kernel as A.

Tether's Triton arm (B) against ``flashinfer_fa3`` (A), batch 1, bf16, head_dim 128, 2K to
16K tokens, with 8 kv heads (GQA 32/8) and 32 (MHA 32/32, which includes issue 15's
32/32 4096 cell; a grid is a product, so the MHA row covers every length). Runs where
flashinfer is installed (``validate/peer_session.sh``).
"""

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef

SWEEP = SweepDef(
    name="square-prefill-fa3",
    axes={"hkv": (8, 32), "seqlen": (2048, 4096, 8192, 16384)},
    fixed={"batch": 1, "hq": 32, "head_dim": 128, "dtype": "bf16", "causal": True},
    arms={"A": "flashinfer_fa3", "B": "triton"},
    entry_points=("single_prefill", "batch_prefill"),
    # Eight cells in about 60-90 s on one H200 (the 16K calls last milliseconds; the cap
    # bounds them, the noise target stops the short ones early).
    timing=TimingPolicy(cell_cap_s=7.0),
    description="square causal prefill, bf16, head_dim 128, 32 query heads over 8 or 32 kv heads",
)
