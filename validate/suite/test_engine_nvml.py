"""The clock the engine reads is the clock of the GPU it times, also under CUDA_VISIBLE_DEVICES.

NVML numbers all the host's GPUs; torch numbers the visible ones. On a two-GPU host with
CUDA_VISIBLE_DEVICES=1, torch's device 0 is NVML's device 1: looking the handle up by index
would read the other GPU's clock (and miss this one's throttling). Fakes stand in for pynvml and
torch here: the point is which lookup is made, not NVML itself.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from tether.bench.engine import _nvml_handle


class FakeNvml:
    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        self.calls.append(("uuid", uuid))
        return f"handle:{uuid}"

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        self.calls.append(("index", index))
        return f"handle:{index}"


def fake_torch(uuid: object) -> SimpleNamespace:
    props = SimpleNamespace() if uuid is None else SimpleNamespace(uuid=uuid)
    cuda = SimpleNamespace(current_device=lambda: 0, get_device_properties=lambda i: props)
    return SimpleNamespace(cuda=cuda)


def test_the_handle_is_found_by_uuid_not_by_torchs_index(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    nvml = FakeNvml()
    assert _nvml_handle(nvml, fake_torch("5b1c-77")) == "handle:GPU-5b1c-77"
    assert _nvml_handle(nvml, fake_torch("GPU-5b1c-77")) == "handle:GPU-5b1c-77"
    assert [kind for kind, _ in nvml.calls] == ["uuid", "uuid"]


def test_without_a_uuid_a_masked_index_is_not_trusted(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    with pytest.raises(LookupError, match="CUDA_VISIBLE_DEVICES"):
        _nvml_handle(nvml, fake_torch(None))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert _nvml_handle(nvml, fake_torch(None)) == "handle:0"
    assert nvml.calls == [("index", 0)]
