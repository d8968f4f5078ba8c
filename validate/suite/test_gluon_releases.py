"""The Triton releases the Gluon arm is declared for, and what an install outside them gets
(issue 45): a refusal naming the releases, a warning once at import, and an install that
cannot pick an untested release.

Pure: reads versions and pyproject.toml; no kernel is compiled here (test_gluon.py's compile
gate does that under the installed release, validate/tools/compile_releases.sh under the rest).
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from tether_kernels.gluon import UntestedTritonWarning, launch
from tether_kernels.gluon.launch import GLUON_TRITON

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("version", ["3.6.0", "3.7.1", "3.8.0", "3.9.0", "3.9.1+git1234"])
def test_every_declared_release_is_served(version: str) -> None:
    assert launch.gluon_triton_reason(version) is None


@pytest.mark.parametrize("version", ["3.5.1", "3.10.0", "4.0.0", "3.60.0"])
def test_a_release_outside_them_is_refused_naming_the_range(version: str) -> None:
    why = launch.gluon_triton_reason(version)
    assert why is not None
    assert f"Triton {GLUON_TRITON[0]} to {GLUON_TRITON[-1]}" in why and version in why


def test_the_installed_release_loses_the_arm_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(launch.metadata, "version", lambda name: "3.10.0")
    with pytest.warns(UntestedTritonWarning, match=r"'gluon'.*3\.10\.0.*triton>=3\.6,<3\.10"):
        launch.warn_untested_triton()
    monkeypatch.setattr(launch.metadata, "version", lambda name: "3.7.1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        launch.warn_untested_triton()  # a declared release: silent


def test_the_package_warns_once_at_import_under_an_untested_release(tmp_path: Path) -> None:
    # A fake distribution of triton 3.10.0 before the real one on sys.path: metadata finds
    # it first, as it would an install of that release.
    dist = tmp_path / "triton-3.10.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: triton\nVersion: 3.10.0\n")
    code = (
        "import warnings, sys; warnings.simplefilter('always');"
        "sys.path.insert(0, sys.argv[1]);"
        "import tether_kernels"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert "UntestedTritonWarning" in res.stderr and "3.10.0" in res.stderr, res.stderr


def test_the_kernels_extra_bounds_triton_to_the_declared_releases() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]["kernels"]
    major, minor = GLUON_TRITON[-1].split(".")
    want = f"triton>={GLUON_TRITON[0]},<{major}.{int(minor) + 1}"
    assert want in extra, extra
    assert any(dep.startswith("numpy") and "<2.4" in dep for dep in extra), extra


def test_setup_installs_the_release_the_gpu_evidence_was_measured_under() -> None:
    # The H200's Triton (3.6, the release the timed runs record) on hosts whose torch is the
    # CPU build; the declared releases' first.
    setup = (ROOT / "ci" / "setup.sh").read_text()
    assert f"triton=={GLUON_TRITON[0]}.*" in setup


def test_the_installed_triton_is_a_declared_release() -> None:
    # What make setup installed here: the suite's own compile gate ran under a declared release.
    assert launch.gluon_triton_reason(metadata.version("triton")) is None
