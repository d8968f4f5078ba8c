"""The pytest plugin as an adopting project meets it: loaded by its pytest11 entry point (no
conftest line), its marks namespaced so an outside project's own marks stay its own, devices
pinned only when asked, and tether_measure judging a cell, listing it in a table, saving it
and comparing against a saved run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tether.bench.engine import TimingPolicy
from tether.pytest_plugin import has_gpu

from validate.suite.fixture_project import fixture_project

QUICK = TimingPolicy(min_sample_s=2e-4, min_reps=4, max_reps=4, warmup_calls=1)


def test_tether_measure_calls_a_deliberately_slower_b_a_loss(tether_measure) -> None:
    def fast() -> None:
        sum(range(200))

    def slow() -> None:
        sum(range(2000))

    # Host functions: timed by the wall clock on any host (a CUDA graph of them is empty).
    stat = tether_measure({"A": fast, "A2": fast, "B": slow}, policy=QUICK, device="cpu")
    assert stat.ratio < 1.0 and stat.verdict == "loss", stat
    assert len(stat.blocks) == 2
    # What a failing assert shows: one readable line, not a dataclass repr.
    assert str(stat).startswith(f"{stat.label}: B against A ") and "loss" in str(stat)
    assert "CellStat(" not in repr(stat)


def _pytest(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TETHER_ROOT", "PYTEST_ADDOPTS")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--strict-markers",
         *argv, str(folder)],
        cwd=folder, capture_output=True, text=True, timeout=180, check=False, env=env,
    )  # fmt: skip


OUTSIDE_TESTS = """\
import pytest
from tether.pytest_plugin import pin_gpus

def test_uses_the_fixture(tether_measure):
    assert callable(tether_measure)

@pytest.mark.gpu
def test_own_gpu_mark():
    pass  # the project's own mark: tether leaves it alone

@pytest.mark.tether_gpu(reason="FIXTURE")
def test_tether_gpu_mark():
    pass

def test_devices_are_pinned_only_when_asked(request):
    assert pin_gpus(request.config) is bool(request.config.getoption("--tether-pin-gpus"))
"""


def test_an_outside_project_keeps_its_own_marks(tmp_path: Path) -> None:
    """No [tool.tether] and no conftest line: the plugin loads, its marks are namespaced."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n  gpu: the project's own\n")
    (tmp_path / "test_outside.py").write_text(OUTSIDE_TESTS, encoding="utf-8")
    start = time.monotonic()
    done = _pytest(tmp_path, "-rs")
    assert done.returncode == 0, done.stdout + done.stderr
    # Its own `gpu` test runs on every host; tether's tether_gpu skips where no GPU is seen.
    want = "4 passed" if has_gpu() else "3 passed, 1 skipped"
    assert want in done.stdout and time.monotonic() - start < 180, done.stdout
    if not has_gpu():
        assert "needs a CUDA or ROCm GPU; none is visible (FIXTURE)" in done.stdout
    asked = _pytest(tmp_path, "--tether-pin-gpus", "-k", "pinned")
    assert asked.returncode == 0, asked.stdout + asked.stderr


def test_in_a_tether_project_the_short_marks_are_tethers(tmp_path: Path) -> None:
    fixture_project(tmp_path, files={}, figures=None, headline=None)
    (tmp_path / "test_inside.py").write_text(
        "import pytest\n\n@pytest.mark.gpu(reason='FIXTURE')\ndef test_marked():\n    pass\n",
        encoding="utf-8",
    )
    done = _pytest(tmp_path, "-rs")
    assert done.returncode == 0, done.stdout + done.stderr
    if has_gpu():
        assert "1 passed" in done.stdout, done.stdout
    else:
        assert "1 skipped" in done.stdout and "needs a CUDA or ROCm GPU" in done.stdout


MEASURE_TESTS = """\
import os
from tether.bench.engine import TimingPolicy

QUICK = TimingPolicy(min_sample_s=2e-4, min_reps=4, max_reps=4, warmup_calls=1)
WORK = int(os.environ.get("FIXTURE_B_WORK", "400"))

def test_pair(tether_measure):
    def a():
        sum(range(400))

    def b():
        sum(range(WORK))

    tether_measure({"A": a, "B": b}, policy=QUICK, device="cpu")
"""


def test_measure_prints_a_table_saves_a_run_and_compares(tmp_path: Path) -> None:
    fixture_project(tmp_path, files={}, figures=None, headline=None, doc_arches=())
    (tmp_path / "test_measure.py").write_text(MEASURE_TESTS, encoding="utf-8")
    done = _pytest(tmp_path, "--tether-save")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "tether_measure: median seconds per call" in done.stdout
    assert "test_measure.py::test_pair" in done.stdout and "A/A floor" in done.stdout
    (saved,) = (tmp_path / "results" / "cpu").glob("*-sweep-pytest-measure-cpu-*.json")
    run = json.loads(saved.read_text(encoding="utf-8"))
    assert run["guard"]["mode"] == "unguarded"  # a test suite's record, never evidence
    assert run["cells"][0]["key"] == {"test": "test_measure.py::test_pair"}
    # B given ten times the work, so the comparison below must fail at its threshold.
    slow = {**os.environ, "FIXTURE_B_WORK": "4000"}
    env_backup = dict(os.environ)
    try:
        os.environ.update(slow)
        failed = _pytest(tmp_path, "--tether-compare", "latest", "--tether-compare-fail", "50%")
        level = _pytest(
            tmp_path, "--tether-compare", saved.stem, "--tether-compare-fail", "median:100000%"
        )
    finally:
        os.environ.clear()
        os.environ.update(env_backup)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert f"slower than {saved.stem} by more than 50%" in failed.stdout
    assert level.returncode == 0, level.stdout + level.stderr
    assert f"B vs {saved.stem}" in level.stdout


def test_compare_fail_needs_compare(tmp_path: Path) -> None:
    fixture_project(tmp_path, files={}, figures=None, headline=None)
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n", encoding="utf-8")
    done = _pytest(tmp_path, "--tether-compare-fail", "5%")
    assert done.returncode == 4 and "needs --tether-compare" in done.stderr, done.stderr
