"""The ``gluon`` arm: honest refusals off sm90, every variant compiled for sm90 (Triton 3.6), and
the f32 reference on an sm90 GPU, across its variants."""

from __future__ import annotations

import pytest
import torch
from tether.errors import ArmUnavailableError
from tether.pytest_plugin import current_arch
from tether_kernels import Shape
from tether_kernels.arms import ARMS, get_arm
from tether_kernels.gluon.launch import VARIANTS, GluonConfig

from validate.correctness._helpers import assert_within_baseline, fresh_seed, make_qkv

CHUNK = Shape(1, 256, 1024, 8, 2, 128, "bf16", True)
VARIANT_NAMES = [pytest.param(name, id=name) for name in VARIANTS]


def test_gluon_arm_is_declared_for_sm90_only() -> None:
    arm = ARMS["gluon"]
    assert arm.arches == ("sm90",) and arm.returns_lse and arm.writes_out
    assert arm.expected_kernels_on("sm90") == (r"attn_fwd_sm90",)
    for arch in ("gfx942", "gfx950", "gfx1151", "cpu"):
        assert arm.supports(CHUNK, arch) == f"gluon does not run on {arch}"
    assert "dtype f32" in (arm.supports(CHUNK.with_(dtype="f32"), "sm90") or "")
    assert "head_dim 256" in (arm.supports(CHUNK.with_(head_dim=256), "sm90") or "")


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


def _triton_36_with_gluon() -> str | None:
    from tether_kernels.gluon.launch import gluon_triton_reason

    return gluon_triton_reason()


@pytest.mark.parametrize("variant", VARIANT_NAMES)
def test_every_variant_compiles_for_sm90_without_spills(variant: str) -> None:
    why = _triton_36_with_gluon()
    if why is not None:
        pytest.skip(why)
    from validate.tools.gluon_aot import compile_variant, inspect

    for causal in (True, False):
        row = inspect(compile_variant(variant, causal))
        assert row["wgmma_ptx"] > 0 and row["hgmma_sass"] > 0, row
        assert row["spill_bytes"] == 0 and row["local_ptx"] == 0, row
        assert row["num_warps"] == 12, row  # two consumer warpgroups and the producer's


GPU_SHAPES = [
    pytest.param(CHUNK, id="chunk-256x1024-gqa8/2"),
    pytest.param(Shape(1, 300, 300, 4, 4, 128, "bf16", True), id="sq300-tails-mha"),
    pytest.param(Shape(1, 200, 333, 8, 1, 128, "bf16", False), id="q200-kv333-full"),
    pytest.param(Shape(2, 190, 500, 8, 2, 64, "f16", True), id="b2-d64-f16"),
]


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
