"""Tuning candidates compute the right answer, and a tuning grid runs end to end.

Every kernel variant among the sm90 tuning candidates (``tether_kernels_plugin.candidates.CANDIDATES``)
and every kernel option (tensor-descriptor loads, warp specialization, two heads per program,
longest first, skipping the rescale) runs at a small shape in the interpreter against the f32
reference; warps and stages do not change what the interpreter computes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from tether_kernels import Shape
from tether_kernels.launch_tables import LaunchConfig
from tether_kernels.triton.attn_fwd import attn_fwd_launcher, tma_unsupported_reason
from tether_kernels_plugin.candidates import CANDIDATES
from tether_kernels_plugin.cases import attention_case

from validate.correctness._helpers import (
    assert_within_baseline,
    fresh_seed,
    make_qkv,
    poisoned_like,
)

pytestmark = pytest.mark.triton

ROOT = Path(__file__).resolve().parents[2]
BASE = LaunchConfig(128, 64, 8, 3)
OPTIONS = {
    "tma": dataclasses.replace(BASE, use_tma=True),
    "ws": dataclasses.replace(BASE, warp_specialize=True),
    "h2": dataclasses.replace(BASE, heads_per_program=2),
    "lf": dataclasses.replace(BASE, longest_first=True),
    "sk": dataclasses.replace(BASE, skip_rescale=True),
    "n128": dataclasses.replace(BASE, block_n=128),
}


def _kernel_variants() -> list[pytest.param]:
    seen: dict[tuple, tuple[str, LaunchConfig]] = {}
    for name, c in [*CANDIDATES.items(), *OPTIONS.items()]:
        key = (c.block_m, c.block_n, c.use_tma, c.warp_specialize, c.heads_per_program,
               c.longest_first, c.skip_rescale)  # fmt: skip
        seen.setdefault(key, (name, c))
    return [pytest.param(c, id=name) for name, c in seen.values()]


SHAPES = [
    # Two query blocks of 128 with a tail, and a chunked call whose diagonal is offset; two
    # query heads per kv head so a two-heads-per-program variant runs as such.
    pytest.param(Shape(1, 136, 136, 2, 1, 64), id="square-136"),
    pytest.param(Shape(1, 40, 200, 2, 1, 64), id="chunked-40x200"),
]


@pytest.mark.parametrize("config", _kernel_variants())
@pytest.mark.parametrize("shape", SHAPES)
def test_candidate_config_is_correct(config: LaunchConfig, shape: Shape) -> None:
    # f16 only: the f32 path is the kernel's own tests' business, and bf16 needs a GPU.
    seed = fresh_seed()
    q, k, v = make_qkv(shape, seed)
    out = poisoned_like(q)
    launch = attn_fwd_launcher(q, k, v, out, config, causal=shape.causal)
    launch()
    assert launch.use_tma == config.use_tma, launch.tma_fallback
    assert launch.heads_per_program == config.heads_per_program, launch.heads_fallback
    assert_within_baseline(str(config), out, shape, q, k, v, seed)


def test_the_tuning_grid_includes_todays_default() -> None:
    from tether_kernels.launch_tables import launch_config

    default = launch_config("sm90", 128, "bf16", qo_len=16384, batch_heads=32)
    assert default in CANDIDATES.values()


def test_a_tuning_cell_runs_the_candidate_it_names(tmp_path: Path) -> None:
    from tether import registry
    from tether.bench.engine import TimingPolicy
    from tether.bench.sweep import Bench, Target
    from tether.pytest_plugin import interpreter_on

    if not interpreter_on() and not torch.cuda.is_available():
        pytest.skip("the Triton arm needs a GPU or TRITON_INTERPRET=1")
    reg = registry.load(["tether_kernels_plugin"])
    tune = reg.get_sweep("tune-sm90")
    assert tune.kind == "tune"
    tiny = tune.replace(
        axes={"config": ("m64n64w4s3lf",), "seqlen": (32,)},
        fixed={"batch": 1, "hq": 2, "hkv": 1, "head_dim": 16, "dtype": "f16", "causal": True},
        arms={"A": "sdpa_math", "B": "triton"},
        timing=TimingPolicy(calls_per_sample=1, warmup_calls=1, min_reps=2, max_reps=2),
        needs_gpu=False,
        replicates=1,
    )
    target = Target.detect() if torch.cuda.is_available() else Target("cpu", "cpu", "cpu: test")
    bench = Bench(ROOT, tmp_path, reg, target, unguarded_reason="FIXTURE: unit test")
    run = bench.sweep(tiny)
    assert run.kind == "tune" and run.status == "ok", run.reason
    (cell,) = run.cells
    assert cell.key["config"] == "m64n64w4s3lf"


def test_tma_reason_off_the_interpreter(monkeypatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    reason = tma_unsupported_reason(torch.device("cpu"))
    assert reason is not None and "NVIDIA" in reason


def test_the_attention_case_reads_a_heads_pair_axis() -> None:
    case = attention_case(
        {"hq/hkv": "8/1", "qo_len": 128, "kv_len": 4096, "batch": 1, "head_dim": 64,
         "dtype": "f16", "causal": True}
    )  # fmt: skip
    assert (case.shape.hq, case.shape.hkv, case.shape.head_dim) == (8, 1, 64)
    assert case.fields()["hq"] == 8
