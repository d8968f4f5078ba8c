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


@pytest.fixture(autouse=True)
def gpu_memory_returned() -> Iterator[None]:
    """Each test hands the GPU memory it freed back to the device: the suite runs 14 xdist
    workers on one GPU, and a caching allocator holding what its worker's big tests freed
    (the f32 reference of a 2k x 16k call is 4 GiB) ran the others out of memory."""
    yield
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()
