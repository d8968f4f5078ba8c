"""The main map: causal bf16 prefill, Triton against the best SDPA arm on the arch."""

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef

SWEEP = SweepDef(
    name="prefill-triton-vs-sdpa",
    axes={
        "batch": (1, 4),
        "hq": (16, 32, 64),
        "seqlen": (256, 512, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 16384),
    },
    fixed={"hkv": 8, "head_dim": 128, "dtype": "bf16", "causal": True},
    # Candidates in order of preference: the first that serves every cell on the arch is A.
    arms={"A": ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient"), "B": "triton"},
    entry_points=("single_prefill", "batch_prefill"),
    # 60 cells in a few minutes on one GPU: the engine's default policy, whose per-cell cap
    # the GPU session scales to its budget.
    timing=TimingPolicy(),
    description="square causal prefill, bf16, head_dim 128, GQA to 8 kv heads",
)
