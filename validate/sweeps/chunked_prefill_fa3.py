"""Chunked prefill against the peer serving stacks call: FlashInfer's Hopper FA3 kernel as A.

Tether's Triton arm (B) against ``flashinfer_fa3`` (A) on issue 15's chunked calls: a 2K-token
query chunk against 8K and 16K keys, bottom-right causal, bf16 and f16. Runs where flashinfer
is installed (``validate/peer_session.sh``); elsewhere the run is rejected with the arm's reason.
"""

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef

SWEEP = SweepDef(
    name="chunked-prefill-fa3",
    axes={"kv_len": (8192, 16384), "dtype": ("bf16", "f16")},
    fixed={"batch": 1, "qo_len": 2048, "hq": 32, "hkv": 8, "head_dim": 128, "causal": True},
    arms={"A": "flashinfer_fa3", "B": "triton"},
    entry_points=("single_prefill", "batch_prefill"),
    # Four cells in about a minute on one H200: each call lasts well under a millisecond, so
    # the engine's noise target usually stops a cell before this cap (the default's 3.5 s is
    # sized for 60-cell maps; four cells can afford more samples each).
    timing=TimingPolicy(cell_cap_s=10.0),
    description="qo_len 2048 against kv_len 8K and 16K, bf16 and f16, FlashInfer FA3 as A",
)
