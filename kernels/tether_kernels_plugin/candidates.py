"""Named tuning candidates: Triton launch configs a tune sweep forces the Triton arm to.

Candidates are named by their fields; the current sm90 default is among them so every tune run
measures today's kernel beside the alternatives. A cell's ``config`` field names one (or a
Gluon variant, tether_kernels.gluon.launch.VARIANTS).
"""

from __future__ import annotations

from tether_kernels.launch_tables import LaunchConfig

CANDIDATES: dict[str, LaunchConfig] = {
    "m128n64w8s4h2lf": LaunchConfig(128, 64, 8, 4, heads_per_program=2, longest_first=True),
    "m128n64w8s3h2lf": LaunchConfig(128, 64, 8, 3, heads_per_program=2, longest_first=True),
    "m128n128w8s2h2lf": LaunchConfig(128, 128, 8, 2, heads_per_program=2, longest_first=True),
    "m128n128w8s3lf": LaunchConfig(128, 128, 8, 3, longest_first=True),
    "m64n64w4s3lf": LaunchConfig(64, 64, 4, 3, longest_first=True),
}
