"""tether's pytest plugin: markers and hardware capabilities, in one place.

It loads wherever tether is installed (its ``pytest11`` entry point), so it stays out of the
way of projects that do not use it: its marks are namespaced, ``tether_gpu``, ``tether_triton``,
``tether_arch``, ``tether_devtool``, ``tether_cpu_toy``. The short names (``gpu``, ``triton``,
``arch``, ``devtool``, ``cpu_toy``) mean the same only in a project whose ``pyproject.toml`` has a
``[tool.tether]`` table (ini ``tether_short_markers`` true/false decides it elsewhere), so an
outside project's own ``gpu`` mark is never taken over.

Marks (skipped at collection time with the reason):

- ``tether_gpu`` / ``tether_gpu(reason=...)``: needs a CUDA or ROCm device (the reason says why).
- ``tether_triton``: runs a Triton kernel; needs a GPU or ``TRITON_INTERPRET=1``.
- ``tether_arch(*names)``: needs the detected arch to be one of ``names``.
- ``tether_devtool(*names)``: needs development tools (ruff, pre_commit, check-jsonschema, or
  ``repo-venv`` for the project's .venv that the pre-commit hooks run). Where they are
  missing the test skips saying so, except under CI (``CI`` set), where the dev extra is
  installed by .ci/run and a missing tool must fail, not vanish into a skip.
- ``tether_cpu_toy``: a toy run of the Triton interpreter on CPU tensors, in a subprocess with
  ``cpu_toy_env()``. It is the CPU host's check; a GPU host runs the compiled kernels instead.
- ``gate``, ``slow``: descriptive (see pyproject.toml), registered with the short names.

The ``routed_case`` fixture counts routed public-API calls by the arm they ran on; the
session writes the counts to ``$TETHER_VERIFY_SUMMARY`` when it is set (``tether verify``
sets it and records the counts in the verify run), merged over xdist workers. The
``tether_measure`` fixture, its table and ``--tether-save``/``--tether-compare`` live in
``tether._pytest_measure``.

Under xdist each worker is pinned to one GPU (``tether.gpus``) before torch is imported, only
when asked (``--tether-pin-gpus`` or ini ``tether_pin_gpus = true``). A skip here only ever
reflects missing hardware; an error in a test is never turned into one.
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

from tether import _pytest_measure, gpus
from tether._pytest_measure import pytest_addoption, tether_measure
from tether.arch import detect_arch
from tether.atomic import write_atomic
from tether.gpus import device, has_gpu
from tether.project import is_project

# device and has_gpu live in tether.gpus (tether_measure needs them too); tests import them here.
__all__ = ["device", "has_gpu", "pytest_addoption", "tether_measure"]

# The hardware marks: short name -> what it needs. Registered as tether_<name> always, and by
# the short name only in projects that use tether (see short_markers).
HARDWARE: dict[str, str] = {
    "gpu": "gpu(reason=...): needs a CUDA or ROCm device",
    "triton": "triton: runs a Triton kernel (a GPU, or TRITON_INTERPRET=1 on the CPU)",
    "arch": "arch(*names): needs the detected arch to be one of names",
    "devtool": "devtool(*names): needs development tools (skips outside CI when they are missing)",
    "cpu_toy": "cpu_toy: a toy interpreter run on CPU tensors (the CPU host's check; skips on "
    "GPU hosts)",
}
PREFIX = "tether_"
DESCRIPTIVE: tuple[str, ...] = (
    "gate: throughput gate (measures a named shape and fails below its policy threshold)",
    "slow: takes more than a few seconds on the CPU",
)
MARKERS: tuple[str, ...] = tuple(PREFIX + line for line in HARDWARE.values())
_SHORT = pytest.StashKey[bool]()


def short_markers(config: pytest.Config) -> bool:
    """Whether the unprefixed marks are tether's here: ini ``tether_short_markers`` when set to
    true or false, else whether the pytest root's pyproject.toml has a [tool.tether] table."""
    value = str(config.getini("tether_short_markers")).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False

    return is_project(Path(str(config.rootpath)))


def interpreter_on() -> bool:
    """True when Triton kernels run in the CPU interpreter."""
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


@functools.lru_cache(maxsize=1)
def current_arch() -> str:
    """The arch tests run on: the GPU's, or ``cpu``."""

    return detect_arch()


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


def dev_tool_present(name: str, root: Path | None = None) -> bool:
    """A dev tool is importable, beside this interpreter, or on PATH (``repo-venv``: the
    ``.venv`` of the project at ``root``, the pytest root, that ``make setup`` creates)."""
    if name == "repo-venv":
        base = root if root is not None else Path.cwd()
        return (base / ".venv" / "bin" / "python").exists()
    if importlib.util.find_spec(name.replace("-", "_")) is not None:
        return True
    return (Path(sys.executable).parent / name).exists() or shutil.which(name) is not None


def _mark(item: Any, name: str) -> Any:
    """``item``'s ``tether_<name>`` mark, or its ``<name>`` mark where short names are tether's."""
    found = item.get_closest_marker(PREFIX + name)
    if found is None and item.config.stash.get(_SHORT, False):
        found = item.get_closest_marker(name)
    return found


def skip_reason(item: Any) -> str | None:
    """Why ``item`` cannot run on this machine, or None."""
    gpu_mark = _mark(item, "gpu")
    if gpu_mark is not None and not has_gpu():
        why = gpu_mark.kwargs.get("reason")
        return f"needs a CUDA or ROCm GPU; none is visible{f' ({why})' if why else ''}"
    if _mark(item, "triton") is not None and not (has_gpu() or interpreter_on()):
        return "Triton needs a GPU, or TRITON_INTERPRET=1 to run on the CPU interpreter"
    arch_mark = _mark(item, "arch")
    if arch_mark is not None and current_arch() not in arch_mark.args:
        return f"needs arch {'/'.join(arch_mark.args)}; this machine is {current_arch()}"
    if _mark(item, "cpu_toy") is not None and has_gpu():
        return CPU_TOY_REASON
    tool_mark = _mark(item, "devtool")
    if tool_mark is not None and not os.environ.get("CI"):
        root = Path(str(item.config.rootpath))
        missing = [name for name in tool_mark.args if not dev_tool_present(name, root)]
        if missing:
            return f"dev tools not installed here: {', '.join(missing)} (pip install -e '.[dev]')"
    return None


def pin_gpus(config: pytest.Config) -> bool:
    """Pinning xdist workers to GPUs was asked for (option or ini)."""
    flag = config.getoption("--tether-pin-gpus")
    return bool(flag) if flag is not None else bool(config.getini("tether_pin_gpus"))


def pytest_configure(config: pytest.Config) -> None:
    short = short_markers(config)
    config.stash[_SHORT] = short
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    if short:
        for line in (*HARDWARE.values(), *DESCRIPTIVE):
            config.addinivalue_line("markers", line)
    config.stash[_ROUTED] = collections.Counter()
    start_failure_log(config)
    _pytest_measure.configure(config)
    if pin_gpus(config):
        # Pin before anything imports torch: CUDA reads the visibility variables once. Called
        # through its module: a pytest_* name imported here would be taken for a hook.
        gpus.pytest_configure_pinning(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not any(_mark(item, m) is not None for m in HARDWARE):
            continue  # items without hardware marks never pay for importing torch
        reason = skip_reason(item)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


# ----- routed public-API cases, counted by arm ------------------------------------------------

SUMMARY_ENV = "TETHER_VERIFY_SUMMARY"
_ROUTED = pytest.StashKey[collections.Counter[str]]()
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
    _pytest_measure.merge_worker(node.config, node)


def write_routed_summary(path: Path, counts: collections.Counter[str]) -> None:
    """``{"routed_cases": {arm: n}}`` to ``path``, atomically (a reader never sees half)."""

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


# ----- failures as they happen ----------------------------------------------------------------

# A suite cut off before its summary (a lent host's deadline) writes no junit xml and prints
# no failure list; this file, appended to as each failure is reported, still names them. At
# 3e172c2 a verify stopped at 96% with 16 failures shown as "F" and nothing else.
FAILURES_ENV = "TETHER_VERIFY_FAILURES"
MESSAGE_CHARS = 400


def failure_line(report: pytest.TestReport) -> str:
    """One JSON line for a failed report: its node id, phase and the error's message (the
    crash line pytest shows after ``E``, else the report's last line)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if not message:
        text = [t.strip() for t in report.longreprtext.splitlines() if t.strip()]
        message = text[-1] if text else ""
    return json.dumps(
        {"nodeid": report.nodeid, "when": report.when, "message": message[:MESSAGE_CHARS]}
    )


def read_failures(path: Path) -> list[dict[str, str]]:
    """The failures ``pytest_runtest_logreport`` appended, in order; a torn last line (the
    writer killed mid-write) is left out, any other bad line is a ValueError naming it."""
    if not path.exists():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines, 1):
        try:
            item = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines):
                break
            raise ValueError(f"{path}:{i}: not a JSON line") from None
        if not isinstance(item, dict) or not isinstance(item.get("nodeid"), str):
            raise ValueError(f"{path}:{i}: expected an object with a nodeid")
        out.append({k: str(item.get(k, "")) for k in ("nodeid", "when", "message")})
    return out


class FailureLog:
    """Appends each failure to one file as it is reported (registered in the controller
    alone: under xdist a report reaches the hook in its worker and again in the controller)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not report.failed:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.write(failure_line(report) + "\n")


def start_failure_log(config: pytest.Config) -> None:
    """Register a FailureLog for ``$TETHER_VERIFY_FAILURES`` in the controller, taking the
    variable out of the environment: a test that runs a suite of its own (this project's
    tests of tether do, with failures on purpose) must not write into the outer one's."""
    path = os.environ.pop(FAILURES_ENV, None)
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(FailureLog(Path(path)), "tether-failure-log")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    counts = config.stash.get(_ROUTED, collections.Counter())
    workeroutput = getattr(config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: the controller merges and writes
        workeroutput[_WORKER_OUTPUT] = dict(counts)
        workeroutput[_pytest_measure._WORKER_RESULTS] = _pytest_measure.worker_output(config)
        return
    path = os.environ.get(SUMMARY_ENV)
    if path:
        write_routed_summary(Path(path), counts)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and _pytest_measure.summary(reporter, config):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
