"""Direct launch (``tether_kernels.direct``): a plan's later calls launch the compiled kernel
its first call made, with the very result the JIT gives, on the caller's stream and inside a
CUDA graph; where there is no compiled kernel (the interpreter) every call stays on the JIT."""

from __future__ import annotations

import pytest
import torch
from tether_kernels import Shape, single_prefill
from tether_kernels.prefill import _PLANS, _key, clear_plans

from validate.correctness._helpers import fresh_seed, make_qkv

SQUARE = Shape(1, 2048, 2048, 32, 8, 128, "bf16", True)  # the Gluon threshold's squares
CHUNKED = Shape(1, 256, 2048, 32, 8, 128, "bf16", True)


def _add_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def add(x, y, out, n, BLOCK: tl.constexpr, SCALE: tl.constexpr = 2):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(out + i, (tl.load(x + i, mask=m) + tl.load(y + i, mask=m)) * SCALE, mask=m)

    return add


def _device() -> str:
    import os

    if torch.cuda.is_available():
        return "cuda"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu"
    pytest.skip("Triton launches need a GPU or the interpreter (TRITON_INTERPRET=1)")


def test_every_call_gives_the_jits_result_and_later_ones_launch_directly_on_a_gpu() -> None:
    """A real kernel with a defaulted constexpr (the launcher's argument tail). In the
    interpreter there is no compiled kernel: every call stays on the JIT."""
    from tether_kernels.direct import DirectKernel

    device = _device()
    n = 1000
    x = torch.arange(n, dtype=torch.float32, device=device)
    y = torch.ones(n, dtype=torch.float32, device=device)
    out = torch.zeros(n, dtype=torch.float32, device=device)
    kernel = DirectKernel(_add_kernel(), (4,), {"BLOCK": 256})
    kernel(x, y, out, n)
    assert torch.equal(out, (x + y) * 2)
    assert kernel.direct == (device == "cuda")
    out.zero_()
    kernel(x, y, out, n)  # direct on a GPU
    if device == "cuda":
        torch.cuda.synchronize()
    assert torch.equal(out, (x + y) * 2)
    assert (kernel.stream() is not None) == (device == "cuda")


def _gpu_sm90() -> str | None:
    if not torch.cuda.is_available():
        return "needs an sm90 GPU; none is visible"
    if torch.cuda.get_device_capability() != (9, 0):
        return "needs an sm90 GPU (the Gluon kernel)"
    from tether_kernels.gluon.launch import gluon_triton_reason

    return gluon_triton_reason()


@pytest.mark.gpu(reason="direct launch of the Gluon kernel runs on an sm90 GPU")
@pytest.mark.parametrize("shape", [SQUARE, CHUNKED], ids=["square-2k", "chunked-256x2k"])
def test_later_calls_launch_directly_with_the_jits_result(shape: Shape) -> None:
    why = _gpu_sm90()
    if why is not None:
        pytest.skip(why)
    clear_plans()
    q, k, v = (t[0] for t in make_qkv(shape, fresh_seed()))
    first = single_prefill(q, k, v, causal=True)  # through the JIT
    plan = _PLANS[_key("single_prefill", q, k, v, True, None, False, None)]
    assert plan.arm == "gluon" and plan.unbatched, plan
    second = single_prefill(q, k, v, causal=True)  # direct
    torch.cuda.synchronize()
    assert torch.equal(first, second) and second.shape == q.shape
    # With the LSE: single_prefill's [hq, qo_len], the same on both paths and beside the
    # output of the call without it.
    out1, lse1 = single_prefill(q, k, v, causal=True, return_lse=True)
    out2, lse2 = single_prefill(q, k, v, causal=True, return_lse=True)
    torch.cuda.synchronize()
    assert lse2.shape == (shape.hq, shape.qo_len)
    assert torch.equal(out1, first) and torch.equal(out2, first) and torch.equal(lse1, lse2)
    # Inside a CUDA graph, on the capture's side stream: the replay computes the same.
    static = single_prefill(q, k, v, causal=True)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        single_prefill(q, k, v, causal=True)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        static = single_prefill(q, k, v, causal=True)
    static.zero_()
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(static, first)
