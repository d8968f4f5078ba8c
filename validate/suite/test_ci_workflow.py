"""The nightly workflow: linted against GitHub's schema (offline) and checked for its structure."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "nightly-hardware.yml"
ARCHES = {"gfx942", "gfx950", "gfx1151", "sm90"}


def _linter() -> list[str]:
    exe = Path(sys.executable).parent / "check-jsonschema"
    found = str(exe) if exe.exists() else shutil.which("check-jsonschema")
    assert found is not None, "check-jsonschema missing although the devtool mark let it run"
    return [found, "--builtin-schema", "vendor.github-workflows"]


def _load() -> dict[Any, Any]:
    return yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))


@pytest.mark.devtool("check-jsonschema")
def test_workflow_passes_the_schema_linter() -> None:
    done = subprocess.run(
        [*_linter(), str(WORKFLOW)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.devtool("check-jsonschema")
def test_linter_catches_a_broken_workflow(tmp_path: Path) -> None:
    # FIXTURE: the real workflow with a misspelt key, so the linter is shown able to fail.
    broken = tmp_path / "broken.yml"
    broken.write_text(
        WORKFLOW.read_text(encoding="utf-8").replace("runs-on: ${{ matrix.runner }}", "run-on: x"),
        encoding="utf-8",
    )
    done = subprocess.run(
        [*_linter(), str(broken)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode != 0


def test_triggers_and_concurrency() -> None:
    wf = _load()
    on = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` key as true
    assert "schedule" in on and on["schedule"][0]["cron"]
    assert "workflow_dispatch" in on
    # Reusable by an adopting repository, with the same input as a manual dispatch.
    assert on["workflow_call"]["inputs"]["sweeps"]["type"] == "string"
    assert wf["concurrency"] == {"group": "nightly-hardware", "cancel-in-progress": False}


def test_host_matrix_covers_every_arch_on_self_hosted_runners() -> None:
    host = _load()["jobs"]["host"]
    include = host["strategy"]["matrix"]["include"]
    assert {row["arch"] for row in include} == ARCHES
    for row in include:
        assert "self-hosted" in row["runner"] and row["arch"] in row["runner"]
    assert host["strategy"]["fail-fast"] is False
    runs = " ".join(step.get("run", "") for step in host["steps"])
    assert "ci/nightly-host.sh" in runs
    uploads = [
        s for s in host["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact")
    ]
    assert uploads and all(s.get("if") == "always()" for s in uploads)


def test_collect_job_runs_after_every_host_and_calls_ci_scripts() -> None:
    jobs = _load()["jobs"]
    collect = jobs["collect"]
    assert collect["needs"] == ["host"] and collect["if"] == "always()"
    runs = [step["run"] for step in collect["steps"] if "run" in step]
    assert any("ci/collect.sh" in r for r in runs)
    assert any("ci/open-pr.sh" in r for r in runs)
    for script in ("nightly-host.sh", "collect.sh", "open-pr.sh"):
        assert (ROOT / "ci" / script).is_file()
    downloads = [s for s in collect["steps"] if "download-artifact" in str(s.get("uses", ""))]
    assert downloads and downloads[0]["with"]["pattern"] == "runs-*"


@pytest.mark.parametrize("script", ["nightly-host.sh", "collect.sh", "open-pr.sh"])
def test_shell_scripts_parse(script: str) -> None:
    done = subprocess.run(
        ["bash", "-n", str(ROOT / "ci" / script)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
