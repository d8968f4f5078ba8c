"""validate/gpu_session.py at toy size on the CPU: every step writes a run that validates."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tether.store import load_store

ROOT = Path(__file__).resolve().parents[2]
STEPS = {
    "triton-chunked-prefill",
    "prefill-triton-vs-sdpa",
    "chunked-prefill",
    "deferred-rescale-square",
    "deferred-rescale",
    "aa-release-demo",
}


@pytest.mark.slow
def test_gpu_session_tiny_runs_every_step_into_one_store(tmp_path: Path) -> None:
    # Fixture environment: the Triton interpreter (set before triton is imported, hence a
    # subprocess), a private guard lock, and a load limit a busy CI box cannot trip.
    env = {
        **os.environ,
        "TRITON_INTERPRET": "1",
        "TETHER_GUARD_LOCK": str(tmp_path / "guard.lock"),
        "TETHER_GUARD_LOAD_LIMIT": "1000",
    }
    store = tmp_path / "store"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "validate" / "gpu_session.py"), "--store", str(store),
         "--tiny", "--guard", "require"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    runs = load_store(store)
    assert {r.name for r in runs} == STEPS
    assert all(r.status == "ok" and r.guard for r in runs)
    demo = next(r for r in runs if r.name == "aa-release-demo")
    assert demo.config["timing"]["release_between_arms"] is True
    probe = next(r for r in runs if r.kind == "probe")
    assert probe.results["bound_tflops"] > 0
    table = proc.stdout.splitlines()
    assert table[0].split()[:3] == ["kind", "name", "status"]
    assert len(table) == 1 + len(STEPS) + 1  # header, one row per step, the closing line
