"""The arm registry: every way tether can compute one attention forward call.

An arm declares, per arch it runs on, what it serves (``serves``: a ``Serves`` each, the one
place routing and ``supports`` read; see the declarations at the end of this module), which
profiler kernel names it should run (``expected_kernels``), and ``prepare``: allocate
everything up front and return a no-argument callable that only launches. An arm that
cannot serve a call raises ArmUnavailableError with the reason; it never falls back.
Torch and triton are imported inside functions: importing this module stays light.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tether.errors import ArmUnavailableError

from tether_kernels import peers
from tether_kernels.archs import ARCH, ARCH_ARMS, ARCHES, GPU_ARCHES, check_arch, detect_arch
from tether_kernels.gluon import arm as gluon_arm
from tether_kernels.launch_tables import LaunchConfig, launch_config
from tether_kernels.serves import (
    GRID_AXIS_MAX,
    HEAD_DIMS_SDPA,
    HEAD_DIMS_TRITON,
    INT32_ELEMENTS,
    Serves,
)
from tether_kernels.shapes import TORCH_DTYPES, Call, Ragged, Shape

if TYPE_CHECKING:
    import torch

Launch = Callable[[], "torch.Tensor"]
# A launcher bound to one call's key (shape, arch, scale, LSE) that takes the call's tensors:
# (q, k, v, out, lse) -> output [batch, qo_len, hq, d]. The public entry points cache one per
# key, so a call pays no validation, routing or launch-config work twice (see prefill.py).
PerCall = Callable[..., "torch.Tensor"]

GPU_HALF = ("f16", "bf16")


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype for a Shape dtype name."""
    import torch

    return getattr(torch, TORCH_DTYPES[name])


def attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    sm_scale: float | None = None,
    return_lse: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Explicit f32 attention: matmul, softmax, matmul.

    q: [batch, qo_len, hq, d]; k, v: [batch, kv_len, hkv, d] with hq a multiple of hkv.
    Returns out: [batch, qo_len, hq, d] in f32 (and lse: [batch, hq, qo_len], natural log).
    Causal is bottom-right aligned: query i sees keys j <= kv_len - qo_len + i. A row that
    sees no key (kv_len < qo_len) gives 0 and lse -inf, as the Triton kernel does.
    """
    import torch

    qo_len, hq, d = q.shape[1], q.shape[2], q.shape[3]
    kv_len, hkv = k.shape[1], k.shape[2]
    scale = d**-0.5 if sm_scale is None else sm_scale
    kf = k.float().repeat_interleave(hq // hkv, dim=2)
    vf = v.float().repeat_interleave(hq // hkv, dim=2)
    s = torch.einsum("bmhd,bnhd->bhmn", q.float(), kf) * scale
    if causal:
        i = torch.arange(qo_len, device=q.device)[:, None]
        j = torch.arange(kv_len, device=q.device)[None, :]
        s = s.masked_fill(j > i + (kv_len - qo_len), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)  # fully masked rows: NaN -> 0
    out = torch.einsum("bhmn,bnhd->bmhd", p, vf)
    return (out, lse) if return_lse else out


def _interpreter_on() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


# On the CPU the profiler lists operators, not kernels, and the SDPA arms' BSHD <-> BHSD
# layout changes show up as metadata-only view operators that move no data. They are allowed
# beside the expected compute operator; a copy (aten::copy_, aten::clone) still is not.
_VIEW_OPS = (
    r"^aten::(as_strided|view|_reshape_alias|transpose|permute|unsqueeze|squeeze|expand|alias)$",
)


@dataclass(frozen=True)
class Arm:
    """One way to run the call. ``serves`` maps arch -> what it serves there (the arms it
    runs on are its keys); ``kernels_by_arch`` maps an arch row's ``kernel_names`` ->
    profiler regexes;
    ``_available`` says why this process cannot run it at all (None when it can)."""

    name: str
    serves: dict[str, Serves]
    kernels_by_arch: dict[str, tuple[str, ...]]
    allowed_kernels: tuple[str, ...] = ()
    writes_out: bool = True  # False: the call returns its own tensor and leaves ``out`` alone
    # True: the plan's launcher reads dense q, k, v, out and lse by address only, so
    # single_prefill may hand it its [len, heads, d] tensors without a batch dimension.
    unbatched: bool = False
    _available: Callable[[str], str | None] = field(default=lambda arch: None, repr=False)
    _prepare: Callable[..., Launch] | None = field(default=None, repr=False)
    # (shape, arch, sm_scale, want_lse) -> PerCall; None: each call prepares then launches.
    _plan: Callable[..., PerCall] | None = field(default=None, repr=False)

    @property
    def arches(self) -> tuple[str, ...]:
        """Arches this arm runs on (those it declares what it serves on)."""
        return tuple(self.serves)

    @property
    def returns_lse(self) -> bool:
        """Whether this arm fills ``lse`` (the same on every arch it runs on)."""
        return any(s.lse for s in self.serves.values())

    @property
    def expected_kernels(self) -> tuple[str, ...]:
        """Regexes over every arch this arm runs on (see ``expected_kernels_on``)."""
        seen: list[str] = []
        for arch in sorted(self.kernels_by_arch):
            seen += [r for r in self.kernels_by_arch[arch] if r not in seen]
        return tuple(seen)

    def expected_kernels_on(self, arch: str) -> tuple[str, ...]:
        """Regexes of the profiler kernel (or op) names this arm should run on ``arch``."""
        check_arch(arch)
        family = ARCH[arch].kernel_names
        return self.kernels_by_arch.get(family, self.kernels_by_arch.get("gpu", ()))

    def supports(self, shape: Call, arch: str, *, need_lse: bool = False) -> str | None:
        """None when this arm serves ``shape`` on ``arch`` (with the LSE if ``need_lse``)
        under the contract in kernels/API.md, else the constraint it fails. A ``Ragged``
        batch is served by the arms that take one in one launch (``Serves.ragged``)."""
        reason = self.declared_refusal(shape, arch, need_lse=need_lse)
        return reason if reason is not None else self._available(arch)

    def declared_refusal(self, shape: Call, arch: str, *, need_lse: bool = False) -> str | None:
        """``supports`` by the declaration alone: whether this process can run the arm (an
        optional backend installed) left out, as a host that does not run it can judge."""
        check_arch(arch)
        if arch not in self.serves or self.name not in ARCH_ARMS[arch]:
            return f"{self.name} does not run on {arch}"
        return self.serves[arch].refusal(shape, need_lse=need_lse)

    def prepare(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        shape: Call,
        out: torch.Tensor | None = None,
        lse: torch.Tensor | None = None,
        arch: str | None = None,
        sm_scale: float | None = None,
    ) -> Launch:
        """Allocate up front; return a no-argument callable that runs the arm and returns
        its output [batch, qo_len, hq, d]: ``out`` itself for arms that write into it
        (``writes_out``: Triton, reference), or the backend's own result for the SDPA arms,
        which leave ``out`` untouched (PyTorch allocates it from its caching allocator).

        q [batch, qo_len, hq, d], k/v [batch, kv_len, hkv, d] (BSHD, contiguous); ``lse``
        (f32 [batch, hq, qo_len]) is filled only by arms with ``returns_lse``; ``sm_scale``
        defaults to 1/sqrt(head_dim). A ``Ragged`` batch's are packed: q [total queries, hq,
        d], k/v [total keys, hkv, d], lse [hq, total queries].
        """
        import torch

        if arch is None:
            arch = detect_arch()
        reason = self.supports(shape, arch)
        if reason is not None:
            raise ArmUnavailableError(f"arm {self.name}: {reason}")
        if lse is not None and not self.returns_lse:
            raise ArmUnavailableError(f"arm {self.name}: does not return the log-sum-exp")
        if isinstance(shape, Ragged):
            want_q: tuple[int, ...] = (shape.total_qo, shape.hq, shape.head_dim)
            want_kv: tuple[int, ...] = (shape.total_kv, shape.hkv, shape.head_dim)
        else:
            want_q = (shape.batch, shape.qo_len, shape.hq, shape.head_dim)
            want_kv = (shape.batch, shape.kv_len, shape.hkv, shape.head_dim)
        dtype = torch_dtype(shape.dtype)
        for name, t, want in (("q", q, want_q), ("k", k, want_kv), ("v", v, want_kv)):
            if tuple(t.shape) != want:
                raise ArmUnavailableError(
                    f"arm {self.name}: {name} has shape {tuple(t.shape)}, expected {want}"
                )
            if t.dtype != dtype:
                raise ArmUnavailableError(
                    f"arm {self.name}: {name} is {t.dtype}, shape says {shape.dtype}"
                )
        if out is None and self.writes_out:
            out = torch.empty_like(q)
        assert self._prepare is not None
        return self._prepare(q, k, v, shape, out, lse, arch, sm_scale)

    def plan(self, shape: Call, arch: str, sm_scale: float | None, want_lse: bool) -> PerCall:
        """A launcher for every call of this key: ``(q, k, v, out, lse) -> output``.

        Whatever depends only on the key (the launch config, a mask, the backend's keyword
        arguments) is done here, once; the returned callable only launches. ``out`` is
        written by arms with ``writes_out`` (others return their own tensor); ``lse`` is
        filled when ``want_lse``. The caller (the entry point) has already routed the call
        here, so the arm serves it.
        """
        if want_lse and not self.returns_lse:
            raise ArmUnavailableError(f"arm {self.name}: does not return the log-sum-exp")
        if self._plan is not None:
            return self._plan(shape, arch, sm_scale, want_lse)
        prepare = self._prepare
        assert prepare is not None

        def per_call(q, k, v, out, lse):
            return prepare(q, k, v, shape, out, lse, arch, sm_scale)()

        return per_call


# --- Triton ---------------------------------------------------------------------------


def _triton_available(arch: str) -> str | None:
    if arch == "cpu" and not _interpreter_on():
        return "Triton on the CPU needs TRITON_INTERPRET=1"
    return None


def _triton_prepare(margin: int) -> Callable[..., Launch]:
    def prepare(q, k, v, shape, out, lse, arch, sm_scale=None, counter=None):
        from tether_kernels.triton.attn_fwd import attn_fwd_launcher

        return attn_fwd_launcher(
            q,
            k,
            v,
            out,
            launch_config(
                arch,
                shape.head_dim,
                shape.dtype,
                qo_len=shape.qo_len,
                batch_heads=shape.batch * shape.hq,
            ),
            causal=shape.causal,
            sm_scale=sm_scale,
            margin=margin,
            lse=lse,
            counter=counter,
        )

    return prepare


def _triton_plan(margin: int) -> Callable[..., PerCall]:
    def plan(shape, arch, sm_scale, want_lse):
        from tether_kernels.triton.attn_fwd import attn_fwd_plan

        config = launch_config(
            arch,
            shape.head_dim,
            shape.dtype,
            qo_len=shape.qo_len,
            batch_heads=shape.batch * shape.hq,
        )
        causal = shape.causal
        # The kernel's plan per device, from the key's first call (its tensors give the
        # strides every call of the key shares); later calls only launch.
        built: dict[object, Callable[..., torch.Tensor]] = {}

        def per_call(q, k, v, out, lse):
            run = built.get(q.device)
            if run is None:
                run = built[q.device] = attn_fwd_plan(
                    q, k, v, out, config, causal=causal, sm_scale=sm_scale, margin=margin, lse=lse
                )
            return run(q, k, v, out, lse)

        return per_call

    return plan


# --- PyTorch SDPA ---------------------------------------------------------------------


def _sdpa_kwargs(shape: Shape, device: object, bias_mode: str, sm_scale: float | None) -> dict:
    """SDPA's keyword arguments for one key: GQA, the scale, and how the bottom-right causal
    mask is expressed when kv_len != qo_len: "lower_right" is torch's causal_lower_right bias
    (native in flash); "mask" is a boolean mask tensor and "additive" the same mask as an
    additive bias in the inputs' dtype (0 where a key is seen, -inf where not), each built here
    once per key. cuDNN converts a boolean mask into such a bias inside every call (a fill and
    a where kernel, which the fidelity check flags), so its arm is handed the bias itself."""
    import torch
    from torch.nn.attention.bias import causal_lower_right

    kwargs: dict[str, object] = {"enable_gqa": True} if shape.hq != shape.hkv else {}
    if sm_scale is not None:
        kwargs["scale"] = sm_scale
    if shape.causal and shape.qo_len == shape.kv_len:
        kwargs["is_causal"] = True
    elif shape.causal and bias_mode == "lower_right":
        with warnings.catch_warnings():
            # PyTorch warns that this bias "will produce NaNs" when qo_len > kv_len. The
            # arm's declaration serves such calls only where the rows that see no key
            # are known to come out 0 (checked by validate/correctness/test_routed_api).
            warnings.filterwarnings("ignore", "Lower right causal bias", UserWarning)
            kwargs["attn_mask"] = causal_lower_right(shape.qo_len, shape.kv_len)
    elif shape.causal:
        i = torch.arange(shape.qo_len, device=device)[:, None]
        j = torch.arange(shape.kv_len, device=device)[None, :]
        seen = j <= i + (shape.kv_len - shape.qo_len)
        if bias_mode == "additive":
            bias = torch.zeros(seen.shape, dtype=torch_dtype(shape.dtype), device=device)
            kwargs["attn_mask"] = bias.masked_fill_(~seen, float("-inf"))
        else:
            kwargs["attn_mask"] = seen
    return kwargs


def _sdpa_checked(backend: object, backend_name: str, shape: Shape, qt, kt, vt, kwargs):
    """One SDPA call with PyTorch's refusal turned into ArmUnavailableError with its reasons
    (PyTorch states them as warnings, which pytest would turn into errors of their own)."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel([backend]):
                return F.scaled_dot_product_attention(qt, kt, vt, **kwargs)
        except RuntimeError as exc:
            why = "; ".join(str(w.message) for w in caught)
            raise ArmUnavailableError(
                f"sdpa backend {backend_name} refused {shape.key()}: {exc} {why}".strip()
            ) from exc


def _sdpa_prepare(backend_name: str, bias_mode: str) -> Callable[..., Launch]:
    """SDPA with exactly one backend forced, so PyTorch raises instead of falling back."""

    def prepare(q, k, v, shape, out, lse, arch, sm_scale=None):
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, backend_name)
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # BSHD -> BHSD views, no copy
        kwargs = _sdpa_kwargs(shape, q.device, bias_mode, sm_scale)
        # One checked call here, outside any timed region, so a refusal surfaces from prepare;
        # its result is discarded; it also warms the caching allocator with a block of the
        # output's size, so the timed calls allocate no device memory.
        _sdpa_checked(backend, backend_name, shape, qt, kt, vt, kwargs)

        # ``out`` is not written: copying SDPA's result into it would time a device copy
        # that the Triton arms do not pay (and that the profiler reports as a stray kernel).
        def launch() -> torch.Tensor:
            with sdpa_kernel([backend]):
                res = F.scaled_dot_product_attention(qt, kt, vt, **kwargs)
            return res.transpose(1, 2)  # BHSD -> BSHD view, no copy

        return launch

    return prepare


class _OnlyBackend:
    """``sdpa_kernel([backend])`` for the entry points' per-call path, without its cost.

    torch's context manager is a generator that reads and sets every backend's flag through
    ``getattr`` on each entry and exit, host work on every call; this sets the same
    process-wide flags with the flag functions looked up once per plan, and restores the
    previous state on the way out, as the context manager does."""

    __slots__ = ("_getters", "_on", "_setters")

    def __init__(self, backend_name: str) -> None:
        import torch
        from torch.nn.attention import SDPBackend, _backend_names

        names = list(_backend_names.items())
        self._getters = tuple(getattr(torch._C, f"_get_{n}_sdp_enabled") for n, _ in names)
        self._setters = tuple(getattr(torch._C, f"_set_sdp_use_{n}") for n, _ in names)
        wanted = getattr(SDPBackend, backend_name)
        self._on = tuple(getattr(SDPBackend, v) == wanted for _, v in names)

    def call(self, fn: Callable[..., torch.Tensor], *args: object, **kwargs: object):
        prev = [get() for get in self._getters]
        for set_, on in zip(self._setters, self._on, strict=True):
            set_(on)
        try:
            return fn(*args, **kwargs)
        finally:
            for set_, was in zip(self._setters, prev, strict=True):
                set_(was)


def _sdpa_plan(backend_name: str, bias_mode: str) -> Callable[..., PerCall]:
    """The entry points' SDPA launcher: the keyword arguments (and any mask) once per key; the
    key's first call is the checked one (no extra call), later calls only launch, with the
    backend forced by ``_OnlyBackend``."""

    def plan(shape, arch, sm_scale, want_lse):
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend

        backend = getattr(SDPBackend, backend_name)
        only = _OnlyBackend(backend_name)
        sdpa = F.scaled_dot_product_attention
        kwargs: dict | None = None

        def per_call(q, k, v, out, lse):
            nonlocal kwargs
            qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            if kwargs is None:
                made = _sdpa_kwargs(shape, q.device, bias_mode, sm_scale)
                res = _sdpa_checked(backend, backend_name, shape, qt, kt, vt, made)
                kwargs = made  # only once the checked call has served the key
                return res.transpose(1, 2)
            return only.call(sdpa, qt, kt, vt, **kwargs).transpose(1, 2)

        return per_call

    return plan


def _sdpa_user_prepare(q, k, v, shape, out, lse, arch, sm_scale=None):
    """PyTorch SDPA as a user calls it: BHSD views, ``is_causal`` for a square causal call and
    torch's ``causal_lower_right`` bias for a chunked one, no backend forced (PyTorch picks)."""
    import torch.nn.functional as F

    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    kwargs = _sdpa_kwargs(shape, q.device, "lower_right", sm_scale)

    def launch() -> torch.Tensor:
        return F.scaled_dot_product_attention(qt, kt, vt, **kwargs).transpose(1, 2)

    return launch


def _ref_prepare(q, k, v, shape, out, lse, arch, sm_scale=None):
    def launch():
        res = attention_ref(q, k, v, shape.causal, sm_scale, return_lse=lse is not None)
        if lse is not None:
            res, res_lse = res
            lse.copy_(res_lse)
        out.copy_(res)
        return out

    return launch


# --- What each arm serves, per arch: the one place routing reads (see serves.py) -------
#
# What is known, and from where. sm90 (an H200 with torch 2.11, cuDNN 9.19, triton 3.6): the
# routed-API grid (validate/gpu_routed_grid.py: issue 11's calls through single_prefill and
# batch_prefill, head_dim 64 and 128, f16 and bf16, GQA 8/8, 8/2 and 8/1, lengths 1 to 4096
# on either side, causal on and off) and the suite's arm tests, whose outcomes the verify
# runs in the store record. There cuDNN returned wrong values, silently, for causal calls
# with qo_len > kv_len (the rows that see no key) and refused kv_len 1. The CPU
# facts are checked on every CPU run of the suite. What a GPU backend does outside what was
# run there is not known from a CPU host, so its declaration leaves it out (not served) and
# says so; widening one takes a run of validate/correctness/test_routed_api.py (or
# validate/gpu_routed_grid.py) on that GPU with the wider declaration. No AMD host has run
# any of this: the AMD declarations are the sm90 ones for the same PyTorch entry points, and
# the routed-API suite checks them on the first AMD verify run.

_ALL = ARCHES
_DTYPES = ("f16", "bf16", "f32")
_NOT_RUN = "not run on a GPU yet"
_GPU_SDPA_DIMS = (64, 128)
_GPU_SDPA_WHY = {
    "head_dims": "the head_dims run through this backend on the H200; others not checked yet",
    "keyless_rows": "not checked on a GPU; PyTorch's own causal_lower_right warns of NaN there",
}


def _triton_serves(arch: str) -> Serves:
    # head_dim 16 and 256, and the head dims that are not powers of two (issue 24), had not run
    # on a GPU when declared: the kernel's arithmetic at them is the interpreter's (checked on
    # the CPU, validate/correctness/test_triton_kernel.py), every one compiles for each arch
    # (`tether compile`), and the routed-API grid runs them on the GPU.
    why = {
        "head_dims": "the kernel pads its tile to the next power of two and masks the rest: "
        "multiples of 8 (16-byte rows of halves) up to 256",
        "max_batch_heads": "batch x hq programs lie along a grid axis of at most 65535",
        "max_elements": "the kernel computes element offsets in 32 bits",
    }
    dtypes = _DTYPES
    if arch == "cpu":
        dtypes = ("f16", "f32")
        why["dtypes"] = "bf16 tl.dot is wrong in the Triton interpreter (triton 3.9); GPU only"
    return Serves(
        dtypes,
        HEAD_DIMS_TRITON,
        "kernel",
        max_batch_heads=GRID_AXIS_MAX,
        max_elements=INT32_ELEMENTS,
        lse=True,
        why=why,
    )


def _flash_serves(arch: str) -> Serves:
    if arch == "cpu":
        # PyTorch's CPU flash kernel gives rows with no key 0 (checked by the suite's CPU run).
        return Serves(_DTYPES, HEAD_DIMS_SDPA, "bias")
    return Serves(GPU_HALF, _GPU_SDPA_DIMS, "bias", keyless_rows=_NOT_RUN, why=_GPU_SDPA_WHY)


_CUDNN_SM90 = Serves(
    GPU_HALF,
    _GPU_SDPA_DIMS,
    "additive",
    min_kv_len=2,
    max_batch_heads=GRID_AXIS_MAX,
    keyless_rows="cuDNN 9.19 returned wrong values silently on the H200 (issue 11)",
    why={
        **_GPU_SDPA_WHY,
        "min_kv_len": "PyTorch's cuDNN backend refuses kv_len 1 (seen on the H200)",
        "max_batch_heads": "PyTorch's cuDNN backend refuses batch or heads above 65535; "
        "declared on their product, the stricter",
    },
)
_EFFICIENT_GPU = Serves(
    _DTYPES,
    _GPU_SDPA_DIMS,
    "mask",
    gqa=False,
    keyless_rows=_NOT_RUN,
    why={**_GPU_SDPA_WHY, "gqa": "PyTorch's efficient backend refused GQA on the H200"},
)
# PyTorch's math backend is one composite on every device; its softmax gives a row with no
# key 0 (checked on the CPU by the suite, in every dtype). Routed for the head_dims no arm
# before it in the route order serves, so its head_dims stay the set the suite enumerates.
_MATH = Serves(_DTYPES, HEAD_DIMS_SDPA, "mask")
# PyTorch SDPA as a user calls it, on the GPUs: what the H200 ran (head_dim 64 and 128, f16 and
# bf16); rows with no key are outside what was checked there.
_SDPA_USER = Serves(GPU_HALF, _GPU_SDPA_DIMS, "bias", keyless_rows=_NOT_RUN, why=_GPU_SDPA_WHY)
# The f32 reference: any head_dim, the LSE, rows with no key 0 (``attention_ref``).
_REFERENCE = Serves(_DTYPES, None, "kernel", lse=True)

ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm(
            "triton",
            {arch: _triton_serves(arch) for arch in _ALL},
            {"sm90": (r"_attn_fwd",), "amd": (r"_attn_fwd",), "cpu": ()},
            _available=_triton_available,
            _prepare=_triton_prepare(margin=8),
            _plan=_triton_plan(margin=8),
        ),
        Arm(
            "triton_eager",
            {arch: _triton_serves(arch) for arch in _ALL},
            {"sm90": (r"_attn_fwd",), "amd": (r"_attn_fwd",), "cpu": ()},
            _available=_triton_available,
            _prepare=_triton_prepare(margin=0),
            _plan=_triton_plan(margin=0),
        ),
        Arm(
            "sdpa_flash",
            {arch: _flash_serves(arch) for arch in _ALL},
            {
                "sm90": (r"flash_fwd",),
                "amd": (r"attn_fwd|flash",),
                "cpu": (r"aten::_scaled_dot_product_flash_attention_for_cpu",),
            },
            allowed_kernels=_VIEW_OPS,
            writes_out=False,
            _prepare=_sdpa_prepare("FLASH_ATTENTION", "lower_right"),
            _plan=_sdpa_plan("FLASH_ATTENTION", "lower_right"),
        ),
        Arm(
            "sdpa_cudnn",
            {"sm90": _CUDNN_SM90},
            {"sm90": (r"cudnn.*sdpa|fprop",)},
            allowed_kernels=(r"Memset",),
            writes_out=False,
            _prepare=_sdpa_prepare("CUDNN_ATTENTION", "additive"),
            _plan=_sdpa_plan("CUDNN_ATTENTION", "additive"),
        ),
        Arm(
            "sdpa_efficient",
            {arch: _EFFICIENT_GPU for arch in GPU_ARCHES},
            {"sm90": (r"fmha_cutlass|efficient_attention",), "amd": (r"attn_fwd|efficient",)},
            writes_out=False,
            _prepare=_sdpa_prepare("EFFICIENT_ATTENTION", "mask"),
            _plan=_sdpa_plan("EFFICIENT_ATTENTION", "mask"),
        ),
        Arm(
            "sdpa_math",
            {arch: _MATH for arch in _ALL},
            {
                "sm90": (r"gemm|softmax",),
                "amd": (r"gemm|Cijk|softmax",),
                "cpu": (r"aten::_scaled_dot_product_attention_math",),
            },
            allowed_kernels=_VIEW_OPS,
            writes_out=False,
            _prepare=_sdpa_prepare("MATH", "mask"),
            _plan=_sdpa_plan("MATH", "mask"),
        ),
        # Not routed (no route order names it): the comparison a caller of PyTorch gets.
        Arm(
            "sdpa",
            {arch: _SDPA_USER for arch in GPU_ARCHES},
            {
                "sm90": (r"cudnn|fprop|flash_fwd|fmha_cutlass|efficient_attention|gemm|softmax",),
                "amd": (r"attn_fwd|flash|efficient|gemm|Cijk|softmax",),
            },
            # What the user's call launches besides attention: a chunked call's bias is
            # materialised by PyTorch inside the call (the anchors' fidelity record).
            allowed_kernels=(r"Memset", r"triu|tril|fill|elementwise|copy|where"),
            writes_out=False,
            _prepare=_sdpa_user_prepare,
        ),
        Arm(
            "reference",
            {arch: _REFERENCE for arch in _ALL},
            {"sm90": (r"gemm|softmax",), "amd": (r"gemm|Cijk|softmax",), "cpu": (r"aten::",)},
            _prepare=_ref_prepare,
        ),
        # FlashInfer's FA3 and FA2 (kernels/tether_kernels/peers.py): optional peers that refuse
        # with the reason where flashinfer is not importable; they allocate their own output.
        *(
            Arm(
                name,
                {"sm90": peers.SERVES_SM90},
                {"sm90": kernels},
                writes_out=False,
                _available=peers.available,
                _prepare=peers.prepare(backend),
            )
            for name, backend, kernels in peers.BACKENDS
        ),
        # tether's Gluon Hopper kernel (kernels/tether_kernels/gluon/arm.py): the same SERVES_SM90
        # under every Triton release of gluon/releases.toml (one source; gluon/compat.py bridges what
        # they rename), refused with that list named under any other.
        Arm(
            "gluon",
            {"sm90": gluon_arm.SERVES_SM90},
            gluon_arm.KERNELS,
            _available=gluon_arm.available,
            _prepare=gluon_arm.PREPARE,
            _plan=gluon_arm.PLAN,
            unbatched=True,
        ),
    )
}


def get_arm(name: str) -> Arm:
    """The arm called ``name``; ArmUnavailableError naming the known arms otherwise."""
    try:
        return ARMS[name]
    except KeyError:
        raise ArmUnavailableError(
            f"unknown arm {name!r}; known: {', '.join(sorted(ARMS))}"
        ) from None


def prepare_triton_debug(
    q, k, v, shape: Shape, out, counter, margin: int = 8, lse=None, arch: str = "cpu"
) -> Launch:
    """The Triton arm with the per-row rescale counter compiled in (tests, not timing).

    counter: int32 [batch, hq, qo_len], set to each row's number of frame moves.
    """
    reason = ARMS["triton"].supports(shape, arch)
    if reason is not None:
        raise ArmUnavailableError(f"arm triton: {reason}")
    return _triton_prepare(margin)(q, k, v, shape, out, lse, arch, None, counter=counter)


def prepare_triton_config(
    q, k, v, shape: Shape, out, config: LaunchConfig, arm: str = "triton", arch: str = "sm90"
) -> Launch:
    """The Triton arm forced to launch ``config`` (tuning cells), deferred (``triton``) or
    eager (``triton_eager``); refuses what the arm refuses."""
    from tether_kernels.triton.attn_fwd import attn_fwd_launcher

    margin = {"triton": 8, "triton_eager": 0}[arm]
    reason = ARMS[arm].supports(shape, arch)
    if reason is not None:
        raise ArmUnavailableError(f"arm {arm}: {reason}")
    return attn_fwd_launcher(q, k, v, out, config, causal=shape.causal, margin=margin)


__all__ = [
    "ARMS",
    "Arm",
    "attention_ref",
    "get_arm",
    "prepare_triton_config",
    "prepare_triton_debug",
    "torch_dtype",
]
