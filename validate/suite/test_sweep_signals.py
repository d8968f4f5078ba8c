"""No measurement is lost (issue 25 item 2): stop signals and stepped clocks during a sweep.

Each test runs a FIXTURE sweep on the CPU with no-op arms (validate/suite/test_bench_sweep's
fakes) on a ``SafeBench`` inside ``StopSignals``, as ``tether sweep`` does (cli/bench.py's
bench_for), into a tmp store, and delivers a real signal to this process at a chosen point.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from tether import stopping
from tether.stopping import Interrupted, SafeBench, StopSignals
from tether.store import load_store

from validate.suite.test_bench_sweep import CPU, ROOT, FakeArm, fake_registry, fake_sweep


def safe(store: Path, reg: Any, sigs: StopSignals | None = None) -> SafeBench:
    return SafeBench(
        ROOT,
        store,
        reg,
        CPU,
        unguarded_reason="FIXTURE: unit test",
        profiler=lambda fn, dev: ["x"],
        signals=sigs,
    )


def _sweep(measuring: SafeBench) -> Any:
    """As bench_for: the bench's signals entered around the sweep, a held one released after."""
    assert measuring.signals is not None
    with measuring.signals as sigs:
        try:
            run = measuring.sweep(fake_sweep())
            sigs.release()
            return run
        except KeyboardInterrupt as exc:
            raise sigs.as_raised(exc) from None


class SignallingArm(FakeArm):
    """Fixture arm whose call sends ``signum`` to this process once ``at`` cells passed."""

    def __init__(self, name: str, signum: int, at: int) -> None:
        super().__init__(name)
        self.signum, self.at = signum, at

    def prepare(self, case: Any, inputs: Any, arch: str) -> Any:
        self.prepared.append(1)
        cell = len(self.prepared) - 1  # B is prepared buffer_sets times per cell
        from validate.suite.test_bench_sweep import QUICK

        stop = cell // QUICK.buffer_sets >= self.at

        def call() -> None:
            if stop:
                os.kill(os.getpid(), self.signum)

        return call


@pytest.mark.parametrize(
    "signum",
    [
        pytest.param(signal.SIGINT, id="SIGINT"),
        pytest.param(signal.SIGTERM, id="SIGTERM"),
        pytest.param(signal.SIGHUP, id="SIGHUP"),
    ],
)
def test_a_signal_mid_sweep_writes_the_cells_so_far(tmp_path: Path, signum: int) -> None:
    reg = fake_registry(fake_a=FakeArm("fake_a"), fake_b=SignallingArm("fake_b", signum, 2))
    before = signal.getsignal(signum)
    with pytest.raises(Interrupted) as stopped:
        _sweep(safe(tmp_path, reg, StopSignals()))
    assert stopped.value.signum == signum
    (run,) = load_store(tmp_path)
    assert run.status == "rejected"
    assert run.reason == "interrupted after 2 of 3 cell blocks"
    assert [c.key for c in run.cells] == [{"seqlen": 8}, {"seqlen": 16}]
    assert signal.getsignal(signum) == before  # the handlers are put back


class FakeHolding:
    """Fixture holding: the guard's closing idle check (``recheck``) sends ``signum``."""

    def __init__(self, signum: int | None) -> None:
        self.signum = signum

    @contextlib.contextmanager
    def arm(self, label: str) -> Iterator[None]:
        yield None

    def recheck(self) -> None:
        if self.signum is not None:
            os.kill(os.getpid(), self.signum)

    def evidence(self) -> dict[str, Any]:
        return {
            "nested": False,
            "lock": "/tmp/fixture.lock",
            "holder": {"pid": os.getpid()},
            "before": {"state": "idle"},
            "after": {"state": "idle"},
            "arms": [],
            "waited_s": 0.0,
        }


def test_ctrl_c_in_the_closing_idle_check_keeps_the_complete_run(tmp_path: Path) -> None:
    reg = fake_registry(fake_a=FakeArm("fake_a"), fake_b=FakeArm("fake_b"))
    measuring = safe(tmp_path, reg, StopSignals())
    measuring.holding = FakeHolding(signal.SIGTERM)
    with pytest.raises(Interrupted) as stopped:
        _sweep(measuring)
    assert stopped.value.signum == signal.SIGTERM
    (run,) = load_store(tmp_path)
    assert run.status == "ok" and len(run.cells) == 3
    assert run.guard.mode == "held"


def test_a_clock_stepped_back_is_recorded_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real_now = datetime.now(timezone.utc)

    class SteppedClock(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> datetime:  # type: ignore[override]
            calls.append(1)
            # The first reading is the start; every later one is an hour earlier.
            return real_now if len(calls) == 1 else real_now - timedelta(hours=1)

    monkeypatch.setattr(stopping, "datetime", SteppedClock)
    # The bench's own wall stamps step back too: without the steady duration the run would
    # end before it started and be refused.
    from tether.bench import sweep as sweep_mod

    real_time = sweep_mod.time.time
    stamps: list[float] = []

    def stepped_time() -> float:
        stamps.append(1)
        return real_time() - (0 if len(stamps) == 1 else 3600)

    monkeypatch.setattr(sweep_mod.time, "time", stepped_time)
    reg = fake_registry(fake_a=FakeArm("fake_a"), fake_b=FakeArm("fake_b"))
    run = safe(tmp_path, reg).sweep(fake_sweep())
    assert run.status == "ok"
    assert run.provenance.ended >= run.provenance.started
    assert run.config["clock"]["wall_step_s"] < -3000
    assert load_store(tmp_path)[0].id == run.id
