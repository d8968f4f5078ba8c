"""No measurement lost (issue 47 item 3): a stop signal at any moment of a sweep leaves every
measured cell in a written run, and a signal after the last cell marks the closing snapshot.

A FIXTURE sweep (test_bench_sweep's no-op arms, 3 cells in 2 replicate blocks) runs on a
``SafeBench`` inside ``StopSignals`` with a holding whose closing idle check is the guard's real
CPU snapshot, as ``tether sweep`` runs it (cli/_bench_host.bench_for), into a tmp store. A
trace function (``sys.settrace``) follows the sweep line by line and names the phase each line
belongs to, from the stack: setup, a cell being measured, between cells, the grid's tail after
the last cell, the closing idle check, building the run, writing it, after it. A dry run counts
each phase's lines; then, for SIGINT, SIGTERM and SIGHUP, the sweep runs again 20 times, each
time sending the signal to this process from inside the trace function at one line, the lines
spread evenly over the phases. The handler runs right there, as it would for a signal that
arrived at that line.

Each time: the signal is raised as ``Interrupted`` in the end, and the store holds every cell
the trace saw measured (a ``Bench.measure_cell`` that returned), with as many blocks; when all
of them were, the run is ``ok``, and its closing snapshot names the signal when it arrived
before or during the closing check (and does not when the check was over).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import pytest
from tether.bench.sweep import Bench, CellMeasurement
from tether.guard import idle
from tether.stopping import Interrupted, SafeBench, StopSignals
from tether.store import load_store
from tether.store.model import Run

from validate.suite.test_bench_sweep import CPU, ROOT, FakeArm, fake_registry, fake_sweep

LIB = str(ROOT / "lib" / "tether")
BLOCKS = 2
CELLS = len(fake_sweep().keys()) * BLOCKS
# Points per phase (20 in all): where the fix matters (the tail, the closing check, between
# cells) gets more than where any signal simply stops (setup) or waits (build, write).
POINTS = {
    "setup": 2,
    "cell": 3,
    "between": 3,
    "tail": 3,
    "closing": 4,
    "build": 2,
    "write": 2,
    "after": 1,
}
# The order phases come in (a cell and the gap after it alternate, so they rank alike).
RANK = {phase: n for n, phase in enumerate(POINTS)} | {"between": 1}
SIGNALS = [
    pytest.param(signal.SIGINT, id="SIGINT"),
    pytest.param(signal.SIGTERM, id="SIGTERM"),
    pytest.param(signal.SIGHUP, id="SIGHUP"),
]


class CpuHolding:
    """Fixture holding: the closing idle check (``recheck``) is the guard's own CPU snapshot,
    with no load limit to trip on a busy test host."""

    def __init__(self) -> None:
        self.after: idle.Snapshot | None = None

    @contextlib.contextmanager
    def arm(self, label: str) -> Iterator[None]:
        yield None

    def recheck(self) -> idle.Snapshot:
        self.after = idle.snapshot("cpu", load_limit=1e9)
        return self.after

    def evidence(self) -> dict[str, Any]:
        return {
            "nested": False,
            "lock": "/tmp/fixture.lock",
            "holder": {"pid": os.getpid()},
            "before": {"state": "idle"},
            "after": self.after.as_dict() if self.after else None,
            "arms": [],
            "waited_s": 0.0,
        }


def _codes(*fns: Any) -> frozenset[CodeType]:
    return frozenset(f.__code__ for f in fns)


CELL = _codes(Bench.measure_cell)
CLOSING = _codes(Bench.guard, CpuHolding.recheck)
WRITE = _codes(Bench.write_run)
BUILD = _codes(Bench.new_run)
GRID = _codes(Bench.measure_grid)


@dataclass
class Tracer:
    """Names the phase of each traced line; counts lines per phase; sends ``signum`` at line
    ``at`` (phase, 1-based index) or, if that phase ends first, at its first line after."""

    signum: int | None = None
    at: tuple[str, int] | None = None
    lines: Counter[str] = field(default_factory=Counter)
    measured: Counter[int] = field(default_factory=Counter)  # cell seqlen -> blocks returned
    closing: str = "not yet"  # the closing check: "not yet", "during", "done"
    written: bool = False
    fired: tuple[str, int, int, str] | None = None  # (phase, line, cells measured, closing)

    def phase(self, frame: FrameType | None) -> str:
        stack = set()
        while frame is not None:
            stack.add(frame.f_code)
            frame = frame.f_back
        done = sum(self.measured.values())
        if stack & CELL:
            return "cell"
        if stack & CLOSING:
            return "closing"
        if stack & WRITE:
            return "write"
        if self.written:
            return "after"
        if stack & BUILD and self.closing == "done":
            return "build"  # before the closing check, building the run is the grid's tail
        if done == 0:
            return "setup"
        if done == CELLS:
            return "tail"
        return "between" if stack & GRID else "tail"

    def __call__(self, frame: FrameType, event: str, arg: Any) -> Any:
        if not frame.f_code.co_filename.startswith((LIB, __file__)):
            return None  # stdlib and third-party code: not followed line by line
        return self._local(frame, event, arg)

    def _local(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "return":
            if frame.f_code in CELL and isinstance(arg, CellMeasurement):
                self.measured[frame.f_locals["case"].key["seqlen"]] += 1
            elif frame.f_code in CLOSING and frame.f_code is Bench.guard.__code__:
                self.closing = "done"
            elif frame.f_code in WRITE and isinstance(arg, Run):
                self.written = True
            return self._local
        if event == "call" and frame.f_code is Bench.guard.__code__:
            self.closing = "during"
        if event != "line":
            return self._local
        here = self.phase(frame)
        self.lines[here] += 1
        if self.at is not None and self.fired is None:
            phase, index = self.at
            ended = RANK[here] > RANK[phase]  # the phase is over, its line not reached
            if (here == phase and self.lines[here] >= index) or ended:
                self.fired = (here, self.lines[here], sum(self.measured.values()), self.closing)
                os.kill(os.getpid(), self.signum or signal.SIGINT)
        return self._local


def _measure(store: Path, tracer: Tracer) -> None:
    """The sweep as bench_for runs it: signals entered around it, a held one released after."""
    reg = fake_registry(fake_a=FakeArm("fake_a"), fake_b=FakeArm("fake_b"))
    with StopSignals() as sigs:
        bench = SafeBench(
            ROOT, store, reg, CPU, holding=CpuHolding(), profiler=lambda fn, dev: ["x"],
            replicates=BLOCKS, signals=sigs,
        )  # fmt: skip
        sys.settrace(tracer)
        try:
            bench.sweep(fake_sweep())
            sigs.release()
        except KeyboardInterrupt as exc:
            raise sigs.as_raised(exc) from None
        finally:
            sys.settrace(None)


def _points(counts: Counter[str]) -> list[tuple[str, int]]:
    """POINTS lines per phase, spread evenly over the lines the dry run counted there."""
    out = []
    for phase, k in POINTS.items():
        n = counts[phase]
        assert n > 0, f"the dry run saw no line in phase {phase!r}: {dict(counts)}"
        out += sorted({(phase, max(1, round((j + 0.5) * n / k))) for j in range(k)})
    return out


@pytest.fixture(scope="module")
def points(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, int]]:
    # Twice: the first run fills caches (fingerprints, git answers) the later runs skip.
    for n in range(2):
        dry = Tracer()
        _measure(tmp_path_factory.mktemp(f"dry{n}"), dry)
        assert sum(dry.measured.values()) == CELLS
    points = _points(dry.lines)
    assert len(points) == sum(POINTS.values())
    return points


@pytest.mark.parametrize("signum", SIGNALS)
def test_every_measured_cell_is_in_a_run(
    tmp_path: Path, signum: int, points: list[tuple[str, int]]
) -> None:
    handlers = signal.getsignal(signum)
    seen: list[str] = []
    for n, at in enumerate(points):
        store = tmp_path / f"{n}-{at[0]}-{at[1]}"
        tracer = Tracer(signum=signum, at=at)
        with pytest.raises(Interrupted) as stopped:
            _measure(store, tracer)
        assert tracer.fired is not None, f"{at}: the signal was never sent"
        phase, line, before, closing = tracer.fired
        where = f"signal at {phase} line {line} ({before} cells measured, closing {closing})"
        seen.append(phase)
        assert stopped.value.signum == signum, where
        runs = load_store(store) if store.is_dir() else []
        measured = sum(tracer.measured.values())
        if measured == 0:
            assert all(not r.cells for r in runs), where
            continue
        assert len(runs) == 1, f"{where}: {len(runs)} runs written"
        (run,) = runs
        blocks = {c.key["seqlen"]: len(c.blocks) or 1 for c in run.cells}
        assert blocks == dict(tracer.measured), f"{where}: measured cells missing from the run"
        if measured < CELLS:
            assert run.status == "rejected" and "interrupted" in str(run.reason), where
            continue
        assert run.status == "ok", f"{where}: {run.reason}"
        assert run.guard.after is not None, where
        mark = run.guard.after.get("interrupted")
        if before == CELLS and closing != "done":
            want = {"signal": signal.Signals(signum).name, "arrived": "before"}
            if closing == "during":
                want["arrived"] = "during"
            assert mark == want, f"{where}: closing snapshot marked {mark}"
        elif closing == "done":
            assert mark is None, f"{where}: marked {mark} after the closing check"
    assert Counter(seen) == Counter(POINTS), f"phases hit: {Counter(seen)}"
    assert signal.getsignal(signum) == handlers  # the handlers are put back
