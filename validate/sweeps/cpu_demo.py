"""The demo sweep: small, f32, CPU only, so `tether demo` runs anywhere in seconds."""

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef

SWEEP = SweepDef(
    name="cpu-demo",
    axes={"hq": (2, 4), "seqlen": (64, 128, 256)},
    fixed={"batch": 1, "hkv": 2, "head_dim": 64, "dtype": "f32", "causal": True},
    arms={"A": "sdpa_math", "B": "sdpa_flash"},
    entry_points=("single_prefill", "batch_prefill"),
    timing=TimingPolicy(
        min_sample_s=2e-3, min_reps=5, max_reps=15, noise_target=0.05, cell_cap_s=0.6
    ),
    needs_gpu=False,
    description="CPU demo: SDPA math against SDPA flash, f32, head_dim 64",
)
