"""Device name, arch, driver and GPU count from the vendor tools, never from torch.

The guard process must not create a GPU context (it would show up as a GPU user and hold
device memory for the whole held command), so provenance comes from nvidia-smi / rocm-smi.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

from tether.arch import ARCH_RE
from tether.guard.probes import run_tool


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return "cpu: " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu: " + (platform.processor() or platform.machine() or "unknown")


def _clean(text: str) -> str:
    return re.sub(r"[|\n\r<>\[\]`]", " ", text).strip()[:200] or "unknown"


def nvidia_gpus() -> list[dict[str, str]]:
    """One row per GPU: name, driver, compute capability (empty list when unknown)."""
    out, _ev = run_tool(
        ["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"]
    )
    rows = []
    for line in (out or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0]:
            rows.append({"name": parts[0], "driver": parts[1], "cc": parts[2]})
    return rows


def rocm_gpus() -> list[dict[str, str]]:
    out, _ev = run_tool(["rocm-smi", "--showproductname"])
    rows: dict[str, dict[str, str]] = {}
    for line in (out or "").splitlines():
        m = re.match(r"\s*GPU\[(\d+)\]\s*:\s*([^:]+?)\s*:\s*(.*)$", line)
        if not m:
            continue
        row = rows.setdefault(m.group(1), {"name": "", "gfx": ""})
        key, value = m.group(2).lower(), m.group(3).strip()
        if key.startswith(("card series", "card model")) and not row["name"]:
            row["name"] = value
        elif key.startswith("gfx version"):
            row["gfx"] = value.lower()
    return list(rows.values())


def gpu_count(vendor: str) -> int:
    if vendor == "cuda":
        return len(nvidia_gpus())
    if vendor == "rocm":
        return len(rocm_gpus())
    return 0


def device_info(vendor: str) -> tuple[str, str, str | None]:
    """(arch, device, driver) for a run's provenance.

    Arches are open (tether.arch): any compute capability or gfx target is its own arch; a
    tool answer that is not an arch name is recorded as ``cpu`` with the real device named in
    ``device``, so a not_measured record is never lost for want of an arch label.
    """
    if vendor == "cuda":
        gpus = nvidia_gpus()
        if gpus:
            major, _, minor = str(gpus[0]["cc"]).partition(".")
            arch = f"sm{major}{minor}" if ARCH_RE.fullmatch(f"sm{major}{minor}") else "cpu"
            return arch, _clean(gpus[0]["name"]), _clean(gpus[0]["driver"])
        return "cpu", "unknown: nvidia-smi gave no GPU", None
    if vendor == "rocm":
        gpus = rocm_gpus()
        if gpus:
            gfx = gpus[0]["gfx"]
            arch = gfx if ARCH_RE.fullmatch(gfx or "") else "cpu"
            return arch, _clean(gpus[0]["name"] or gfx), None
        return "cpu", "unknown: rocm-smi gave no GPU", None
    return "cpu", _clean(cpu_name()), None
