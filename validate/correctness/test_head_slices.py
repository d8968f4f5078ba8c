"""The correctness rule judged a slice of heads at a time (_helpers.head_slices): the slices
cover every head once, keep each slice's scores within the budget where one kv head allows,
and a wrong head is still caught when the call is sliced."""

from __future__ import annotations

import pytest
from tether_kernels import Shape
from tether_kernels.arms import attention_ref

from validate.correctness import _helpers
from validate.correctness._helpers import assert_within_baseline, head_slices, make_qkv


@pytest.mark.parametrize(
    "shape",
    [
        Shape(1, 8192, 8192, 128, 8, 128, "bf16", True),
        Shape(1, 8192, 8192, 40, 10, 128, "f16", True),
        Shape(2, 4097, 4097, 32, 8, 64, "bf16", True),
        Shape(1, 300, 20000, 28, 4, 128, "f16", True),
        Shape(1, 64, 64, 8, 1, 64, "f16", True),
    ],
)
def test_the_slices_cover_every_head_once(shape: Shape) -> None:
    slices = head_slices(shape)
    q_heads = [h for qh, _, _ in slices for h in range(shape.hq)[qh]]
    kv_heads = [h for _, kh, _ in slices for h in range(shape.hkv)[kh]]
    assert q_heads == list(range(shape.hq)) and kv_heads == list(range(shape.hkv))
    group = shape.hq // shape.hkv
    for qh, kh, part in slices:
        assert part.hq == len(range(shape.hq)[qh]) and part.hkv == len(range(shape.hkv)[kh])
        assert part.hq == group * part.hkv  # each slice keeps its query heads' kv head
        scores = part.batch * part.qo_len * part.kv_len * part.hq
        assert part.hkv == 1 or scores <= _helpers.SLICE_ELEMS


def test_a_wrong_head_is_caught_when_the_call_is_sliced(monkeypatch: pytest.MonkeyPatch) -> None:
    shape = Shape(1, 96, 96, 8, 4, 32, "f32", True)
    monkeypatch.setattr(_helpers, "SLICE_ELEMS", 96 * 96 * 2)  # one kv head per slice
    assert len(head_slices(shape)) == 4
    q, k, v = make_qkv(shape, 7)
    out = attention_ref(q, k, v, True)
    assert_within_baseline("reference", out, shape, q, k, v, 7)
    bad = out.clone()
    bad[:, 5:, 5] += 0.05  # query head 5, in the third slice
    with pytest.raises(AssertionError, match="heads 4-5"):
        assert_within_baseline("reference", bad, shape, q, k, v, 7)
