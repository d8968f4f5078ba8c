"""Architecture names, open to any GPU: ``sm<major><minor>``, any ``gfx`` target, or ``cpu``.

One table for the whole suite. A name is valid when it has one of these forms; nothing here
lists which arches exist, so an A100 (sm80), an L40S (sm89), a B200 (sm100) or a new AMD
target records runs without an edit to tether. The project's documents list the arches its
``[tool.tether] doc_arches`` names, measured or not.

Detection reads vendor tools and sysfs first and never creates a GPU context; torch is the
last resort, only when the tools say nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from tether.errors import UnknownArchError

ARCH_RE = re.compile(r"(?:sm\d{2,3}[a-z]?|gfx[0-9a-f]{3,5}|cpu)")
_TOOL_TIMEOUT_S = 10.0


def check_arch(name: object) -> str:
    """``name`` itself when it is a valid arch name, else UnknownArchError naming it."""
    if not isinstance(name, str) or not ARCH_RE.fullmatch(name):
        raise UnknownArchError(
            f"arch {name!r} is not an arch name (sm<major><minor>, gfx<target> or cpu)"
        )
    return name


def vendor_of(arch: str) -> str:
    """cuda, rocm or cpu for an arch name."""
    check_arch(arch)
    if arch.startswith("sm"):
        return "cuda"
    if arch.startswith("gfx"):
        return "rocm"
    return "cpu"


def from_compute_capability(major: int, minor: int) -> str:
    """(9, 0) -> sm90."""
    return check_arch(f"sm{major}{minor}")


def parse_gcn_arch(name: str) -> str:
    """``"gfx942:sramecc+:xnack-"`` -> ``"gfx942"``: the feature suffix is not part of the arch."""
    base = name.strip().split(":", 1)[0]
    if not base.startswith("gfx"):
        raise UnknownArchError(f"not a GCN arch name: {name!r}")
    return check_arch(base)


def _tool(argv: list[str]) -> str | None:
    exe = shutil.which(argv[0])
    if exe is None:
        return None
    try:
        done = subprocess.run(
            [exe, *argv[1:]],
            capture_output=True,
            text=True,
            timeout=_TOOL_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _visible(var: str) -> str | None:
    """The first visible device token of ``var``; "" when the variable hides every device,
    None when it is unset."""
    raw = os.environ.get(var)
    if raw is None:
        return None
    first = raw.split(",")[0].strip()
    return "" if not first or first.startswith("-") else first


def _nvidia() -> str | None:
    first = _visible("CUDA_VISIBLE_DEVICES")
    if first == "":
        return None
    select = ["-i", first] if first else []
    out = _tool(["nvidia-smi", *select, "--query-gpu=compute_cap", "--format=csv,noheader"])
    if not out:
        return None
    first = out.strip().splitlines()[0].strip() if out.strip() else ""
    m = re.fullmatch(r"(\d+)\.(\d+)", first)
    return from_compute_capability(int(m.group(1)), int(m.group(2))) if m else None


def _amd_sysfs(nodes: Path = Path("/sys/class/kfd/kfd/topology/nodes")) -> str | None:
    """gfx target of the first GPU node: ``gfx_target_version`` 90402 -> gfx942."""
    if not nodes.is_dir() or _visible("HIP_VISIBLE_DEVICES") == "":
        return None
    for props in sorted(nodes.glob("*/properties")):
        try:
            text = props.read_text(encoding="utf-8")
        except OSError:
            continue
        m = re.search(r"^gfx_target_version\s+(\d+)$", text, re.MULTILINE)
        if not m or int(m.group(1)) == 0:
            continue  # a CPU node
        v = int(m.group(1))
        major, minor, step = v // 10000, (v // 100) % 100, v % 100
        return check_arch(f"gfx{major}{minor:x}{step:x}")
    return None


def detect_arch() -> str:
    """The arch of the first visible GPU, or ``cpu``; vendor tools and sysfs before torch."""
    hidden = _visible("CUDA_VISIBLE_DEVICES") == "" and _visible("HIP_VISIBLE_DEVICES") in (
        "",
        None,
    )
    if hidden:
        return "cpu"
    found = _nvidia() or _amd_sysfs()
    if found:
        return found
    try:
        import torch
    except ImportError:
        return "cpu"
    if not torch.cuda.is_available():
        return "cpu"
    if getattr(torch.version, "hip", None):
        gcn = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "")
        return parse_gcn_arch(gcn)
    return from_compute_capability(*torch.cuda.get_device_capability())
