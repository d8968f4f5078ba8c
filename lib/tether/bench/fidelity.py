"""Arm fidelity: which kernels an arm really ran, and whether they are the ones it declares.

An arm that silently fell back to another backend, or built a mask inside its call (the cuDNN
arm with a lower-right causal bias launches triu_tril and fill kernels on torch 2.11), is not
measuring what its name says. Each cell profiles every arm once, outside timing, and is
flagged ``kernel_mismatch`` when a name outside the arm's ``expected_kernels`` appears, and
``kernel_repeated`` when one call launches the same GPU kernel twice (a public entry point
that ran attention twice: a probe call before the real one).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

# Profiler rows that are bookkeeping, not work an arm chose to launch.
_IGNORED = re.compile(r"^(cudaDeviceSynchronize|cudaStreamSynchronize|ProfilerStep.*)$")

Profile = Callable[[Callable[[], object], str], list[str]]

# torch.profiler warns this on some builds when a profile without a schedule ends; the suite
# runs with warnings as errors, and the message says nothing about the arm being profiled.
# (``message`` is matched from the start; torch prefixes it with "Warning: " on some builds.)
PROFILER_CYCLE_WARNING = r"(Warning: )?Profiler clears events at the end of each cycle"


# What torch's bundled kineto logs at its USDT level on every profile start and stop, straight
# to file descriptor 2 from C++ (so neither warnings nor redirect_stderr can catch it):
#   USDT:2026-11-30 21:17:32 16916:16916 SyncActivityProfilerHandler.cpp:52] profiler_start
KINETO_NOTICE = re.compile(rb"^USDT:[^\n]*\] profiler_(start|stop)\s*$")


@contextlib.contextmanager
def filtered_stderr(noise: re.Pattern[bytes] = KINETO_NOTICE) -> Iterator[None]:
    """Hold back what is written to file descriptor 2 (C and Python alike) inside the block,
    then write every line of it back except those matching ``noise``.

    Only the known notice lines are dropped: a real error printed by the profiler or by the
    profiled call still reaches stderr, in order, just after the block.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable fd 2 (a daemon): nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [ln for ln in held.read().splitlines(keepends=True) if not noise.match(ln)]
            if kept:
                os.write(2, b"".join(kept))


@contextlib.contextmanager
def quiet_profiler() -> Iterator[None]:
    """Ignore exactly the profiler's end-of-cycle notice; every other warning still counts."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PROFILER_CYCLE_WARNING, category=UserWarning)
        yield


def profile_kernels(fn: Callable[[], object], device: str) -> list[str]:
    """The names of what one call of ``fn`` ran, in order, a name once per launch.

    CUDA: the device-side activities (kernels, memsets, memcpys). CPU: the operators called
    directly by the top-level operator (or the top-level ones when they have no children),
    which is where a backend choice or a mask construction shows.
    """
    import torch
    from torch.profiler import DeviceType, ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    # The profiler prints start/stop lines on some builds (stdout from Python, kineto's USDT
    # notices on fd 2 from C++); they are not ours to show, and nothing else is hidden.
    with quiet_profiler(), filtered_stderr():
        with contextlib.redirect_stdout(io.StringIO()), profile(activities=activities) as prof:
            fn()
            if device == "cuda":
                torch.cuda.synchronize()
        events = list(prof.events())
    names: list[str] = []
    if device == "cuda":
        picked = [e.name for e in events if e.device_type == DeviceType.CUDA]
        if not picked:  # some builds attach device work to the launching op only
            picked = [k.name for e in events for k in getattr(e, "kernels", ())]
    else:
        tops = [e for e in events if e.cpu_parent is None]
        picked = []
        for top in tops:
            kids = [c.name for c in top.cpu_children]
            picked.extend(kids or [top.name])
    for name in picked:
        if not _IGNORED.match(name):
            names.append(name)
    return names


def distinct(names: Iterable[str]) -> list[str]:
    """Each name once, in first-seen order (what a run records per role)."""
    return list(dict.fromkeys(names))


# Copies and fills may repeat inside one call (a memset per output); a compute kernel that runs
# twice in one call means the call did its work twice (a probe, a second pass).
_MAY_REPEAT = re.compile(r"(?i)memset|memcpy|fill")


def repeated(names: Sequence[str]) -> list[str]:
    """Kernel names launched more than once by one call (copies and fills aside)."""
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    return [n for n, c in counts.items() if c > 1 and not _MAY_REPEAT.search(n)]


def unexpected(names: Iterable[str], expected: Sequence[str]) -> list[str]:
    """Names that match none of the ``expected`` regexes (searched, not anchored)."""
    patterns = [re.compile(p) for p in expected]
    return [n for n in names if not any(p.search(n) for p in patterns)]


def check_arms(
    fns: Mapping[str, Callable[[], object]],
    expected: Mapping[str, Sequence[str]],
    device: str,
    profiler: Profile | None = None,
) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Profile every role once; returns (distinct kernels per role, unexpected names per role).

    ``profiler`` is injectable so tests can hand in a fake profile. Use ``check_launches``
    for the kernels a call launched more than once.
    """
    kernels, strays, _ = check_launches(fns, expected, device, profiler)
    return kernels, strays


def check_launches(
    fns: Mapping[str, Callable[[], object]],
    expected: Mapping[str, Sequence[str]],
    device: str,
    profiler: Profile | None = None,
) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[str]]]:
    """``check_arms`` plus, per role, the GPU kernels one call launched more than once (on the
    CPU the profiler lists operators, which repeat by design)."""
    run = profiler or profile_kernels
    kernels: dict[str, list[str]] = {}
    strays: dict[str, list[str]] = {}
    repeats: dict[str, list[str]] = {}
    for role, fn in fns.items():
        names = run(fn, device)
        kernels[role] = distinct(names)
        bad = unexpected(kernels[role], expected.get(role, ()))
        if bad:
            strays[role] = bad
        again = repeated(names) if device == "cuda" else []
        if again:
            repeats[role] = again
    return kernels, strays, repeats
