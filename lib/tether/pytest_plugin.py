"""tether's pytest plugin: markers and hardware capabilities, in one place.

Marks (registered here, skipped at collection time with the reason):

- ``gpu`` / ``gpu(reason=...)``: needs a CUDA or ROCm device (the reason says why, e.g. bf16).
- ``triton``: runs a Triton kernel; needs a GPU or ``TRITON_INTERPRET=1`` (the CPU interpreter).
- ``arch(*names)``: needs the detected arch to be one of ``names`` (e.g. ``arch("sm90")``).
- ``devtool(*names)``: needs development tools (ruff, pre_commit, check-jsonschema, or
  ``repo-venv`` for the checkout's .venv that the pre-commit hooks run). Where they are
  missing the test skips saying so, except under CI (``CI`` set), where the dev extra is
  installed by .ci/run and a missing tool must fail, not vanish into a skip.
- ``cpu_toy``: a toy run of the Triton interpreter on CPU tensors, in a subprocess with
  ``cpu_toy_env()``. It is the CPU host's check; a GPU host runs the compiled kernels instead.
- ``gate``, ``slow``: descriptive (see pyproject.toml).

The ``routed_case`` fixture counts routed public-API calls by the arm they ran on; the
session writes the counts to ``$TETHER_VERIFY_SUMMARY`` when it is set (``tether verify``
sets it and records the counts in the verify run), merged over xdist workers.

Under xdist each worker is pinned to one GPU (``tether.gpus``) before torch is imported.
A skip here only ever reflects missing hardware; an error in a test is never turned into one.
"""

from __future__ import annotations

import collections
import functools
import importlib.util
import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

MARKERS: tuple[str, ...] = (
    "gpu(reason=...): needs a CUDA or ROCm device",
    "triton: runs a Triton kernel (a GPU, or TRITON_INTERPRET=1 on the CPU)",
    "arch(*names): needs the detected arch to be one of names",
    "devtool(*names): needs development tools (skips outside CI when they are missing)",
    "cpu_toy: a toy interpreter run on CPU tensors (the CPU host's check; skips on GPU hosts)",
    "gate: throughput gate (measures a named shape and fails below its policy threshold)",
    "slow: takes more than a few seconds on the CPU",
)


def interpreter_on() -> bool:
    """True when Triton kernels run in the CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


@functools.lru_cache(maxsize=1)
def has_gpu() -> bool:
    """A CUDA or ROCm device is visible to torch."""
    import torch

    return bool(torch.cuda.is_available())


@functools.lru_cache(maxsize=1)
def current_arch() -> str:
    """The arch tests run on: the GPU's, or ``cpu``."""
    from tether.arch import detect_arch

    return detect_arch()


def device() -> str:
    """The torch device string tests allocate on."""
    return "cuda" if has_gpu() else "cpu"


# Why a cpu_toy test does not run on a GPU host.
CPU_TOY_REASON = (
    "toy interpreter run for CPU hosts: a GPU host runs the compiled kernel "
    "(validate/correctness), and triton 3.6's interpreter rejects the kernel's tensor "
    "loop bound that the compiler and triton 3.9's interpreter accept"
)


def cpu_toy_env(**extra: str) -> dict[str, str]:
    """Environment for a cpu_toy subprocess: the interpreter (set before triton is imported)
    on CPU tensors, GPUs hidden, so every host runs the same toy problem."""
    return {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "CUDA_VISIBLE_DEVICES": "",
        "HIP_VISIBLE_DEVICES": "",
        **extra,
    }


def dev_tool_present(name: str) -> bool:
    """A dev tool is importable, beside this interpreter, or on PATH (``repo-venv``: .venv)."""
    if name == "repo-venv":
        return (Path(__file__).resolve().parents[1] / ".venv" / "bin" / "python").exists()
    if importlib.util.find_spec(name.replace("-", "_")) is not None:
        return True
    return (Path(sys.executable).parent / name).exists() or shutil.which(name) is not None


def skip_reason(item: Any) -> str | None:
    """Why ``item`` cannot run on this machine, or None."""
    gpu_mark = item.get_closest_marker("gpu")
    if gpu_mark is not None and not has_gpu():
        why = gpu_mark.kwargs.get("reason")
        return f"needs a CUDA or ROCm GPU; none is visible{f' ({why})' if why else ''}"
    if item.get_closest_marker("triton") is not None and not (has_gpu() or interpreter_on()):
        return "Triton needs a GPU, or TRITON_INTERPRET=1 to run on the CPU interpreter"
    arch_mark = item.get_closest_marker("arch")
    if arch_mark is not None and current_arch() not in arch_mark.args:
        return f"needs arch {'/'.join(arch_mark.args)}; this machine is {current_arch()}"
    if item.get_closest_marker("cpu_toy") is not None and has_gpu():
        return CPU_TOY_REASON
    tool_mark = item.get_closest_marker("devtool")
    if tool_mark is not None and not os.environ.get("CI"):
        missing = [name for name in tool_mark.args if not dev_tool_present(name)]
        if missing:
            return f"dev tools not installed here: {', '.join(missing)} (pip install -e '.[dev]')"
    return None


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    config.stash[_ROUTED] = collections.Counter()
    # Pin before anything imports torch: CUDA reads the visibility variables once.
    from tether.gpus import pytest_configure_pinning

    pytest_configure_pinning(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    hardware = ("gpu", "triton", "arch", "devtool", "cpu_toy")
    for item in items:
        if not any(item.get_closest_marker(m) is not None for m in hardware):
            continue  # items without hardware marks never pay for importing torch
        reason = skip_reason(item)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def tether_measure() -> Any:
    """Measure one sweep cell inside a test, with tether's engine and statistics.

        def test_fused_beats_ops(tether_measure):
            stat = tether_measure({"A": ops_call, "A2": ops_call_2, "B": fused_call})
            assert stat.verdict != "loss", stat

    Roles: ``A`` (the baseline), ``B`` (the arm under test) and ``A2``, a second, separately
    prepared instance of A (the A/A control; when left out, A is timed twice, which measures
    timer noise only). Returns a ``tether.stats.CellStat`` judged against its A/A floor and
    replicate band (``blocks`` replicate blocks of the engine's samples). ``device`` "cpu"
    times host functions by the wall clock (default: this host's device, where the calls
    launch GPU work and are timed by CUDA graphs). A test that needs a
    number kept belongs in a sweep that writes a run; this is for checks a test can fail.
    """
    from collections.abc import Mapping

    default_device = device  # the module's: where this host's tests run

    def measure(
        calls: Mapping[str, Callable[[], object]],
        *,
        policy: Any = None,
        blocks: int = 2,
        work: float = 1.0,
        device: str | None = None,
    ) -> Any:
        from tether.bench.engine import TimingPolicy
        from tether.bench.engine import measure as engine_measure
        from tether.stats import cell_stat
        from tether.store.model import Cell

        if not {"A", "B"} <= set(calls):
            raise pytest.UsageError("tether_measure: calls need roles A and B (and ideally A2)")
        roles = {"A": calls["A"], "A2": calls.get("A2", calls["A"]), "B": calls["B"]}
        timing = policy or TimingPolicy()
        dev = device or default_device()
        samples: dict[str, list[float]] = {r: [] for r in roles}
        sizes = []
        for block in range(max(1, blocks)):
            got = engine_measure(roles, timing, device=dev, seed=timing.seed + block).samples
            for role, vals in got.items():
                samples[role].extend(vals)
            sizes.append(len(got["A"]))
        cell = Cell(
            key={"cell": "tether_measure"},
            work=work,
            samples={r: tuple(v) for r, v in samples.items()},
            blocks=tuple(sizes) if len(sizes) > 1 else (),
        )
        return cell_stat(cell, {})

    return measure


# ----- routed public-API cases, counted by arm ------------------------------------------------

SUMMARY_ENV = "TETHER_VERIFY_SUMMARY"
_ROUTED = pytest.StashKey[collections.Counter]()
_WORKER_OUTPUT = "tether_routed_cases"


@pytest.fixture
def routed_case(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Call with the arm one routed public-API call ran on; the session counts them by arm."""
    counts = request.config.stash[_ROUTED]

    def record(arm: str) -> None:
        counts[arm] += 1

    return record


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """xdist controller: add a finished worker's counts (sent in its workeroutput)."""
    counts = node.config.stash[_ROUTED]
    for arm, n in getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT, {}).items():
        counts[arm] += n


def write_routed_summary(path: Path, counts: collections.Counter) -> None:
    """``{"routed_cases": {arm: n}}`` to ``path``, atomically (a reader never sees half)."""
    from tether.atomic import write_atomic

    payload = json.dumps({"routed_cases": dict(sorted(counts.items()))}) + "\n"
    write_atomic(path, payload.encode("utf-8"))


def read_routed_summary(path: Path) -> dict[str, int]:
    """The counts ``write_routed_summary`` wrote; ValueError naming what is wrong otherwise."""
    data = json.loads(path.read_text(encoding="utf-8"))
    counts = data.get("routed_cases") if isinstance(data, dict) else None
    if not isinstance(counts, dict):
        raise ValueError(f"{path}: no routed_cases object")
    for arm, n in counts.items():
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"{path}: routed_cases.{arm}: expected a non-negative int, got {n!r}")
    return counts


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    counts = config.stash.get(_ROUTED, collections.Counter())
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller merges and writes
        workeroutput[_WORKER_OUTPUT] = dict(counts)
        return
    path = os.environ.get(SUMMARY_ENV)
    if path:
        write_routed_summary(Path(path), counts)
