"""tether: Triton attention prefill kernels whose published numbers cannot drift from the raw logs.

The suite (guard, bench, store, stats, render, check) lives here; the kernels are
``tether_kernels``. Importing ``tether`` imports no GPU code.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from tether.errors import TetherError

try:
    __version__ = version("tether")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "TetherError",
    "__version__",
]
