"""Idle probes: is anyone else on the GPU? Three answers: idle, busy, unknown.

A probe that cannot see (missing tool, timeout, non-zero exit, ``N/A``, output it cannot parse)
says unknown, never idle: the seeds' failure was a harness that believed a busy host was free.
Process evidence comes first, busy percent is a second opinion, and the load average is read
before any probe runs so the probes' own work does not show up in it. Nothing here creates a
GPU context: torch is never imported, NVML only lists processes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.guard import _proc

IDLE, BUSY, UNKNOWN, NOT_APPLICABLE = "idle", "busy", "unknown", "not_applicable"
TARGETS = ("auto", "cuda", "rocm", "cpu")
# long-lived daemons that keep device nodes open without running work
DAEMONS = frozenset({"nvidia-persistenced", "nv-hostengine", "nvidia-powerd"})
DEVICE_RE = re.compile(r"^/dev/(nvidia\d+|nvidia-uvm|kfd|dri/renderD\d+)$")
RAW_LIMIT = 4000


def probe_timeout() -> float:
    return float(os.environ.get("TETHER_GUARD_PROBE_TIMEOUT", "5"))


@dataclass
class ProbeResult:
    name: str
    state: str  # idle | busy | unknown | not_applicable
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "state": self.state, "evidence": self.evidence}


def run_tool(cmd: list[str], timeout: float | None = None) -> tuple[str | None, dict[str, Any]]:
    """Run an external tool; (stdout or None when it could not give an answer, evidence)."""
    timeout = probe_timeout() if timeout is None else timeout
    ev: dict[str, Any] = {"command": cmd, "rc": None, "raw": "", "note": ""}
    exe = shutil.which(cmd[0])
    if exe is None:
        ev["note"] = f"{cmd[0]}: not installed (not on PATH)"
        return None, ev
    try:
        # own session so a hung tool and anything it spawned can be killed together
        proc = subprocess.Popen(
            [exe, *cmd[1:]],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        ev["note"] = f"{cmd[0]}: cannot run: {exc}"
        return None, ev
    try:
        out_b, err_b = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        ev["note"] = f"{cmd[0]}: timed out after {timeout:g} s"
        return None, ev
    out = out_b.decode("utf-8", errors="replace")
    ev["rc"] = proc.returncode
    ev["raw"] = out[:RAW_LIMIT]
    if err_b:
        ev["stderr"] = err_b.decode("utf-8", errors="replace")[:RAW_LIMIT]
    if proc.returncode != 0:
        ev["note"] = f"{cmd[0]}: exit status {proc.returncode}"
        return None, ev
    return out, ev


def _judge(
    name: str, ev: dict[str, Any], pids: list[dict[str, Any]] | None, note: str
) -> ProbeResult:
    """Turn parsed process rows into a result, dropping this guard and its descendants."""
    if pids is None:
        ev["note"] = note
        return ProbeResult(name, UNKNOWN, ev)
    foreign = [p for p in pids if not _proc.is_ours(int(p["pid"]))]
    hidden = [p["pid"] for p in foreign if not (_proc.PROC / str(p["pid"])).exists()]
    if hidden:
        # in a container without the host pid namespace the tool reports host pids; we cannot
        # prove such a process is ours, so it stays foreign, and the evidence says why
        note += f"; pid(s) {hidden} not visible here (other pid namespace?), counted as foreign"
    ev["processes"] = pids
    ev["foreign"] = foreign
    ev["note"] = note
    return ProbeResult(name, BUSY if foreign else IDLE, ev)


def probe_nvml() -> ProbeResult:
    """Compute and graphics processes per device through NVML (no context is created)."""
    ev: dict[str, Any] = {"command": "pynvml", "rc": None, "raw": "", "note": ""}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the pynvml shim package warns on import
            import pynvml
    except ImportError:
        ev["note"] = "pynvml not importable"
        return ProbeResult("nvml", UNKNOWN, ev)
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses are generated at runtime
        ev["note"] = f"nvmlInit failed: {exc}"
        return ProbeResult("nvml", UNKNOWN, ev)
    rows: list[dict[str, Any]] = []
    util: list[Any] = []
    try:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            for getter in (
                "nvmlDeviceGetComputeRunningProcesses",
                "nvmlDeviceGetGraphicsRunningProcesses",
            ):
                for p in getattr(pynvml, getter)(h):
                    rows.append({"pid": int(p.pid), "gpu": i, "source": getter})
            try:
                util.append(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            except Exception:
                util.append(None)
    except Exception as exc:
        ev["note"] = f"NVML query failed: {exc}"
        return ProbeResult("nvml", UNKNOWN, ev)
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
    ev["utilization"] = util
    ev["raw"] = json.dumps(rows)
    return _judge("nvml", ev, rows, f"{len(rows)} process(es) on {len(util)} device(s)")


def parse_nvidia_smi_apps(out: str) -> tuple[list[dict[str, Any]] | None, str]:
    """Rows of ``--query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits``."""
    rows = []
    for line in out.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            return None, f"unparseable line: {line!r}"
        if not parts[0].isdigit():
            return None, f"pid is not a number: {line!r}"
        rows.append({"pid": int(parts[0]), "name": parts[1], "used_memory": parts[-1]})
    # noheader: no processes is documented as no output at all
    return rows, f"{len(rows)} compute process(es)"


def probe_nvidia_smi() -> ProbeResult:
    cmd = [
        "nvidia-smi",
        "--query-compute-apps=pid,process_name,used_memory",
        "--format=csv,noheader,nounits",
    ]
    out, ev = run_tool(cmd)
    if out is None:
        return ProbeResult("nvidia-smi", UNKNOWN, ev)
    rows, note = parse_nvidia_smi_apps(out)
    return _judge("nvidia-smi", ev, rows, note)


NO_PROCS = "no running processes detected"


def parse_amd_smi_process(out: str) -> tuple[list[dict[str, Any]] | None, str]:
    """``amd-smi process --json``: a list of GPUs, or ``{"gpu_data": [...]}`` in newer releases."""
    if out.strip().lower() == NO_PROCS:
        return [], "amd-smi: no running processes detected"
    try:
        data = json.loads(out)
    except ValueError:
        return None, "not JSON"
    gpus = data.get("gpu_data") if isinstance(data, dict) else data
    if not isinstance(gpus, list) or not gpus:
        return None, "no GPU entries (expected a list or gpu_data)"
    rows: list[dict[str, Any]] = []
    for g in gpus:
        if not isinstance(g, dict) or "process_list" not in g:
            return None, f"GPU entry without process_list: {str(g)[:80]!r}"
        plist = g["process_list"]
        if isinstance(plist, str) and NO_PROCS in plist.lower():
            continue
        if not isinstance(plist, list):
            return None, "process_list is neither a list nor the no-process message"
        for entry in plist:
            info = entry.get("process_info", entry) if isinstance(entry, dict) else entry
            if isinstance(info, str) and NO_PROCS in info.lower():
                continue
            pid = info.get("pid") if isinstance(info, dict) else None
            if isinstance(pid, str) and pid.isdigit():
                pid = int(pid)
            if not isinstance(pid, int):
                return None, f"process entry without a numeric pid: {str(entry)[:80]!r}"
            rows.append({"pid": pid, "name": info.get("name"), "gpu": g.get("gpu")})
    return rows, f"{len(rows)} process(es) on {len(gpus)} GPU(s)"


def probe_amd_smi() -> ProbeResult:
    out, ev = run_tool(["amd-smi", "process", "--json"])
    if out is None:
        return ProbeResult("amd-smi", UNKNOWN, ev)
    rows, note = parse_amd_smi_process(out)
    return _judge("amd-smi", ev, rows, note)


def parse_rocm_smi_pids(out: str) -> tuple[list[dict[str, Any]] | None, str]:
    """``rocm-smi --showpids``: 'No KFD PIDs currently running' or a PID table under a header."""
    if "No KFD PIDs currently running" in out:
        return [], "no KFD pids"
    lines = [ln.strip() for ln in out.splitlines()]
    try:
        start = next(i for i, ln in enumerate(lines) if ln.upper().startswith("PID"))
    except StopIteration:
        return None, "no PID table and no 'No KFD PIDs' message"
    rows = []
    for ln in lines[start + 1 :]:
        if not ln or ln.startswith("="):
            break
        parts = ln.split()
        if not parts[0].isdigit():
            return None, f"unparseable row: {ln!r}"
        rows.append({"pid": int(parts[0]), "name": parts[1] if len(parts) > 1 else ""})
    if not rows:
        return None, "PID header without rows or the no-process message"
    return rows, f"{len(rows)} KFD process(es)"


def probe_rocm_smi() -> ProbeResult:
    out, ev = run_tool(["rocm-smi", "--showpids"])
    if out is None:
        return ProbeResult("rocm-smi", UNKNOWN, ev)
    rows, note = parse_rocm_smi_pids(out)
    return _judge("rocm-smi", ev, rows, note)


def probe_device_holders(proc_root: Path = _proc.PROC) -> ProbeResult:
    """Processes with /dev/kfd, /dev/dri/renderD*, /dev/nvidia* open (readlink on /proc/*/fd)."""
    rows: list[dict[str, Any]] = []
    unreadable = 0
    try:
        pids = sorted(int(p.name) for p in proc_root.iterdir() if p.name.isdigit())
    except OSError:
        pids = []
    for pid in pids:
        fd_dir = proc_root / str(pid) / "fd"
        try:
            names = os.listdir(fd_dir)
        except FileNotFoundError:
            continue  # exited while we looked
        except OSError:
            unreadable += 1
            continue
        devs = set()
        for n in names:
            try:
                target = os.readlink(fd_dir / n)
            except OSError:
                continue
            if DEVICE_RE.match(target):
                devs.add(target)
        try:
            name = (proc_root / str(pid) / "comm").read_text(encoding="utf-8").strip()
        except OSError:
            name = ""
        if devs and name not in DAEMONS:
            rows.append({"pid": pid, "name": name, "devices": sorted(devs)})
    ev: dict[str, Any] = {
        "command": "readlink /proc/*/fd/*",
        "rc": 0,
        "raw": json.dumps(rows)[:RAW_LIMIT],
    }
    result = _judge("device-holders", ev, rows, f"{len(rows)} holder(s)")
    ev["unreadable_processes"] = unreadable
    if result.state == IDLE and unreadable:
        ev["note"] += f"; {unreadable} process(es) unreadable, so idle cannot be claimed"
        result.state = UNKNOWN
    return result


def parse_busy_percent(out: str) -> list[float] | None:
    vals = []
    for line in out.splitlines():
        s = line.strip().rstrip("%").strip()
        if not s:
            continue
        try:
            vals.append(float(s))
        except ValueError:
            return None  # N/A, [Not Supported], garbage
    return vals or None


def _find_gfx(data: Any) -> list[float]:
    found: list[float] = []
    if isinstance(data, dict):
        for k, v in data.items():
            if k in ("gfx_activity", "gfx_usage", "gfx_busy_percent"):
                v = v.get("value") if isinstance(v, dict) else v
                if isinstance(v, (int, float)):
                    found.append(float(v))
            else:
                found.extend(_find_gfx(v))
    elif isinstance(data, list):
        for v in data:
            found.extend(_find_gfx(v))
    return found


def probe_busy_percent(
    vendor: str, samples: int = 3, interval_s: float = 0.2, limit: float = 5.0
) -> ProbeResult:
    """GPU busy percent sampled a few times: a second opinion that catches invisible users."""
    readings: list[list[float]] = []
    evs: list[dict[str, Any]] = []
    for i in range(samples):
        if i:
            time.sleep(interval_s)
        if vendor == "cuda":
            out, ev = run_tool(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
            )
            vals = parse_busy_percent(out) if out is not None else None
        else:
            out, ev = run_tool(["amd-smi", "metric", "--usage", "--json"])
            try:
                vals = _find_gfx(json.loads(out)) or None if out is not None else None
            except ValueError:
                vals = None
        evs.append(ev)
        if vals is None:
            ev["note"] = ev.get("note") or "no busy percent in the output"
            return ProbeResult(
                "busy-percent",
                UNKNOWN,
                {
                    "samples": evs,
                    "note": ev["note"],
                    "command": ev["command"],
                    "rc": ev["rc"],
                    "raw": ev["raw"],
                },
            )
        readings.append(vals)
    peak = max(max(r) for r in readings)
    ev0 = {
        "command": evs[0]["command"],
        "rc": evs[0]["rc"],
        "raw": evs[0]["raw"],
        "readings": readings,
        "limit": limit,
    }
    ev0["note"] = f"peak {peak:g} over {samples} sample(s) against limit {limit:g}"
    return ProbeResult("busy-percent", BUSY if peak > limit else IDLE, ev0)


def read_loadavg() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except OSError:
        return None
