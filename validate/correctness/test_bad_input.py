"""Bad input to single_prefill and batch_prefill: a UsageError naming the argument, before
anything runs (issue 11 saw a raw ValueError, a Triton driver error, a silent all-NaN output
and an AttributeError for these)."""

from __future__ import annotations

import pytest
import torch
from tether.errors import UnknownArchError, UsageError
from tether.pytest_plugin import current_arch, device, has_gpu
from tether_kernels import batch_prefill, prefill, single_prefill

D = 64


def _qkv(qo: int = 16, kv: int = 24, hq: int = 4, hkv: int = 2, d: int = D, **kw):
    """Single-request inputs on this machine's device."""
    kw.setdefault("device", device())
    return (
        torch.randn(qo, hq, d, **kw),
        torch.randn(kv, hkv, d, **kw),
        torch.randn(kv, hkv, d, **kw),
    )


@pytest.fixture
def nothing_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad input is refused before any arm runs."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an arm ran for bad input")

    monkeypatch.setattr(prefill, "_run_plan", refuse)
    monkeypatch.setattr(prefill, "_plan_for", refuse)


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in ("q", "k", "v")])
def test_a_non_tensor_is_named(name: str, nothing_runs) -> None:
    args = dict(zip("qkv", _qkv(), strict=True))
    args[name] = args[name].tolist()
    with pytest.raises(
        UsageError, match=f"single_prefill: {name} must be a torch.Tensor, got list"
    ):
        single_prefill(args["q"], args["k"], args["v"])


def test_tensors_on_different_devices_are_named(nothing_runs) -> None:
    q, k, v = _qkv()
    # A second device this machine has: the GPU's host memory, or a meta device on the CPU.
    other = "cpu" if has_gpu() else "meta"
    with pytest.raises(UsageError, match=r"q, k and v must be on one device; got q on .*, k on"):
        single_prefill(q, k.to(other), v)
    with pytest.raises(UsageError, match="one device"):
        batch_prefill(q[None], k[None], v[None].to(other))


def test_an_arch_that_cannot_use_the_tensors_is_named(nothing_runs) -> None:
    q, k, v = _qkv(device="cpu")
    with pytest.raises(UsageError, match=r"arch 'sm90' cannot use tensors on cpu \(a cpu device\)"):
        single_prefill(q, k, v, arch="sm90")
    with pytest.raises(UsageError, match="arch 'gfx942' cannot use tensors on cpu"):
        batch_prefill(q[None], k[None], v[None], arch="gfx942")
    with pytest.raises(UnknownArchError, match="sm80"):
        single_prefill(q, k, v, arch="sm80")


@pytest.mark.gpu(reason="GPU tensors")
def test_cpu_arch_with_gpu_tensors_is_named(nothing_runs) -> None:
    q, k, v = _qkv(device="cuda")
    with pytest.raises(
        UsageError, match=f"arch 'cpu' cannot use tensors on cuda:0 \\(a {current_arch()} device\\)"
    ):
        single_prefill(q, k, v, arch="cpu")


def test_meta_tensors_are_refused(nothing_runs) -> None:
    q, k, v = _qkv(device="meta")
    with pytest.raises(UsageError, match="meta tensors hold no data"):
        single_prefill(q, k, v)


SCALES = [
    pytest.param(float("nan"), "positive finite number, got nan", id="nan"),
    pytest.param(float("inf"), "positive finite number, got inf", id="inf"),
    pytest.param(float("-inf"), "positive finite number, got -inf", id="neg-inf"),
    pytest.param(0.0, "positive finite number, got 0.0", id="zero"),
    pytest.param(-0.125, "positive finite number, got -0.125", id="negative"),
    pytest.param("0.125", "positive finite number or None, got str", id="str"),
    pytest.param(True, "positive finite number or None, got bool", id="bool"),
    pytest.param(torch.tensor(0.125), "positive finite number or None, got Tensor", id="tensor"),
]


@pytest.mark.parametrize(("scale", "message"), SCALES)
def test_a_bad_sm_scale_is_named(scale: object, message: str, nothing_runs) -> None:
    q, k, v = _qkv()
    with pytest.raises(UsageError, match=f"single_prefill: sm_scale must be a {message}"):
        single_prefill(q, k, v, sm_scale=scale)


@pytest.mark.parametrize("flag", [pytest.param(f, id=f) for f in ("causal", "return_lse")])
def test_flags_must_be_bools(flag: str, nothing_runs) -> None:
    q, k, v = _qkv()
    with pytest.raises(UsageError, match=f"batch_prefill: {flag} must be a bool, got 'yes'"):
        batch_prefill(q[None], k[None], v[None], **{flag: "yes"})


SHAPES = [
    pytest.param("single", (8, 2, D, 1), (8, 2, D), "q must be 3-D", id="single-q-4d"),
    pytest.param("single", (8, 2, D), (8, D), "k must be 3-D", id="single-k-2d"),
    pytest.param("batch", (8, 2, D), (8, 2, D), "q must be 4-D", id="batch-q-3d"),
    pytest.param("single", (0, 2, D), (8, 2, D), "q has an empty dimension", id="empty-q"),
    pytest.param("single", (8, 2, D), (0, 2, D), "k has an empty dimension", id="empty-kv"),
    pytest.param("single", (8, 2, D), (8, 2, 32), "disagree on batch or head_dim", id="head-dim"),
    pytest.param(
        "single", (8, 3, D), (8, 2, D), "q has 3 heads, not a multiple of k's 2", id="gqa"
    ),
]


@pytest.mark.parametrize(("entry", "q_dims", "kv_dims", "message"), SHAPES)
def test_wrong_ranks_and_shapes_are_named(
    entry: str, q_dims: tuple, kv_dims: tuple, message: str, nothing_runs
) -> None:
    q = torch.randn(q_dims, device=device())
    kv = torch.randn(kv_dims, device=device())
    fn = single_prefill if entry == "single" else batch_prefill
    with pytest.raises(UsageError, match=message):
        fn(q, kv, kv)


def test_k_and_v_shapes_and_dtypes_must_agree(nothing_runs) -> None:
    q, k, v = _qkv()
    with pytest.raises(UsageError, match=r"k \(1, 24, 2, 64\) and v \(1, 25, 2, 64\) differ"):
        batch_prefill(q[None], k[None], torch.cat([v, v[:1]])[None])
    with pytest.raises(UsageError, match="dtypes differ"):
        single_prefill(q, k, v.double())
    with pytest.raises(UsageError, match=r"dtype torch\.int64 is not one of f16, bf16, f32"):
        single_prefill(*(t.long() for t in (q, k, v)))
    with pytest.raises(UsageError, match="v must be 4-D"):
        batch_prefill(q[None], k[None], v[None, None])


def test_batched_q_and_kv_disagreeing_on_batch(nothing_runs) -> None:
    q, k, v = _qkv()
    with pytest.raises(UsageError, match="disagree on batch"):
        batch_prefill(torch.stack([q, q]), k[None], v[None])


def test_a_call_no_arm_serves_names_the_constraint() -> None:
    q, k, v = _qkv(d=20)  # no arm on any arch serves head_dim 20
    with pytest.raises(UsageError, match=r"no arm on .* serves .*head_dim 20 is not one of"):
        single_prefill(q, k, v)
