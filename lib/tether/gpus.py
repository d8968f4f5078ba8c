"""One GPU per worker: count the visible GPUs, pin xdist workers to them, lock each one.

Counting never creates a GPU context: a context on the wrong device (or any device, on a
host the guard has not taken yet) is exactly the contamination the guard exists to avoid.
The count comes from the visibility variables first, then the vendor tools' listings, then
the device nodes. Pinning must happen before torch initialises CUDA or HIP, so it runs from
``pytest_configure`` and only touches ``os.environ``.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.errors import HostBusyError, UsageError
from tether.guard.lock import HostLock, default_lock_path

VISIBILITY_VARS: tuple[str, ...] = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")
_WORKER_RE = re.compile(r"^gw(\d+)$")
_PROBE_TIMEOUT_S = 10.0


@functools.lru_cache(maxsize=1)
def has_gpu() -> bool:
    """A CUDA or ROCm device is visible to torch."""
    import torch  # heavy, optional: only asked where a test or a measurement wants a device

    return bool(torch.cuda.is_available())


def device() -> str:
    """The torch device string tests allocate on and measurements time on."""
    return "cuda" if has_gpu() else "cpu"


@dataclass(frozen=True)
class Gpu:
    """A GPU as seen by this process: its index among the visible ones and what names it."""

    index: int
    ident: str  # the token to put in CUDA_VISIBLE_DEVICES (an ordinal or a UUID)
    name: str | None = None
    uuid: str | None = None

    def as_extra(self) -> dict[str, Any]:
        """The ``extra.gpu`` record a run cell carries."""
        return {"index": self.index, "uuid": self.uuid, "name": self.name}


def _from_env(environ: Mapping[str, str]) -> list[Gpu] | None:
    for var in VISIBILITY_VARS:
        raw = environ.get(var)
        if raw is None:
            continue
        tokens = [t.strip() for t in raw.split(",") if t.strip()]
        # CUDA stops at the first invalid entry ("-1" hides everything after it).
        kept: list[str] = []
        for tok in tokens:
            if tok.startswith("-"):
                break
            kept.append(tok)
        return [Gpu(i, tok, uuid=tok if not tok.isdigit() else None) for i, tok in enumerate(kept)]
    return None


def _run_tool(argv: Sequence[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


_NVSMI_RE = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]+)\))?\s*$")


def _from_nvidia_smi(text: str) -> list[Gpu]:
    gpus: list[Gpu] = []
    for line in text.splitlines():
        m = _NVSMI_RE.match(line.strip())
        if m:
            gpus.append(Gpu(len(gpus), m.group(1), name=m.group(2), uuid=m.group(3)))
    return gpus


_AMDSMI_RE = re.compile(r"^GPU:\s*(\d+)\s*$")


def _from_amd_smi(text: str) -> list[Gpu]:
    gpus: list[Gpu] = []
    uuid: str | None = None
    for line in text.splitlines():
        m = _AMDSMI_RE.match(line.strip())
        if m:
            gpus.append(Gpu(len(gpus), m.group(1)))
            continue
        if gpus and line.strip().startswith("UUID:"):
            uuid = line.split(":", 1)[1].strip() or None
            last = gpus[-1]
            gpus[-1] = Gpu(last.index, last.ident, name=last.name, uuid=uuid)
    return gpus


def _from_nodes(dev: Path) -> list[Gpu]:
    nvidia = sorted(
        (p for p in glob.glob(str(dev / "nvidia*")) if re.fullmatch(r"nvidia\d+", Path(p).name)),
        key=lambda p: int(Path(p).name[6:]),
    )
    if nvidia:
        return [Gpu(i, Path(p).name[6:]) for i, p in enumerate(nvidia)]
    # A render node is any GPU (an iGPU too); counted only when no vendor tool answered.
    render = sorted(glob.glob(str(dev / "dri" / "renderD*")))
    return [Gpu(i, str(i)) for i in range(len(render))]


def list_gpus(environ: Mapping[str, str] | None = None, dev: Path = Path("/dev")) -> list[Gpu]:
    """The GPUs this process may use, without creating a GPU context."""
    env = os.environ if environ is None else environ
    found = _from_env(env)
    if found is not None:
        return found
    text = _run_tool(["nvidia-smi", "-L"])
    if text:
        gpus = _from_nvidia_smi(text)
        if gpus:
            return gpus
    text = _run_tool(["amd-smi", "list"])
    if text:
        gpus = _from_amd_smi(text)
        if gpus:
            return gpus
    return _from_nodes(dev)


def visible_gpus(environ: Mapping[str, str] | None = None, dev: Path = Path("/dev")) -> int:
    """How many GPUs this process may use (0 on a CPU-only host)."""
    return len(list_gpus(environ, dev))


def worker_index(worker_id: str) -> int:
    """``gw3`` -> 3; ``master`` (no xdist) -> 0."""
    if worker_id in ("", "master"):
        return 0
    m = _WORKER_RE.match(worker_id)
    if not m:
        raise UsageError(f"PYTEST_XDIST_WORKER: not an xdist worker id: {worker_id!r}")
    return int(m.group(1))


def pin_worker(worker_id: str, gpus: int | Sequence[Gpu] | Sequence[str]) -> dict[str, str]:
    """Environment that pins ``worker_id`` to one GPU, round-robin over ``gpus``.

    ``gpus`` is a count, a list of :class:`Gpu`, or the tokens to expose. Both vendors'
    variables are set so the same worker env works under CUDA and ROCm. No GPUs: ``{}``.
    """
    if isinstance(gpus, int):
        tokens = [str(i) for i in range(gpus)]
    else:
        tokens = [g.ident if isinstance(g, Gpu) else str(g) for g in gpus]
    if not tokens:
        return {}
    tok = tokens[worker_index(worker_id) % len(tokens)]
    return {var: tok for var in VISIBILITY_VARS}


def pytest_configure_pinning(
    config: Any = None, environ: dict[str, str] | None = None
) -> int | None:
    """Pin this xdist worker to one GPU before torch initialises a device.

    Call from ``pytest_configure``. Returns the index of the GPU among those visible to the
    controller (what the verify run records per worker), or None when nothing was pinned.
    ``config`` is accepted so the call reads naturally from the hook; pinning needs only the
    environment.
    """
    env = os.environ if environ is None else environ
    worker = env.get("PYTEST_XDIST_WORKER")
    if not worker:
        return None
    gpus = list_gpus(env)
    if not gpus:
        return None
    pinned = pin_worker(worker, gpus)
    env.update(pinned)
    idx = worker_index(worker) % len(gpus)
    # The verify recorder reads this to show which GPU each worker ran on.
    env["TETHER_GPU_INDEX"] = str(idx)
    return idx


# ----- per-GPU locks -------------------------------------------------------------------------


def gpu_lock_path(host_lock: Path | str, index: int) -> Path:
    """The lock of GPU ``index``: beside the host lock, ``<host lock>.gpu<N>``."""
    if index < 0:
        raise UsageError(f"gpu index: must be >= 0, got {index}")
    return Path(f"{host_lock}.gpu{index}")


@contextlib.contextmanager
def hold_gpu_lock(host_lock: Path | str | None, index: int, holder: str = "") -> Iterator[Path]:
    """Hold GPU ``index``'s lock for the block; HostBusyError if another process has it.

    The lock is the guard's own primitive (``tether.guard.lock.HostLock``) on the per-GPU
    path, so it keeps the guard's rules: local filesystem only, never follows a symlink,
    refuses a file another account owns, never deletes the lock file, writes a holder record.
    ``host_lock`` None means the guard's default host lock path.
    """

    path = gpu_lock_path(host_lock if host_lock is not None else default_lock_path(), index)
    lock = HostLock(path)
    if not lock.try_acquire(purpose=f"gpu {index} {holder}".strip()):
        raise HostBusyError(f"{path}: GPU {index} is locked by another worker")
    try:
        yield path
    finally:
        lock.release()
