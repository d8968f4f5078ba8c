"""The control for ``aa-release-demo``: the same cells and arms at the default timing policy.

Rendered side by side with the release demonstration, it shows what the A/A floor of these
cells is when nothing is released between arms and graphs are replayed.
"""

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef

SWEEP = SweepDef(
    name="aa-control-demo",
    axes={"seqlen": (256, 1024, 4096)},
    fixed={"batch": 1, "hq": 32, "hkv": 8, "head_dim": 128, "dtype": "bf16", "causal": True},
    arms={"A": ("sdpa_cudnn", "sdpa_flash", "sdpa_efficient"), "B": "triton"},
    entry_points=("single_prefill", "batch_prefill"),
    timing=TimingPolicy(),
    description="A/A demonstration control: the release demo's cells at the default policy",
)
