"""The attention call's shape, and the one FLOP formula every number is computed from.

Pure Python: the renderer and ``tether check`` import this on machines without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from tether.errors import UsageError

DTYPES: tuple[str, ...] = ("f16", "bf16", "f32")
# The one dtype map: a Shape's dtype name -> torch's attribute name (no torch import here).
TORCH_DTYPES: dict[str, str] = {"f16": "float16", "bf16": "bfloat16", "f32": "float32"}


@dataclass(frozen=True)
class Shape:
    """One prefill attention call: q [batch, qo_len, hq, head_dim], k/v [batch, kv_len, hkv, head_dim].

    Causal masks are aligned bottom-right: query ``i`` sees keys ``0 .. kv_len - qo_len + i``.
    """

    batch: int
    qo_len: int
    kv_len: int
    hq: int
    hkv: int
    head_dim: int
    dtype: str = "f16"
    causal: bool = True

    def __post_init__(self) -> None:
        for name in ("batch", "qo_len", "kv_len", "hq", "hkv", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"Shape.{name}: expected a positive int, got {value!r}")
        if self.hq % self.hkv:
            raise UsageError(f"Shape.hq: {self.hq} is not a multiple of hkv={self.hkv} (GQA)")
        if self.dtype not in DTYPES:
            raise UsageError(f"Shape.dtype: {self.dtype!r} is not one of {DTYPES}")
        if not isinstance(self.causal, bool):
            raise UsageError(f"Shape.causal: expected a bool, got {self.causal!r}")

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.hq // self.hkv

    def key(self) -> dict[str, object]:
        """Every field, for run files and test ids."""
        return {
            "batch": self.batch,
            "qo_len": self.qo_len,
            "kv_len": self.kv_len,
            "hq": self.hq,
            "hkv": self.hkv,
            "head_dim": self.head_dim,
            "dtype": self.dtype,
            "causal": self.causal,
        }

    def with_(self, **changes: object) -> Shape:
        """A copy with some fields changed (validated again)."""
        return Shape(**{**self.key(), **changes})  # type: ignore[arg-type]


def attended_pairs(qo_len: int, kv_len: int, causal: bool) -> int:
    """Number of (query, key) pairs one head attends.

    Causal, bottom-right: query ``i`` sees ``kv_len - qo_len + i + 1`` keys, clipped to
    ``[0, kv_len]``; summed in closed form so a 16K x 16K call costs nothing to count.
    """
    if not causal:
        return qo_len * kv_len
    shift = kv_len - qo_len
    # Row i sees shift + i + 1 keys, never more than kv_len since i < qo_len; rows with
    # i < -shift see none, so the sum runs over i in [lo, qo_len), an arithmetic series.
    lo = max(0, -shift)
    if lo >= qo_len:
        return 0
    first = shift + lo + 1
    last = shift + qo_len
    return (first + last) * (qo_len - lo) // 2


def flops(shape: Shape) -> float:
    """FLOPs of one forward call: 4 * batch * hq * head_dim * attended pairs (QK^T and PV)."""
    pairs = attended_pairs(shape.qo_len, shape.kv_len, shape.causal)
    return float(4 * shape.batch * shape.hq * shape.head_dim * pairs)
