"""The arm registry: every way tether can compute one attention forward call.

An arm declares where it runs (``arches``), which shapes it serves (``supports``), which
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
from tether_kernels.arch_caps import AMD_ARCHES, ARCH_ARMS, LaunchConfig, check_arch
from tether_kernels.gluon import arm as gluon_arm
from tether_kernels.shapes import Shape

if TYPE_CHECKING:
    import torch

Launch = Callable[[], "torch.Tensor"]

TORCH_DTYPES = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}
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


def _is_pow2(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


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
    """One way to run the call. ``expected_kernels`` maps arch family -> profiler regexes."""

    name: str
    arches: tuple[str, ...]
    kernels_by_arch: dict[str, tuple[str, ...]]
    allowed_kernels: tuple[str, ...] = ()
    returns_lse: bool = False
    writes_out: bool = True  # False: the call returns its own tensor and leaves ``out`` alone
    _supports: Callable[[Shape, str], str | None] = field(default=lambda s, a: None, repr=False)
    _prepare: Callable[..., Launch] | None = field(default=None, repr=False)

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
        family = "amd" if arch in AMD_ARCHES else arch
        return self.kernels_by_arch.get(family, self.kernels_by_arch.get("gpu", ()))

    def supports(self, shape: Shape, arch: str) -> str | None:
        """None when this arm serves ``shape`` on ``arch``, else the reason it does not."""
        check_arch(arch)
        if arch not in self.arches or self.name not in ARCH_ARMS[arch]:
            return f"{self.name} does not run on {arch}"
        return self._supports(shape, arch)

    def prepare(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        shape: Shape,
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
        defaults to 1/sqrt(head_dim).
        """
        import torch

        if arch is None:
            from tether_kernels.arch_caps import detect_arch

            arch = detect_arch()
        reason = self.supports(shape, arch)
        if reason is not None:
            raise ArmUnavailableError(f"arm {self.name}: {reason}")
        if lse is not None and not self.returns_lse:
            raise ArmUnavailableError(f"arm {self.name}: does not return the log-sum-exp")
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


# --- Triton ---------------------------------------------------------------------------


def _triton_supports(shape: Shape, arch: str) -> str | None:
    if not _is_pow2(shape.head_dim) or not 16 <= shape.head_dim <= 256:
        return f"head_dim {shape.head_dim} is not a power of two in 16..256"
    if arch == "cpu":
        if not _interpreter_on():
            return "Triton on the CPU needs TRITON_INTERPRET=1"
        if shape.dtype == "bf16":
            return (
                "bf16 tl.dot is wrong in the Triton interpreter (triton 3.9); checked on GPU only"
            )
    return None


def _triton_prepare(margin: int) -> Callable[..., Launch]:
    def prepare(q, k, v, shape, out, lse, arch, sm_scale=None, counter=None):
        from tether_kernels.arch_caps import launch_config
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


# --- PyTorch SDPA ---------------------------------------------------------------------


def _sdpa_prepare(backend_name: str, bias_mode: str) -> Callable[..., Launch]:
    """SDPA with exactly one backend forced, so PyTorch raises instead of falling back.

    ``bias_mode`` says how a bottom-right causal call with kv_len != qo_len is expressed:
    "lower_right" uses torch's causal_lower_right bias (native in flash); "mask" builds the
    boolean mask here, outside the call, so the timed call does not materialise it.
    """

    def prepare(q, k, v, shape, out, lse, arch, sm_scale=None):
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right

        backend = getattr(SDPBackend, backend_name)
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # BSHD -> BHSD views, no copy
        gqa = shape.hq != shape.hkv
        kwargs: dict[str, object] = {"enable_gqa": True} if gqa else {}
        if sm_scale is not None:
            kwargs["scale"] = sm_scale
        if shape.causal and shape.qo_len == shape.kv_len:
            kwargs["is_causal"] = True
        elif shape.causal and bias_mode == "lower_right":
            kwargs["attn_mask"] = causal_lower_right(shape.qo_len, shape.kv_len)
        elif shape.causal:
            i = torch.arange(shape.qo_len, device=q.device)[:, None]
            j = torch.arange(shape.kv_len, device=q.device)[None, :]
            kwargs["attn_mask"] = j <= i + (shape.kv_len - shape.qo_len)

        # One probe call here, outside any timed region, so a refusal surfaces from prepare
        # with PyTorch's reasons (it states them as warnings, which pytest would turn into
        # errors of their own). Its result is discarded; it also warms the caching allocator
        # with a block of the output's size, so the timed calls allocate no device memory.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                with sdpa_kernel([backend]):
                    F.scaled_dot_product_attention(qt, kt, vt, **kwargs)
            except RuntimeError as exc:
                why = "; ".join(str(w.message) for w in caught)
                raise ArmUnavailableError(
                    f"sdpa backend {backend_name} refused {shape.key()}: {exc} {why}".strip()
                ) from exc

        # ``out`` is not written: copying SDPA's result into it would time a device copy
        # that the Triton arms do not pay (and that the profiler reports as a stray kernel).
        def launch() -> torch.Tensor:
            with sdpa_kernel([backend]):
                res = F.scaled_dot_product_attention(qt, kt, vt, **kwargs)
            return res.transpose(1, 2)  # BHSD -> BSHD view, no copy

        return launch

    return prepare


def _sdpa_supports(
    gpu_dtypes: tuple[str, ...], cpu_ok: bool, gqa_ok: bool = True, max_d: int = 256
):
    def supports(shape: Shape, arch: str) -> str | None:
        if arch == "cpu" and not cpu_ok:
            return "no CPU implementation"
        if arch != "cpu" and shape.dtype not in gpu_dtypes:
            return f"dtype {shape.dtype} not supported on {arch}"
        if shape.head_dim % 8 or shape.head_dim > max_d:
            return f"head_dim {shape.head_dim} must be a multiple of 8 up to {max_d}"
        if not gqa_ok and shape.hq != shape.hkv:
            return f"refuses GQA ({shape.hq}/{shape.hkv} heads)"
        return None

    return supports


def _ref_prepare(q, k, v, shape, out, lse, arch, sm_scale=None):
    def launch():
        res = attention_ref(q, k, v, shape.causal, sm_scale, return_lse=lse is not None)
        if lse is not None:
            res, res_lse = res
            lse.copy_(res_lse)
        out.copy_(res)
        return out

    return launch


_ALL = ("sm90", "gfx942", "gfx950", "gfx1151", "cpu")
_GPU = ("sm90", "gfx942", "gfx950", "gfx1151")

ARMS: dict[str, Arm] = {
    arm.name: arm
    for arm in (
        Arm(
            "triton",
            _ALL,
            {"sm90": (r"_attn_fwd",), "amd": (r"_attn_fwd",), "cpu": ()},
            returns_lse=True,
            _supports=_triton_supports,
            _prepare=_triton_prepare(margin=8),
        ),
        Arm(
            "triton_eager",
            _ALL,
            {"sm90": (r"_attn_fwd",), "amd": (r"_attn_fwd",), "cpu": ()},
            returns_lse=True,
            _supports=_triton_supports,
            _prepare=_triton_prepare(margin=0),
        ),
        Arm(
            "sdpa_flash",
            _ALL,
            {
                "sm90": (r"flash_fwd",),
                "amd": (r"attn_fwd|flash",),
                "cpu": (r"aten::_scaled_dot_product_flash_attention_for_cpu",),
            },
            allowed_kernels=_VIEW_OPS,
            _supports=_sdpa_supports(GPU_HALF, cpu_ok=True),
            writes_out=False,
            _prepare=_sdpa_prepare("FLASH_ATTENTION", "lower_right"),
        ),
        Arm(
            "sdpa_cudnn",
            ("sm90",),
            {"sm90": (r"cudnn.*sdpa|fprop",)},
            allowed_kernels=(r"Memset",),
            _supports=_sdpa_supports(GPU_HALF, cpu_ok=False, max_d=128),
            writes_out=False,
            _prepare=_sdpa_prepare("CUDNN_ATTENTION", "mask"),
        ),
        Arm(
            "sdpa_efficient",
            _GPU,
            {"sm90": (r"fmha_cutlass|efficient_attention",), "amd": (r"attn_fwd|efficient",)},
            _supports=_sdpa_supports(("f16", "bf16", "f32"), cpu_ok=False, gqa_ok=False),
            writes_out=False,
            _prepare=_sdpa_prepare("EFFICIENT_ATTENTION", "mask"),
        ),
        Arm(
            "sdpa_math",
            _ALL,
            {
                "sm90": (r"gemm|softmax",),
                "amd": (r"gemm|Cijk|softmax",),
                "cpu": (r"aten::_scaled_dot_product_attention_math",),
            },
            allowed_kernels=_VIEW_OPS,
            _supports=_sdpa_supports(("f16", "bf16", "f32"), cpu_ok=True, max_d=4096),
            writes_out=False,
            _prepare=_sdpa_prepare("MATH", "mask"),
        ),
        Arm(
            "reference",
            _ALL,
            {"sm90": (r"gemm|softmax",), "amd": (r"gemm|Cijk|softmax",), "cpu": (r"aten::",)},
            returns_lse=True,
            _prepare=_ref_prepare,
        ),
        *peers.PEER_ARMS,  # flashinfer_fa3, flashinfer_fa2 (kernels/tether_kernels/peers.py)
        *gluon_arm.GLUON_ARMS,  # gluon (kernels/tether_kernels/gluon/arm.py)
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
    reason = _triton_supports(shape, arch)
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
    reason = _triton_supports(shape, arch)
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
