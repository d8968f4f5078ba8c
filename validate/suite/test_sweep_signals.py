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
from tether.bench.engine import TimingPolicy
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


def _sweep(measuring: SafeBench, sweep: Any = None) -> Any:
    """As bench_for: the bench's signals entered around the sweep (the fixture sweep unless
    given), a held one released after."""
    assert measuring.signals is not None
    with measuring.signals as sigs:
        try:
            run = measuring.sweep(sweep or fake_sweep())
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


class Events(list[int]):
    """Every prepare and timed call of a sweep's arms (each its cell's seqlen), in order; sends
    ``signum`` to this process as the ``at``-th is logged, whichever role logs it."""

    def __init__(self, signum: int | None = None, at: int = -1) -> None:
        super().__init__()
        self.signum, self.at = signum, at

    def log(self, seqlen: int) -> None:
        self.append(seqlen)
        if self.signum is not None and len(self) - 1 == self.at:
            os.kill(os.getpid(), self.signum)


class EventArm(FakeArm):
    """Fixture arm whose prepares and calls are logged in ``events``, shared by both roles."""

    def __init__(self, name: str, events: Events) -> None:
        super().__init__(name)
        self.events = events

    def prepare(self, case: Any, inputs: Any, arch: str) -> Any:
        seqlen = case.fields()["seqlen"]
        self.events.log(seqlen)
        return lambda: self.events.log(seqlen)


def _event_registry(events: Events) -> Any:
    return fake_registry(fake_a=EventArm("fake_a", events), fake_b=EventArm("fake_b", events))


POINTS = 20
# One call per sample (a sample floor no call misses): the engine's calibration then makes the
# same events in every run, so a point names the same moment of the sweep each time.
ONE_CALL = fake_sweep().replace(
    timing=TimingPolicy(min_sample_s=1e-9, min_reps=3, max_reps=3, warmup_calls=1)
)


@pytest.mark.parametrize("point", range(POINTS))
@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_a_signal_at_any_point_keeps_every_cell_measured_before_it(
    tmp_path: Path, signum: int, point: int
) -> None:
    # Issue 47 item 3: each signal at POINTS points spread over a sweep's events (both roles'
    # prepares and timed calls, every cell), and once in the closing idle check (below). A clean sweep first counts the events; a cell that a later cell's event
    # followed was measured before the signal, and must be in the run that is written.
    clean = Events()
    _sweep(safe(tmp_path / "clean", _event_registry(clean), StopSignals()), ONE_CALL)
    at = point * (len(clean) - 1) // (POINTS - 1)
    events = Events(signum, at)
    with pytest.raises(Interrupted) as stopped:
        _sweep(safe(tmp_path / "store", _event_registry(events), StopSignals()), ONE_CALL)
    assert stopped.value.signum == signum
    assert len(events) > at  # the signal was sent
    order = list(dict.fromkeys(events[: at + 1]))  # the cells begun by the signal, in order
    (run,) = load_store(tmp_path / "store")
    kept = [c.key["seqlen"] for c in run.cells]
    assert kept[: len(order) - 1] == order[:-1], (at, order, kept)
    assert set(kept) <= set(order)


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["SIGINT", "SIGTERM", "SIGHUP"]
)
def test_each_signal_in_the_closing_idle_check_keeps_the_complete_run(
    tmp_path: Path, signum: int
) -> None:
    reg = fake_registry(fake_a=FakeArm("fake_a"), fake_b=FakeArm("fake_b"))
    measuring = safe(tmp_path, reg, StopSignals())
    measuring.holding = FakeHolding(signum)
    with pytest.raises(Interrupted) as stopped:
        _sweep(measuring)
    assert stopped.value.signum == signum
    (run,) = load_store(tmp_path)
    assert run.status == "ok" and len(run.cells) == 3
