"""``tether sweep NAME --shards N`` on the CPU: shard workers, one merged run in the store.

The sweep is a FIXTURE registered by a plugin module the test writes into a FIXTURE project
(four tiny f32 cells timed with the minimum repetitions), so the whole launch stays within
seconds and also shows that an outside project's sweep shards like tether's own.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tether.bench.shard import load_shard
from tether.registry import REGISTRY
from tether.store import load_store

from validate.suite.fixture_project import fixture_project

ROOT = Path(__file__).resolve().parents[2]

PLUGIN = '''"""FIXTURE plugin for test_sharded_sweep: a tiny CPU sweep over tether_kernels' cases."""

import tether_kernels_plugin  # noqa: F401  (the attention case and arms)
from tether import registry
from tether.bench.engine import TimingPolicy
from tether.registry import Sweep

registry.sweep(
    Sweep(
        name="tiny-shard",
        case="attention",
        axes={"hq": (2,), "seqlen": (16, 32, 48, 64)},
        fixed={"batch": 1, "hkv": 2, "head_dim": 64, "dtype": "f32", "causal": True},
        arms={"A": "sdpa_math", "B": "sdpa_flash"},
        # max_reps ends each block at two samples; the cap only has to outlast one slow
        # repetition on a loaded host (past twice the cap the engine starts no new one).
        timing=TimingPolicy(min_sample_s=1e-5, min_reps=2, max_reps=2, warmup_calls=1, cell_cap_s=5.0),
        needs_gpu=False,
        replicates=2,
    )
)
'''


def _project(tmp_path: Path) -> Path:
    root = fixture_project(tmp_path / "project", plugins=("tiny_shard_plugin",))
    (root / "tiny_shard_plugin.py").write_text(PLUGIN, encoding="utf-8")
    return root


def _env(tmp_path: Path, root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
        "TETHER_GUARD_LOCK": str(tmp_path / "guard.lock"),
        "TETHER_GUARD_LOAD_LIMIT": "1000",
        "CUDA_VISIBLE_DEVICES": "",
        "HIP_VISIBLE_DEVICES": "",
    }


def test_sharded_sweep_merges_two_workers_into_one_guarded_run(tmp_path: Path) -> None:
    root = _project(tmp_path)
    store = tmp_path / "store"
    done = subprocess.run(
        [sys.executable, "-m", "tether", "--root", str(root), "--store", str(store), "sweep",
         "tiny-shard", "--shards", "2", "--shard-dir", str(tmp_path / "shards"), "--no-progress"],
        env=_env(tmp_path, root), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (run,) = load_store(store)
    assert run.status == "ok" and len(run.cells) == 4
    assert run.guard.mode == "nested" and run.evidence_grade  # each worker nested under the parent
    assert sorted({c.extra["gpu"]["index"] for c in run.cells}) == [0, 1]
    assert all(c.blocks == (2, 2) for c in run.cells)
    assert len(list((tmp_path / "shards").glob("*.shard*.json"))) == 2  # kept


def test_shards_of_an_unguarded_sweep_merge_unguarded(tmp_path: Path) -> None:
    from tether.cli import main

    root = _project(tmp_path)
    store = tmp_path / "store"
    env = _env(tmp_path, root)
    out, err = io.StringIO(), io.StringIO()
    old = dict(os.environ)
    os.environ.update(env)
    sys.path.insert(0, str(root))
    try:
        code = main(
            ["--root", str(root), "--store", str(store), "sweep", "tiny-shard", "--shards", "2",
             "--shard-dir", str(tmp_path / "shards"), "--no-progress", "--unguarded"],
            out, err,
        )  # fmt: skip
    finally:
        os.environ.clear()
        os.environ.update(old)
        sys.path.remove(str(root))
        # The plugin registered its sweep in this process: later tests (the CPU demo, which
        # wants exactly one CPU sweep) must not see it.
        REGISTRY.sweeps.pop("tiny-shard", None)
        sys.modules.pop("tiny_shard_plugin", None)
    assert code == 0, err.getvalue()
    (run,) = load_store(store)
    assert run.guard.mode == "unguarded" and not run.evidence_grade


SLOW_PLUGIN = '''"""FIXTURE plugin for test_sharded_sweep: a CPU sweep of no-op arms that sleep, whose B arm
marks (a file in $FIXTURE_MARKS) each cell it prepares, so a test can signal mid-grid."""

import os
import time
from pathlib import Path

from tether import registry
from tether.bench.engine import TimingPolicy
from tether.registry import Sweep


class SlowCase:
    def __init__(self, fields):
        self.key = dict(fields)
        self.work = 1.0e6

    def fields(self):
        return dict(self.key)

    def inputs(self, device, seed):
        return seed

    def reach(self, arch):
        return {}


class SleepArm:
    allowed_kernels = ()

    def __init__(self, name):
        self.name = name

    def supports(self, case, arch):
        return None

    def kernels_on(self, arch):
        return ()

    def prepare(self, case, inputs, arch):
        if self.name == "sleep_b":
            Path(os.environ["FIXTURE_MARKS"], f"{os.getpid()}-{case.key['n']}").touch()
        return lambda: time.sleep(0.01)


registry.case("slow")(SlowCase)
registry.arm(SleepArm("sleep_a"))
registry.arm(SleepArm("sleep_b"))
registry.sweep(
    Sweep(
        name="slow-shard",
        case="slow",
        axes={"n": tuple(range(12))},
        fixed={},
        arms={"A": "sleep_a", "B": "sleep_b"},
        timing=TimingPolicy(min_sample_s=1e-5, min_reps=2, max_reps=2, warmup_calls=1),
        needs_gpu=False,
        replicates=1,
        unit="rows",
    )
)
'''


@pytest.mark.parametrize(
    "signum",
    [
        pytest.param(signal.SIGTERM, id="SIGTERM"),
        pytest.param(signal.SIGHUP, id="SIGHUP"),
    ],
)
def test_a_stopped_parent_merges_what_its_workers_measured(tmp_path: Path, signum: int) -> None:
    # The signal goes to the parent alone (a scheduler's SIGTERM, a closed terminal's SIGHUP):
    # it must reach the workers, and their cells must land in one run before the parent exits.
    root = fixture_project(tmp_path / "project", plugins=("slow_shard_plugin",), headline=None)
    (root / "slow_shard_plugin.py").write_text(SLOW_PLUGIN, encoding="utf-8")
    marks = tmp_path / "marks"
    marks.mkdir()
    store, shards = tmp_path / "store", tmp_path / "shards"
    parent = subprocess.Popen(
        [sys.executable, "-m", "tether", "--root", str(root), "--store", str(store), "sweep",
         "slow-shard", "--shards", "2", "--shard-dir", str(shards), "--no-progress"],
        env={**_env(tmp_path, root), "FIXTURE_MARKS": str(marks)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 240
        # Both workers past their second cell: each has measured one, and is measuring on.
        while len({m.name.split("-")[0] for m in marks.glob("*-[1-9]*")}) < 2:
            assert parent.poll() is None, parent.communicate()
            assert time.monotonic() < deadline, "the workers never reached their second cell"
            time.sleep(0.02)
        parent.send_signal(signum)
        out, err = parent.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)  # a worker left measuring, were it so
    said = (out + err).decode()
    assert parent.returncode == 128 + signum, said
    written = [load_shard(p)["run"] for p in sorted(shards.glob("*.shard*.json"))]
    assert len(written) == 2, said  # each worker wrote what it measured
    measured = sorted(c["key"]["n"] for run in written for c in run["cells"])
    assert measured, said
    (run,) = load_store(store)
    assert sorted(c.key["n"] for c in run.cells) == measured, said
    assert run.status == "rejected" and "interrupted" in str(run.reason), said
