"""Every arm against the f32 reference wherever it serves the shape, and honest refusals."""

from __future__ import annotations

import re

import pytest
import torch
from tether.errors import ArmUnavailableError
from tether.pytest_plugin import current_arch, has_gpu
from tether_kernels import Shape
from tether_kernels.arms import ARMS, get_arm

from validate.correctness._helpers import (
    assert_within_baseline,
    fresh_seed,
    make_qkv,
    run_arm,
)

# bf16 runs on the CPU for the SDPA arms; the Triton arms' own ``supports`` says why they skip.
DTYPES = [pytest.param(d, id=d) for d in ("f16", "bf16", "f32")]

ARM_NAMES = [pytest.param(name, id=name) for name in sorted(ARMS)]

SHAPES = [
    pytest.param(Shape(1, 32, 32, 4, 2, 64, "f16", True), id="sq32-gqa4/2"),
    pytest.param(Shape(1, 17, 68, 4, 2, 64, "f16", True), id="q17-kv68-kv4x"),
    pytest.param(Shape(1, 24, 40, 4, 4, 64, "f16", False), id="q24-kv40-full-mha"),
    pytest.param(Shape(2, 16, 48, 2, 1, 64, "f16", True), id="b2-q16-kv48"),
    pytest.param(
        Shape(1, 2048, 16384, 32, 8, 128, "f16", True),
        id="chunk-2k-16k-gqa32/8",
        marks=pytest.mark.gpu(reason="full-size shape"),
    ),
    pytest.param(
        Shape(4, 1024, 1024, 32, 32, 128, "f16", True),
        id="b4-sq1024-mha",
        marks=pytest.mark.gpu(reason="full-size shape"),
    ),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("base", SHAPES)
@pytest.mark.parametrize("arm", ARM_NAMES)
def test_arm_matches_reference(arm: str, base: Shape, dtype: str) -> None:
    shape = base.with_(dtype=dtype)
    reason = get_arm(arm).supports(shape, current_arch())
    if reason is not None:
        pytest.skip(f"{arm} does not serve this shape on {current_arch()}: {reason}")
    seed = fresh_seed()
    q, k, v = make_qkv(shape, seed)
    out = run_arm(arm, shape, q, k, v)
    assert_within_baseline(arm, out, shape, q, k, v, seed)


def test_unsupported_arm_raises_instead_of_falling_back() -> None:
    shape = Shape(1, 16, 16, 2, 2, 64, "f16", True)
    q, k, v = make_qkv(shape, fresh_seed())
    with pytest.raises(ArmUnavailableError, match="sdpa_cudnn"):
        get_arm("sdpa_cudnn").prepare(q, k, v, shape, arch="cpu")


def test_prepare_checks_shapes_and_dtypes() -> None:
    shape = Shape(1, 16, 16, 2, 2, 64, "f32", True)
    q, k, v = make_qkv(shape, fresh_seed())
    with pytest.raises(ArmUnavailableError, match="q has shape"):
        get_arm("sdpa_math").prepare(q[:, :8], k, v, shape, arch=current_arch())
    with pytest.raises(ArmUnavailableError, match=r"k is torch\.float16"):
        get_arm("sdpa_math").prepare(q, k.half(), v, shape, arch=current_arch())


def test_unknown_arm_names_the_known_ones() -> None:
    with pytest.raises(ArmUnavailableError, match=r"unknown arm .flash3.*sdpa_flash"):
        get_arm("flash3")


def test_sdpa_cpu_arms_serve_cpu_demo_shapes() -> None:
    # The CPU demo sweep times sdpa_math as A against sdpa_flash as B.
    for name in ("sdpa_math", "sdpa_flash"):
        assert get_arm(name).supports(Shape(1, 256, 256, 8, 2, 64, "f32", True), "cpu") is None


def _ran_names(launch) -> list[str]:
    # The bench's own profiling path: one place decides how kernels are named (and which
    # profiler warnings are expected), so this test checks what sweeps will record.
    from tether.bench.fidelity import profile_kernels

    return profile_kernels(launch, "cuda" if has_gpu() else "cpu")


@pytest.mark.parametrize("arm", [pytest.param(n, id=n) for n in ("sdpa_flash", "sdpa_math")])
def test_expected_kernels_appear_in_profile(arm: str) -> None:
    shape = Shape(1, 32, 64, 4, 2, 64, "f16", True)
    reason = get_arm(arm).supports(shape, current_arch())
    if reason is not None:
        pytest.skip(f"{arm} does not serve this shape on {current_arch()}: {reason}")
    q, k, v = make_qkv(shape, fresh_seed())
    launch = get_arm(arm).prepare(q, k, v, shape, arch=current_arch())
    names = _ran_names(launch)
    patterns = get_arm(arm).expected_kernels_on(current_arch())
    assert any(re.search(p, n) for p in patterns for n in names), (
        patterns,
        sorted(set(names))[:40],
    )


def test_expected_kernels_cover_every_arch() -> None:
    for name, arm in ARMS.items():
        for arch in arm.arches:
            if arch != "cpu" or not name.startswith("triton"):
                assert arm.expected_kernels_on(arch), f"{name} declares no kernels on {arch}"


def test_backend_refusal_surfaces_from_prepare() -> None:
    # Forcing a backend that cannot run here must raise with the shape, never fall back.
    from tether_kernels.arms import _sdpa_prepare

    if has_gpu():
        pytest.skip("the efficient backend runs on GPUs; this refusal is the CPU's")
    shape = Shape(1, 16, 16, 2, 2, 64, "f16", True)
    q, k, v = make_qkv(shape, fresh_seed())
    with pytest.raises(ArmUnavailableError, match="EFFICIENT_ATTENTION refused"):
        _sdpa_prepare("EFFICIENT_ATTENTION", "mask")(
            q, k, v, shape, torch.empty_like(q), None, "cpu"
        )


SDPA_ARMS = [pytest.param(n, id=n) for n in sorted(ARMS) if not ARMS[n].writes_out]


def test_only_sdpa_arms_return_their_own_tensor() -> None:
    # ... and the FlashInfer peers, whose public call allocates its own output too.
    assert {n for n, arm in ARMS.items() if not arm.writes_out} == {
        "sdpa_flash",
        "sdpa_cudnn",
        "sdpa_efficient",
        "sdpa_math",
        "sdpa",  # PyTorch SDPA as a user calls it
        "flashinfer_fa3",
        "flashinfer_fa2",
    }


@pytest.mark.gpu(reason="device allocator segments")
@pytest.mark.parametrize("arm", SDPA_ARMS)
def test_sdpa_call_allocates_no_segment_after_warmup(arm: str) -> None:
    # The SDPA arms return PyTorch's own output, allocated per call from the caching
    # allocator: after the first call (prepare's probe) the block is reused, never cudaMalloc'd.
    shape = Shape(1, 2048, 4096, 32, 8, 128, "f16", True)
    reason = get_arm(arm).supports(shape, current_arch())
    if reason is not None:
        pytest.skip(f"{arm} does not serve this shape on {current_arch()}: {reason}")
    q, k, v = make_qkv(shape, fresh_seed())
    out = torch.full_like(q, float("nan"))
    launch = get_arm(arm).prepare(q, k, v, shape, out=out, arch=current_arch())
    launch()
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats().get("segment.all.allocated", 0)
    for _ in range(3):
        launch()  # the result is dropped, as the timing engine drops it
    res = launch()
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats().get("segment.all.allocated", 0) == before
    assert res.data_ptr() != out.data_ptr() and torch.isnan(out).all()
    assert torch.isfinite(res).all()


def test_cpu_view_ops_are_allowed_but_copies_are_not() -> None:
    from tether_kernels.arms import _VIEW_OPS

    def allowed(name: str) -> bool:
        return any(re.search(p, name) for p in _VIEW_OPS)

    assert allowed("aten::as_strided") and allowed("aten::transpose")
    assert not allowed("aten::copy_") and not allowed("aten::clone")
    assert not allowed("aten::as_strided_scatter")
