"""The GPU guard: a host lock, three-state idle probes, and the evidence a run keeps.

Importing this package never imports torch and never creates a GPU context.
"""

from __future__ import annotations

from tether.guard.api import ArmCheck, Holding, HostUnavailable, acquire
from tether.guard.lock import HostLock, LockStatus
from tether.guard.probes import ProbeResult

__all__ = [
    "ArmCheck",
    "Holding",
    "HostLock",
    "HostUnavailable",
    "LockStatus",
    "ProbeResult",
    "acquire",
]
