"""The CLI answers `--help`, `--version` and every verb's `--help` under the base install
(jinja2 alone): what the measuring verbs need (pytest, rich, torch, triton, numpy, matplotlib)
is imported inside their handlers, not when the parser is built.

The base install is simulated, offline, in a subprocess whose PYTHONPATH holds a
``sitecustomize`` that makes those modules unimportable; the blocker is itself checked to
block, so the test cannot pass by blocking nothing. The real light install, from a fresh venv,
is test_light_install's."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tether.cli import build_parser

TETHER = Path(sys.executable).parent / "tether"
# Not in tether's base dependencies (pyproject.toml [project] dependencies): jinja2 only.
ABSENT = ("pytest", "_pytest", "rich", "torch", "triton", "numpy", "matplotlib", "pynvml")
BLOCKER = f"""\
import sys

ABSENT = {ABSENT!r}


class _Absent:
    # A meta-path finder asked before the real ones: these modules do not exist here.
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Absent())
"""


def _verbs(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[list[str]]:
    """Every verb path of the full parser (``["store", "ls"]`` among them)."""
    found: list[list[str]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append([*path, name])
                found += _verbs(sub, (*path, name))
    return found


@pytest.fixture
def base_env(tmp_path: Path) -> dict[str, str]:
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("TETHER_ROOT", "PYTHONPATH")}
    env["PYTHONPATH"] = str(blocker)
    return env


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_blocker_blocks(base_env: dict[str, str], tmp_path: Path) -> None:
    probe = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\n"
    for name in ("pytest", "rich", "torch"):
        done = _run([sys.executable, "-c", probe, name], base_env, tmp_path)
        assert done.returncode == 1 and f"No module named '{name}'" in done.stderr, done.stderr
    assert _run([sys.executable, "-c", probe, "jinja2"], base_env, tmp_path).returncode == 0


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        pytest.param(["--version"], "tether ", id="version"),
        pytest.param(["-V"], "tether ", id="version-short"),
        pytest.param(["--help"], "Verbs (", id="help"),
    ],
)
def test_help_and_version_under_the_base_install(
    base_env: dict[str, str], tmp_path: Path, argv: list[str], says: str
) -> None:
    """Through the console script, as a user types it, outside any project."""
    done = _run([str(TETHER), *argv], base_env, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert says in done.stdout, done.stdout


def test_every_verbs_help_under_the_base_install(base_env: dict[str, str], tmp_path: Path) -> None:
    """Each verb's help, built as a call names it (only that verb's module imported), all in
    one interpreter: a blocked module cannot be imported by any of them, whatever the order."""
    verbs = _verbs(build_parser())
    assert ["sweep"] in verbs and ["verify"] in verbs and ["store", "ls"] in verbs
    probe = (
        "import contextlib, io, json, sys\n"
        "from tether.cli import main\n"
        "codes = {}\n"
        "for verb in json.loads(sys.argv[1]):\n"
        "    out, err = io.StringIO(), io.StringIO()\n"
        "    with contextlib.redirect_stdout(out):  # argparse prints help to sys.stdout\n"
        "        code = main([*verb, '--help'], out, err)\n"
        "    codes[' '.join(verb)] = [code, err.getvalue()]\n"
        "print(json.dumps(codes))\n"
    )
    done = _run([sys.executable, "-c", probe, json.dumps(verbs)], base_env, tmp_path)
    assert done.returncode == 0, done.stderr
    codes = json.loads(done.stdout)
    failed = {verb: err for verb, (code, err) in codes.items() if code != 0}
    assert not failed, failed
    assert len(codes) == len(verbs)
