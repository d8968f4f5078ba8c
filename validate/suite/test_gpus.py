"""Per-GPU pinning and per-GPU locks (tether.gpus). CPU only: GPUs are faked via env and files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tether.errors import GuardError, HostBusyError, UsageError
from tether.gpus import (  # parsers: tested on fixed text
    _from_amd_smi,
    _from_nvidia_smi,
    gpu_lock_path,
    hold_gpu_lock,
    list_gpus,
    pin_worker,
    pytest_configure_pinning,
    visible_gpus,
)


@pytest.mark.parametrize(
    ("worker", "gpu"),
    [
        pytest.param("gw0", "0", id="gw0-gpu0"),
        pytest.param("gw1", "1", id="gw1-gpu1"),
        pytest.param("gw2", "0", id="gw2-wraps-to-gpu0"),
        pytest.param("master", "0", id="no-xdist"),
    ],
)
def test_pin_worker_round_robin(worker: str, gpu: str) -> None:
    assert pin_worker(worker, 2) == {"CUDA_VISIBLE_DEVICES": gpu, "HIP_VISIBLE_DEVICES": gpu}


def test_pin_worker_keeps_parent_tokens() -> None:
    # With CUDA_VISIBLE_DEVICES=4,6 the workers must see 4 and 6, not 0 and 1.
    gpus = list_gpus({"CUDA_VISIBLE_DEVICES": "4,6"})
    assert [pin_worker(w, gpus)["CUDA_VISIBLE_DEVICES"] for w in ("gw0", "gw1", "gw2")] == [
        "4",
        "6",
        "4",
    ]


def test_pin_worker_no_gpus_and_bad_id() -> None:
    assert pin_worker("gw3", 0) == {}
    with pytest.raises(UsageError, match="PYTEST_XDIST_WORKER"):
        pin_worker("worker-1", 2)


@pytest.mark.parametrize(
    ("env", "count"),
    [
        pytest.param({"CUDA_VISIBLE_DEVICES": "0,1"}, 2, id="cuda-two"),
        pytest.param({"HIP_VISIBLE_DEVICES": "3"}, 1, id="hip-one"),
        pytest.param({"CUDA_VISIBLE_DEVICES": ""}, 0, id="hidden"),
        pytest.param({"CUDA_VISIBLE_DEVICES": "0,-1,1"}, 1, id="stops-at-invalid"),
    ],
)
def test_visible_gpus_from_env(env: dict[str, str], count: int) -> None:
    assert visible_gpus(env) == count


def test_visible_gpus_from_device_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # FIXTURE: a fake /dev with two NVIDIA nodes plus the control node that is not a GPU.
    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    monkeypatch.setattr("tether.gpus._run_tool", lambda argv: None)
    assert visible_gpus({}, dev=tmp_path) == 2
    empty = tmp_path / "empty"
    empty.mkdir()
    assert visible_gpus({}, dev=empty) == 0


def test_vendor_listings_parse() -> None:
    nv = _from_nvidia_smi(
        "GPU 0: NVIDIA H200 (UUID: GPU-aaaa)\nGPU 1: NVIDIA H200 (UUID: GPU-bbbb)\n"
    )
    assert [(g.index, g.ident, g.name, g.uuid) for g in nv] == [
        (0, "0", "NVIDIA H200", "GPU-aaaa"),
        (1, "1", "NVIDIA H200", "GPU-bbbb"),
    ]
    amd = _from_amd_smi("GPU: 0\n    BDF: 0000:05:00.0\n    UUID: abc\nGPU: 1\n    UUID: def\n")
    assert [(g.ident, g.uuid) for g in amd] == [("0", "abc"), ("1", "def")]


def test_configure_pinning_sets_env_before_torch() -> None:
    env = {"PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert pytest_configure_pinning(None, environ=env) == 1
    assert env["CUDA_VISIBLE_DEVICES"] == "1"
    assert env["HIP_VISIBLE_DEVICES"] == "1"
    assert env["TETHER_GPU_INDEX"] == "1"
    untouched = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert pytest_configure_pinning(None, environ=untouched) is None
    assert untouched == {"CUDA_VISIBLE_DEVICES": "0,1"}


def test_gpu_lock_is_exclusive_and_kept(tmp_path: Path) -> None:
    host_lock = tmp_path / "tether.lock"
    assert gpu_lock_path(host_lock, 1) == tmp_path / "tether.lock.gpu1"
    with hold_gpu_lock(host_lock, 1, holder="gw1") as path:
        holder = path.with_name(path.name + ".holder.json").read_text(encoding="utf-8")
        assert "gpu 1 gw1" in holder
        # flock locks are per open file description: a second open in this process conflicts.
        with pytest.raises(HostBusyError, match="GPU 1"), hold_gpu_lock(host_lock, 1):
            pass
        with hold_gpu_lock(host_lock, 0):  # another GPU is independent
            pass
    assert path.exists()  # never deleted: a deleted lock lets two holders lock two inodes
    with hold_gpu_lock(host_lock, 1):
        pass


def test_gpu_lock_refuses_symlink(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.touch()
    os.symlink(target, tmp_path / "tether.lock.gpu0")
    with pytest.raises(GuardError, match="symlink"), hold_gpu_lock(tmp_path / "tether.lock", 0):
        pass


@pytest.mark.gpu(reason="checks the xdist worker's pinning on real GPUs")
def test_worker_sees_only_its_gpu(record_property: pytest.RecordProperty) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        pytest.skip("not under xdist (one GPU or -n 0): no worker is pinned")
    import torch

    index = os.environ["TETHER_GPU_INDEX"]
    record_property("gpu", f"{worker} -> gpu {index}: {torch.cuda.get_device_name(0)}")
    assert len(os.environ["CUDA_VISIBLE_DEVICES"].split(",")) == 1
    assert torch.cuda.device_count() == 1
