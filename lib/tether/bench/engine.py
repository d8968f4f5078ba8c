"""The timing engine: interleaved, warmed, allocation-checked samples of several arms.

Every arm of a cell is prepared (inputs and outputs allocated) by its caller; the engine warms
all of them before timing any, then takes samples in a seeded shuffled or ABBA order per
repetition so that drift hits every arm alike, and stops on a noise target (never before
``min_reps``) or a time cap.
On CUDA a sample is one replay of a captured graph of ``calls`` calls (or ``calls`` eager calls
between two events, or under the host clock: see SAMPLERS); on the CPU it is ``calls`` calls
under ``time.perf_counter``. Each role is calibrated on its own: its ``calls`` are chosen from
its own call time, so a slow arm's samples are not stretched to the fastest arm's count. The same code
path runs in both places so the whole pipeline is exercised without a GPU.

Why two instances of the same call can differ steadily, and what the engine does about it.
The A/A control times one arm twice, each with its own inputs and its own graph. At small
sizes a call lasts a few microseconds, and two such instances can keep a small, stable offset
that no number of repetitions removes: their buffers sit at different addresses (different
DRAM channel and L2 slice mapping, different TLB reach, a tensor that shares an allocator
segment with another one), and each captured graph is its own instantiation. Such an offset
is not noise, so more samples only make it look more certain. Three measures keep it out:

- Inputs are allocated the same way for every role (the sweep places each role's tensors in
  one slab at the same aligned offsets), so no role is systematically luckier in placement.
- A role may bring several prepared instances (``buffer_sets``: the same call on distinct
  input sets, each with its own graph); the engine rotates through them by repetition pair,
  so every role averages over several placements and captures, and each half of the samples
  (even and odd repetitions, which the A/A floor compares) sees every instance equally.
  The engine stops only at the end of a rotation cycle, for the same reason.
- A and A2 never share instances: the floor must still cover the placement effects that B,
  with its own buffers, is exposed to. Re-capturing a graph every repetition would also
  spread placements, at a capture cost per sample; rotating pre-captured graphs does it
  without capture inside the sampling loop.

Samples are long enough (``min_sample_s``, by replaying many calls in one graph) that timer
resolution and launch jitter are small next to the work, which is what tightens the floor.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.errors import TetherError, UsageError

ORDERS = ("shuffle", "abba")
# graph: replay of a captured CUDA graph of ``calls`` calls (what a serving stack runs);
# events: ``calls`` eager calls between two device events; wall: ``calls`` eager calls between
# two device synchronisations on the host clock (an eager caller's time, host cost included);
# host: the host time to issue ``calls`` eager calls, the device drained before and after but
# not counted (an entry point's host cost per call, whatever the device does meanwhile).
SAMPLERS = ("auto", "graph", "events", "wall", "host")


class TimingError(TetherError):
    """A sample could not be taken or is not a duration (NaN, zero, negative)."""


@dataclass(frozen=True)
class TimingPolicy:
    """How a cell is timed; serialised verbatim into a run's ``config.timing``."""

    sampler: str = "auto"  # auto: graph replay on CUDA, wall clock on the CPU
    min_sample_s: float = 2.5e-3  # calls per sample chosen so one sample lasts at least this
    calls_per_sample: int | None = None  # None: calibrated per cell from min_sample_s
    max_calls_per_sample: int = 2000
    warmup_calls: int = 3
    min_reps: int = 10
    max_reps: int = 60
    noise_target: float = 0.01  # after min_reps, stop once IQR/median of every arm is under this
    cell_cap_s: float = 3.5  # ... or once a cell has been sampled this long
    buffer_sets: int = 2  # prepared instances per role, rotated (see the module docstring)
    order: str = "shuffle"
    seed: int = 0
    flush_l2: bool = False  # cold: overwrite a buffer larger than L2 before every sample
    # A sample whose SM clock reading (before or after it) is below this fraction of the
    # device's maximum SM clock (in MHz, read from NVML) flags the cell ``clock_throttled``:
    # on an H200 (max 1980 MHz) anything under 1881 MHz. Throttled cells are never a gate's
    # before or after.
    throttle_ratio: float = 0.95
    # Seconds of rest before a cell's warm-up: a GPU that has just run long cells sits at its
    # power limit with a lowered SM clock, and a short measurement (a gate) that starts from
    # rest is timed at the clock the device reaches, not the one the previous cell left.
    cooldown_s: float = 0.0
    # Deliberately wrong, for demonstrations only: release the allocator cache between arms
    # so an arm pays device malloc inside its own measurement (the seeds' failure).
    release_between_arms: bool = False

    def __post_init__(self) -> None:
        if self.sampler not in SAMPLERS:
            raise UsageError(f"timing policy: sampler {self.sampler!r} not in {SAMPLERS}")
        if self.order not in ORDERS:
            raise UsageError(f"timing policy: order {self.order!r} not in {ORDERS}")
        if self.release_between_arms and self.sampler == "graph":
            # A replayed graph never allocates, so releasing the cache could not show anything.
            raise UsageError("timing policy: release_between_arms needs sampler events or wall")
        if self.min_reps < 1 or self.max_reps < self.min_reps:
            raise UsageError("timing policy: need 1 <= min_reps <= max_reps")
        if self.buffer_sets < 1:
            raise UsageError("timing policy: buffer_sets must be >= 1")
        if self.calls_per_sample is not None and self.calls_per_sample < 1:
            raise UsageError("timing policy: calls_per_sample must be >= 1")
        if self.cooldown_s < 0:
            raise UsageError("timing policy: cooldown_s must be >= 0")
        if not (self.noise_target > 0 and self.cell_cap_s > 0 and self.min_sample_s > 0):
            raise UsageError("timing policy: noise_target, cell_cap_s, min_sample_s must be > 0")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def resolved_sampler(self, device: str) -> str:
        if self.sampler != "auto":
            return self.sampler
        if device != "cuda":
            return "wall"
        return "events" if self.release_between_arms else "graph"


@dataclass
class Probes:
    """Injectable hooks around samples; the defaults read the real device (see ``for_device``).

    ``alloc_count``: a counter that grows when device memory is newly reserved (a new cudaMalloc
    shows as a new allocator segment). ``clock_mhz``: the SM clock now and its maximum.
    ``release``: what release_between_arms calls. ``sync``: waits for queued device work.
    """

    alloc_count: Callable[[], int] | None = None
    clock_mhz: Callable[[], tuple[float, float] | None] | None = None
    release: Callable[[], None] | None = None
    sync: Callable[[], None] = lambda: None
    flush: Callable[[], None] | None = None

    @staticmethod
    def for_device(device: str, policy: TimingPolicy) -> Probes:
        if device != "cuda":
            return Probes()
        import torch

        def alloc_count() -> int:
            # segment.all.allocated counts cudaMalloc calls the caching allocator made; block
            # allocations served from the cache do not move it.
            return int(torch.cuda.memory_stats().get("segment.all.allocated", 0))

        flush: Callable[[], None] | None = None
        if policy.flush_l2:
            scratch = torch.empty(512 * 1024 * 1024, dtype=torch.uint8, device="cuda")

            def flush() -> None:
                scratch.zero_()

        return Probes(
            alloc_count=alloc_count,
            clock_mhz=_nvml_clock(),
            release=torch.cuda.empty_cache,
            sync=torch.cuda.synchronize,
            flush=flush,
        )


def _nvml_handle(pynvml: Any, torch: Any) -> Any:
    """NVML's handle for the GPU torch is using. NVML numbers every GPU on the host and ignores
    CUDA_VISIBLE_DEVICES, so torch's index is not NVML's: the handle is looked up by the
    device's UUID (PyTorch 2.1+), and without one only an unmasked index is trusted."""
    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is not None:
        text = str(uuid)
        return pynvml.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else f"GPU-{text}")
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        raise LookupError("no device UUID to match NVML's GPU under CUDA_VISIBLE_DEVICES")
    return pynvml.nvmlDeviceGetHandleByIndex(index)


def _nvml_clock() -> Callable[[], tuple[float, float] | None] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        import torch

        pynvml.nvmlInit()
        handle = _nvml_handle(pynvml, torch)
        top = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # NVML absent or refused: the clock is unknown, never assumed fine
        return None

    def read() -> tuple[float, float] | None:
        try:
            return float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)), top
        except Exception:
            return None

    return read


@dataclass
class CellTiming:
    """What the engine measured for one cell: per-role seconds per call, flags and detail."""

    samples: dict[str, list[float]]
    flags: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def spread(xs: list[float]) -> float:
    """IQR over median; the noise measure the stop rule uses (0 for fewer than 2 samples)."""
    if len(xs) < 2:
        return 0.0 if xs else math.inf
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return (q[2] - q[0]) / statistics.median(xs)


def _check_sample(role: str, value: float) -> float:
    if not (isinstance(value, float) and math.isfinite(value) and value > 0):
        raise TimingError(f"arm {role}: sample {value!r} is not a positive finite duration")
    return value


class _Sampler:
    """Turns a no-argument call into a ``() -> seconds per call`` sampler of ``calls`` calls."""

    def __init__(self, kind: str, fn: Callable[[], object], calls: int, sync: Callable[[], None]):
        self.kind, self.fn, self.calls, self.sync = kind, fn, calls, sync
        if kind == "graph":
            import torch

            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                fn()  # capture needs the call's lazy setup done on a side stream first
            torch.cuda.current_stream().wait_stream(stream)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                for _ in range(calls):
                    fn()
            torch.cuda.synchronize()

    def __call__(self) -> float:
        if self.kind == "host":
            self.sync()
            t0 = time.perf_counter()
            for _ in range(self.calls):
                self.fn()
            elapsed = time.perf_counter() - t0
            self.sync()
            return elapsed / self.calls
        if self.kind == "wall":
            self.sync()
            t0 = time.perf_counter()
            for _ in range(self.calls):
                self.fn()
            self.sync()
            return (time.perf_counter() - t0) / self.calls
        import torch

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        if self.kind == "graph":
            self.graph.replay()
        else:
            for _ in range(self.calls):
                self.fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3 / self.calls


def _calibrate(
    fns: Mapping[str, Sequence[Callable[[], object]]],
    policy: TimingPolicy,
    sync: Callable[[], None],
) -> dict[str, int]:
    """Calls per sample for each role, from that role's own fastest call: one sample lasts at
    least ``min_sample_s`` for every role, and no role's count is set by another's speed."""
    if policy.calls_per_sample is not None:
        return {role: policy.calls_per_sample for role in fns}
    out = {}
    for role, variants in fns.items():
        fastest = math.inf
        for fn in variants:
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            fastest = min(fastest, time.perf_counter() - t0)
        need = math.ceil(policy.min_sample_s / max(fastest, 1e-9))
        out[role] = max(1, min(policy.max_calls_per_sample, need))
    return out


def _call_seconds(
    fns: Mapping[str, Sequence[Callable[[], object]]], sync: Callable[[], None]
) -> dict[str, float]:
    out = {}
    for role, variants in fns.items():
        sync()
        t0 = time.perf_counter()
        variants[0]()
        sync()
        out[role] = time.perf_counter() - t0
    return out


def _orders(
    roles: list[str], policy: TimingPolicy, rng: random.Random
) -> Callable[[int], list[str]]:
    def order(rep: int) -> list[str]:
        if policy.order == "abba":
            return list(roles) if rep % 2 == 0 else list(reversed(roles))
        shuffled = list(roles)
        rng.shuffle(shuffled)
        return shuffled

    return order


Call = Callable[[], object]


def _variants(fns: Mapping[str, Call | Sequence[Call]]) -> dict[str, list[Call]]:
    """Each role's prepared instances as a list (a single callable is one instance)."""
    out: dict[str, list[Call]] = {}
    for role, value in fns.items():
        out[role] = [value] if callable(value) else list(value)
        if not out[role] or not all(callable(f) for f in out[role]):
            raise UsageError(f"measure: role {role} needs one or more prepared calls")
    if len({len(v) for v in out.values()}) > 1:
        raise UsageError("measure: every role needs the same number of prepared instances")
    return out


def rotation(rep: int, count: int) -> int:
    """Which instance serves repetition ``rep``: pairs of repetitions per instance.

    Pairs, so the even and the odd repetitions each see every instance equally often.
    """
    return (rep // 2) % count


def measure(
    fns: Mapping[str, Call | Sequence[Call]],
    policy: TimingPolicy,
    *,
    device: str = "cpu",
    probes: Probes | None = None,
    seed: int | None = None,
) -> CellTiming:
    """Time every role in ``fns`` (e.g. A, A2, B) interleaved; returns seconds per call.

    ``fns`` maps a role to a prepared no-argument call, or to several prepared instances of
    the same call (distinct buffers), which are rotated by repetition; nothing is allocated
    here except the captured graphs. ``seed`` overrides ``policy.seed`` (a sweep derives one
    per cell).
    """
    if not fns:
        raise UsageError("measure: no arms given")
    variants = _variants(fns)
    count = len(next(iter(variants.values())))
    cycle = 2 * count if count > 1 else 1  # stop only when every instance served both halves
    probes = probes or Probes.for_device(device, policy)
    kind = policy.resolved_sampler(device)
    if kind in ("graph", "events") and device != "cuda":
        raise UsageError(f"timing policy: sampler {kind} needs a CUDA device, not {device}")
    roles = list(fns)
    rng = random.Random(policy.seed if seed is None else seed)

    if policy.cooldown_s:
        probes.sync()
        time.sleep(policy.cooldown_s)
    # Warm every arm before timing any, so no arm pays first-call costs in its samples.
    for _ in range(policy.warmup_calls):
        for role in roles:
            for fn in variants[role]:
                fn()
    probes.sync()
    calls = _calibrate(variants, policy, probes.sync)
    # A sample longer than the cell's cap would overrun it on its own: said before timing, in
    # the cell's flags, never silently stretched.
    per_call = _call_seconds(variants, probes.sync)
    over_cap = sorted(r for r in roles if per_call[r] * calls[r] > policy.cell_cap_s)
    graph_error = None

    def build(sampler: str) -> dict[str, list[_Sampler]]:
        return {
            r: [_Sampler(sampler, fn, calls[r], probes.sync) for fn in variants[r]] for r in roles
        }

    try:
        samplers = build(kind)
    except RuntimeError as exc:
        if not (kind == "graph" and policy.sampler == "auto"):
            raise TimingError(f"cannot build a {kind} sampler: {exc}") from exc
        # Some arms refuse capture; timing them with events is recorded, never hidden.
        graph_error = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        probes.sync()
        kind = "events"
        samplers = build(kind)

    samples: dict[str, list[float]] = {r: [] for r in roles}
    allocs: dict[str, int] = {r: 0 for r in roles}
    clocks: list[float] = []
    tops: list[tuple[float, float]] = []
    throttled = 0
    order_of = _orders(roles, policy, rng)
    orders: list[str] = []
    stop = "max_reps"
    t_start = time.perf_counter()
    for rep in range(policy.max_reps):
        if rep >= 1 and time.perf_counter() - t_start > 2 * policy.cell_cap_s:
            stop = "cap"  # past twice the cap: no new repetition starts, whatever the cycle
            break
        order = order_of(rep)
        orders.append(" ".join(order))
        for role in order:
            if policy.release_between_arms and probes.release is not None:
                probes.release()
            if probes.flush is not None:
                probes.flush()
            probes.sync()
            c0 = probes.clock_mhz() if probes.clock_mhz else None
            a0 = probes.alloc_count() if probes.alloc_count else 0
            value = samplers[role][rotation(rep, count)]()
            a1 = probes.alloc_count() if probes.alloc_count else 0
            c1 = probes.clock_mhz() if probes.clock_mhz else None
            samples[role].append(_check_sample(role, float(value)))
            allocs[role] += max(0, a1 - a0)
            for reading in (c0, c1):
                if reading is not None:
                    clocks.append(reading[0])
                    tops.append(reading)
            if any(r is not None and r[0] < policy.throttle_ratio * r[1] for r in (c0, c1)):
                throttled += 1
        if rep + 1 >= policy.min_reps and (rep + 1) % cycle == 0:
            if all(spread(s) < policy.noise_target for s in samples.values()):
                stop = "noise"
                break
            if time.perf_counter() - t_start > policy.cell_cap_s:
                stop = "cap"
                break

    flags: list[str] = []
    if any(allocs.values()):
        flags.append("alloc_in_timed_region")
    if throttled:
        flags.append("clock_throttled")
    if over_cap:
        flags.append("sample_over_cap")
    extra: dict[str, Any] = {
        "sampler": kind,
        "calls_per_sample": calls,
        **({"sample_over_cap": over_cap} if over_cap else {}),
        "buffer_sets": count,
        "reps": len(orders),
        "stop": stop,
        "seed": policy.seed if seed is None else seed,
        "order": orders,
        "spread": {r: round(spread(s), 6) for r, s in samples.items()},
        "alloc_events": allocs,
        "alloc_counter": "none" if probes.alloc_count is None else "present",
    }
    if graph_error is not None:
        extra["graph_capture_failed"] = graph_error
    if clocks:
        extra["clock_mhz"] = {
            "min": min(clocks),
            "max": max(clocks),
            "throttled": throttled,
            "device_max": max(top for _, top in tops) if tops else None,
            "ratio": policy.throttle_ratio,
        }
    return CellTiming(samples=samples, flags=flags, extra=extra)
