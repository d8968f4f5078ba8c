"""validate/tune_sm90.py: its candidates compute the right answer, and ``--tiny`` runs end to end.

Every kernel variant among the sm90 candidates (tile sizes, tensor-descriptor loads, warp
specialization) runs at a small shape in the interpreter against the f32 reference; warps
and stages do not change what the interpreter computes, so those variants are deduplicated.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tether.pytest_plugin import cpu_toy_env, interpreter_on
from tether_kernels import Shape
from tether_kernels.arch_caps import LaunchConfig
from tether_kernels.triton.attn_fwd import attn_fwd_launcher, tma_unsupported_reason

from validate import tune_sm90
from validate.correctness._helpers import (
    assert_within_baseline,
    fresh_seed,
    make_qkv,
    poisoned_like,
)

pytestmark = pytest.mark.triton

ROOT = Path(__file__).resolve().parents[2]


def _kernel_variants() -> list[pytest.param]:
    seen: dict[tuple, LaunchConfig] = {}
    grids = (
        tune_sm90.sm90_candidates()
        + tune_sm90.sm90_schedule_candidates()
        + tune_sm90.sm90_rescale_candidates()
    )
    for cand in grids:
        c = cand.config
        key = (c.block_m, c.block_n, c.use_tma, c.warp_specialize, c.heads_per_program)
        seen.setdefault((*key, c.longest_first, c.skip_rescale), c)
    return [pytest.param(c, id=tune_sm90.config_name(c)) for c in seen.values()]


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
    assert_within_baseline(tune_sm90.config_name(config), out, shape, q, k, v, seed)


def test_sm90_candidates_are_pruned_and_include_the_options() -> None:
    cands = tune_sm90.sm90_candidates()
    names = [c.name for c in cands]
    assert 12 <= len(cands) <= 20
    assert len(set(names)) == len(names)
    assert cands[0].config == tune_sm90.V1_DEFAULT
    assert all(
        tune_sm90.smem_estimate(c.config, 128, 2) <= tune_sm90.SMEM_LIMIT_SM90 for c in cands
    )
    assert "m128n128w8s4" not in names  # does not fit shared memory at head_dim 128
    assert any(c.config.use_tma for c in cands)
    assert any(c.config.warp_specialize for c in cands)
    assert {c.config.num_stages for c in cands} == {2, 3, 4}


def test_schedule_candidates_cover_both_options_on_the_v3_tiles() -> None:
    cands = tune_sm90.sm90_schedule_candidates()
    names = [c.name for c in cands]
    assert len(set(names)) == len(names)
    assert cands[0].config == tune_sm90.V3_LONG
    assert {c.config.heads_per_program for c in cands} == {1, 2}
    assert {c.config.longest_first for c in cands} == {False, True}
    assert all(
        tune_sm90.smem_estimate(c.config, 128, 2) <= tune_sm90.SMEM_LIMIT_SM90 for c in cands
    )
    # Two 128-row Q tiles beside three stages of 128-key K and V tiles do not fit.
    assert "m128n128w8s3+h2" not in names


def test_check_flags_a_wrong_answer(monkeypatch) -> None:
    if not interpreter_on():
        pytest.skip("the tiny candidates run on CPU tensors, which needs TRITON_INTERPRET=1")
    import tether_kernels.triton.attn_fwd as attn_fwd

    real = attn_fwd.attn_fwd_launcher

    def off_by_a_bit(q, k, v, out, *args, **kwargs):
        launch = real(q, k, v, out, *args, **kwargs)

        def wrong():
            return launch().add_(1e-2)

        wrong.use_tma, wrong.tma_fallback = launch.use_tma, launch.tma_fallback
        return wrong

    monkeypatch.setattr(attn_fwd, "attn_fwd_launcher", off_by_a_bit)
    shape = tune_sm90.check_shapes(tune_sm90.timed_shapes(tiny=True), tiny=True)[0]
    cand = tune_sm90.tiny_candidates()[0]
    args = type("Args", (), {"tiny": True, "warmup_ms": 0, "rep_ms": 0})()
    rec = tune_sm90.run_candidate(cand, [], [shape], {}, {}, "cpu", "cpu", args)
    assert rec["status"] == "wrong", rec
    assert "err" in rec["reason"]


def test_tma_reason_off_the_interpreter(monkeypatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    reason = tma_unsupported_reason(torch.device("cpu"))
    assert reason is not None and "NVIDIA" in reason


@pytest.mark.slow
@pytest.mark.cpu_toy
def test_tune_tiny_runs_end_to_end(tmp_path: Path) -> None:
    env = cpu_toy_env()
    out = tmp_path / "tune.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "validate" / "tune_sm90.py"), "--tiny", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    report = json.loads(out.read_text(encoding="utf-8"))
    cands = tune_sm90.tiny_candidates()
    assert [r["name"] for r in report["configs"]] == [c.name for c in cands]
    sids = [tune_sm90.shape_id(s) for s in tune_sm90.timed_shapes(tiny=True)]
    for rec in report["configs"]:
        assert rec["status"] == "ok", rec
        assert all(c["ok"] for c in rec["checks"])
        assert sorted(rec["results"]) == sorted(sids)
        assert all(r["tflops"] > 0 for r in rec["results"].values())
    assert sum(r["is_default"] for r in report["configs"]) == 1
    square = sids[0]
    assert "does not run on cpu" in report["reference"][square]["unavailable"]
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:2] == ["config", "status"]
    assert lines[-1].startswith("TFLOP/s per shape")
    assert len(lines) == 1 + 1 + len(cands) + 1  # header, cuDNN row, configs, legend
