"""Arm fidelity on the CPU: the profiler's end-of-cycle notice and kineto's notices on stderr are
silenced, nothing else is."""

from __future__ import annotations

import os
import warnings

import pytest
from tether.bench.fidelity import filtered_stderr, profile_kernels, quiet_profiler, unexpected


def test_the_profiler_cycle_notice_is_ignored_with_or_without_its_prefix() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with quiet_profiler():
            for prefix in ("", "Warning: "):
                warnings.warn(
                    prefix + "Profiler clears events at the end of each cycle. Only events "
                    "from the current cycle will be reported.",
                    UserWarning,
                    stacklevel=1,
                )


def test_other_warnings_inside_the_profiler_still_count() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="something else"), quiet_profiler():
            warnings.warn("something else", UserWarning, stacklevel=1)


def test_profiling_a_cpu_call_records_what_it_ran() -> None:
    import torch

    a = torch.ones(8, 8)
    names = profile_kernels(lambda: torch.mm(a, a), "cpu")
    assert names, "nothing recorded for a matmul"
    assert unexpected(names, [r"^aten::"]) == []
    assert unexpected(names, [r"^nothing$"]) == names


# -- no third-party noise, no hidden errors -----------------------------------------------------


def test_filtered_stderr_drops_only_kineto_notices(capfd: pytest.CaptureFixture[str]) -> None:
    with filtered_stderr():
        os.write(
            2, b"USDT:2026-11-30 21:17:32 1:1 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
        )
        os.write(2, b"RuntimeError: a real problem\n")
        os.write(
            2, b"USDT:2026-11-30 21:17:32 1:1 SyncActivityProfilerHandler.cpp:59] profiler_stop\n"
        )
    err = capfd.readouterr().err
    assert "a real problem" in err and "USDT" not in err


def test_profiling_an_arm_prints_no_profiler_notices(capfd: pytest.CaptureFixture[str]) -> None:
    import torch

    names = profile_kernels(lambda: torch.ones(8) + 1, "cpu")
    captured = capfd.readouterr()
    assert names, "the profile still sees what ran"
    assert "USDT" not in captured.err and "profiler_st" not in captured.err + captured.out
