"""The ``gluon`` arm: honest refusals off sm90, every variant compiled for sm90 (Triton 3.6), and
the f32 reference on an sm90 GPU, across its variants."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tether.errors import ArmUnavailableError
from tether.pytest_plugin import current_arch
from tether_kernels import Shape
from tether_kernels.arms import ARMS, attention_ref, get_arm
from tether_kernels.gluon.launch import (
    DEFAULT_VARIANT,
    HEAD_DIMS,
    MAX_SPLIT,
    SMEM_LIMIT,
    VARIANTS,
    GluonConfig,
    default_config,
    head_part,
    split_count,
)

from validate.correctness._helpers import assert_within_baseline, fresh_seed, make_qkv, max_err

CHUNK = Shape(1, 256, 1024, 8, 2, 128, "bf16", True)
VARIANT_NAMES = [pytest.param(name, id=name) for name in VARIANTS]


def test_gluon_arm_is_declared_for_sm90_only() -> None:
    arm = ARMS["gluon"]
    assert arm.arches == ("sm90",) and arm.returns_lse and arm.writes_out
    assert arm.expected_kernels_on("sm90") == (r"attn_fwd_sm90", r"merge_splits")
    for arch in ("gfx942", "gfx950", "gfx1151", "cpu"):
        assert arm.supports(CHUNK, arch) == f"gluon does not run on {arch}"
    assert "dtype f32" in (arm.supports(CHUNK.with_(dtype="f32"), "sm90") or "")
    assert "head_dim 80" in (arm.supports(CHUNK.with_(head_dim=80), "sm90") or "")
    assert HEAD_DIMS == (64, 96, 128, 256)
    for d in HEAD_DIMS:
        assert arm.serves["sm90"].refusal(CHUNK.with_(head_dim=d), need_lse=True) is None, d


@pytest.mark.parametrize(
    ("head_dim", "first"), [(64, 64), (96, 64), (128, 128), (256, 256), (80, 64), (48, 32)]
)
def test_head_part_is_the_largest_power_of_two_part(head_dim: int, first: int) -> None:
    assert head_part(head_dim) == first


@pytest.mark.parametrize("head_dim", [72, 112, 40])
def test_head_part_refuses_a_rest_that_is_no_wgmma_tile(head_dim: int) -> None:
    # 72 = 64 + 8 (under a K step of 16), 112 = 64 + 48 and 40 = 32 + 8: no power of two.
    with pytest.raises(ValueError, match=f"head_dim {head_dim}"):
        head_part(head_dim)


def test_default_config_keeps_the_tuned_variant_where_it_fits() -> None:
    """The tuned variant at 64 and 128; at 256 the same variant on 64-key tiles, two stages:
    the only ring that fits a block (the tuned one needs 320 KiB)."""
    tuned = VARIANTS[DEFAULT_VARIANT]
    assert default_config(64) == default_config(96) == default_config(128) == tuned
    assert tuned.smem_bytes(256) > SMEM_LIMIT
    wide = default_config(256)
    assert wide.block_n == 64 and wide.stages == 2 and wide.smem_bytes(256) <= SMEM_LIMIT
    assert (wide.pingpong, wide.consumer_regs) == (tuned.pingpong, tuned.consumer_regs)
    assert GluonConfig(block_n=64, stages=3).smem_bytes(256) > SMEM_LIMIT
    with pytest.raises(ValueError, match="head_dim 1024"):
        default_config(1024)


def test_gluon_arm_refuses_a_device_that_is_not_sm90() -> None:
    if current_arch() == "sm90":
        pytest.skip("this machine is sm90: the arm runs here (see the GPU tests)")
    q, k, v = make_qkv(CHUNK.with_(dtype="f16"), fresh_seed())
    with pytest.raises(ArmUnavailableError, match="arm gluon"):
        get_arm("gluon").prepare(q, k, v, CHUNK.with_(dtype="f16"), arch="sm90")


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        pytest.param({"block_n": 96}, "block_n", id="block-n-96"),
        pytest.param({"stages": 5}, "stages", id="stages-5"),
        pytest.param({"consumer_regs": 256}, "register", id="regs-over"),
    ],
)
def test_gluon_config_rejects_what_cannot_launch(changes: dict, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        GluonConfig(**changes)


@pytest.mark.parametrize(
    ("programs", "key_blocks", "sms", "want"),
    [
        pytest.param(32, 64, 132, 4, id="q128-kv8k-fills-the-sms"),
        pytest.param(64, 64, 132, 2, id="q256-kv8k-two"),
        pytest.param(128, 64, 132, 1, id="q512-one-wave-no-split"),
        pytest.param(67, 256, 132, 1, id="just-over-half-no-split"),
        pytest.param(32, 8, 132, 2, id="few-key-blocks-cap"),
        pytest.param(32, 1, 132, 1, id="square-128-one-block"),
        pytest.param(1, 4096, 132, MAX_SPLIT, id="one-program-max-split"),
    ],
)
def test_split_count(programs: int, key_blocks: int, sms: int, want: int) -> None:
    assert split_count(programs, key_blocks, sms) == want


def _gluon_triton() -> str | None:
    from tether_kernels.gluon.launch import gluon_triton_reason

    return gluon_triton_reason()


def test_every_case_compiles_for_sm90_without_spills(tmp_path: Path) -> None:
    """The compile gate under the installed Triton: every variant (causal, not, split) and what
    the arm launches at each head_dim (f16 too: the P conversion has an instruction per dtype)
    compiles for sm90 with no spill, wgmma in the PTX, HGMMA in the main loop and TMA loads in
    the producer's (validate/tools/gluon_aot.py; compile_releases.sh runs it per release).
    In a process of its own without TRITON_INTERPRET: under the interpreter (the CPU suite's
    mode) a Gluon kernel is an interpreted function, which triton.compile cannot take."""
    why = _gluon_triton()
    if why is not None:
        pytest.skip(why)
    out = tmp_path / "rows.json"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    tool = Path(__file__).resolve().parents[1] / "tools" / "gluon_aot.py"
    res = subprocess.run(
        [sys.executable, str(tool), "--json", str(out), "--workers", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert out.is_file(), res.stdout[-2000:] + res.stderr[-2000:]
    rows = json.loads(out.read_text())
    from validate.tools.gluon_aot import CASES, gate

    assert len(rows) == len(CASES()), "every case reported"
    assert not gate(rows), gate(rows)
    assert res.returncode == 0, res.stderr[-2000:]
    for row in rows:
        assert row["hgmma_sass"] > 0 and row["utmaldg_sass"] > 0, row
        if row["set"] == "variant":
            assert row["num_warps"] == 12, row  # two consumer warpgroups and the producer's


GPU_SHAPES = [
    pytest.param(CHUNK, id="chunk-256x1024-gqa8/2"),
    pytest.param(Shape(1, 300, 300, 4, 4, 128, "bf16", True), id="sq300-tails-mha"),
    pytest.param(Shape(1, 200, 333, 8, 1, 128, "bf16", False), id="q200-kv333-full"),
    pytest.param(Shape(2, 190, 500, 8, 2, 64, "f16", True), id="b2-d64-f16"),
]


def _assert_lse_matches(lse: torch.Tensor, q, k, v, causal: bool, seed: int) -> None:
    """-inf exactly where a row sees no key, else within f32 rounding of the reference's."""
    _, ref_lse = attention_ref(q, k, v, causal, return_lse=True)
    seen = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), seen), f"lse -inf where no key is seen (seed {seed})"
    assert max_err(lse[seen], ref_lse[seen]) <= 1e-4 * ref_lse[seen].abs().max().item() + 1e-5


# The head dims beyond the tuned tile, through the arm as routed (head_dim 256 takes
# default_config's key tile, 96 runs in two parts of 64 and 32): tails, GQA/MHA/MQA, f16
# and bf16.
WIDE_SHAPES = [
    pytest.param(Shape(b, qo, kv, hq, hkv, d, dt, causal), id=f"d{d}-{name}")
    for d in (96, 256)
    for b, qo, kv, hq, hkv, dt, causal, name in (
        (1, 256, 1024, 8, 2, "bf16", True, "chunk-gqa"),
        (1, 333, 333, 4, 4, "f16", True, "sq333-tails-mha"),
        (2, 200, 517, 8, 1, "bf16", False, "b2-full-mqa"),
    )
]


@pytest.mark.gpu(reason="the Gluon kernel runs on an sm90 GPU")
@pytest.mark.parametrize("base", WIDE_SHAPES)
def test_gluon_wide_head_matches_reference(base: Shape) -> None:
    if current_arch() != "sm90":
        pytest.skip(f"the Gluon kernel is declared for sm90; this is {current_arch()}")
    seed = fresh_seed()
    q, k, v = make_qkv(base, seed)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((base.batch, base.hq, base.qo_len), float("nan"), device=q.device)
    launch = get_arm("gluon").prepare(q, k, v, base, out, lse, "sm90")
    for _ in range(2):  # the JIT launch, then the direct one
        assert launch() is out
        assert_within_baseline(f"gluon d{base.head_dim}", out, base, q, k, v, seed)
    _assert_lse_matches(lse, q, k, v, base.causal, seed)


@pytest.mark.gpu(reason="the Gluon kernel runs on an sm90 GPU")
@pytest.mark.parametrize("base", GPU_SHAPES)
@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_gluon_variant_matches_reference(variant: str, base: Shape) -> None:
    if current_arch() != "sm90":
        pytest.skip(f"the Gluon kernel is declared for sm90; this is {current_arch()}")
    from tether_kernels.gluon.arm import prepare_gluon

    seed = fresh_seed()
    q, k, v = make_qkv(base, seed)
    out = torch.full_like(q, float("nan"))
    res = prepare_gluon(VARIANTS[variant])(q, k, v, base, out, None, "sm90")()
    assert res is out
    assert_within_baseline(f"gluon:{variant}", res, base, q, k, v, seed)


# Split-KV: each tile's key blocks shared among n_split programs, merged by merge_splits.
SPLIT_SHAPES = [
    pytest.param(Shape(1, 128, 2048, 8, 2, 128, "bf16", True), id="q128-kv2048-chunk"),
    pytest.param(Shape(1, 300, 1000, 4, 4, 128, "bf16", True), id="q300-kv1000-tails-mha"),
    pytest.param(Shape(2, 130, 777, 8, 1, 64, "f16", False), id="b2-q130-kv777-full-d64"),
    # qo > kv, causal: the first rows see no key in any split (0, lse -inf).
    pytest.param(Shape(1, 400, 300, 4, 2, 128, "f16", True), id="q400-kv300-empty-rows"),
    pytest.param(Shape(1, 128, 1500, 8, 2, 256, "bf16", True), id="q128-kv1500-d256"),
    pytest.param(Shape(1, 128, 1500, 8, 2, 96, "f16", True), id="q128-kv1500-d96"),
]


@pytest.mark.gpu(reason="the Gluon kernel runs on an sm90 GPU")
@pytest.mark.parametrize("base", SPLIT_SHAPES)
@pytest.mark.parametrize("n_split", [2, 3, 8])
def test_gluon_split_kv_matches_reference(n_split: int, base: Shape) -> None:
    """Every split count, with splits left empty (8 splits of a few key blocks), key tails,
    rows that see nothing, and the LSE: the merged result is the unsplit kernel's."""
    if current_arch() != "sm90":
        pytest.skip(f"the Gluon kernel is declared for sm90; this is {current_arch()}")
    from tether_kernels.gluon.launch import GluonPlan

    seed = fresh_seed()
    q, k, v = make_qkv(base, seed)
    dims = (base.batch, base.qo_len, base.kv_len, base.hq, base.hkv, base.head_dim)
    plan = GluonPlan(dims, q.dtype, q.device, causal=base.causal, want_lse=True, n_split=n_split)
    assert plan.n_split == n_split and plan.merge is not None
    out = torch.full_like(q, float("nan"))
    lse = torch.full((base.batch, base.hq, base.qo_len), float("nan"), device=q.device)
    for _ in range(2):  # the JIT launch, then the direct one
        plan.launch(q, k, v, out, lse)
        assert_within_baseline(f"gluon split {n_split}", out, base, q, k, v, seed)
    _assert_lse_matches(lse, q, k, v, base.causal, seed)


@pytest.mark.gpu(reason="the split is chosen from the device's SM count")
def test_gluon_splits_a_call_that_leaves_the_gpu_idle() -> None:
    """A short chunked call (one query tile per head) splits its keys; a long one does not."""
    if current_arch() != "sm90":
        pytest.skip(f"the Gluon kernel is declared for sm90; this is {current_arch()}")
    from tether_kernels.gluon.launch import GluonPlan

    dev = torch.device("cuda")
    short = GluonPlan((1, 128, 8192, 32, 8, 128), torch.bfloat16, dev)
    long = GluonPlan((1, 4096, 8192, 32, 8, 128), torch.bfloat16, dev)
    assert short.n_split > 1 and long.n_split == 1 and long.merge is None
