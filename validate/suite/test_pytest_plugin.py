"""The pytest plugin as an adopting project meets it: loaded by its pytest11 entry point (no
conftest line), its markers registered, and tether_measure judging a cell a test can fail."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tether.bench.engine import TimingPolicy

QUICK = TimingPolicy(min_sample_s=2e-4, min_reps=4, max_reps=4, warmup_calls=1)


def test_tether_measure_calls_a_deliberately_slower_b_a_loss(tether_measure) -> None:
    def fast() -> None:
        sum(range(200))

    def slow() -> None:
        sum(range(2000))

    stat = tether_measure({"A": fast, "A2": fast, "B": slow}, policy=QUICK)
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
    assert "1 passed" in done.stdout and time.monotonic() - start < 120
