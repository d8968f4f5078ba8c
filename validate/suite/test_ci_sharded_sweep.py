"""ci/sharded_sweep.py on the CPU: two shard workers, one merged run in the store.

The sweep is a FIXTURE written by the test into a scratch checkout: four tiny f32 cells timed
with the minimum repetitions, so the whole launch stays within seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tether.store import load_store

ROOT = Path(__file__).resolve().parents[2]

TINY_SWEEP = '''"""FIXTURE sweep for test_ci_sharded_sweep: tiny, CPU, minimum repetitions."""

from tether.bench.engine import TimingPolicy
from tether.bench.sweep import SweepDef

SWEEP = SweepDef(
    name="tiny-shard",
    axes={"hq": (2,), "seqlen": (16, 32, 48, 64)},
    fixed={"batch": 1, "hkv": 2, "head_dim": 64, "dtype": "f32", "causal": True},
    arms={"A": "sdpa_math", "B": "sdpa_flash"},
    timing=TimingPolicy(
        min_sample_s=1e-5, min_reps=2, max_reps=2, warmup_calls=1, cell_cap_s=0.05
    ),
    needs_gpu=False,
)
'''


def _scratch(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "validate" / "sweeps").mkdir(parents=True)
    (root / "validate" / "sweeps" / "tiny_shard.py").write_text(TINY_SWEEP, encoding="utf-8")
    for name in ("kernels", "lib"):  # what the harness and kernel fingerprints read
        shutil.copytree(ROOT / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_run_shard_in_process_merges(tmp_path: Path) -> None:
    from tether.bench.shard import merge_shards, run_shard
    from tether.bench.sweep import Target, load_sweep

    root = _scratch(tmp_path)
    sweep = load_sweep("tiny-shard", root)
    target = Target("cpu", "cpu", "cpu: fixture")
    paths = [
        run_shard(
            sweep,
            i,
            2,
            tmp_path / "shards",
            root=root,
            gpu={"index": i, "uuid": None, "name": "cpu: fixture"},
            target=target,
        )
        for i in range(2)
    ]
    run = merge_shards(paths)
    assert run.status == "ok"
    assert {c.key["seqlen"]: c.extra["gpu"]["index"] for c in run.cells} == {
        16: 0,
        32: 1,
        48: 0,
        64: 1,
    }
    assert all(set(c.samples) == {"A", "A2", "B"} for c in run.cells)


@pytest.mark.slow  # two worker processes each import torch: tens of seconds on 2 cores
def test_sharded_sweep_merges_two_workers(tmp_path: Path) -> None:
    root = _scratch(tmp_path)
    env = dict(os.environ, TETHER_GUARD_LOCK=str(tmp_path / "host.lock"))
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "PYTEST_XDIST_WORKER"):
        env.pop(var, None)
    env["CUDA_VISIBLE_DEVICES"] = ""  # no GPU for the fixture, even on a GPU host
    shards = tmp_path / "shards"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "ci" / "sharded_sweep.py"),
            "tiny-shard",
            "--shards",
            "2",
            "--shard-dir",
            str(shards),
            "--root",
            str(root),
            "--store",
            str(tmp_path / "results"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert len(list(shards.glob("*.shard*.json"))) == 2  # kept beside the merged run
    (run,) = load_store(tmp_path / "results")
    assert run.name == "tiny-shard" and run.status == "ok"
    assert sorted(c.key["seqlen"] for c in run.cells) == [16, 32, 48, 64]
    by_gpu = {c.key["seqlen"]: c.extra["gpu"]["index"] for c in run.cells}
    assert by_gpu == {16: 0, 32: 1, 48: 0, 64: 1}  # round-robin, all roles of a cell together
    assert all(set(c.samples) == {"A", "A2", "B"} for c in run.cells)
    assert (tmp_path / "host.lock.gpu0").exists() and (tmp_path / "host.lock.gpu1").exists()
    json.dumps(run.to_json())
