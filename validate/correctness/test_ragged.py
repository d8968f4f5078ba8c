"""ragged_prefill: requests of their own lengths, packed, against the f32 reference per request.

On the CPU every batch takes ``per_request`` (each request as single_prefill routes it; the
LSE needs the Triton kernel, so the interpreter); on an sm90 GPU the policy's batches take the
Gluon kernel's one launch, checked here through the arm, through the entry point as routed,
and replayed in a CUDA graph. The argument checks run before anything else, and the plan
cache keys on the offsets' values.
"""

from __future__ import annotations

import pytest
import torch
from tether.errors import ArmUnavailableError, UsageError
from tether.pytest_plugin import current_arch
from tether_kernels import Ragged, Shape, flops, prefill, ragged_prefill, route, single_prefill
from tether_kernels.archs import PER_REQUEST
from tether_kernels.arms import get_arm
from tether_kernels.gluon.launch import ragged_work

from validate.correctness._helpers import assert_matches_per_request, fresh_seed, packed

# (qo_lens, kv_lens, causal): square requests spread out, chunked requests (a cache before
# each chunk), rows that see no key (causal, a request with more queries than keys), and a
# full (non-causal) batch; lengths off every tile boundary.
BATCHES = [
    pytest.param((64, 129, 200), (64, 129, 200), True, id="square-spread"),
    pytest.param((30, 64, 1), (100, 64, 90), True, id="chunked"),
    pytest.param((50, 20, 3), (10, 20, 3), True, id="keyless-rows"),
    pytest.param((7, 150), (300, 11), False, id="full"),
]


@pytest.mark.triton(reason="the LSE comes from the Triton kernel (per_request's requests)")
@pytest.mark.parametrize("dtype", ["f16", "f32"])
@pytest.mark.parametrize(("qo_lens", "kv_lens", "causal"), BATCHES)
def test_ragged_prefill_matches_the_reference_per_request(
    qo_lens: tuple[int, ...], kv_lens: tuple[int, ...], causal: bool, dtype: str
) -> None:
    call = Ragged(qo_lens, kv_lens, 8, 2, 64, dtype, causal)
    seed = fresh_seed()
    q, k, v, qo, kv = packed(call, seed)
    out, lse = ragged_prefill(q, k, v, qo, kv, causal=causal, return_lse=True)
    assert lse.shape == (call.hq, call.total_qo) and lse.dtype == torch.float32
    assert_matches_per_request("ragged_prefill", call, q, k, v, qo, kv, out, lse, seed)
    # The cached plan's call gives the same answer.
    again, lse_again = ragged_prefill(q, k, v, qo, kv, causal=causal, return_lse=True)
    assert torch.equal(again, out) and torch.equal(lse_again, lse)


def test_a_ragged_batch_of_one_is_single_prefill() -> None:
    call = Ragged((77,), (300,), 4, 2, 64, "f32", True)
    q, k, v, qo, kv = packed(call, fresh_seed())
    assert route("ragged_prefill", call, current_arch()) == PER_REQUEST
    assert torch.equal(ragged_prefill(q, k, v, qo, kv), single_prefill(q, k, v))


def test_offsets_as_a_list_a_tuple_or_a_host_tensor_share_one_plan() -> None:
    call = Ragged((5, 40, 17), (5, 40, 17), 4, 2, 64, "f32", True)
    q, k, v, qo, kv = packed(call, fresh_seed())
    prefill.clear_plans()
    first = ragged_prefill(q, k, v, qo, kv)
    for qo_as, kv_as in (
        (tuple(qo), tuple(kv)),
        (torch.tensor(qo), torch.tensor(kv, dtype=torch.int32)),
    ):
        assert torch.equal(ragged_prefill(q, k, v, qo_as, kv_as), first)
    assert len(prefill._PLANS) == 1
    # Another batch of the same totals is another key: its own plan, its own answer.
    other = [0, 40, 57, 62]
    res = ragged_prefill(q, k, v, other, other)
    assert len(prefill._PLANS) == 2
    assert not torch.equal(res, first)


def test_per_request_plans_each_distinct_request_once() -> None:
    call = Ragged((16, 16, 16, 33), (16, 16, 16, 33), 4, 2, 64, "f32", True)
    q, k, v, _, _ = packed(call, fresh_seed())
    plan = prefill._PerRequestPlan.build(call, current_arch(), False, None, q, k, v)
    assert len(plan.plans) == 4 and len({id(p) for p in plan.plans}) == 2
    assert plan.rows[3] == (48, 81, 48, 81)


# Each bad argument, refused with a UsageError naming it before any plan or launch.
def _bad(**changes: object) -> dict[str, object]:
    call = Ragged((5, 7), (5, 9), 4, 2, 64, "f32", True)
    q, k, v, qo, kv = packed(call, 1)
    args: dict[str, object] = dict(q=q, k=k, v=v, qo_indptr=qo, kv_indptr=kv)
    args.update(changes)
    return args


BAD = [
    pytest.param({"q": torch.zeros(1, 12, 4, 64)}, "q must be 3-D", id="q-rank"),
    pytest.param({"qo_indptr": [1, 5, 12]}, "qo_indptr must start at 0", id="not-from-0"),
    pytest.param({"qo_indptr": [0]}, "hold batch \\+ 1 offsets", id="no-request"),
    pytest.param({"qo_indptr": [0, 5, 5, 12]}, "request 1 0 rows", id="empty-request"),
    pytest.param({"qo_indptr": [0, 7, 5, 12]}, "request 1 -2 rows", id="decreasing"),
    pytest.param({"qo_indptr": [0, 5, 11]}, "ends at 11, but q has 12 rows", id="short"),
    pytest.param({"kv_indptr": [0, 14]}, "qo_indptr holds 2 requests, kv_indptr 1", id="counts"),
    pytest.param({"qo_indptr": [0, 5.0, 12]}, "sequence of ints", id="float-entry"),
    pytest.param({"qo_indptr": [0, True, 12]}, "sequence of ints", id="bool-entry"),
    pytest.param({"qo_indptr": "0,5,12"}, "sequence of ints", id="string"),
    pytest.param({"qo_indptr": None}, "sequence of ints", id="none"),
    pytest.param(
        {"qo_indptr": torch.tensor([0.0, 5.0, 12.0])}, "1-D integer tensor", id="float-tensor"
    ),
    pytest.param(
        {"qo_indptr": torch.tensor([0, 5, 12], device="meta")},
        "pass the offsets on the host",
        id="device-tensor",
    ),
    pytest.param({"v": torch.zeros(14, 2, 32)}, "k .* and v .* differ", id="kv-shapes"),
    pytest.param({"k": torch.zeros(14, 3, 64), "v": torch.zeros(14, 3, 64)}, "GQA", id="gqa"),
    pytest.param({"causal": 1}, "causal must be a bool", id="causal-int"),
    pytest.param({"sm_scale": -1.0}, "sm_scale must be a positive", id="scale"),
]


@pytest.mark.parametrize(("changes", "why"), BAD)
def test_bad_ragged_input_is_refused_by_name_before_anything_runs(
    changes: dict[str, object], why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a plan or a launch ran before the checks refused the call")

    monkeypatch.setattr(prefill, "_run_plan", refuse)
    monkeypatch.setattr(prefill, "_plan_for", refuse)
    monkeypatch.setattr(prefill._PerRequestPlan, "build", refuse)
    with pytest.raises(UsageError, match=why):
        ragged_prefill(**_bad(**changes))  # type: ignore[arg-type]


def test_float_offsets_never_find_the_plan_of_their_integer_values() -> None:
    args = _bad()
    ragged_prefill(**args)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="sequence of ints"):
        ragged_prefill(**{**args, "qo_indptr": [0, 5.0, 12]})  # type: ignore[arg-type]


def test_the_ragged_call_form_checks_its_lengths() -> None:
    with pytest.raises(UsageError, match=r"Ragged\.qo_lens"):
        Ragged((), (), 4, 2, 64)
    with pytest.raises(UsageError, match=r"Ragged.kv_lens\[1\]"):
        Ragged((3, 4), (3, 0), 4, 2, 64)
    with pytest.raises(UsageError, match="2 qo_lens but 1 kv_lens"):
        Ragged((3, 4), (3,), 4, 2, 64)
    with pytest.raises(UsageError, match=r"Shape\.hq"):
        Ragged((3,), (3,), 5, 2, 64)
    call = Ragged((100, 37), (300, 37), 8, 2, 128, "bf16", True)
    assert (call.batch, call.qo_len, call.kv_len, call.total_qo, call.total_kv) == (
        2, 100, 300, 137, 337,
    )  # fmt: skip
    assert flops(call) == sum(flops(r) for r in call.requests())
    assert flops(call) == flops(Shape(1, 100, 300, 8, 2, 128)) + flops(Shape(1, 37, 37, 8, 2, 128))


def test_the_ragged_launch_lists_every_tile_once_most_key_blocks_first() -> None:
    qo, kv = (300, 64, 1), (300, 1000, 20)
    work = ragged_work(qo, kv, 128, causal=True)
    assert sorted(work) == [(0, 0), (0, 1), (0, 2), (1, 0), (2, 0)]
    # Request 1's one tile sees its 1000 keys (8 blocks), request 0's last tile all 300 (3).
    assert work[0] == (1, 0) and work[1] == (0, 2)
    # Non-causal: every tile of a request sees all its keys; ties keep request and tile order.
    assert ragged_work((256, 256), (128, 128), 64, causal=False) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # A tile whose rows see no key (causal, more queries than keys) is kept: it writes zeros.
    assert (0, 0) in ragged_work((300,), (10,), 128, causal=True)


# --- On an sm90 GPU: the Gluon kernel's one launch --------------------------------------------

GLUON_BATCHES = [
    pytest.param(Ragged(q, kv, hq, hkv, d, dt, causal), id=name)
    for q, kv, hq, hkv, d, dt, causal, name in (
        ((64, 129, 200, 1000), (64, 129, 200, 1000), 8, 2, 128, "bf16", True, "spread-gqa"),
        ((30, 256, 1), (100, 256, 4000), 4, 4, 128, "f16", True, "chunked-mha"),
        ((300, 20, 3), (10, 20, 3), 8, 1, 64, "bf16", True, "keyless-mqa-d64"),
        ((7, 150, 513), (300, 11, 513), 8, 2, 96, "f16", False, "full-d96"),
        ((129, 700), (129, 700), 4, 2, 256, "bf16", True, "spread-d256"),
    )
]


def _sm90() -> None:
    if current_arch() != "sm90":
        pytest.skip(f"the Gluon kernel is declared for sm90; this is {current_arch()}")


@pytest.mark.gpu(reason="the Gluon kernel runs on an sm90 GPU")
@pytest.mark.parametrize("call", GLUON_BATCHES)
def test_gluon_ragged_launch_matches_the_reference(call: Ragged) -> None:
    """Through the arm (the JIT launch, then the direct one), with the LSE."""
    _sm90()
    seed = fresh_seed()
    q, k, v, qo, kv = packed(call, seed)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((call.hq, call.total_qo), float("nan"), device=q.device)
    launch = get_arm("gluon").prepare(q, k, v, call, out, lse, "sm90")
    for _ in range(2):
        assert launch() is out
        assert_matches_per_request("gluon ragged", call, q, k, v, qo, kv, out, lse, seed)


@pytest.mark.gpu(reason="the Gluon kernel runs on an sm90 GPU")
def test_ragged_prefill_takes_the_gluon_launch_for_the_policys_batches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As routed, eagerly and replayed in a CUDA graph (the serving stacks' mode)."""
    _sm90()
    lens = (256, 512, 768, 1024)
    call = Ragged(lens, lens, 32, 8, 128, "bf16", True)
    assert route("ragged_prefill", call, "sm90") == "gluon"
    seed = fresh_seed()
    q, k, v, qo, kv = packed(call, seed)
    ran: list[str] = []
    real = prefill._run_plan
    monkeypatch.setattr(prefill, "_run_plan", lambda p, *a: (ran.append(p.arm), real(p, *a))[1])
    out = ragged_prefill(q, k, v, qo, kv)
    assert ran == ["gluon"]
    assert_matches_per_request("ragged_prefill", call, q, k, v, qo, kv, out, None, seed)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = ragged_prefill(q, k, v, qo, kv)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, out)


def test_the_gluon_arm_refuses_a_ragged_batch_off_sm90() -> None:
    call = Ragged((64, 100), (64, 100), 8, 2, 128, "f16", True)
    gluon = get_arm("gluon")
    assert gluon.supports(call, "gfx942") == "gluon does not run on gfx942"
    if current_arch() == "sm90":
        return
    q, k, v, _, _ = packed(call, 1)
    with pytest.raises(ArmUnavailableError):
        gluon.prepare(q, k, v, call, arch="sm90")()
