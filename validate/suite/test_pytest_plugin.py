"""The pytest plugin as an adopting project meets it: loaded by its pytest11 entry point (no
conftest line), its markers registered, and tether_measure judging a cell a test can fail."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tether.bench.engine import TimingPolicy
from tether.pytest_plugin import has_gpu

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


def test_the_plugin_loads_in_a_project_without_a_conftest(tmp_path: Path) -> None:
    (tmp_path / "test_outside.py").write_text(
        "def test_uses_the_fixture(tether_measure):\n"
        "    assert callable(tether_measure)\n"
        "import pytest\n"
        "@pytest.mark.gpu(reason='FIXTURE')\n"
        "def test_marked():\n"
        "    pass\n",
        encoding="utf-8",
    )
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--strict-markers",
         str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    # The gpu-marked test runs where a GPU is visible and skips, with its reason, elsewhere.
    want = "2 passed" if has_gpu() else "1 passed, 1 skipped"
    assert want in done.stdout and time.monotonic() - start < 120, done.stdout
