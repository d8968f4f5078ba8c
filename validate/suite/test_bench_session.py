"""validate/gpu_session.py at toy size on the CPU: every step writes a run that validates."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from tether.pytest_plugin import cpu_toy_env
from tether.store import load_store

ROOT = Path(__file__).resolve().parents[2]
STEPS = {
    "triton-chunked-prefill",
    "prefill-triton-vs-sdpa",
    "chunked-prefill",
    "deferred-rescale-square",
    "deferred-rescale",
    "aa-release-demo",
    "aa-control-demo",
}


@pytest.mark.slow
@pytest.mark.cpu_toy
def test_gpu_session_tiny_runs_every_step_into_one_store(tmp_path: Path) -> None:
    # Fixture environment: the toy interpreter run on the CPU everywhere (on a GPU host the
    # suite's other workers are busy on the GPUs, and this fixture is not measuring them), a
    # private guard lock, and a load limit a busy CI box cannot trip.
    env = cpu_toy_env(
        TETHER_GUARD_LOCK=str(tmp_path / "guard.lock"), TETHER_GUARD_LOAD_LIMIT="1000"
    )
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
    assert table[0].split()[-1] == "secs"
    for step in STEPS - {"triton-chunked-prefill"}:
        assert f"gpu_session: {step}: ok in " in proc.stderr


def session_module():
    spec = importlib.util.spec_from_file_location(
        "gpu_session", ROOT / "validate" / "gpu_session.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_default_budget_fits_one_device_call_with_room_to_start() -> None:
    session = session_module()
    budget = session.DEFAULT_BUDGET_S
    shares = session.PROBE_SHARE + sum(share for _, share in session.STEPS)
    assert shares <= 0.9  # the rest is start-up, compilation and overruns
    assert budget + 30 <= 9.5 * 60
    # The main map's per-cell cap, scaled to its share, still leaves the overhead room.
    prefill = session.fit(session.load_sweep("prefill-triton-vs-sdpa", ROOT), 0.45 * budget)
    cells = len(prefill.keys())
    assert cells * prefill.timing.cell_cap_s <= session.SAMPLING_FRACTION * 0.45 * budget + 1e-6
    assert prefill.timing.cell_cap_s >= 3.0


def test_skip_and_only_pick_steps_and_refuse_unknown_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = session_module()
    every = [a for name in session.STEP_NAMES for a in ("--skip", name)]
    assert session.main(["--store", str(tmp_path), "--guard", "off", *every]) == 0
    assert "no step was run" in capsys.readouterr().out
    assert not tmp_path.exists() or not any(tmp_path.rglob("*.json"))
    with pytest.raises(SystemExit) as exc:
        session.main(["--store", str(tmp_path), "--skip", "nope"])
    assert exc.value.code == 2
    assert "unknown step nope" in capsys.readouterr().err
