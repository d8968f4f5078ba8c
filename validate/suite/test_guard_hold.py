"""`tether guard --hold`, `tether verify` and the bench API, run in-process against tmp stores;
a refusal, or a verify with no GPU, records in the scratch store, not the committed one.

Stores, lock files and the tiny pytest suites verify runs are fixtures built in tmp_path.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from tether import verify
from tether.cli import main
from tether.errors import RunFileError
from tether.guard import api, probes
from tether.guard.lock import HostLock
from tether.guard.probes import BUSY, IDLE, ProbeResult
from tether.store import load_store

from validate.suite.fixture_project import run_cli

ROOT = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).resolve().parent / "fake_smi"


pytestmark = pytest.mark.usefixtures("private_guard")


def _cli(*argv: str, store: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = main(["--root", str(ROOT), "--store", str(store), *argv], out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def test_hold_runs_the_command_and_returns_its_status(tmp_path: Path) -> None:
    rc, _out, err = _cli(
        "guard", "--hold", "--target", "cpu", "--", "sh", "-c", "exit 3", store=tmp_path / "s"
    )
    assert rc == 3
    assert "guard: before: idle" in err and "guard: after:" in err
    assert not (tmp_path / "s").exists(), "a command that ran must not write a not_measured run"


def test_busy_host_exits_75_with_a_not_measured_record(tmp_path: Path) -> None:
    holder = HostLock(tmp_path / "gpu.lock")
    assert holder.try_acquire("someone else's sweep")
    try:
        rc, _out, err = _cli(
            "guard",
            "--hold",
            "--wait",
            "0.3",
            "--target",
            "cpu",
            "--",
            "true",
            store=tmp_path / "s",
        )
    finally:
        holder.release()
    assert rc == 75, err
    assert f"pid {os.getpid()}" in err
    (run,) = load_store(tmp_path / "s")
    assert (run.kind, run.name, run.status) == ("verify", "guard-hold", "not_measured")
    assert f"pid {os.getpid()}" in (run.reason or "") and "since" in (run.reason or "")
    assert run.guard.mode == "refused" and run.guard.before["lock"]["state"] == "held"


def test_not_idle_host_exits_75_naming_the_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_GUARD_LOAD_LIMIT", "-1")  # any load is too much: host busy
    rc, _out, err = _cli(
        "guard", "--hold", "--wait", "0.2", "--target", "cpu", "--", "true", store=tmp_path / "s"
    )
    assert rc == 75 and "loadavg busy" in err
    (run,) = load_store(tmp_path / "s")
    assert run.status == "not_measured" and "loadavg" in (run.reason or "")
    assert HostLock(tmp_path / "gpu.lock").try_acquire(), (
        "the lock must be released after giving up"
    )


def test_status_shows_lock_and_probes(tmp_path: Path) -> None:
    rc, out, _err = _cli("guard", "--target", "cpu", "status", store=tmp_path / "s")
    assert rc == 0
    assert "gpu.lock: free" in out and "loadavg: idle" in out


def test_arm_check_flags_a_foreign_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TETHER_GUARD_NVML", "0")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    (tmp_path / "bin").mkdir()
    shutil.copy2(FAKE / "nvidia-smi", tmp_path / "bin" / "nvidia-smi")
    monkeypatch.setattr(
        probes, "probe_device_holders", lambda: ProbeResult("device-holders", IDLE, {})
    )
    monkeypatch.setenv("FAKE_NVIDIA_SMI", "idle")
    with api.acquire(target="cuda", purpose="test") as held:
        with held.arm("A") as a:
            pass
        with held.arm("B") as b:
            monkeypatch.setenv("FAKE_NVIDIA_SMI", "busy")  # someone started a job mid-arm
        monkeypatch.setenv("FAKE_NVIDIA_SMI", "idle")
        held.recheck(full=False)
        ev = held.evidence()
    assert not a.contaminated
    assert b.contaminated and b.new_pids == [1] and b.after["verdict"] == BUSY
    assert ev["nested"] is False and [x["label"] for x in ev["arms"]] == ["A", "B"]
    assert ev["before"]["verdict"] == IDLE and ev["holder"]["purpose"] == "test"


def test_wrong_vendor_is_not_run_here_and_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing ran: exit 77 (not run here), with a not_measured run saying why in the store
    # given (without --store it goes to the scratch store, validate/suite/test_compile_runs.py).
    monkeypatch.setattr(verify, "detect_vendor", lambda: "cuda")
    rc, out, err = _cli("verify", "--vendor", "rocm", store=tmp_path / "s")
    assert rc == 77 and "verify --vendor rocm" in err and "cuda GPU" in err
    assert "[verify-rocm] NOT MEASURED" in out
    monkeypatch.setattr(verify, "detect_vendor", lambda: "cpu")
    rc, _out, err = _cli("verify", "--vendor", "cuda", store=tmp_path / "s")
    assert rc == 77 and "no GPU" in err
    runs = load_store(tmp_path / "s")
    assert sorted(r.name for r in runs) == ["verify-cuda", "verify-rocm"]
    assert all(r.status == "not_measured" and r.reason for r in runs)


# FIXTURE: the junit xml pytest writes for 3 passed, 1 failed, 1 skipped, 1 error
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest"
 errors="1" failures="1" skipped="1" tests="6" time="0.1"></testsuite></testsuites>"""


def test_parse_junit(tmp_path: Path) -> None:
    (tmp_path / "j.xml").write_text(JUNIT)
    c = verify.parse_junit(tmp_path / "j.xml")
    assert (c.passed, c.failed, c.skipped, c.errors) == (3, 1, 1, 1)
    (tmp_path / "bad.xml").write_text("<testsuites")
    with pytest.raises(RunFileError, match=r"bad\.xml: junitxml"):
        verify.parse_junit(tmp_path / "bad.xml")


def _suite(tmp_path: Path, body: str) -> Path:
    suite = tmp_path / "tiny_suite"
    suite.mkdir()
    (suite / "test_tiny.py").write_text(textwrap.dedent(body))
    return suite


@pytest.mark.parametrize(
    ("body", "rc", "last", "status"),
    [
        pytest.param(
            """
            import pytest
            def test_a(): pass
            def test_b(): pass
            @pytest.mark.skip(reason="fixture skip")
            def test_c(): pass
            """,
            0,
            "[verify-cpu] OK",
            "ok",
            id="passing",
        ),
        pytest.param(
            "def test_a(): assert False\n", 1, "[verify-cpu] FAILED", "rejected", id="failing"
        ),
        pytest.param(
            "import pytest\n@pytest.mark.skip(reason='fixture')\ndef test_a(): pass\n",
            1,
            "[verify-cpu] FAILED",
            "rejected",
            id="nothing-passed",
        ),
    ],
)
def test_verify_records_the_suite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, rc: int, last: str, status: str
) -> None:
    monkeypatch.setattr(verify, "detect_vendor", lambda: "cpu")
    suite = _suite(tmp_path, body)
    got, out, err = _cli("verify", "--suite", str(suite), "--", "-x", store=tmp_path / "s")
    assert got == rc, out + err
    assert out.strip().splitlines()[-1] == last
    (run,) = load_store(tmp_path / "s")
    assert (run.kind, run.name, run.status) == ("verify", "verify-cpu", status)
    assert run.results["vendor"] == "cpu" and run.results["suite"] == str(suite)
    assert run.guard.mode == "held" and run.guard.before["verdict"] == IDLE
    assert run.results["complete"] is (run.results["suite"] == "validate")
    assert run.provenance.ended >= run.started
    if status == "ok":
        assert (run.results["passed"], run.results["skipped"], run.results["failed"]) == (2, 1, 0)


def test_own_load_does_not_contaminate_a_cpu_arm(monkeypatch: pytest.MonkeyPatch) -> None:
    with api.acquire(target="cpu") as held:
        monkeypatch.setenv("TETHER_GUARD_LOAD_LIMIT", "-1")  # the arm's own work raised the load
        with held.arm("A") as a:
            pass
    assert not a.contaminated and a.after["verdict"] == BUSY


# -- a refusal is not evidence: it goes to the scratch store -----------------------------------


def test_refused_hold_records_in_scratch_not_the_committed_store(
    project: Path, tmp_path: Path, lock_holder: subprocess.Popen[bytes]
) -> None:
    argv = ("guard", "--hold", "--wait", "0.2", "--target", "cpu", "--", "true")
    rc, _, err = run_cli(project, *argv)
    assert rc == 75, err
    assert not (project / "results").exists(), "a refusal must not write the committed store"
    runs = list((project / "scratch" / "results").rglob("*.json"))
    assert len(runs) == 1 and str(runs[0]) in err
    rc, _, _ = run_cli(project, "--store", str(tmp_path / "mine"), *argv)
    assert rc == 75 and len(list((tmp_path / "mine").rglob("*.json"))) == 1
    assert not (project / "results").exists()


def test_verify_on_a_host_without_gpu_records_in_scratch(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether import verify

    monkeypatch.setattr(verify, "detect_vendor", lambda: "cpu")
    suite = tmp_path / "tiny_suite"
    suite.mkdir()
    (suite / "test_tiny.py").write_text("def test_a():\n    pass\n", encoding="utf-8")
    rc, out, err = run_cli(project, "verify", "--suite", str(suite))
    assert rc == 0, out + err
    assert not (project / "results").exists()
    assert len(list((project / "scratch" / "results").rglob("*.json"))) == 1
    assert "no GPU on this host" in err


@pytest.mark.parametrize(
    "signum",
    [
        pytest.param(signal.SIGINT, id="SIGINT"),
        pytest.param(signal.SIGTERM, id="SIGTERM"),
        pytest.param(signal.SIGHUP, id="SIGHUP"),
    ],
)
def test_hold_forwards_each_stop_signal_to_its_command(
    tmp_path: Path, guard_env: dict[str, str], signum: int
) -> None:
    # The command traps the signal and exits 7 only if it arrived: a guard that does not
    # forward it (SIGHUP was not) dies of it itself, and its command never hears of it.
    ready = tmp_path / "ready"
    script = f"trap 'exit 7' {signal.Signals(signum).name[3:]}; touch {ready}; sleep 30 & wait"
    guard = subprocess.Popen(
        [sys.executable, "-m", "tether", "--root", str(ROOT), "--store", str(tmp_path / "s"),
         "guard", "--hold", "--target", "cpu", "--", "sh", "-c", script],
        env=guard_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert guard.poll() is None and time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)
    guard.send_signal(signum)
    _, err = guard.communicate(timeout=60)
    assert guard.returncode == 7, err.decode()


def test_a_stop_signal_right_after_the_command_starts_still_reaches_it(
    private_guard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The signal lands as the command starts, before run_held's next line: the guard must
    # keep it and forward it (a loaded CI host sent SIGHUP there, and the command, never told,
    # ran to its end with status 0). The test's own SIGHUP handler stands in for whatever the
    # process had before, so a guard that misses the signal fails here instead of dying.
    from tether.guard import hold

    real_popen = subprocess.Popen

    def popen_then_signal(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        child = real_popen(*args, **kwargs)  # type: ignore[call-overload]
        time.sleep(0.5)  # the child's trap is set by now
        os.kill(os.getpid(), signal.SIGHUP)
        return child

    monkeypatch.setattr(hold.subprocess, "Popen", popen_then_signal)
    previous = signal.signal(signal.SIGHUP, lambda *_: None)
    try:
        rc, _ = hold.run_held(
            ["sh", "-c", "trap 'exit 7' HUP; sleep 5 & wait"],
            target="cpu",
            lock_path=private_guard,
            err=io.StringIO(),
        )
    finally:
        signal.signal(signal.SIGHUP, previous)
    assert rc == 7
