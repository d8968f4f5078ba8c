"""flops(shape) against a brute-force count of attended (query, key) pairs."""

from __future__ import annotations

import pytest
from tether_kernels import Shape, attended_pairs, flops


def brute_pairs(qo_len: int, kv_len: int, causal: bool) -> int:
    shift = kv_len - qo_len
    return sum(1 for i in range(qo_len) for j in range(kv_len) if not causal or j <= i + shift)


@pytest.mark.parametrize(
    "causal", [pytest.param(True, id="causal"), pytest.param(False, id="full")]
)
def test_pairs_match_brute_force(causal: bool) -> None:
    for qo_len in range(1, 24):
        for kv_len in range(1, 24):
            got = attended_pairs(qo_len, kv_len, causal)
            assert got == brute_pairs(qo_len, kv_len, causal), (qo_len, kv_len, causal)


def test_flops_scales_pairs_by_four_b_h_d() -> None:
    shape = Shape(batch=4, qo_len=17, kv_len=33, hq=6, hkv=2, head_dim=64, dtype="f16", causal=True)
    assert flops(shape) == 4 * 4 * 6 * 64 * brute_pairs(17, 33, True)


def test_large_causal_count_is_closed_form() -> None:
    # 2048 queries against 16384 keys: every row sees the 14336-key prefix plus its triangle.
    assert attended_pairs(2048, 16384, True) == 2048 * 14336 + 2048 * 2049 // 2


def test_rows_before_the_diagonal_count_zero() -> None:
    assert attended_pairs(8, 3, True) == 1 + 2 + 3
    assert attended_pairs(5, 1, True) == 1
