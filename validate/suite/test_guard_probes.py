"""Probes against stand-in nvidia-smi / amd-smi / rocm-smi (validate/suite/fake_smi, fixtures).

The stand-ins print the tools' documented output formats; each case checks the probe state
and the overall verdict, and that no unknown answer is ever turned into idle.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from tether.guard import idle, probes
from tether.guard.probes import BUSY, IDLE, UNKNOWN, ProbeResult

FAKE = Path(__file__).resolve().parent / "fake_smi"


@pytest.fixture
def tools(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Put only the named stand-in tools on PATH (others are then missing)."""

    def install(*names: str) -> None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        for n in names:
            shutil.copy2(FAKE / n, bin_dir / n)
        monkeypatch.setenv("PATH", str(bin_dir))

    monkeypatch.setenv("TETHER_GUARD_PROBE_TIMEOUT", "0.5")
    monkeypatch.setenv("TETHER_GUARD_NVML", "0")  # a real driver on a GPU host must not answer
    # device-node holders see the real host (sibling xdist workers on a GPU box): fixed idle here
    monkeypatch.setattr(
        probes,
        "probe_device_holders",
        lambda: ProbeResult("device-holders", IDLE, {"note": "fixture"}),
    )
    return install


NVIDIA_CASES = [
    pytest.param("idle", IDLE, IDLE, id="idle"),
    pytest.param("busy", BUSY, BUSY, id="busy"),
    pytest.param("mine", IDLE, IDLE, id="own-process-not-foreign"),
    pytest.param("header", UNKNOWN, UNKNOWN, id="header-only"),
    pytest.param("na", UNKNOWN, UNKNOWN, id="n-a"),
    pytest.param("garbage", UNKNOWN, UNKNOWN, id="garbage"),
    pytest.param("hang", UNKNOWN, UNKNOWN, id="hang"),
    pytest.param("fail", UNKNOWN, UNKNOWN, id="nonzero-exit"),
]


@pytest.mark.parametrize(("mode", "probe_state", "verdict"), NVIDIA_CASES)
def test_nvidia_smi(
    tools, monkeypatch: pytest.MonkeyPatch, mode: str, probe_state: str, verdict: str
) -> None:
    tools("nvidia-smi")
    monkeypatch.setenv("FAKE_NVIDIA_SMI", mode)
    monkeypatch.setenv("FAKE_SMI_PID", str(os.getpid()) if mode == "mine" else "1")
    result = probes.probe_nvidia_smi()
    assert result.state == probe_state, result.evidence
    assert {"command", "rc", "raw", "note"} <= set(result.evidence)
    snap = idle.snapshot("cuda", busy_interval_s=0.01)
    assert snap.verdict == verdict, snap.as_dict()


def test_hang_is_cut_at_the_timeout(tools, monkeypatch: pytest.MonkeyPatch) -> None:
    tools("nvidia-smi")
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "hang")
    result = probes.probe_nvidia_smi()
    assert result.state == UNKNOWN and "timed out" in result.evidence["note"]


def test_missing_tools_are_unknown(tools) -> None:
    tools()
    for fn in (probes.probe_nvidia_smi, probes.probe_amd_smi, probes.probe_rocm_smi):
        r = fn()
        assert r.state == UNKNOWN and "not installed" in r.evidence["note"]
    assert idle.snapshot("cuda").verdict == UNKNOWN
    assert idle.snapshot("rocm").verdict == UNKNOWN


AMD_CASES = [
    pytest.param("idle", IDLE, id="list-idle"),
    pytest.param("idle-gpudata", IDLE, id="gpu-data-idle"),
    pytest.param("busy", BUSY, id="list-busy"),
    pytest.param("busy-gpudata", BUSY, id="gpu-data-busy"),
    pytest.param("mine", IDLE, id="own-process-not-foreign"),
    pytest.param("header", UNKNOWN, id="no-gpus"),
    pytest.param("na", UNKNOWN, id="n-a"),
    pytest.param("garbage", UNKNOWN, id="garbage"),
    pytest.param("hang", UNKNOWN, id="hang"),
    pytest.param("fail", UNKNOWN, id="nonzero-exit"),
]


@pytest.mark.parametrize(("mode", "state"), AMD_CASES)
def test_amd_smi(tools, monkeypatch: pytest.MonkeyPatch, mode: str, state: str) -> None:
    tools("amd-smi")
    monkeypatch.setenv("FAKE_AMD_SMI", mode)
    monkeypatch.setenv("FAKE_SMI_PID", str(os.getpid()) if mode == "mine" else "1")
    r = probes.probe_amd_smi()
    assert r.state == state, r.evidence
    assert idle.snapshot("rocm", busy_interval_s=0.01).verdict == state


ROCM_CASES = [
    pytest.param("idle", IDLE, id="idle"),
    pytest.param("busy", BUSY, id="busy"),
    pytest.param("mine", IDLE, id="own-process-not-foreign"),
    pytest.param("header", UNKNOWN, id="header-only"),
    pytest.param("na", UNKNOWN, id="n-a"),
    pytest.param("garbage", UNKNOWN, id="garbage"),
    pytest.param("fail", UNKNOWN, id="nonzero-exit"),
]


@pytest.mark.parametrize(("mode", "state"), ROCM_CASES)
def test_rocm_smi(tools, monkeypatch: pytest.MonkeyPatch, mode: str, state: str) -> None:
    tools("rocm-smi")
    monkeypatch.setenv("FAKE_ROCM_SMI", mode)
    monkeypatch.setenv("FAKE_SMI_PID", str(os.getpid()) if mode == "mine" else "1")
    r = probes.probe_rocm_smi()
    assert r.state == state, r.evidence
    assert idle.snapshot("rocm", full=False).verdict == state


@pytest.mark.parametrize(
    ("amd", "rocm", "verdict"),
    [
        pytest.param("busy", "idle", BUSY, id="busy-wins-over-idle"),
        pytest.param("garbage", "idle", IDLE, id="one-of-the-pair-idle"),
        pytest.param("garbage", "header", UNKNOWN, id="both-unknown"),
        pytest.param("idle", "busy", BUSY, id="rocm-busy"),
    ],
)
def test_rocm_pair_verdict(
    tools, monkeypatch: pytest.MonkeyPatch, amd: str, rocm: str, verdict: str
) -> None:
    tools("amd-smi", "rocm-smi")
    monkeypatch.setenv("FAKE_AMD_SMI", amd)
    monkeypatch.setenv("FAKE_ROCM_SMI", rocm)
    assert idle.snapshot("rocm", full=False).verdict == verdict


def test_busy_percent_is_a_second_opinion(tools, monkeypatch: pytest.MonkeyPatch) -> None:
    tools("nvidia-smi")
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "idle")
    monkeypatch.setattr(
        probes, "run_tool", _util_override(probes.run_tool, "93\n")
    )  # processes idle, yet the GPU is busy: someone we cannot see
    snap = idle.snapshot("cuda", busy_interval_s=0.01)
    assert snap.verdict == BUSY and "busy-percent" in snap.reason()


def _util_override(real, text: str):
    def run(cmd: list[str], timeout: float | None = None):
        if any("utilization.gpu" in c for c in cmd):
            return text, {"command": cmd, "rc": 0, "raw": text, "note": ""}
        return real(cmd, timeout)

    return run


def test_device_holders_from_proc(tmp_path: Path) -> None:
    # FIXTURE: a fake /proc with one process holding /dev/kfd, one daemon, one unrelated fd
    for pid, name, target in (
        (999001, "python3", "/dev/kfd"),
        (999002, "nvidia-persistenced", "/dev/nvidia0"),
        (999003, "bash", "/dev/null"),
    ):
        fd = tmp_path / str(pid) / "fd"
        fd.mkdir(parents=True)
        (fd / "3").symlink_to(target)
        (tmp_path / str(pid) / "comm").write_text(name + "\n")
    r = probes.probe_device_holders(tmp_path)
    assert r.state == BUSY
    assert [f["pid"] for f in r.evidence["foreign"]] == [999001]
    (tmp_path / "999001" / "fd" / "3").unlink()
    assert probes.probe_device_holders(tmp_path).state == IDLE


def test_cpu_target_judges_by_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probes, "read_loadavg", lambda: (3.0, 1.0, 1.0))
    busy = idle.snapshot("cpu", load_limit=2.0)
    assert busy.verdict == BUSY
    assert {p.name: p.state for p in busy.probes}["gpu-processes"] == probes.NOT_APPLICABLE
    assert idle.snapshot("cpu", load_limit=4.0).verdict == IDLE
    monkeypatch.setattr(probes, "read_loadavg", lambda: None)
    assert idle.snapshot("cpu", load_limit=4.0).verdict == UNKNOWN


def test_a_nested_hold_does_not_read_its_outer_holders_work_as_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Two lanes under one outer hold: lane 1's sweep keeps GPU 1 at 100 % while lane 0's
    # verify takes its nested hold. The busy percent cannot say whose work that is, so a
    # nested hold does not sample it (the outer hold did); the process probes still decide.
    from tether.guard import idle
    from tether.guard import probes as P

    def idle_processes(vendor: str) -> list[P.ProbeResult]:
        return [P.ProbeResult("nvml", P.IDLE, {"note": "fixture: no foreign process"})]

    def busy(*args: object, **kwargs: object) -> P.ProbeResult:
        return P.ProbeResult("busy-percent", P.BUSY, {"note": "fixture: 100 % on GPU 1"})

    monkeypatch.setattr(idle, "process_probes", idle_processes)
    monkeypatch.setattr(P, "probe_busy_percent", busy)
    assert idle.snapshot("cuda").verdict == P.BUSY  # an outer hold still samples it
    snap = idle.snapshot("cuda", nested=True)
    assert snap.verdict == P.IDLE
    (pct,) = [p for p in snap.probes if p.name == "busy-percent"]
    assert pct.state == P.NOT_APPLICABLE and "nested" in pct.evidence["note"]
