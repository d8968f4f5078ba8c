"""The engine's device paths (graph replay, events, allocator counters, profiler) on a GPU.

These run only where CUDA (or ROCm through torch.cuda) is present; the CPU paths are covered
by test_bench_engine.py and test_bench_sweep.py.
"""

from __future__ import annotations

import statistics

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or ROCm device"),
]


def matmul_call(n: int = 2048):
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    c = torch.empty_like(a)
    return lambda: torch.matmul(a, a, out=c)


def test_graph_replay_aa_is_level() -> None:
    """One arm timed twice by graph replay: medians within 10%. `tether verify` runs the suite
    with many xdist workers on one GPU, so another worker's kernels can land in one arm's
    samples (at 9e13ad8 on the H200 one measurement fell far outside the bound): up to three
    measurements, and a sampler that is biased fails all three, where contention passes by
    within them."""
    from tether.bench.engine import TimingPolicy, measure

    ratios = []
    for _ in range(3):
        got = measure({"A": matmul_call(), "A2": matmul_call()}, TimingPolicy(), device="cuda")
        assert got.extra["sampler"] == "graph"
        assert "alloc_in_timed_region" not in got.flags
        ratios.append(statistics.median(got.samples["A2"]) / statistics.median(got.samples["A"]))
        if 0.9 < ratios[-1] < 1.1:
            break
    assert 0.9 < ratios[-1] < 1.1, ratios


def test_release_between_arms_flags_the_allocation() -> None:
    from tether.bench.engine import TimingPolicy, measure

    # Each call allocates a block larger than everything the caching allocator holds, so it
    # can never be carved out of a partly used segment left by an earlier test in this worker
    # (which is what made a small matmul output miss the flag inside the full suite): served
    # from the cache when kept, a fresh device allocation after every release.
    size = torch.cuda.memory_reserved() + (64 << 20)

    def allocating() -> object:
        return torch.empty(size, dtype=torch.uint8, device="cuda").fill_(1)

    kept = TimingPolicy(sampler="events", calls_per_sample=3, release_between_arms=False)
    released = TimingPolicy(sampler="events", calls_per_sample=3, release_between_arms=True)
    assert "alloc_in_timed_region" not in measure({"A": allocating}, kept, device="cuda").flags
    got = measure({"A": allocating, "A2": allocating}, released, device="cuda")
    assert "alloc_in_timed_region" in got.flags


def test_profiler_sees_device_kernels() -> None:
    from tether.bench.fidelity import profile_kernels

    names = profile_kernels(matmul_call(), "cuda")
    assert names, "no device activity recorded for a matmul"
