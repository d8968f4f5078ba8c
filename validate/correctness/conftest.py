"""Fixtures shared by the kernel library's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tether_kernels import prefill


@pytest.fixture(autouse=True)
def fresh_plans() -> Iterator[None]:
    """Each test starts with no cached call plans: a test that fakes a device's arch
    (monkeypatching ``_device_arch``) must not find a plan another test made for the same
    tensors on another arch. Production never remaps a device, so its cache needs no reset."""
    prefill.clear_plans()
    yield
    prefill.clear_plans()
