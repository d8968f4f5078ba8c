"""tether_kernels: Triton flash-attention prefill, the arms it is compared with, and routing.

Importing this package imports neither torch nor triton; the entry points import them when
called.
"""

from __future__ import annotations

from tether_kernels.archs import ARCHES
from tether_kernels.prefill import batch_prefill, ragged_prefill, single_prefill
from tether_kernels.routing import ENTRY_POINTS, reachable_entry_points, route
from tether_kernels.shapes import Ragged, Shape, attended_pairs, flops

__all__ = [
    "ARCHES",
    "ENTRY_POINTS",
    "Ragged",
    "Shape",
    "attended_pairs",
    "batch_prefill",
    "flops",
    "ragged_prefill",
    "reachable_entry_points",
    "route",
    "single_prefill",
]
