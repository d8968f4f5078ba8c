"""single_prefill and batch_prefill as users call them, as routed, over the grid issue 11 names.

Each case calls a public entry point exactly as a user does (no ``arch``: the tensors' device
decides), records the arm that ran (the real ``_run_plan``, wrapped; counted by arm for the
verify run through the plugin's ``routed_case``) and checks it is the arm ``route`` names for
the call on this machine. Then the contract of kernels/API.md: the output within the suite's
tolerance rule (twice the error of PyTorch's math SDPA in the input dtype or of the rounding
a flash kernel must do, plus a tiny epsilon; see _helpers.py), rows that see no key exactly 0
with lse -inf, and the lse within f32 rounding of the reference's.

How the grid is sized (validate/correctness/_routed_grid.py). Lengths 1, 2, 3, 17, 63-65,
127-129, 239, 799, 1023-1025, 2048 and 4096 or more, each on either side, with qo_len above,
equal to and below kv_len (chunked: kv_len up to 4096 against 17 queries). On a GPU: hq 8 on
hkv 2 (hkv 8, 2 and 1 on the heads test), head_dim 64 and 128 on the length tests and every
routed head_dim on its own tests (with and without the LSE: since issue 24 the Triton kernel
serves every multiple of 8 up to 256 with it), batch 1 and 2 (single_prefill, and batch_prefill with
both); f16 and bf16 on the length tests, bf16 and f32 on the return_lse test, all three on
the head_dim test, f32 on the scale test. A GPU builds the Triton kernel once per dtype,
head_dim, mask, head group and length class (Triton specialises a length of 1 or a multiple
of 16), so the dtypes are spread over the tests rather than crossed with every length: the
grid needs about 120 builds on sm90 instead of about 180.

On the CPU (the CI host: two shared cores, a few minutes for the whole suite) the same axes,
smaller: head_dim 64 and hq 2 on hkv 1 on the length tests (f16, bf16 and f32), one head
from length 1023 up, long pairs only while a head has at most 4M scores (the f32 references
dominate) and in f16 only; single_prefill only on the long pairs and on the return_lse and
heads tests (batch 2 with the LSE still runs in the strided and scale tests). The return_lse calls are the only
ones the CPU routes to the Triton kernel, whose interpreter walks each block in numpy: they
pair each named length up to 1025, and 4096, with a short other side (2048 reaches the CPU's
flash arm through the long-length test); bf16 with return_lse is GPU only (the
interpreter's bf16 dot is wrong). ``test_grid_reaches_every_arm_route_picks`` checks, for
every arch, that the grid sized for a host of it reaches every arm ``route`` can pick.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from tether.errors import UsageError
from tether.pytest_plugin import current_arch, interpreter_on
from tether_kernels import ARCHES, Shape, prefill, route, single_prefill
from tether_kernels.archs import ROUTE_ORDER
from tether_kernels.arms import attention_ref, get_arm
from tether_kernels.policy import thresholds_for
from tether_kernels.routing import candidates, policy_choice
from tether_kernels.serves import HEAD_DIMS_SDPA, has_keyless_rows

from validate.correctness._helpers import (
    assert_within_baseline,
    fresh_seed,
    head_slices,
    make_qkv,
    max_err,
    run_arm,
)
from validate.correctness._routed_grid import (
    CATALOG,
    ENTRY_FNS,
    GPU,
    GRIDS,
    HEAD_DIMS,
    HEADS,
    LENGTHS,
    LONG_LENGTHS,
    LSE,
    LSE_HEAD_DIMS,
    POLICY,
    RETURN_LSE,
    SCALES,
    STRIDED,
    Call,
    _scope_values,
    as_layout,
    policy_calls,
)

# --- Calling as a user does, and checking the contract ---------------------------------------


@pytest.fixture(autouse=True, scope="module")
def _one_cpu_thread() -> Iterator[None]:
    # Without a GPU every reference is computed on the host. torch's default of a thread per
    # core, times the xdist workers, oversubscribes a small shared CI host: the many small
    # products here ran several times slower than on one thread.
    threads = torch.get_num_threads()
    if not GPU:
        torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def ran(monkeypatch: pytest.MonkeyPatch, routed_case: Callable[[str], None]) -> list[str]:
    """The arms the entry points ran, in order: the real ``_run_plan``, recorded."""
    arms: list[str] = []
    real = prefill._run_plan

    def spy(plan: Any, *args: Any) -> Any:
        arms.append(plan.arm)
        routed_case(plan.arm)
        return real(plan, *args)

    monkeypatch.setattr(prefill, "_run_plan", spy)
    return arms


def call_routed(call: Call, ran: list[str]) -> None:
    """Make inputs, call the entry point as a user does, check the arm and the contract."""
    shape, arch = call.shape, current_arch()
    seed = fresh_seed()
    q, k, v = make_qkv(shape, seed)
    args = as_layout(call.layout, q, k, v)
    # The reference sees exactly the values the entry point got (expanded-kv repeats a head).
    q, k, v = (t.contiguous() for t in args)
    if call.entry == "single_prefill":
        args = tuple(t[0] for t in args)
    kwargs: dict[str, Any] = {"causal": shape.causal, "return_lse": call.return_lse}
    if call.sm_scale is not None:
        kwargs["sm_scale"] = call.sm_scale
    want = route(call.entry, shape, arch, return_lse=call.return_lse)
    ran.clear()
    res = ENTRY_FNS[call.entry](*args, **kwargs)
    assert ran == [want], f"{call.entry} ran {ran}, route says {want} for {shape.key()}"
    out, lse = res if call.return_lse else (res, None)
    if call.entry == "single_prefill":
        out = out[None]
        lse = None if lse is None else lse[None]
    assert out.shape == q.shape and out.dtype == q.dtype and out.device == q.device
    assert_within_baseline(f"{call.entry} -> {want}", out, shape, q, k, v, seed, call.sm_scale)
    keyless = shape.qo_len - shape.kv_len if has_keyless_rows(shape) else 0
    if keyless:
        assert torch.equal(out[:, :keyless], torch.zeros_like(out[:, :keyless])), (
            f"{want}: rows that see no key are not 0 ({shape.key()}, seed {seed})"
        )
    if lse is not None:
        assert lse.shape == (shape.batch, shape.hq, shape.qo_len) and lse.dtype == torch.float32
        # The reference's LSE a slice of heads at a time (head_slices: a long square of many
        # heads would materialise every head's scores at once).
        ref_lse = torch.cat(
            [
                attention_ref(q[:, :, qh], k[:, :, kh], v[:, :, kh], shape.causal,
                              call.sm_scale, return_lse=True)[1]
                for qh, kh, _ in head_slices(shape)
            ],
            dim=1,
        )  # fmt: skip
        assert torch.isneginf(lse[..., :keyless]).all(), f"keyless rows' lse (seed {seed})"
        seen, ref_seen = lse[..., keyless:], ref_lse[..., keyless:]
        tol = 1e-4 * ref_seen.abs().max().item() + 1e-5
        assert max_err(seen, ref_seen) <= tol, f"{want} lse {shape.key()} (seed {seed})"


# --- The tests: one per grid ----------------------------------------------------------------


@LENGTHS.parametrize
def test_lengths(pair, head_dim, causal, dtype, entry, ran) -> None:
    call_routed(LENGTHS.call(GPU, pair, head_dim, causal, dtype, entry), ran)


@pytest.mark.slow
@LONG_LENGTHS.parametrize
def test_long_lengths(pair, head_dim, causal, dtype, entry, ran) -> None:
    call_routed(LONG_LENGTHS.call(GPU, pair, head_dim, causal, dtype, entry), ran)


@pytest.mark.triton
@RETURN_LSE.parametrize
def test_return_lse(pair, causal, dtype, entry, ran) -> None:
    call_routed(RETURN_LSE.call(GPU, pair, causal, dtype, entry), ran)


@HEADS.parametrize
def test_heads(group, pair, causal, return_lse, entry, ran) -> None:
    call_routed(HEADS.call(GPU, group, pair, causal, return_lse, entry), ran)


@HEAD_DIMS.parametrize
def test_head_dims(head_dim, pair, causal, dtype, ran) -> None:
    call_routed(HEAD_DIMS.call(GPU, head_dim, pair, causal, dtype), ran)


@pytest.mark.triton
@LSE_HEAD_DIMS.parametrize
def test_lse_head_dims(head_dim, pair, causal, ran) -> None:
    call_routed(LSE_HEAD_DIMS.call(GPU, head_dim, pair, causal), ran)


@STRIDED.parametrize
def test_strided_inputs(layout, causal, return_lse, entry, ran) -> None:
    call_routed(STRIDED.call(GPU, layout, causal, return_lse, entry), ran)


@SCALES.parametrize
def test_sm_scale(sm_scale, causal, return_lse, entry, ran) -> None:
    call_routed(SCALES.call(GPU, sm_scale, causal, return_lse, entry), ran)


@POLICY.parametrize
def test_policy_scopes(call: Call, ran) -> None:
    call_routed(call, ran)


@CATALOG.parametrize
def test_model_catalog_layouts(call: Call, ran) -> None:
    call_routed(call, ran)


# --- The grid reaches every arm the router can pick ------------------------------------------


def _head_dim_classes(arch: str) -> list[int]:
    """One head_dim per class that every arm's declaration on ``arch`` treats alike."""
    classes: dict[tuple[bool, ...], int] = {}
    for d in (*range(8, 264, 8), 4, 20, 512):
        key = tuple(
            (s := get_arm(a).serves.get(arch)) is not None
            and (s.head_dims is None or d in s.head_dims)
            for a in ROUTE_ORDER[arch]
        )
        classes.setdefault(key, d)
    return sorted(classes.values())


def routable_arms(arch: str) -> set[str]:
    """Every arm ``route`` picks on ``arch`` over a space of calls that varies each thing a
    declaration or a policy threshold can turn on (lengths across 1, 2 and 2048, heads,
    head_dim classes, dtypes, masks, batch, the LSE, both entry points)."""
    lengths = (1, 2, 17, 65, 2048, 4096)
    picked: set[str] = set()
    for qo, kv, hkv, d, dtype, causal, batch, lse in itertools.product(
        lengths, lengths, (8, 2), _head_dim_classes(arch), ("f16", "bf16", "f32"),
        (True, False), (1, 2), (False, True),
    ):  # fmt: skip
        shape = Shape(batch, qo, kv, 8, hkv, d, dtype, causal)
        for entry in ("single_prefill", "batch_prefill")[batch - 1 :]:
            with contextlib.suppress(UsageError):  # no arm serves it: nothing to reach
                picked.add(route(entry, shape, arch, return_lse=lse))
    return picked


def test_the_head_dim_test_covers_every_routed_head_dim() -> None:
    # test_head_dims runs HEAD_DIMS_SDPA: every head_dim an arm route may pick serves.
    for arch in ARCHES:
        for name in ROUTE_ORDER[arch]:
            dims = get_arm(name).serves[arch].head_dims
            assert dims is not None and set(dims) <= set(HEAD_DIMS_SDPA), (arch, name)
        for th in thresholds_for(arch):
            assert set(get_arm(th.arm).serves[arch].head_dims or ()) <= set(HEAD_DIMS_SDPA)


def test_the_policy_grid_covers_every_combination_each_threshold_routes() -> None:
    # Each set threshold's arm is reached through the public API at every combination of the
    # values its scope names, at lengths its region takes: the evidence's own axes.
    for arch in ARCHES:
        for entry in ("single_prefill", "batch_prefill"):
            for th in thresholds_for(arch, entry):
                if not th.is_set:
                    continue
                values = _scope_values(th.scope + (th.takes or ()))
                names = [n for n in values if n != "causal"]
                want = set(itertools.product(*(values[n] for n in names)))
                got = {
                    tuple(
                        f"{c.shape.hq}/{c.shape.hkv}" if n == "hq/hkv" else c.shape.key()[n]
                        for n in names
                    )
                    for c in policy_calls()
                    if c.entry == entry and policy_choice(entry, c.shape, arch) == th.arm
                    and th.applies(c.shape.key())
                }  # fmt: skip
                assert want <= got, f"{th.region}: no call at {sorted(want - got)}"
                lse = {c.return_lse for c in policy_calls() if th.applies(c.shape.key())}
                assert lse == {False, True}, f"{th.region}: the LSE both ways"


@pytest.mark.parametrize("arch", [pytest.param(a, id=a) for a in ARCHES])
def test_grid_reaches_every_arm_route_picks(arch: str) -> None:
    # The grid as sized for a host of this arch (a GPU host's grid for the GPU arches). On
    # the CPU without the interpreter the return_lse cases skip, as route has no arm for them.
    gpu = arch != "cpu"
    reached: dict[str, int] = {}
    for name, grid in GRIDS.items():
        for call in grid.calls(gpu):
            if not gpu and call.return_lse and not interpreter_on():
                continue
            arm = route(call.entry, call.shape, arch, return_lse=call.return_lse)
            reached[arm] = reached.get(arm, 0) + 1
            assert arm in candidates(call.entry, call.shape, arch), (name, call)
    missing = routable_arms(arch) - set(reached)
    assert not missing, f"route picks {sorted(missing)} on {arch}; the grid never reaches them"


@pytest.mark.gpu(reason="the routed arms of a GPU arch")
def test_this_gpu_grid_reaches_the_arms_named_in_issue_11() -> None:
    # On an H200 the router picks cuDNN, the Triton kernel and the math backend; each must be
    # among the arms this host's grid exercises (each case asserts the arm it ran).
    arch = current_arch()
    reached = {
        route(c.entry, c.shape, arch, return_lse=c.return_lse)
        for g in GRIDS.values()
        for c in g.calls(True)
    }
    if arch == "sm90":
        # Since issue 24 the Triton kernel serves every head_dim, so the math backend that
        # issue 11 saw take head_dim 96 is reached only beyond the kernel's own limits. The
        # policy's grid reaches the Gluon kernel wherever this host's Triton runs it.
        want = {"sdpa_cudnn", "triton"}
        if get_arm("gluon").supports(Shape(1, 128, 4096, 32, 8, 128, "bf16"), arch) is None:
            want.add("gluon")
        assert want <= reached
    assert routable_arms(arch) <= reached


# --- NaN and Inf inside the tensors propagate, as in PyTorch ---------------------------------

NAN, INF = float("nan"), float("inf")
# Where a non-finite value sits and which. An infinity in k is left out: it makes scores of
# +-inf, and PyTorch's own backends disagree on those (its math backend gives the row NaN,
# its CPU flash kernel in f16 a finite row), so there is no one PyTorch answer to hold to.
POISON = [
    pytest.param(("q", NAN), id="q-nan"),
    pytest.param(("q", INF), id="q-inf"),
    pytest.param(("q", -INF), id="q-neg-inf"),
    pytest.param(("k", NAN), id="k-nan"),
    pytest.param(("v", NAN), id="v-nan"),
    pytest.param(("v", INF), id="v-inf"),
    pytest.param(("v", -INF), id="v-neg-inf"),
]


# numpy, running the Triton interpreter on the CPU, warns as it meets NaN; a GPU does not.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("return_lse", LSE)
@pytest.mark.parametrize("poison", POISON)
def test_non_finite_inputs_propagate(poison: tuple[str, float], return_lse: bool, ran) -> None:
    where, value = poison
    shape = Shape(1, 40, 56, 4, 2, 64, "f16", True)
    q, k, v = make_qkv(shape, fresh_seed())
    row, key, col = 20, 30, 5  # query row 20 sees keys 0..36; key 30 is seen by rows 14..39
    t = {"q": q, "k": k, "v": v}[where]
    t[0, row if where == "q" else key, 0, col] = value  # kv head 0 serves query heads 0 and 1
    res = single_prefill(q[0], k[0], v[0], causal=True, return_lse=return_lse)
    assert ran == [route("single_prefill", shape, current_arch(), return_lse=return_lse)]
    out, lse = res if return_lse else (res, None)
    out_bad = ~torch.isfinite(out.float())
    # PyTorch's own answer (its math backend, in f32): a +inf score makes its row NaN, a -inf
    # one drops the key. (attention_ref would not do: it zeroes NaN rows, keyless ones.)
    f32 = tuple(x.float() for x in (q, k, v))
    ref_bad = ~torch.isfinite(run_arm("sdpa_math", shape.with_(dtype="f32"), *f32)[0])
    if where == "q":
        rows, heads = slice(row, row + 1), slice(0, 1)
    else:
        rows, heads = slice(key - (shape.kv_len - shape.qo_len), None), slice(0, 2)
    # Never scrubbed: where the rows that read the value are not finite in PyTorch, they are
    # not finite here (rows that do not read it may be, a zero weight times NaN being NaN).
    assert ref_bad[rows, heads].any(), "the fixture's value reached no row in PyTorch either"
    assert out_bad[rows, heads][ref_bad[rows, heads]].all(), "a non-finite result came out finite"
    if where == "q":  # a query row is its own: no other row is touched
        out_bad[rows, heads] = False
        assert not out_bad.any(), "a non-finite query reached another row"
        if lse is not None and ref_bad[row, 0].any():
            assert not torch.isfinite(lse[0, row])
