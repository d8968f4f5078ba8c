"""Entry arms and the engine's per-role timing: the public API timed as a caller calls it.

On the CPU the entry points route to PyTorch's CPU SDPA (no interpreter needed), so a sweep
with ``single_prefill`` as B is a real call through validation, routing and the output's
allocation; the engine's per-role calibration, host sampler and over-cap flag are checked on
plain Python calls.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from tether import registry
from tether.bench import engine
from tether.bench.engine import TimingPolicy, measure
from tether.bench.fidelity import check_launches, repeated
from tether.bench.sweep import Bench, Target
from tether.errors import UsageError
from tether.registry import Sweep

ROOT = Path(__file__).resolve().parents[2]
CPU = Target("cpu", "cpu", "cpu: test fixture")
QUICK = TimingPolicy(min_sample_s=2e-4, min_reps=3, max_reps=3, warmup_calls=1)
FAST = TimingPolicy(min_sample_s=2e-3, min_reps=4, max_reps=4, cell_cap_s=5.0, warmup_calls=1)


def _reg() -> registry.Registry:
    return registry.load(["tether_kernels_plugin"])


def _sleeper(seconds: float):
    def call() -> None:
        time.sleep(seconds)

    return call


def test_each_role_is_calibrated_on_its_own_call_time() -> None:
    # The slow role needs one or two calls to last a sample; the fast one many more.
    # A2 (the A/A control, the same call) is calibrated as a fast call too. How many calls
    # each gets depends on how long a 0.1 ms sleep takes on a loaded host: not compared. A
    # stall of a loaded host (the suite runs a worker per core, beside GPU work) can stretch
    # the one call a fast role is calibrated on, so the fast roles' counts must hold in one of
    # three measurements; a stall never gives the slow role more calls, so that holds in each.
    seen = []
    for _ in range(3):
        calls = measure(
            {"A": _sleeper(1e-4), "A2": _sleeper(1e-4), "B": _sleeper(2e-3)}, FAST
        ).extra["calls_per_sample"]
        seen.append(calls)
        assert calls["B"] <= 2, calls
        if calls["A"] > 2 and calls["A2"] > 2:
            break
    else:
        pytest.fail(f"a fast role was calibrated as a slow one in each of three runs: {seen}")


def test_the_host_sampler_times_issuing_calls() -> None:
    # A 1 ms call against a 0.1 ms one: the host sampler must see the gap. A loaded host (a
    # worker per core beside the interpreter) stretches a 0.1 ms sleep to a quarter of a
    # millisecond at times, so the gap must show in one of three measurements.
    seen = []
    for _ in range(3):
        got = measure({"A": _sleeper(1e-4), "B": _sleeper(1e-3)}, FAST.__class__(
            **{**FAST.to_json(), "sampler": "host"}))  # fmt: skip
        assert got.extra["sampler"] == "host"
        seen.append((min(got.samples["A"]), min(got.samples["B"])))
        if seen[-1][1] > 5 * seen[-1][0]:
            break
    else:
        pytest.fail(f"the host sampler never told a 1 ms call from a 0.1 ms one: {seen}")


def test_a_sample_longer_than_the_cap_is_flagged_before_timing() -> None:
    policy = TimingPolicy(
        min_sample_s=1e-4, min_reps=1, max_reps=2, cell_cap_s=0.01, warmup_calls=1
    )
    got = measure({"A": _sleeper(1e-4), "B": _sleeper(0.03)}, policy)
    assert "sample_over_cap" in got.flags
    assert got.extra["sample_over_cap"] == ["B"]


def test_a_cell_stops_inside_the_cap_whatever_the_cycle() -> None:
    policy = TimingPolicy(
        min_sample_s=1e-4, min_reps=50, max_reps=60, cell_cap_s=0.05, warmup_calls=1, buffer_sets=1
    )
    t0 = time.perf_counter()
    got = measure({"A": _sleeper(2e-3), "B": _sleeper(2e-3)}, policy)
    assert got.extra["stop"] == "cap"
    assert time.perf_counter() - t0 < 2.0
    assert len(got.samples["A"]) == len(got.samples["B"]) < 50


def test_a_kernel_launched_twice_in_one_call_is_found() -> None:
    assert repeated(["k", "memset", "k", "Memset (Device)"]) == ["k"]
    assert repeated(["k", "fill", "fill"]) == []

    def profile(fn, device):
        return ["cudnn_fprop", "cudnn_fprop"] if fn is twice else ["cudnn_fprop"]

    def once() -> None: ...

    def twice() -> None: ...

    kernels, strays, repeats = check_launches(
        {"A": once, "B": twice}, {"A": ("cudnn",), "B": ("cudnn",)}, "cuda", profile
    )
    assert kernels["B"] == ["cudnn_fprop"] and not strays
    assert repeats == {"B": ["cudnn_fprop"]}
    _, _, none = check_launches({"B": twice}, {"B": ("cudnn",)}, "cpu", profile)
    assert none == {}  # CPU operators repeat by design (view ops): never judged there


def test_single_prefill_as_an_entry_arm_on_the_cpu(tmp_path: Path) -> None:
    reg = _reg()
    sweep = Sweep(
        name="fixture-entry",
        case="attention",
        axes={"seqlen": (32, 64)},
        aliases={"seqlen": ("qo_len", "kv_len")},
        fixed={"batch": 1, "hq": 4, "hkv": 2, "head_dim": 64, "dtype": "f32", "causal": True},
        arms={"A": "sdpa_math", "B": "single_prefill"},
        entry_points=("single_prefill", "batch_prefill"),
        timing=QUICK,
        needs_gpu=False,
        replicates=1,
    )
    bench = Bench(ROOT, tmp_path, reg, CPU, unguarded_reason="FIXTURE: unit test")
    run = bench.sweep(sweep)
    assert run.status == "ok", run.reason
    assert run.config["arms"] == {"A": "sdpa_math", "B": "single_prefill"}
    for cell in run.cells:
        assert set(cell.samples) == {"A", "A2", "B"}
        # The entry point's call reached the arm route picks (the CPU's flash SDPA).
        assert cell.reach["routes"]["single_prefill"] == "sdpa_flash"
        assert any("flash_attention" in k for k in cell.kernels["B"])


def test_an_entry_arm_refuses_what_its_entry_point_cannot_make() -> None:
    reg = _reg()
    arm = reg.get_arm("single_prefill")
    case = reg.make_case(
        "attention",
        {"batch": 2, "qo_len": 8, "kv_len": 8, "hq": 2, "hkv": 2, "head_dim": 64, "dtype": "f32"},
    )
    assert "cannot make batch 2" in (arm.supports(case, "cpu") or "")
    assert reg.get_arm("batch_prefill").supports(case, "cpu") is None


def test_the_engine_default_is_unchanged_for_the_old_sampler_names() -> None:
    assert set(engine.SAMPLERS) == {"auto", "graph", "events", "wall", "host"}


def test_ragged_prefill_as_an_entry_arm_against_per_request_on_the_cpu(tmp_path: Path) -> None:
    # A ragged batch on the CPU routes to per_request (each request to the CPU's flash SDPA):
    # the entry point as called against the same route prepared outside the call.
    reg = _reg()
    sweep = Sweep(
        name="fixture-ragged",
        case="ragged",
        axes={"batch": (2, 3), "seqlen": (16, 40)},
        aliases={"seqlen": ("qo_len", "kv_len")},
        fixed={"hq": 4, "hkv": 2, "head_dim": 64, "dtype": "f32", "causal": True, "mix": "spread"},
        arms={"A": "per_request", "B": "ragged_prefill"},
        entry_points=("single_prefill", "batch_prefill", "ragged_prefill"),
        timing=QUICK,
        needs_gpu=False,
        replicates=1,
    )
    run = Bench(ROOT, tmp_path, reg, CPU, unguarded_reason="FIXTURE: unit test").sweep(sweep)
    assert run.status == "ok", run.reason
    for cell in run.cells:
        assert set(cell.samples) == {"A", "A2", "B"}
        assert cell.reach == {
            "entry_points": ["ragged_prefill"],
            "routes": {"ragged_prefill": "per_request"},
        }
        assert not cell.flags, cell.extra  # the copies into the packed output are declared
        assert any("flash_attention" in k for k in cell.kernels["B"])
    batch3 = next(c for c in run.cells if c.key == {"batch": 3, "seqlen": 40})
    # The work is the requests' own: 14, 27 and 40 queries, each square and causal.
    assert batch3.work == sum(4 * 4 * 64 * n * (n + 1) // 2 for n in (14, 27, 40))


def test_a_serving_mix_is_decode_rows_chunks_and_prompts_in_turn() -> None:
    """The "serving" mix keeps "spread"'s keys and gives request i a one-token row, the last
    quarter of its keys, or all of them as queries, in turn: the envelope the ragged scope
    reads is the longest request's keys and the most queries any request has."""
    reg = _reg()
    fields = {"batch": 6, "seqlen": 120, "hq": 4, "hkv": 2, "head_dim": 64, "dtype": "f32"}
    spread = reg.make_case("ragged", {**fields, "mix": "spread"}).shape
    case = reg.make_case("ragged", {**fields, "mix": "serving"})
    assert case.shape.kv_lens == spread.kv_lens == (20, 40, 60, 80, 100, 120)
    assert case.shape.qo_lens == (1, 10, 60, 80, 1, 30)
    assert case.fields()["mix"] == "serving"
    assert (case.shape.qo_len, case.shape.kv_len) == (80, 120)
    # Every request's queries see keys (causal, bottom-right): none outnumbers its keys.
    assert all(q <= k for q, k in zip(case.shape.qo_lens, case.shape.kv_lens, strict=True))


def test_a_ragged_case_names_what_it_cannot_make() -> None:
    reg = _reg()
    fields = {"batch": 2, "seqlen": 8, "hq": 2, "hkv": 2, "head_dim": 64, "dtype": "f32"}
    with pytest.raises(UsageError, match="mix 'zipf' is not one of"):
        reg.make_case("ragged", {**fields, "mix": "zipf"})
    with pytest.raises(UsageError, match="one longest length"):
        reg.make_case("ragged", {**fields, "seqlen": None, "qo_len": 8, "kv_len": 16})
    case = reg.make_case("ragged", fields)
    assert "cannot make" in (reg.get_arm("single_prefill").supports(case, "cpu") or "")
    assert "takes a ragged batch" in (
        reg.get_arm("ragged_prefill").supports(
            reg.make_case("attention", {**fields, "batch": 1, "qo_len": 8, "kv_len": 8}), "cpu"
        )
        or ""
    )
