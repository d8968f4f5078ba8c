"""Launcher and variants of the Gluon sm90 forward kernel (``attn_fwd_sm90.py``).

Each variant is a ``GluonConfig``; ``VARIANTS`` names the ones a GPU session times side by side
(``validate/tools/gluon_session.py``). Importing this module imports neither torch nor triton; the
launcher does, when called.
"""

from __future__ import annotations

import itertools
import math
import sys
import warnings
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the dependency tomli serves 3.10
    import tomli as tomllib

from tether_kernels.direct import DirectKernel
from tether_kernels.direct import HostDescriptor as _HostDescriptor

if TYPE_CHECKING:
    import torch

# The kernel's program: 128 query rows in two consumer warpgroups, plus one producer warp, so
# 12 warps (the producer's warpgroup is padded): 65536 registers / 384 threads, rounded down
# to a multiple of 8. The consumers then take CONSUMER_REGS each and the producer warpgroup
# the rest (setmaxnreg), which must add up to the same pool: 2 x 240 + 24 = 3 x 168.
MAXNREG = 168
LOG2E = 1.4426950408889634
# head_dim 256 takes a narrower key tile than the tuned variant (default_config); 96, not a
# power of two as register tiles must be, runs as two parts of 64 and 32 (head_part).
HEAD_DIMS = (64, 96, 128, 256)


def head_part(head_dim: int) -> int:
    """The kernel's first head part (D0): the head itself where it is a power of two, else the
    largest power of two below it, the rest being the second part (96: 64 and 32). Both parts
    must be powers of two of at least 16 (a wgmma K step)."""
    d0 = 1 << (head_dim.bit_length() - 1)
    rest = head_dim - d0
    if rest and (rest < 16 or rest & (rest - 1)):
        raise ValueError(f"gluon attn_fwd: head_dim {head_dim} is not two power-of-two parts")
    return d0


@dataclass(frozen=True)
class GluonConfig:
    """One variant: key tile, K/V ring depth, warpgroup ping-pong, register split, slot
    releases (``one_release``: one arrive per block instead of two, the kernel's
    ``ONE_RELEASE``), the steady-state loop two blocks per trip (``unroll``, ``UNROLL``) and P
    converted two scores per instruction (``pack``, ``PACK``)."""

    block_n: int = 128
    stages: int = 2
    pingpong: bool = True
    one_release: bool = False
    unroll: bool = False
    pack: bool = False
    consumer_regs: int = 240
    producer_regs: int = 24

    def __post_init__(self) -> None:
        if self.block_n not in (64, 128):
            raise ValueError(f"GluonConfig.block_n: 64 or 128, got {self.block_n}")
        if not 2 <= self.stages <= 4:
            raise ValueError(f"GluonConfig.stages: 2 to 4, got {self.stages}")
        if 2 * self.consumer_regs + self.producer_regs > 3 * MAXNREG:
            raise ValueError("GluonConfig: the register split exceeds the CTA's register file")

    def smem_bytes(self, head_dim: int, item: int = 2) -> int:
        """Shared memory of Q (128 rows) and the K and V rings, without the barriers."""
        return item * head_dim * (128 + 2 * self.stages * self.block_n)


# The H200's per-block shared memory limit (227 KiB); a variant over it cannot launch.
SMEM_LIMIT = 232448
# Query rows (one token's one head) per program of the split-KV merge.
MERGE_ROWS = 16
# A head of one part passes None for the second part's descriptors: constexprs, which the
# launcher neither builds nor passes (no per-call cost where the head is a power of two).
_UNSPLIT = (None, None, None)

VARIANTS: dict[str, GluonConfig] = {
    "n128s2pp": GluonConfig(),
    "n128s2": GluonConfig(pingpong=False),
    "n128s2r": GluonConfig(pingpong=False, one_release=True),
    "n128s2k": GluonConfig(pingpong=False, pack=True),
    "n128s2rk": GluonConfig(pingpong=False, one_release=True, pack=True),
    "n128s3rk": GluonConfig(stages=3, pingpong=False, one_release=True, pack=True),
    "n128s2rku": GluonConfig(pingpong=False, one_release=True, pack=True, unroll=True),
}
# The arm's variant: the pick of the tuning grid tune-gluon-sm90 (every variant against the
# fastest peer, under the guard) by the rule tether_kernels/tuned.py declares, which tether
# check holds; the region below renders the run it rests on.
# BEGIN GENERATED: tuned-gluon-sm90-variant (tether render)
# Tuned choice gluon-sm90-variant on sm90: config n128s2rk.
# Rule (tether.policy.TunedChoice): the candidate with the highest geomean of B
# over A; a lead inside the noise of the leader's cells changes no default.
# run 20261207T080513Z-tune-tune-gluon-sm90-sm90-1d1e90891bcb
# (2026-12-07, git de333b775a31): gluon against flashinfer_fa3
#   n128s2: geomean 0.996, noise up to 1.005
#   n128s2k: geomean 1.026, noise up to 1.005
#   n128s2pp: geomean 0.968, noise up to 1.006
#   n128s2r: geomean 0.995, noise up to 1.005
#   n128s2rk: geomean 1.028, noise up to 1.003
#   n128s2rku: geomean 0.924, noise up to 1.005
#   n128s3rk: geomean 1.013, noise up to 1.003
# best n128s2rk; chosen n128s2rk: holds
# END GENERATED: tuned-gluon-sm90-variant
DEFAULT_VARIANT = "n128s2rk"


def default_config(head_dim: int) -> GluonConfig:
    """The arm's variant at ``head_dim``: the tuned DEFAULT_VARIANT where its shared memory
    fits a block; else the same variant on 64-key tiles with the deepest K/V ring, no deeper
    than the tuned one's, that fits (head_dim 256: two stages, 192 KiB, where n128s2 needs
    320 KiB and n64s3 256 KiB). The
    tuning grid times head_dim 128; the key tile is the one thing a wider head forces."""
    tuned = VARIANTS[DEFAULT_VARIANT]
    if tuned.smem_bytes(head_dim) <= SMEM_LIMIT:
        return tuned
    for stages in range(tuned.stages, 1, -1):
        narrow = replace(tuned, block_n=64, stages=stages)
        if narrow.smem_bytes(head_dim) <= SMEM_LIMIT:
            return narrow
    raise ValueError(f"gluon attn_fwd: no variant fits head_dim {head_dim} in shared memory")


# Split-KV (a launch whose query tiles are too few to fill the GPU shares each tile's key
# blocks among several programs, then merges their partial results): at most MAX_SPLIT
# programs per tile, each with at least MIN_SPLIT_BLOCKS key blocks, so that each program's
# K/V ring fills before it drains; and only where the unsplit launch leaves more than half the
# SMs idle: a split adds a round trip of the partial results through memory and a second
# launch, which only SMs that would otherwise idle can pay for. validate/tools/split_session.py
# times the split counts side by side.
MAX_SPLIT = 8
MIN_SPLIT_BLOCKS = 4


def split_count(programs: int, key_blocks: int, sms: int) -> int:
    """How many programs share a query tile's key blocks: 1 (no split) unless ``programs``
    (the unsplit grid) would leave more than half of ``sms`` idle; then as many as fill the
    SMs, within MAX_SPLIT and MIN_SPLIT_BLOCKS of the longest tile's ``key_blocks``."""
    if programs <= 0 or 2 * programs > sms:
        return 1
    return max(1, min(sms // programs, key_blocks // MIN_SPLIT_BLOCKS, MAX_SPLIT))


def ragged_work(
    qo_lens: tuple[int, ...], kv_lens: tuple[int, ...], block_n: int, causal: bool
) -> list[tuple[int, int]]:
    """A ragged launch's work items, (request, query tile of 128 rows), each once, the tiles
    with the most key blocks first (ties in request and tile order): the longest-first order
    of a batch's grid, over requests of their own lengths. A tile whose rows see no key is
    kept: it writes their zeros."""
    items = []
    for b, (qo, kv) in enumerate(zip(qo_lens, kv_lens, strict=True)):
        for t in range(-(-qo // 128)):
            if causal:
                end = min(kv, t * 128 + 128 + kv - qo)  # one past the last key the tile sees
                blocks = -(-max(end, 0) // block_n)
            else:
                blocks = -(-kv // block_n)
            items.append((-blocks, b, t))
    return [(b, t) for _, b, t in sorted(items)]


class HostDescriptor(_HostDescriptor):
    """The direct launch's host descriptor of a TMA tensor (``direct.HostDescriptor``), with
    the field the NVIDIA launcher reads of a tiled descriptor from Triton 3.7 on,
    ``round_f32_to_tf32`` (False, as Triton's own descriptor defaults it; 3.6 reads no such
    field: gluon/compat.py)."""

    __slots__ = ()
    round_f32_to_tf32 = False


# The Triton releases the kernel's one source is written for (gluon/releases.toml, which the
# README renders too). A release outside them is refused, never guessed at: its Gluon API may
# have moved again.
GLUON_TRITON: tuple[str, ...] = tuple(
    tomllib.loads(Path(__file__).with_name("releases.toml").read_text(encoding="utf-8"))["gluon"]
)


def triton_release(version: str) -> str:
    """``major.minor`` of a Triton version string ("3.9.0" -> "3.9", "3.7.1+git" -> "3.7")."""
    return ".".join(version.split("+")[0].split(".")[:2])


def gluon_triton_reason(version: str | None = None) -> str | None:
    """None where the installed Triton (or ``version``) is a release the kernel is written for,
    else why not, naming the releases it is. Reads the installed version only (no import), so
    routing stays cheap and pure."""

    if version is None:
        try:
            version = metadata.version("triton")
        except metadata.PackageNotFoundError:
            return "Triton is not installed"
    if triton_release(version) not in GLUON_TRITON:
        return (
            f"the Gluon kernel is written for Triton {GLUON_TRITON[0]} to {GLUON_TRITON[-1]} "
            f"(releases {', '.join(GLUON_TRITON)}); this is triton {version}"
        )
    return None


class UntestedTritonWarning(UserWarning):
    """The installed Triton is outside the releases the sm90 Gluon arm is written for, so sm90
    calls it would take route to the next arm (filter it by this class to silence it)."""


def warn_untested_triton() -> None:
    """Warn once, at ``tether_kernels`` import, where the installed Triton cannot run the Gluon
    arm, so an install outside its releases is told which arm it cannot run and why. Quiet
    where Triton is not installed (nothing of the library runs) or is a release the arm is
    written for."""
    try:
        version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        return
    reason = gluon_triton_reason(version)
    if reason is not None:
        warnings.warn(
            f"tether_kernels: the sm90 arm 'gluon' (the Hopper kernel) is unavailable: {reason}; "
            f"sm90 calls take the next arm in the route order. Install triton>={GLUON_TRITON[0]},"
            f"<{_next_release(GLUON_TRITON[-1])} (pip install 'tether[kernels]') to keep it.",
            UntestedTritonWarning,
            stacklevel=2,
        )


def _next_release(release: str) -> str:
    major, minor = release.split(".")
    return f"{major}.{int(minor) + 1}"


def gluon_unavailable(device: Any = None) -> str | None:
    """None where the Gluon Hopper kernel can run (an sm90 device, a Triton with Gluon's
    Hopper module), else the reason. Imports triton; ``device`` None checks only the Triton."""
    try:
        from triton.experimental.gluon.language.nvidia import hopper  # noqa: F401
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor  # noqa: F401
    except ImportError as exc:
        return f"this Triton has no Gluon Hopper module ({exc})"
    if device is None:
        return None
    if getattr(device, "type", str(device)) != "cuda":
        return f"the Gluon kernel runs on an sm90 GPU, not on {device}"
    import torch

    if torch.version.hip or torch.cuda.get_device_capability(device) != (9, 0):
        return "the Gluon kernel uses wgmma, TMA and setmaxnreg: sm90 (Hopper) only"
    return None


class GluonPlan:
    """Everything one key of the Gluon kernel's launch needs that does not depend on the
    tensors' addresses (the layouts, the grid, the constants, the split), built once;
    ``launch`` then only makes the three tensor descriptors and launches. The entry points
    keep one per key.

    ``n_split`` None picks the split from the grid and the device's SM count
    (``split_count``); a number forces it (1: never split). A split launch writes f32
    partial results into fresh workspace and launches ``merge_splits`` after the kernel.

    ``lens`` (qo_lens, kv_lens): a ragged batch, packed (``RAGGED``): q [total queries, hq, d],
    k/v [total keys, hkv, d], lse [hq, total queries]; ``shape`` then gives batch 1 and the
    totals as qo_len and kv_len. Its work rows (``ragged_work``'s order, each with its
    request's offsets and lengths) go to the device once, here; it never splits.

    The first launch goes through the JIT with Triton's checked ``TensorDescriptor``s; later
    ones launch the compiled kernel directly with bare descriptors (``direct.py``)."""

    def __init__(
        self,
        shape: tuple[int, int, int, int, int, int],
        dtype: Any,
        device: Any,
        config: GluonConfig | None = None,
        causal: bool = True,
        sm_scale: float | None = None,
        want_lse: bool = False,
        n_split: int | None = None,
        lens: tuple[tuple[int, ...], tuple[int, ...]] | None = None,
    ) -> None:
        import torch
        from triton.experimental.gluon import language as gl

        from tether_kernels.gluon.attn_fwd_sm90 import attn_fwd_sm90
        from tether_kernels.triton.merge import merge_splits

        batch, qo_len, kv_len, hq, hkv, d = shape
        why = gluon_unavailable(device)
        if why is not None:
            raise ValueError(f"gluon attn_fwd: {why}")
        if dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"gluon attn_fwd: f16 or bf16 inputs of one dtype, got {dtype}")
        if d not in HEAD_DIMS:
            raise ValueError(f"gluon attn_fwd: head_dim {d} not in {HEAD_DIMS}")
        config = config or default_config(d)
        if hq % hkv:
            raise ValueError(f"gluon attn_fwd: hq {hq} is not a multiple of hkv {hkv}")
        if config.smem_bytes(d) > SMEM_LIMIT:
            raise ValueError(f"gluon attn_fwd: {config} needs more shared memory than a block has")
        if n_split is not None and not 1 <= n_split <= MAX_SPLIT:
            raise ValueError(f"gluon attn_fwd: n_split {n_split} not in 1..{MAX_SPLIT}")
        if lens is not None and (batch != 1 or sum(lens[0]) != qo_len or sum(lens[1]) != kv_len):
            raise ValueError(
                f"gluon attn_fwd: a ragged plan takes batch 1 and the totals of its lengths, "
                f"got {shape} for {len(lens[0])} requests"
            )
        scale = d**-0.5 if sm_scale is None else sm_scale
        if not (scale > 0 and math.isfinite(scale)):
            # The kernel takes the row max of the unscaled scores (see the kernel's docstring).
            raise ValueError(f"gluon attn_fwd: sm_scale must be positive, got {sm_scale!r}")
        elt = gl.float16 if dtype == torch.float16 else gl.bfloat16
        self.config = config
        # A head that is not a power of two runs as two parts (head_part): the same 2-D
        # views, described twice, in blocks of each part's width.
        d0 = head_part(d)
        # Each part's (width, Q layout, K/V layout): Q blocks are 64 rows, K/V blocks block_n.
        self.parts = [
            (w, gl.NVMMASharedLayout.get_default_for([64, w], elt),
             gl.NVMMASharedLayout.get_default_for([config.block_n, w], elt))
            for w in ((d0, d - d0) if d0 < d else (d0,))
        ]  # fmt: skip
        self.q_dims = [batch * qo_len, hq * d]
        self.kv_dims = [batch * kv_len, hkv * d]
        self.want_lse = want_lse
        # Never written when lse is None (STORE_LSE off); the pointer argument still needs a tensor.
        self.no_lse = None if want_lse else torch.empty(1, dtype=torch.float32, device=device)
        self.q_strides = [self.q_dims[1], 1]
        self.kv_strides = [self.kv_dims[1], 1]
        tiles = -(-qo_len // 128)
        programs = tiles * batch * hq
        # A ragged batch's work rows (int32, the kernel's WORK_FIELDS each: query tile, the
        # request's first query row, qo_len, first key row, kv_len), on the device once per plan.
        self.work: Any = None
        if lens is not None:
            items = ragged_work(lens[0], lens[1], config.block_n, causal)
            qo_at, kv_at = ([0, *itertools.accumulate(ns)] for ns in lens)
            rows = [(t, qo_at[b], lens[0][b], kv_at[b], lens[1][b]) for b, t in items]
            self.work = torch.tensor(rows, dtype=torch.int32, device=device)
            programs = len(items) * hq
            n_split = 1
        if n_split is None:
            # The longest tile sees every key (the last tile, when causal: masks align
            # bottom-right).
            sms = torch.cuda.get_device_properties(device).multi_processor_count
            n_split = split_count(programs, -(-kv_len // config.block_n), sms)
        self.n_split = n_split
        self.consts = (scale * LOG2E, qo_len, kv_len, n_split)
        # The output's strides, contiguous BSHD: ``launch`` takes it dense, batched or not
        # (single_prefill's [len, heads, d] output has the same layout with batch 1).
        self.out_strides = (qo_len * hq * d, hq * d, d)
        meta = dict(
            HQ=hq,
            GROUP=hq // hkv,
            HEAD_DIM=d,
            D0=d0,
            BLOCK_N=config.block_n,
            STAGES=config.stages,
            CAUSAL=causal,
            PINGPONG=config.pingpong,
            ONE_RELEASE=config.one_release,
            UNROLL=config.unroll,
            PACK=config.pack,
            STORE_LSE=want_lse or n_split > 1,  # a split's LSE weighs it in the merge
            PRODUCER_REGS=config.producer_regs,
            CONSUMER_REGS=config.consumer_regs,
            RAGGED=lens is not None,
            num_warps=4,
            maxnreg=MAXNREG,
        )
        self.kernel = DirectKernel(attn_fwd_sm90, (programs * n_split,), meta)
        self.merge: DirectKernel | None = None
        if n_split > 1:
            rows = batch * qo_len * hq
            self.part_o = (n_split * rows * d,)
            self.part_lse = (n_split * rows,)
            self.merge_consts = (rows, qo_len, hq)
            merge_meta = dict(N_SPLIT=n_split, HEAD_DIM=d, ROWS=MERGE_ROWS, STORE_LSE=want_lse)
            if d0 < d:  # a head of two parts: the merge's register tile is padded
                merge_meta["HEAD_PAD"] = 2 * d0
            self.merge = DirectKernel(merge_splits, (-(-rows // MERGE_ROWS),), merge_meta)

    def launch(self, q: Any, k: Any, v: Any, out: Any, lse: Any = None) -> Any:
        """Launch on contiguous, 16-byte aligned tensors of the plan's key: BSHD, or the
        [len, heads, d] of a batch of one (the same memory); lse f32, [b, hq, qo] or [hq, qo]."""
        if self.merge is not None:
            return self._launch_split(q, k, v, out, lse)
        lse_arg = lse if self.want_lse else self.no_lse
        return self._launch(q, k, v, out, lse_arg)

    def _launch_split(self, q: Any, k: Any, v: Any, out: Any, lse: Any) -> Any:
        """The kernel into fresh f32 partial results, then the merge into ``out`` (and
        ``lse``). Fresh per call, from the caching allocator: two calls in flight on two
        streams, or two graphs, never share a workspace."""
        import torch

        o_part = torch.empty(self.part_o, dtype=torch.float32, device=q.device)
        lse_part = torch.empty(self.part_lse, dtype=torch.float32, device=q.device)
        self._launch(q, k, v, o_part, lse_part)
        assert self.merge is not None
        lse_arg = lse if self.want_lse else self.no_lse
        self.merge(o_part, lse_part, out, lse_arg, *self.merge_consts)
        return out

    def _launch(self, q: Any, k: Any, v: Any, out: Any, lse_arg: Any) -> Any:
        rest = (out, lse_arg, *self.consts, *self.out_strides, self.work)
        stream = self.kernel.stream()
        if stream is not None:
            # A descriptor's base is read for its address only: q itself, not a 2-D view; the
            # block shape is the compiled kernel's, so a split head's parts share these.
            qd = HostDescriptor(q, self.q_dims, self.q_strides)
            kd = HostDescriptor(k, self.kv_dims, self.kv_strides)
            vd = HostDescriptor(v, self.kv_dims, self.kv_strides)
            second = (qd, kd, vd) if len(self.parts) > 1 else _UNSPLIT
            self.kernel.launch(stream, qd, kd, vd, *second, *rest)
            return out
        from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

        # 2-D views: one row per token, the heads side by side; a tile is one head's columns
        # (or one part's of them).
        jit_descs = []
        kn = self.config.block_n
        for w, q_layout, kv_layout in self.parts:
            jit_descs.append((
                TensorDescriptor(q.view(self.q_dims), self.q_dims, self.q_strides, [64, w],
                                 q_layout),
                TensorDescriptor(k.view(self.kv_dims), self.kv_dims, self.kv_strides, [kn, w],
                                 kv_layout),
                TensorDescriptor(v.view(self.kv_dims), self.kv_dims, self.kv_strides, [kn, w],
                                 kv_layout),
            ))  # fmt: skip
        self.kernel.jit(*jit_descs[0], *(jit_descs[1] if len(jit_descs) > 1 else _UNSPLIT), *rest)
        return out


def attn_fwd_sm90_launcher(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    config: GluonConfig | None = None,
    causal: bool = True,
    sm_scale: float | None = None,
    lse: torch.Tensor | None = None,
):
    """A no-argument callable that launches the kernel on these preallocated tensors.

    q [b, qo_len, hq, d], k/v [b, kv_len, hkv, d] (BSHD, contiguous, f16 or bf16, d in HEAD_DIMS),
    out like q; lse f32 [b, hq, qo_len] (natural log) when given. Raises ValueError naming
    what it cannot serve.
    """
    batch, qo_len, hq, d = q.shape
    kv_len, hkv = k.shape[1], k.shape[2]
    if not q.dtype == k.dtype == v.dtype:
        raise ValueError(f"gluon attn_fwd: f16 or bf16 inputs of one dtype, got {q.dtype}")
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError(f"gluon attn_fwd: {name} must be contiguous BSHD, 16-byte aligned")
    plan = GluonPlan(
        (batch, qo_len, kv_len, hq, hkv, d), q.dtype, q.device, config, causal, sm_scale,
        lse is not None,
    )  # fmt: skip

    def launch() -> torch.Tensor:
        return plan.launch(q, k, v, out, lse)

    launch.config = plan.config  # type: ignore[attr-defined]
    return launch


__all__ = [
    "DEFAULT_VARIANT",
    "VARIANTS",
    "GluonConfig",
    "GluonPlan",
    "attn_fwd_sm90_launcher",
    "default_config",
    "gluon_unavailable",
    "head_part",
    "ragged_work",
    "split_count",
]
