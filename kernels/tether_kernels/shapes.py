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


@dataclass(frozen=True)
class Ragged:
    """A batch of requests of their own lengths, packed (``ragged_prefill``'s call): q
    [sum of qo_lens, hq, head_dim], k/v [sum of kv_lens, hkv, head_dim], request i's rows
    following request i-1's. Each request is causal bottom-right on its own lengths.

    Its ``key`` is the envelope the policy and the run files read: the batch and the longest
    request's qo_len and kv_len, with the shared fields; ``requests`` are its calls one by one.
    """

    qo_lens: tuple[int, ...]
    kv_lens: tuple[int, ...]
    hq: int
    hkv: int
    head_dim: int
    dtype: str = "f16"
    causal: bool = True

    def __post_init__(self) -> None:
        for name in ("qo_lens", "kv_lens"):
            lens = getattr(self, name)
            if not isinstance(lens, tuple) or not lens:
                raise UsageError(f"Ragged.{name}: expected a non-empty tuple, got {lens!r}")
            for i, n in enumerate(lens):
                if not isinstance(n, int) or isinstance(n, bool) or n < 1:
                    raise UsageError(f"Ragged.{name}[{i}]: expected a positive int, got {n!r}")
        if len(self.qo_lens) != len(self.kv_lens):
            raise UsageError(f"Ragged: {len(self.qo_lens)} qo_lens but {len(self.kv_lens)} kv_lens")
        # The shared fields are a Shape's: one of the requests checks them.
        self.requests()

    @property
    def batch(self) -> int:
        return len(self.qo_lens)

    @property
    def qo_len(self) -> int:
        """The longest request's queries."""
        return max(self.qo_lens)

    @property
    def kv_len(self) -> int:
        """The longest request's keys."""
        return max(self.kv_lens)

    @property
    def total_qo(self) -> int:
        return sum(self.qo_lens)

    @property
    def total_kv(self) -> int:
        return sum(self.kv_lens)

    @property
    def group(self) -> int:
        return self.hq // self.hkv

    def requests(self) -> tuple[Shape, ...]:
        """Each request as the batch-1 call ``single_prefill`` would make of it."""
        return tuple(
            Shape(1, qo, kv, self.hq, self.hkv, self.head_dim, self.dtype, self.causal)
            for qo, kv in zip(self.qo_lens, self.kv_lens, strict=True)
        )

    def distinct(self) -> tuple[tuple[int, Shape], ...]:
        """Each distinct request once, with the index of its first occurrence: what a check
        of every request needs to look at."""
        first: dict[Shape, int] = {}
        for i, request in enumerate(self.requests()):
            first.setdefault(request, i)
        return tuple((i, request) for request, i in first.items())

    def key(self) -> dict[str, object]:
        """The envelope, with a Shape's fields: batch, the longest qo_len and kv_len."""
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


Call = Shape | Ragged


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


def flops(call: Call) -> float:
    """FLOPs of one forward call: 4 * batch * hq * head_dim * attended pairs (QK^T and PV);
    a ragged batch's, the sum of its requests'."""
    if isinstance(call, Ragged):
        return sum(flops(r) for r in call.requests())
    pairs = attended_pairs(call.qo_len, call.kv_len, call.causal)
    return float(4 * call.batch * call.hq * call.head_dim * pairs)
