"""How a measurement stops without losing what it measured (issue 25 item 2, issue 47 item 3).

- A stop signal (SIGINT, SIGTERM, SIGHUP) raises ``Interrupted``, a KeyboardInterrupt, so the
  bench's own Ctrl-C path writes a ``rejected`` run of the cells measured so far, and every
  ``finally`` on the way out runs: the guard lock is released and its holder record removed.
  Without this SIGTERM and SIGHUP kill the process where it stands.
- Once a cell is measured it is never thrown away: a signal stops the grid only while a cell
  is being measured (that cell is lost, the ones before it are written) or before the first
  one. A signal that arrives anywhere else is held: between cells it stops the grid at the
  start of the next cell; after the grid's last cell (the guard's closing idle check, the run
  being built and written) it waits until the run is on disk, and is raised then. Which place
  a signal arrived at is read from the stack it interrupted (``StopSignals.defers``), not from
  a flag set after the cell returns: a flag leaves a few bytecodes between the return and the
  flag in which a Ctrl-C used to throw away a complete run.
- The run's closing idle snapshot says when a stop signal arrived before or during it
  (``guard.after.interrupted``): the snapshot was taken, but by a process asked to stop.
- A run's duration is taken from a steady clock (one that never steps), and its end stamp is its start stamp plus
  that duration. Wall-clock stamps are provenance, never validity: a clock stepped during a
  sweep (NTP, a manual set) is recorded in the run's ``config.clock``, not fatal. Before, a
  clock stepped back made the finished run invalid ("ended earlier than started").

This lives beside the timing engine, not in it: ``SafeBench`` wraps ``tether.bench.sweep.Bench``
at its seams (a cell, the grid, the guard record, the run builder, the write), so nothing here
changes how a sample is taken, and the harness fingerprint (which covers ``tether.bench``) does
not move.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from types import CodeType, FrameType
from typing import Any

from tether import project
from tether.atomic import STAMP_FORMAT, utc_stamp
from tether.bench.sweep import Bench, CellMeasurement, GridMeasurement
from tether.guard.hold import STOP_SIGNALS
from tether.store.model import GuardRecord, Run
from tether.store.signing import sign_written

# A wall clock that moved this much more (or less) than the steady clock during a run was
# stepped; the step is recorded in the run.
CLOCK_STEP_S = 2.0


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived; ``signum`` says which. A KeyboardInterrupt, so everything that
    already unwinds on Ctrl-C (the bench writes its partial run) unwinds on it too."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class StopSignals:
    """While entered, the stop signals raise ``Interrupted``; after ``hold()``, or where
    ``defers`` says the interrupted stack must not be unwound, they are only remembered
    (``pending``, the first one) until ``release()``, which raises it. Off the main thread
    (where Python cannot install handlers) it installs nothing."""

    def __init__(self) -> None:
        self.pending: int | None = None
        self.raised: int | None = None  # the last signal raised as Interrupted
        self.holding = False
        self._old: dict[int, Any] = {}

    def defers(self, frame: FrameType | None) -> bool:
        """Whether a signal that interrupted ``frame`` must wait: held, or the nearest of
        ``_HELD_IN`` and ``_OPEN_IN`` on the stack is in ``_HELD_IN`` (SafeBench's cell
        wrapper runs, not the cell it wraps)."""
        if self.holding:
            return True
        while frame is not None:
            if frame.f_code in _OPEN_IN:
                return False
            if frame.f_code in _HELD_IN:
                return True
            frame = frame.f_back
        return False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.defers(frame):
            self.pending = self.pending or signum
            return
        self.raised = signum
        raise Interrupted(signum)

    def as_raised(self, exc: KeyboardInterrupt) -> KeyboardInterrupt:
        """``exc`` as the Interrupted of the signal that caused it (the bench re-raises a
        bare KeyboardInterrupt after writing its partial run; the exit code wants the
        signal's number)."""
        if isinstance(exc, Interrupted) or self.raised is None:
            return exc
        return Interrupted(self.raised)

    def hold(self) -> None:
        self.holding = True

    def release(self) -> None:
        """Stop holding; raise the signal that arrived meanwhile, if any."""
        self.holding = False
        pending, self.pending = self.pending, None
        if pending is not None:
            self.raised = pending
            raise Interrupted(pending)

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._old[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        self._old.clear()


@contextmanager
def stop_signals() -> Iterator[StopSignals]:
    """The stop signals as ``Interrupted`` for the block."""
    with StopSignals() as sigs:
        yield sigs


@dataclass
class SafeBench(Bench):
    """A Bench whose grids survive stop signals and stepped clocks (see the module doc).

    ``signals`` is the StopSignals of the verb (entered around the whole measurement); without
    one, signals are left as they are and only the clock handling applies.
    """

    signals: StopSignals | None = field(default=None, repr=False)
    _began: float | None = field(default=None, init=False, repr=False)
    _wall: datetime | None = field(default=None, init=False, repr=False)

    def measure_cell(self, *args: Any, **kwargs: Any) -> CellMeasurement:
        """One cell, the only place a signal may cut: one held since the previous cell stops
        the grid here, before this cell; one that arrives while this frame (not the cell it
        calls) runs, before or after the call, waits (``StopSignals.defers``)."""
        sigs = self.signals
        if sigs is None:
            return super().measure_cell(*args, **kwargs)
        sigs.release()
        try:
            return super().measure_cell(*args, **kwargs)
        finally:
            sigs.hold()

    def guard(self) -> GuardRecord:
        """The guard record, its closing idle snapshot (taken here, signals held) marked with
        the stop signal that arrived before or during it, if one did."""
        sigs = self.signals
        before = sigs.pending if sigs is not None else None
        record = super().guard()
        pending = sigs.pending if sigs is not None else None
        if pending is None or record.after is None:
            return record
        interrupted = {
            "signal": signal.Signals(pending).name,
            "arrived": "before" if before is not None else "during",
        }
        return replace(record, after={**record.after, "interrupted": interrupted})

    def measure_grid(
        self, sweep: Any, only: Callable[[int], bool] | None = None
    ) -> GridMeasurement:
        self._began = time.monotonic()
        self._wall = datetime.now(timezone.utc)
        try:
            return super().measure_grid(sweep, only)
        finally:
            # From the last cell to the written run, nothing may throw the cells away.
            if self.signals is not None:
                self.signals.hold()

    def new_run(self, kind: str, name: str, **kwargs: Any) -> Run:
        if self._began is not None and isinstance(kwargs.get("started"), str):
            kwargs = self._monotonic_stamps(kwargs)
        return super().new_run(kind, name, **kwargs)

    def _monotonic_stamps(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        assert self._began is not None and self._wall is not None
        elapsed = time.monotonic() - self._began
        start = datetime.strptime(kwargs["started"], STAMP_FORMAT).replace(tzinfo=timezone.utc)
        step = (datetime.now(timezone.utc) - self._wall).total_seconds() - elapsed
        out = dict(kwargs)
        out["ended"] = utc_stamp(start + timedelta(seconds=int(elapsed)))
        if abs(step) > CLOCK_STEP_S:
            config = dict(out.get("config") or {})
            config["clock"] = {"elapsed_s": round(elapsed, 3), "wall_step_s": round(step, 3)}
            out["config"] = config
        return out

    def write_run(self, run: Run) -> Run:
        written = super().write_run(run)
        # Signed as written, with the host's key when one is configured (tether.store.signing):
        # before the held signal is raised, so a stopped sweep's run is signed too.
        sign_written(written.path, written.digest, project.get(self.root).allowed_signers)
        self._began = self._wall = None
        if self.signals is not None:
            self.signals.release()  # a signal held since the last cell: the run is on disk
        return written


# Where a signal must not unwind the stack (a cell measured, its wrapper returning; the hold
# being taken), unless a cell being measured is nearer the top (StopSignals.defers).
_HELD_IN: frozenset[CodeType] = frozenset(
    {SafeBench.measure_cell.__code__, StopSignals.hold.__code__}
)
_OPEN_IN: frozenset[CodeType] = frozenset({Bench.measure_cell.__code__})


__all__ = ["STOP_SIGNALS", "Interrupted", "SafeBench", "StopSignals", "stop_signals"]
