"""Arm fidelity on the CPU: the profiler's end-of-cycle notice is silenced, nothing else is."""

from __future__ import annotations

import warnings

import pytest
from tether.bench.fidelity import profile_kernels, quiet_profiler, unexpected


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
