"""Chunked prefill against cuDNN: the same grid as chunked-prefill with cuDNN as arm A.

cuDNN serves bottom-right causal only with an explicit lower-right bias; whether it builds a
mask inside the timed call is for the fidelity check to say (a cell that does is flagged,
not trusted). Kept as its own sweep so the Triton arm is judged against each SDPA arm that
can serve the shape, not only the first candidate.
"""

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef

SWEEP = SweepDef(
    name="chunked-prefill-cudnn",
    axes={"kv_len": (2048, 4096, 8192, 16384), "dtype": ("f16", "bf16")},
    fixed={"batch": 1, "qo_len": 2048, "hq": 32, "hkv": 8, "head_dim": 128, "causal": True},
    arms={"A": "sdpa_cudnn", "B": "triton"},
    entry_points=("single_prefill", "batch_prefill"),
    timing=TimingPolicy(),
    description="qo_len 2048 against kv_len 2K to 16K, f16 and bf16, cuDNN as A",
)
