"""A second outside layout adopts tether from a fresh venv (issue 46 item 3): a src/ layout
package whose README has CRLF line endings, with figures typed in its text before tether.

tether is installed into the venv as a user installs it, not editable: the README's one
command, with a local copy of this checkout in place of the repository's URL. To stay offline
and quick the install takes no dependencies and no build isolation, and the venv borrows the
suite's installed packages (torch, jinja2, setuptools) through a path entry. Then, in the
package's git repository, its maintainer's steps through that venv's console script: `tether
init`, `git add -A` and `tether check` (the first check passes, the typed figures baselined),
one arm pointed at the package's own function, `tether sweep` on the CPU, `tether render`,
`tether check` again, and a hand edit of a rendered number, which the check catches.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from validate.suite.adopting import git_repo, run_tether, stage, tether_ok
from validate.suite.test_readme_markdown import install_command

ROOT = Path(__file__).resolve().parents[2]
# The venv's own view: a PYTHONPATH (the GPU host's session exports the checkout's lib/ and
# kernels/ on it) would import this checkout's tether in place of the installed one, so the
# test would judge the checkout, not what the user's one command installed.
VENV_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}

PYPROJECT = b"""\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "fast-ops"
version = "0.1.0"

[tool.setuptools.packages.find]
where = ["src"]
"""
PACKAGE = b'''\
"""fast_ops: a fused scale for torch tensors (1.6x the eager ops when it was written)."""


def twice(x):
    return x * 2.0
'''
# FIXTURE text written before tether: CRLF, a figure in the prose, a section after it.
README = (
    b"# fast-ops\r\n\r\nA fused scale for torch tensors.\r\n\r\n## Performance\r\n\r\n"
    b"The fused scale runs at 1.8x the speed of the eager ops, about 410 GB/s.\r\n\r\n"
    b"## License\r\n\r\nMIT\r\n"
)
NOTES = b"# Performance notes\n\n- 12.5 TFLOP/s on the long rows, before the rewrite\n"
FILES = {
    "pyproject.toml": PYPROJECT,
    ".gitignore": b"build/\n*.egg-info/\n",
    "src/fast_ops/__init__.py": PACKAGE,
    "README.md": README,
    "docs/perf.md": NOTES,
}


def _tether_sources(dest: Path) -> Path:
    """What this checkout's pyproject.toml builds, copied, so the build writes its build/ and
    egg-info folders there and never into the checkout (other tests read it meanwhile)."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("lib", "kernels"):
        shutil.copytree(ROOT / name, dest / name, ignore=skip)
    return dest


def _fresh_venv(path: Path) -> Path:
    """A new venv with no packages of its own; returns its python. The suite's packages are
    lent through a path entry (a .pth line): it adds the folder to sys.path but runs none of
    the .pth files inside it, so the suite's editable tether (a .pth finder) stays unseen."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120
    )
    python = path / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60, env=VENV_ENV,
    ).stdout.strip()  # fmt: skip
    lent = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    (Path(site) / "suite-packages.pth").write_text("\n".join(lent) + "\n", encoding="utf-8")
    return python


def _pip(python: Path, *argv: str) -> None:
    done = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps",
         "--no-build-isolation", *argv],
        capture_output=True, text=True, timeout=600, check=False, env=VENV_ENV,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def _region(text: bytes) -> tuple[bytes, bytes, bytes]:
    """(before, the region's lines, after) of the README's results region."""
    begin = b"<!-- BEGIN GENERATED: results (tether render) -->\r\n"
    end = b"<!-- END GENERATED: results -->\r\n"
    before, _, rest = text.partition(begin)
    inside, _, after = rest.partition(end)
    return before, inside, after


@pytest.mark.slow
def test_a_src_layout_package_adopts_tether_from_a_fresh_venv(tmp_path: Path) -> None:
    python = _fresh_venv(tmp_path / "venv")
    (command,) = install_command((ROOT / "README.md").read_text(encoding="utf-8"))
    requirement = command.removeprefix("pip install ").strip('"')
    name, _, _url = requirement.partition(" @ ")
    assert name == "tether[kernels]", command
    _pip(python, f"{name} @ {_tether_sources(tmp_path / 'tether-src').as_uri()}")
    repo = git_repo(tmp_path / "fast-ops", FILES)
    _pip(python, "-e", str(repo))  # the maintainer's own package, as they develop it
    where = subprocess.run(
        [str(python), "-c", "import fast_ops, tether; print(tether.__file__)"],
        capture_output=True, text=True, check=True, timeout=60, cwd=tmp_path, env=VENV_ENV,
    ).stdout.strip()  # fmt: skip
    assert Path(where).is_relative_to(tmp_path / "venv"), where  # installed, not the checkout
    tether = python.parent / "tether"

    out = tether_ok(repo, "init", tether=tether)
    (said,) = [ln for ln in out.splitlines() if "tether-scan-baseline.json" in ln]
    assert said.startswith("wrote tether-scan-baseline.json: "), out
    baseline = json.loads((repo / "tether-scan-baseline.json").read_text(encoding="utf-8"))
    assert {e["path"] for e in baseline["findings"]} == {
        "README.md",
        "docs/perf.md",
        "src/fast_ops/__init__.py",
    }
    stage(repo)
    assert "tether check: clean" in tether_ok(repo, "check", tether=tether)  # the first check

    # The maintainer times the package's function as the example's B arm (one line), from
    # the plugin init wrote at the root, importing the installed src/ package.
    plugin = repo / "tether_bench.py"
    text = plugin.read_text(encoding="utf-8")
    arm = 'registry.arm(TorchArm("example_add", lambda x: x + x))'
    assert arm in text
    plugin.write_text(
        text.replace(arm, 'registry.arm(TorchArm("example_add", fast_ops.twice))').replace(
            "from tether import registry\n", "import fast_ops\nfrom tether import registry\n"
        ),
        encoding="utf-8",
    )
    assert "guard held" in tether_ok(repo, "sweep", "example", "--no-progress", tether=tether)
    tether_ok(repo, "render", tether=tether)
    rendered = (repo / "README.md").read_bytes()
    before, inside, after = _region(rendered)
    assert before == README + b"\r\n" and after == b"", rendered  # every other byte kept
    assert b"\n" not in rendered.replace(b"\r\n", b"")  # CRLF throughout, the region too
    assert b"sweep `example`: `example\\_add` against `example\\_mul`" in inside, inside
    stage(repo)
    assert "tether check: clean" in tether_ok(repo, "check", tether=tether)

    # A hand edit of a measured number inside the region is drift.
    row = next(ln for ln in inside.split(b"\r\n") if re.match(rb"\| \d+ \| \d", ln))
    cells = row.split(b" | ")
    digit = cells[1][-1:]
    cells[1] = cells[1][:-1] + (b"1" if digit != b"1" else b"2")
    (repo / "README.md").write_bytes(rendered.replace(row, b" | ".join(cells)))
    stage(repo)
    drift = run_tether(repo, "check", tether=tether)
    assert drift.returncode == 1, drift.stdout + drift.stderr
    assert "README.md" in drift.stdout and "tether render" in drift.stdout + drift.stderr
