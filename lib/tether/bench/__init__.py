"""tether.bench: the timing engine, sweeps as data, arm fidelity, gates, the probe and the demo.

Importing this package imports no GPU code; torch is imported where a measurement starts.
"""

from __future__ import annotations

from tether.bench.engine import CellTiming, Probes, TimingError, TimingPolicy, measure
from tether.bench.fidelity import check_arms, profile_kernels, unexpected
from tether.bench.sweep import SweepDef, Target, list_sweeps, load_sweep, run_sweep

__all__ = [
    "CellTiming",
    "Probes",
    "SweepDef",
    "Target",
    "TimingError",
    "TimingPolicy",
    "check_arms",
    "list_sweeps",
    "load_sweep",
    "measure",
    "profile_kernels",
    "run_sweep",
    "unexpected",
]
