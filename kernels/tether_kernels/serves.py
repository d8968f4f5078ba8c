"""What an arm serves on one arch, declared as data, and the check ``route`` reads.

Every arm in ``tether_kernels.arms`` declares one ``Serves`` per arch it runs on. A
declaration covers the calls the arm computes with the library's semantics (the contract in
kernels/API.md): bottom-right causal masks, rows that see no key give 0 (and lse -inf),
``sm_scale``, GQA, the LSE when asked. Anything outside it the arm refuses, and ``route``
never sends a call there. Pure Python, no torch: the router, the renderer and ``tether check``
read this on machines without a GPU.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from tether_kernels.shapes import DTYPES, Call, Ragged, Shape

# How an arm applies the bottom-right causal mask when qo_len != kv_len (every routable arm
# applies it; the value says where the work happens, for the reader and the fidelity check).
BOTTOM_RIGHT = {
    "kernel": "the kernel masks each score itself",
    "mask": "a boolean mask built once per call key, outside the timed call (a backend may "
    "still convert it inside its call: the fidelity check records what it launches)",
    "additive": "the mask as an additive bias in the inputs' dtype, built once per call key, "
    "which the backend applies as it is",
    "bias": "PyTorch's causal_lower_right bias: the backend applies it, or PyTorch builds the "
    "mask inside the call (the fidelity check flags that)",
}

# Every head_dim tether routes anywhere: multiples of 8 up to 256. The Triton kernel serves
# all of them (it pads its tile to the next power of two and masks the rest, see
# triton/attn_fwd.py); the SDPA arms' declarations stay inside this set, so a test can
# enumerate every routed head_dim (validate/correctness/test_routed_api.py does).
HEAD_DIMS_SDPA: tuple[int, ...] = tuple(range(8, 257, 8))
HEAD_DIMS_TRITON: tuple[int, ...] = HEAD_DIMS_SDPA
# The Triton kernel's tile widths: powers of two in 16..256 (tl.dot reduces over at least 16).
# A head_dim runs on the tile of its width (``tile_head_dim``), and the launch tables in
# launch_tables.py are keyed by these.
HEAD_DIMS_POW2: tuple[int, ...] = (16, 32, 64, 128, 256)


def tile_head_dim(head_dim: int) -> int:
    """The Triton tile width ``head_dim`` runs on: the smallest of ``HEAD_DIMS_POW2`` that
    holds it (ValueError above 256). Pure Python: the launch tables read it without triton."""
    for width in HEAD_DIMS_POW2:
        if head_dim <= width:
            return width
    raise ValueError(f"head_dim {head_dim} is above the Triton kernel's widest tile, 256")


# Largest element offset a Triton program computes in 32 bits (its strides are i32).
INT32_ELEMENTS = 2**31 - 1
# CUDA and HIP grids allow 65535 blocks along their second axis, where the kernel puts
# batch x query heads (or the query blocks); cuDNN refuses batch or heads beyond it.
GRID_AXIS_MAX = 65535


def describe_dims(dims: tuple[int, ...]) -> str:
    """``(8, 16, ..., 256)`` -> ``"8..256 step 8"``; short or irregular tuples in full."""
    if len(dims) > 4:
        step = dims[1] - dims[0]
        if all(b - a == step for a, b in itertools.pairwise(dims)):
            return f"{dims[0]}..{dims[-1]} step {step}"
    return ", ".join(str(d) for d in dims)


@dataclass(frozen=True)
class Serves:
    """The calls one arm serves on one arch with the library's semantics.

    ``head_dims`` None means any; ``keyless_rows`` None means causal rows that see no key
    (qo_len > kv_len) give 0 and lse -inf, as the contract says, and a string says why this
    arm does not meet that (the arm then serves no call that has such rows). ``why`` maps a
    field name to the reason for its limit; refusals quote it.
    """

    dtypes: tuple[str, ...]
    head_dims: tuple[int, ...] | None
    bottom_right: str
    gqa: bool = True
    min_kv_len: int = 1
    max_batch: int | None = None
    max_batch_heads: int | None = None
    max_elements: int | None = None
    keyless_rows: str | None = None
    lse: bool = False
    # Takes a ragged batch (``Ragged``: packed requests of their own lengths) in one launch;
    # False: ragged_prefill reaches this arm only one request at a time (routing's per_request).
    ragged: bool = False
    why: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [d for d in self.dtypes if d not in DTYPES]
        if unknown or not self.dtypes:
            raise ValueError(f"Serves.dtypes: {self.dtypes!r} (known: {DTYPES})")
        if self.bottom_right not in BOTTOM_RIGHT:
            raise ValueError(f"Serves.bottom_right: {self.bottom_right!r} not in {BOTTOM_RIGHT}")
        fields = set(self.__dataclass_fields__)
        for name in self.why:
            if name not in fields:
                raise ValueError(f"Serves.why: {name!r} is not a field")

    def _because(self, name: str) -> str:
        return f" ({self.why[name]})" if name in self.why else ""

    def refusal(self, shape: Call, *, need_lse: bool = False) -> str | None:
        """None when this declaration covers ``shape`` (and the LSE if asked), else the first
        constraint it fails, named with the value that fails it. A ``Ragged`` batch is covered
        when the arm takes ragged batches, every request is covered as a call of its own, and
        the packed tensors fit ``max_elements``."""
        if isinstance(shape, Ragged):
            return self._ragged_refusal(shape, need_lse)
        if shape.dtype not in self.dtypes:
            return f"dtype {shape.dtype} is not one of {', '.join(self.dtypes)}" + self._because(
                "dtypes"
            )
        if self.head_dims is not None and shape.head_dim not in self.head_dims:
            return (
                f"head_dim {shape.head_dim} is not one of {describe_dims(self.head_dims)}"
                + self._because("head_dims")
            )
        if not self.gqa and shape.hq != shape.hkv:
            return f"GQA ({shape.hq} query heads on {shape.hkv} kv heads) is not served" + (
                self._because("gqa")
            )
        if shape.kv_len < self.min_kv_len:
            return f"kv_len {shape.kv_len} is below {self.min_kv_len}" + self._because("min_kv_len")
        if self.max_batch is not None and shape.batch > self.max_batch:
            return f"batch {shape.batch} is above {self.max_batch}" + self._because("max_batch")
        if self.max_batch_heads is not None and shape.batch * shape.hq > self.max_batch_heads:
            return (
                f"batch x hq = {shape.batch * shape.hq} is above {self.max_batch_heads}"
                + self._because("max_batch_heads")
            )
        if self.max_elements is not None:
            largest = shape.batch * max(shape.qo_len * shape.hq, shape.kv_len * shape.hkv)
            if largest * shape.head_dim > self.max_elements:
                return (
                    f"a tensor of {largest * shape.head_dim} elements is above "
                    f"{self.max_elements}" + self._because("max_elements")
                )
        if has_keyless_rows(shape) and self.keyless_rows is not None:
            return (
                f"causal qo_len {shape.qo_len} > kv_len {shape.kv_len} leaves rows that see "
                f"no key, which this arm does not give as 0 ({self.keyless_rows})"
            )
        if need_lse and not self.lse:
            return "does not return the log-sum-exp (return_lse)"
        return None

    def _ragged_refusal(self, call: Ragged, need_lse: bool) -> str | None:
        if not self.ragged:
            return "takes no ragged batch in one launch" + self._because("ragged")
        for i, request in call.distinct():
            reason = self.refusal(request, need_lse=need_lse)
            if reason is not None:
                return f"request {i} ({request.qo_len} x {request.kv_len}): {reason}"
        if self.max_elements is not None:
            largest = max(call.total_qo * call.hq, call.total_kv * call.hkv) * call.head_dim
            if largest > self.max_elements:
                return (
                    f"a packed tensor of {largest} elements is above {self.max_elements}"
                    + self._because("max_elements")
                )
        return None


def has_keyless_rows(shape: Shape) -> bool:
    """Causal with qo_len > kv_len: bottom-right alignment leaves the first rows no key."""
    return shape.causal and shape.qo_len > shape.kv_len
