"""Public entry points: single_prefill (one request, batch pinned to 1), batch_prefill (a batch
of one length) and ragged_prefill (requests of their own lengths, packed).

Each checks its arguments (a clear UsageError naming the argument, before anything runs),
ask ``route`` which arm to take, then run that arm; neither falls back when the arm refuses.

The per-call path only launches. What a call's checks, route and launch config depend on is
its key: the entry point, each tensor's type, shape, strides, dtype, device and 16-byte
alignment, the flags with their types, and ``arch``. The first call of a key does all the
work once and keeps a ``_Plan`` (the routed arm's launcher bound to the key); every later call
of the key builds the key, finds the plan and launches: it allocates its output, copies an
input only where the routed kernel needs it contiguous, and runs no probe, mask or route. A
call whose tensors differ in any of those from a cached key is a new key, checked in full.
``_run_plan`` is the one place a call runs, so tests can record which arm each call took.

ragged_prefill's key also holds its offsets (host integers, as FlashInfer's ``plan`` takes
them): a serving step's batch is planned once, and every layer's call of it only launches.
Routed to ``per_request``, its plan is each request's single_prefill plan, run one after
another into the packed output.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, overload

from tether.errors import ArmUnavailableError, UsageError

from tether_kernels.archs import PER_REQUEST, check_arch, detect_arch
from tether_kernels.arms import get_arm
from tether_kernels.routing import per_request_refusal, route
from tether_kernels.shapes import TORCH_DTYPES, Call, Ragged, Shape

if TYPE_CHECKING:
    import torch

_NAMES = ("q", "k", "v")
# Plans kept per process, oldest dropped first: a plan may hold a device mask (SDPA arms).
PLAN_CACHE_SIZE = 64


def _check_tensors(entry: str, tensors: tuple[object, ...], layout: str) -> None:
    """Each of q, k, v is a tensor of the entry point's rank with no empty dimension."""
    import torch

    rank = layout.count(",") + 1
    for name, t in zip(_NAMES, tensors, strict=True):
        if not isinstance(t, torch.Tensor):
            raise UsageError(f"{entry}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != rank:
            raise UsageError(
                f"{entry}: {name} must be {rank}-D {layout}, got shape {tuple(t.shape)}"
            )
        if 0 in t.shape:
            raise UsageError(f"{entry}: {name} has an empty dimension, shape {tuple(t.shape)}")


def _shape_of(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, entry: str) -> Shape:
    if k.shape != v.shape:
        raise UsageError(f"{entry}: k {tuple(k.shape)} and v {tuple(v.shape)} differ")
    if q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise UsageError(
            f"{entry}: q {tuple(q.shape)} and k {tuple(k.shape)} disagree on batch or head_dim"
        )
    if q.shape[2] % k.shape[2]:
        raise UsageError(
            f"{entry}: q has {q.shape[2]} heads, not a multiple of k's {k.shape[2]} (GQA)"
        )
    if not (q.dtype == k.dtype == v.dtype):
        raise UsageError(f"{entry}: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    dtype = {str(f"torch.{t}"): name for name, t in TORCH_DTYPES.items()}.get(str(q.dtype))
    if dtype is None:
        raise UsageError(f"{entry}: dtype {q.dtype} is not one of f16, bf16, f32")
    return Shape(
        batch=q.shape[0],
        qo_len=q.shape[1],
        kv_len=k.shape[1],
        hq=q.shape[2],
        hkv=k.shape[2],
        head_dim=q.shape[3],
        dtype=dtype,
        causal=causal,
    )


def _device_arch(device: torch.device) -> str:
    """The arch of the device the tensors live on (meta tensors hold no data: refused)."""

    if device.type == "meta":
        raise UsageError("meta tensors hold no data; pass tensors on the CPU or a GPU")
    return detect_arch(device)


def _check_device(
    entry: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, arch: str | None
) -> str:
    """The arch to route for: the tensors' own, which ``arch``, when given, must name."""

    if q.device != k.device or q.device != v.device:
        raise UsageError(
            f"{entry}: q, k and v must be on one device; got q on {q.device}, "
            f"k on {k.device}, v on {v.device}"
        )
    if arch is not None:
        check_arch(arch)
    found = _device_arch(q.device)
    if arch is not None and arch != found:
        raise UsageError(
            f"{entry}: arch {arch!r} cannot use tensors on {q.device} (a {found} device); "
            f"pass arch=None or {found!r}, or move q, k, v to a {arch} device"
        )
    return found


def _check_flags(
    entry: str, causal: object, sm_scale: object, return_lse: object
) -> tuple[bool, float | None, bool]:
    """``(causal, sm_scale, return_lse)`` checked: two bools and a positive finite scale."""
    if not isinstance(causal, bool):
        raise UsageError(f"{entry}: causal must be a bool, got {causal!r}")
    if not isinstance(return_lse, bool):
        raise UsageError(f"{entry}: return_lse must be a bool, got {return_lse!r}")
    if sm_scale is None:
        return causal, None, return_lse
    if isinstance(sm_scale, bool) or not isinstance(sm_scale, numbers.Real):
        raise UsageError(
            f"{entry}: sm_scale must be a positive finite number or None, "
            f"got {type(sm_scale).__name__}"
        )
    # Every arm scales scores by sm_scale; the Triton kernel takes each block's max of the
    # unscaled scores, which is the max of the scaled ones only for a positive scale.
    scale = float(sm_scale)
    if not (math.isfinite(scale) and scale > 0):
        raise UsageError(f"{entry}: sm_scale must be a positive finite number, got {sm_scale!r}")
    return causal, scale, return_lse


@dataclass(frozen=True)
class _Plan:
    """One key's checked, routed call: ``__call__`` takes the batch-shaped q, k, v and only
    allocates the output (and LSE), makes a copy the kernel needs, and launches."""

    arm: str
    shape: Call
    arch: str
    return_lse: bool
    writes_out: bool
    copy: bool  # the routed kernel needs contiguous, 16-byte aligned inputs these are not
    launch: Callable[..., Any]
    # single_prefill's own [len, heads, d] tensors go to the launcher as they are (no batch
    # view in, no [0] out): the arm reads dense tensors by address only (Arm.unbatched).
    unbatched: bool = False

    @property
    def lse_dims(self) -> tuple[int, ...]:
        """The LSE's shape: [hq, qo_len] unbatched, [hq, total queries] for a ragged batch,
        else [batch, hq, qo_len]."""
        s = self.shape
        if isinstance(s, Ragged):
            return (s.hq, s.total_qo)
        return (s.hq, s.qo_len) if self.unbatched else (s.batch, s.hq, s.qo_len)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        import torch

        if self.copy:
            q, k, v = (t if _dense(t) else t.clone(memory_format=torch.contiguous_format)
                       for t in (q, k, v))  # fmt: skip
        out = torch.empty_like(q) if self.writes_out else None
        lse = None
        if self.return_lse:
            lse = torch.empty(self.lse_dims, dtype=torch.float32, device=q.device)
        res = self.launch(q, k, v, out, lse)
        return (res, lse) if self.return_lse else res


def _dense(t: torch.Tensor) -> bool:
    return t.is_contiguous() and t.data_ptr() % 16 == 0


_PLANS: OrderedDict[tuple[Any, ...], _Plan | _PerRequestPlan] = OrderedDict()


def _tensor_key(t: Any) -> tuple[Any, ...]:
    return (type(t), t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0)


def _key(
    entry: str, q: object, k: object, v: object, causal: object, sm_scale: object,
    return_lse: object, arch: object,
) -> tuple[Any, ...] | None:  # fmt: skip
    """The call's key, or None where it cannot be formed (not tensors): checked in full.
    Types ride beside the flags, so ``causal=1`` never finds the plan of ``causal=True``."""
    try:
        return (
            entry, _tensor_key(q), _tensor_key(k), _tensor_key(v),
            type(causal), causal, type(sm_scale), sm_scale,
            type(return_lse), return_lse, type(arch), arch,
        )  # fmt: skip
    except Exception:  # anything that is not a tensor: the full check names it
        return None


def _plan_for(
    entry: str,
    arm_name: str,
    shape: Call,
    arch: str,
    return_lse: bool,
    scale: float | None,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
) -> _Plan:

    arm = get_arm(arm_name)
    # The Triton arms read any strides but the innermost, yet their launcher asks for BSHD
    # contiguous; the Gluon kernel reads through TMA descriptors (contiguous, 16-byte aligned);
    # the SDPA arms and the reference take any layout.
    copy = arm_name in ("triton", "triton_eager", "gluon") and not all(map(_dense, (q, k, v)))
    return _Plan(
        arm=arm_name,
        shape=shape,
        arch=arch,
        return_lse=return_lse,
        writes_out=arm.writes_out,
        copy=copy,
        launch=arm.plan(shape, arch, scale, return_lse),
        unbatched=entry == "single_prefill" and arm.unbatched,
    )


def _checked_plan(
    entry: str, q: Any, k: Any, v: Any, causal: object, sm_scale: object, return_lse: object,
    arch: str | None,
) -> _Plan:  # fmt: skip
    """The full check of a call, its route and its plan (the first call of a key)."""
    layout = _LAYOUTS[entry]
    _check_tensors(entry, (q, k, v), layout)
    if entry == "single_prefill":
        q, k, v = q[None], k[None], v[None]
    causal, scale, return_lse = _check_flags(entry, causal, sm_scale, return_lse)
    shape = _shape_of(q, k, v, causal, entry)
    found = _check_device(entry, q, k, v, arch)
    arm = route(entry, shape, found, return_lse=return_lse)
    return _plan_for(entry, arm, shape, found, return_lse, scale, q, k, v)


_LAYOUTS = {
    "single_prefill": "[len, heads, head_dim] (batch is 1)",
    "batch_prefill": "[batch, len, heads, head_dim]",
    "ragged_prefill": "[total len, heads, head_dim] (requests packed)",
}


def _call(
    entry: str, q: Any, k: Any, v: Any, causal: object, sm_scale: object, return_lse: object,
    arch: str | None,
) -> Any:  # fmt: skip
    key = _key(entry, q, k, v, causal, sm_scale, return_lse, arch)
    plan = _PLANS.get(key) if key is not None else None
    if plan is None:
        plan = _checked_plan(entry, q, k, v, causal, sm_scale, return_lse, arch)
        if key is not None:
            _PLANS[key] = plan
            if len(_PLANS) > PLAN_CACHE_SIZE:
                _PLANS.popitem(last=False)
    assert isinstance(plan, _Plan)  # the key names this entry point: never a ragged plan
    if entry == "single_prefill" and not plan.unbatched:
        res = _run_plan(plan, q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0))
        if return_lse:
            return res[0][0], res[1][0]
        return res[0]
    return _run_plan(plan, q, k, v)  # batch_prefill, or single_prefill's unbatched plan


# --- ragged_prefill: requests of their own lengths, packed ------------------------------------


def _offsets_key(offsets: Any) -> tuple[int, ...] | None:
    """The offsets as a key: a tuple of Python ints, or None where they are not plainly that
    (then the full check names what is wrong). A host integer tensor gives its values."""
    try:
        import torch

        if isinstance(offsets, torch.Tensor):
            if offsets.device.type != "cpu" or offsets.is_floating_point() or offsets.dim() != 1:
                return None
            offsets = offsets.tolist()
        values = tuple(offsets)
    except Exception:  # not a sequence: the full check names it
        return None
    return values if all(type(x) is int for x in values) else None


def _check_offsets(name: str, offsets: Any, total: int, of: str) -> tuple[int, ...]:
    """``offsets`` (host integers: a list, tuple or CPU integer tensor) checked: batch + 1 of
    them from 0, each request at least one row, the last ``total`` (``of``'s rows)."""
    import torch

    entry = "ragged_prefill"
    if isinstance(offsets, torch.Tensor) and offsets.device.type != "cpu":
        raise UsageError(
            f"{entry}: {name} is on {offsets.device}; pass the offsets on the host (a list or "
            "a CPU tensor): they key the call's plan, which a device tensor would make "
            "every call read back"
        )
    if isinstance(offsets, torch.Tensor) and (offsets.is_floating_point() or offsets.dim() != 1):
        raise UsageError(
            f"{entry}: {name} must be a 1-D integer tensor, got {offsets.dtype} of shape "
            f"{tuple(offsets.shape)}"
        )
    values = _offsets_key(offsets)
    if values is None:
        raise UsageError(
            f"{entry}: {name} must be a sequence of ints (or a CPU integer tensor), got "
            f"{type(offsets).__name__}"
            + (f" {list(offsets)[:8]!r}" if isinstance(offsets, (list, tuple)) else "")
        )
    if len(values) < 2 or values[0] != 0:
        raise UsageError(
            f"{entry}: {name} must start at 0 and hold batch + 1 offsets, got {values[:8]!r}"
        )
    for i, (a, b) in enumerate(itertools.pairwise(values)):
        if b <= a:
            raise UsageError(
                f"{entry}: {name} gives request {i} {b - a} rows ({a} to {b}); every request "
                "needs at least one"
            )
    if values[-1] != total:
        raise UsageError(f"{entry}: {name} ends at {values[-1]}, but {of} has {total} rows")
    return values


def _ragged_key(
    q: object, k: object, v: object, qo_indptr: object, kv_indptr: object, causal: object,
    sm_scale: object, return_lse: object, arch: object,
) -> tuple[Any, ...] | None:  # fmt: skip
    """The call's key: ``_key``'s, with both offsets' values; None where it cannot be formed."""
    base = _key("ragged_prefill", q, k, v, causal, sm_scale, return_lse, arch)
    qo, kv = _offsets_key(qo_indptr), _offsets_key(kv_indptr)
    if base is None or qo is None or kv is None:
        return None
    return (*base, qo, kv)


def _checked_ragged_plan(
    q: Any, k: Any, v: Any, qo_indptr: Any, kv_indptr: Any, causal: object, sm_scale: object,
    return_lse: object, arch: str | None,
) -> _Plan | _PerRequestPlan:  # fmt: skip
    """The full check of a ragged call, its route and its plan (the first call of a key)."""
    entry = "ragged_prefill"
    _check_tensors(entry, (q, k, v), _LAYOUTS[entry])
    causal, scale, return_lse = _check_flags(entry, causal, sm_scale, return_lse)
    # The checks a batch of one makes of q, k, v (heads, head_dim, dtypes) apply as they are.
    one = _shape_of(q[None], k[None], v[None], causal, entry)
    found = _check_device(entry, q, k, v, arch)
    qo = _check_offsets("qo_indptr", qo_indptr, q.shape[0], "q")
    kv = _check_offsets("kv_indptr", kv_indptr, k.shape[0], "k")
    if len(qo) != len(kv):
        raise UsageError(
            f"{entry}: qo_indptr holds {len(qo) - 1} requests, kv_indptr {len(kv) - 1}"
        )
    ragged = Ragged(
        tuple(b - a for a, b in itertools.pairwise(qo)),
        tuple(b - a for a, b in itertools.pairwise(kv)),
        one.hq, one.hkv, one.head_dim, one.dtype, causal,
    )  # fmt: skip
    arm = route(entry, ragged, found, return_lse=return_lse)
    if arm == PER_REQUEST:
        return _PerRequestPlan.build(ragged, found, return_lse, scale, q, k, v)
    return _plan_for(entry, arm, ragged, found, return_lse, scale, q, k, v)


@dataclass(frozen=True)
class _PerRequestPlan:
    """A ragged batch run one request at a time, each by its own single_prefill plan, into the
    packed output (and LSE): where no arm takes the batch in one launch. ``arm`` is
    ``per_request``; ``plans`` the requests' (their arms are each plan's)."""

    shape: Ragged
    return_lse: bool
    plans: tuple[_Plan, ...]
    rows: tuple[tuple[int, int, int, int], ...]  # per request: q rows [a, b), k rows [c, d)
    arm: str = PER_REQUEST

    @classmethod
    def build(
        cls, shape: Ragged, arch: str, return_lse: bool, scale: float | None,
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
    ) -> _PerRequestPlan:  # fmt: skip
        qo = [0, *itertools.accumulate(shape.qo_lens)]
        kv = [0, *itertools.accumulate(shape.kv_lens)]
        rows = tuple((qo[i], qo[i + 1], kv[i], kv[i + 1]) for i in range(shape.batch))
        made: dict[Shape, _Plan] = {}
        plans = []
        for request, (a, b, c, d) in zip(shape.requests(), rows, strict=True):
            if request not in made:
                qs, ks, vs = q[a:b], k[c:d], v[c:d]
                arm = route("single_prefill", request, arch, return_lse=return_lse)
                made[request] = _plan_for(
                    "single_prefill", arm, request, arch, return_lse, scale, qs, ks, vs
                )
            plans.append(made[request])
        return cls(shape, return_lse, tuple(plans), rows)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        import torch

        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        lse = None
        if self.return_lse:
            lse = torch.empty((self.shape.hq, self.shape.total_qo), dtype=torch.float32,
                              device=q.device)  # fmt: skip
        for plan, (a, b, c, d) in zip(self.plans, self.rows, strict=True):
            qs, ks, vs = q[a:b], k[c:d], v[c:d]
            if not plan.unbatched:
                qs, ks, vs = qs[None], ks[None], vs[None]
            res = plan(qs, ks, vs)
            # Each request's output (and LSE) into its rows: a copy the request's own plan
            # does not make (its kernel writes a fresh tensor of its own length).
            part = res[0] if lse is not None else res
            out[a:b].copy_(part if plan.unbatched else part[0])
            if lse is not None:
                lse[:, a:b].copy_(res[1] if plan.unbatched else res[1][0])
        return (out, lse) if self.return_lse else out


def plan_per_request(
    shape: Ragged,
    arch: str,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    sm_scale: float | None = None,
) -> Callable[[], torch.Tensor]:
    """ragged_prefill's ``per_request`` route for ``shape`` on ``arch``, planned now for these
    packed tensors: a call that runs each request's single_prefill plan into a fresh packed
    output, as ragged_prefill does when it routes there (what a policy sweep compares the
    one-launch arms against). ArmUnavailableError where a request has no route."""
    reason = per_request_refusal(shape, arch)
    if reason is not None:
        raise ArmUnavailableError(f"per_request: {reason}")
    plan = _PerRequestPlan.build(shape, arch, False, sm_scale, q, k, v)
    return lambda: plan(q, k, v)


def _run_plan(
    plan: _Plan | _PerRequestPlan, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> Any:
    """The one place a call runs its plan (``plan.arm`` names the arm), so tests can record it."""
    return plan(q, k, v)


def clear_plans() -> None:
    """Forget every cached plan (tests; a process that changed the policy)."""
    _PLANS.clear()


@overload
def single_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = ...,
    sm_scale: float | None = ...,
    return_lse: Literal[False] = ...,
    arch: str | None = ...,
) -> torch.Tensor: ...
@overload
def single_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = ...,
    sm_scale: float | None = ...,
    *,
    return_lse: Literal[True],
    arch: str | None = ...,
) -> tuple[torch.Tensor, torch.Tensor]: ...
def single_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = True,
    sm_scale: float | None = None,
    return_lse: bool = False,
    arch: str | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention for one request: q [qo_len, hq, d], k/v [kv_len, hkv, d] -> [qo_len, hq, d].

    Causal is bottom-right aligned (chunked prefill). With ``return_lse`` also returns the
    natural-log LSE [hq, qo_len] in f32. ``arch`` defaults to the arch of the tensors'
    device; when given it must be that arch. See kernels/API.md for the full contract.
    """
    res: torch.Tensor | tuple[torch.Tensor, torch.Tensor]
    res = _call("single_prefill", q, k, v, causal, sm_scale, return_lse, arch)
    return res


@overload
def batch_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = ...,
    sm_scale: float | None = ...,
    return_lse: Literal[False] = ...,
    arch: str | None = ...,
) -> torch.Tensor: ...
@overload
def batch_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = ...,
    sm_scale: float | None = ...,
    *,
    return_lse: Literal[True],
    arch: str | None = ...,
) -> tuple[torch.Tensor, torch.Tensor]: ...
def batch_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = True,
    sm_scale: float | None = None,
    return_lse: bool = False,
    arch: str | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention for a batch: q [b, qo_len, hq, d], k/v [b, kv_len, hkv, d] -> [b, qo_len, hq, d].

    Every request shares qo_len and kv_len. With ``return_lse`` also returns [b, hq, qo_len].
    """
    res: torch.Tensor | tuple[torch.Tensor, torch.Tensor]
    res = _call("batch_prefill", q, k, v, causal, sm_scale, return_lse, arch)
    return res


@overload
def ragged_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qo_indptr: Sequence[int] | torch.Tensor,
    kv_indptr: Sequence[int] | torch.Tensor,
    causal: bool = ...,
    sm_scale: float | None = ...,
    return_lse: Literal[False] = ...,
    arch: str | None = ...,
) -> torch.Tensor: ...
@overload
def ragged_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qo_indptr: Sequence[int] | torch.Tensor,
    kv_indptr: Sequence[int] | torch.Tensor,
    causal: bool = ...,
    sm_scale: float | None = ...,
    *,
    return_lse: Literal[True],
    arch: str | None = ...,
) -> tuple[torch.Tensor, torch.Tensor]: ...
def ragged_prefill(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    qo_indptr: Sequence[int] | torch.Tensor,
    kv_indptr: Sequence[int] | torch.Tensor,
    causal: bool = True,
    sm_scale: float | None = None,
    return_lse: bool = False,
    arch: str | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Attention for a batch of requests of their own lengths, packed: q [total_qo, hq, d],
    k/v [total_kv, hkv, d] -> [total_qo, hq, d].

    Request i's queries are rows ``qo_indptr[i]:qo_indptr[i + 1]`` of q, its keys and values
    rows ``kv_indptr[i]:kv_indptr[i + 1]`` of k and v: offsets on the host (a list or a CPU
    integer tensor), batch + 1 of them from 0, each request at least one row. Causal is
    bottom-right aligned per request (chunked prefill). With ``return_lse`` also returns the
    natural-log LSE [hq, total_qo] in f32. See kernels/API.md for the full contract.
    """
    key = _ragged_key(q, k, v, qo_indptr, kv_indptr, causal, sm_scale, return_lse, arch)
    plan = _PLANS.get(key) if key is not None else None
    if plan is None:
        plan = _checked_ragged_plan(
            q, k, v, qo_indptr, kv_indptr, causal, sm_scale, return_lse, arch
        )
        if key is not None:
            _PLANS[key] = plan
            if len(_PLANS) > PLAN_CACHE_SIZE:
                _PLANS.popitem(last=False)
    res: torch.Tensor | tuple[torch.Tensor, torch.Tensor] = _run_plan(plan, q, k, v)
    return res
