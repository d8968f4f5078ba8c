"""tether.bench: the timing engine, grids in replicate blocks, arm fidelity, gates, probes.

Importing this package imports no GPU code; torch is imported where a measurement starts.
"""

from __future__ import annotations

from tether.bench.engine import CellTiming, Probes, TimingError, TimingPolicy, measure
from tether.bench.fidelity import check_arms, profile_kernels, unexpected
from tether.bench.sweep import Bench, Target, guard_record, resolve_arms

__all__ = [
    "Bench",
    "CellTiming",
    "Probes",
    "Target",
    "TimingError",
    "TimingPolicy",
    "check_arms",
    "guard_record",
    "measure",
    "profile_kernels",
    "resolve_arms",
    "unexpected",
]
