"""The idle verdict: which probes a target needs, and how their answers combine.

Busy if any probe is busy. Idle only when the process probes that matter for the vendor say
idle; anything else is unknown. NVML and nvidia-smi read the same driver tables (as do
amd-smi and rocm-smi), so either one of a pair answering idle is enough, while a busy answer
from either wins.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.atomic import utc_stamp
from tether.errors import UsageError
from tether.guard import probes as P

VENDOR_PROBES: dict[str, tuple[Callable[[], P.ProbeResult], ...]] = {
    "cuda": (P.probe_nvml, P.probe_nvidia_smi),
    "rocm": (P.probe_amd_smi, P.probe_rocm_smi),
}


def detect_vendor() -> str:
    """cuda, rocm or cpu from device nodes and tools on PATH; never opens a GPU context."""
    if Path("/dev/nvidia0").exists() or shutil.which("nvidia-smi"):
        return "cuda"
    if Path("/dev/kfd").exists() or shutil.which("amd-smi") or shutil.which("rocm-smi"):
        return "rocm"
    return "cpu"


def resolve_target(target: str) -> str:
    if target not in P.TARGETS:
        raise UsageError(f"--target {target!r}: expected one of {', '.join(P.TARGETS)}")
    return detect_vendor() if target == "auto" else target


def default_load_limit() -> float:
    env = os.environ.get("TETHER_GUARD_LOAD_LIMIT")
    if env:
        try:
            return float(env)
        except ValueError as exc:
            raise UsageError(f"TETHER_GUARD_LOAD_LIMIT={env!r}: not a number") from exc
    # above the core count: a finished test run leaves the 1-minute average high for a while,
    # and a benchmark that really competes for the host pushes it well past the cores
    return 1.5 * float(os.cpu_count() or 1) + 1.0


def _use_nvml() -> bool:
    return os.environ.get("TETHER_GUARD_NVML", "1") != "0"


@dataclass
class Snapshot:
    """One look at the host: the load average (read first), every probe, and the verdict."""

    target: str
    verdict: str
    loadavg: tuple[float, float, float] | None
    probes: list[P.ProbeResult] = field(default_factory=list)
    taken_at: float = field(default_factory=time.time)

    def reason(self) -> str:
        """Why the host is not idle, naming the probes that said so."""
        bad = [p for p in self.probes if p.state == P.BUSY] or [
            p for p in self.probes if p.state == P.UNKNOWN
        ]
        if not bad:
            return f"host {self.verdict}"
        parts = []
        for p in bad:
            foreign = p.evidence.get("foreign")
            detail = (
                ", ".join(f"pid {f['pid']} {f.get('name') or ''}".strip() for f in foreign[:3])
                if foreign
                else p.evidence.get("note", "")
            )
            parts.append(f"{p.name} {p.state}: {detail}")
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "verdict": self.verdict,
            "loadavg": list(self.loadavg) if self.loadavg else None,
            "taken_at": utc_stamp(self.taken_at),
            "probes": [p.as_dict() for p in self.probes],
        }


def process_probes(vendor: str) -> list[P.ProbeResult]:
    """The cheap probes (no sleeping window): vendor process lists and device-node holders."""
    results = []
    for fn in VENDOR_PROBES.get(vendor, ()):
        if fn is P.probe_nvml and not _use_nvml():
            results.append(P.ProbeResult("nvml", P.NOT_APPLICABLE, {"note": "TETHER_GUARD_NVML=0"}))
            continue
        results.append(fn())
    results.append(P.probe_device_holders())
    return results


def verdict(vendor: str, results: list[P.ProbeResult], load: Any = None, limit: float = 0) -> str:
    states = {p.name: p.state for p in results}
    if P.BUSY in states.values():
        return P.BUSY
    if vendor == "cpu":
        if load is None:
            return P.UNKNOWN
        return P.BUSY if load[0] > limit else P.IDLE
    pair = {"cuda": ("nvml", "nvidia-smi"), "rocm": ("amd-smi", "rocm-smi")}[vendor]
    if not any(states.get(n) == P.IDLE for n in pair):
        return P.UNKNOWN
    # device-node holders unknown only because of unreadable processes does not block idle:
    # the vendor tool sees every process on the device, including other users'.
    return P.IDLE


def snapshot(
    target: str = "auto",
    *,
    full: bool = True,
    nested: bool = False,
    load_limit: float | None = None,
    busy_samples: int = 3,
    busy_interval_s: float = 0.2,
) -> Snapshot:
    """Look at the host. ``full=False`` skips the sampled busy percent (for per-arm checks).

    ``nested``: a hold inside an outer guard's. The busy percent cannot tell the outer
    holder's own work (a second lane on another GPU, say) from someone else's, so it is not
    sampled; it is recorded as not applicable, with why. The outer hold sampled it before its
    command started, and the process probes still attribute every GPU process to its owner.
    """
    vendor = resolve_target(target)
    load = P.read_loadavg()  # before any probe, so probes do not raise it
    limit = default_load_limit() if load_limit is None else load_limit
    if vendor == "cpu":
        na = {"note": "not applicable: target cpu"}
        results = [
            P.ProbeResult(n, P.NOT_APPLICABLE, dict(na)) for n in ("gpu-processes", "busy-percent")
        ]
        results.append(
            P.ProbeResult(
                "loadavg",
                P.UNKNOWN if load is None else (P.BUSY if load[0] > limit else P.IDLE),
                {
                    "command": "os.getloadavg",
                    "rc": 0,
                    "raw": str(load),
                    "limit": limit,
                    "note": f"1-minute load against limit {limit:g}",
                },
            )
        )
        return Snapshot(vendor, verdict("cpu", results, load, limit), load, results)
    results = process_probes(vendor)
    if full and nested:
        note = (
            "not applicable: nested under an outer hold, whose own work this cannot tell from "
            "another user's; the outer hold sampled it before its command"
        )
        results.append(P.ProbeResult("busy-percent", P.NOT_APPLICABLE, {"note": note}))
    elif full:
        results.append(P.probe_busy_percent(vendor, busy_samples, busy_interval_s))
    return Snapshot(vendor, verdict(vendor, results), load, results)
