"""The README's two commands are honest: `make setup test` on a fresh clone runs the suite the
way a second `make test` does. NO_GPU (whether tests run in the Triton interpreter) must be
decided when the test recipe runs, after setup made .venv, not when make starts.

The FIXTURE folder holds the real Makefile, a test that records the environment it ran in, and
a stand-in ci/setup.sh that makes .venv/bin/python (a launcher of this interpreter) the way the
real one makes the venv: absent before `setup`, present after.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tether.pytest_plugin import has_gpu

REPO = Path(__file__).resolve().parents[2]

SETUP = f"""\
#!/usr/bin/env bash
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .venv/bin
printf '#!/bin/sh\\nexec {sys.executable} "$@"\\n' > .venv/bin/python
chmod +x .venv/bin/python
"""

RECORD = """\
import os
from pathlib import Path

def test_record_the_environment():
    Path(os.environ["FIXTURE_RECORD"]).write_text(os.environ.get("TRITON_INTERPRET", "unset"))
"""


def _make(folder: Path, *targets: str, record: Path) -> str:
    if shutil.which("make") is None:
        pytest.fail("make is needed to test the Makefile and is not on PATH")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "MAKEFLAGS")}
    env.update(FIXTURE_RECORD=str(record), JOBS="1")
    done = subprocess.run(
        ["make", "--no-print-directory", *targets], cwd=folder, env=env, capture_output=True,
        text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return record.read_text(encoding="utf-8")


def test_setup_then_test_in_one_make_decides_no_gpu_after_setup(tmp_path: Path) -> None:
    shutil.copy2(REPO / "Makefile", tmp_path / "Makefile")
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "setup.sh").write_text(SETUP, encoding="utf-8")
    (tmp_path / "test_record.py").write_text(RECORD, encoding="utf-8")
    assert not (tmp_path / ".venv").exists()  # a fresh clone
    first = _make(tmp_path, "setup", "test", record=tmp_path / "first.txt")
    second = _make(tmp_path, "test", record=tmp_path / "second.txt")
    assert first == second
    assert first == ("unset" if has_gpu() else "1")
