"""On purpose, the seeds' failure: the allocator cache is released between arms.

Each arm then pays device malloc inside its own samples; the engine flags the cells
alloc_in_timed_region and the A/A floor widens. Never a source for a published number.
"""

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef

SWEEP = SweepDef(
    name="aa-release-demo",
    axes={"seqlen": (256, 1024, 4096)},
    fixed={"batch": 1, "hq": 32, "hkv": 8, "head_dim": 128, "dtype": "bf16", "causal": True},
    arms={"A": ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient"), "B": "triton"},
    entry_points=("single_prefill", "batch_prefill"),
    # Few calls per sample as in the seeds, events rather than graphs (a replayed graph never
    # allocates), and the deliberate release between arms.
    timing=TimingPolicy(
        sampler="events",
        calls_per_sample=3,
        min_reps=7,
        max_reps=15,
        cell_cap_s=3.0,
        release_between_arms=True,
    ),
    description="A/A demonstration: allocator released between arms (deliberately wrong)",
)
