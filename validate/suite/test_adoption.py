"""Adopting tether from outside, as a kernel repository's maintainer would, with no edit to
tether: through `tether init`, and by hand in a repository laid out its own way (a hand-written
CRLF README, a `benchmark/` folder that is not a package, its own pre-commit config).

Both run tether's console script (not `python -m tether`, whose working directory on sys.path
would hide a plugin import problem) in a FIXTURE git repository in tmp_path, measure on the CPU
under the guard into that repository's store, render, and check (validate/suite/adopting.py).
A src/ layout package adopting tether from a fresh venv is test_adoption_venv's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from validate.suite.adopting import TETHER, git_repo, run_tether, stage, tether_ok

OWN_HOOKS = b"""\
repos:
  - repo: local
    hooks:
      - id: no-tabs
        name: no tabs
        entry: "\\t"
        language: pygrep
"""


@pytest.mark.slow
def test_tether_init_then_sweep_render_check_work_unedited(tmp_path: Path) -> None:
    readme = b"# fixture-kernels\r\n\r\nA hand-written README with CRLF endings.\r\n"
    repo = git_repo(
        tmp_path / "repo",
        {
            "README.md": readme,
            "pyproject.toml": b'[project]\nname = "fixture-kernels"\nversion = "0"\n',
            ".pre-commit-config.yaml": OWN_HOOKS,
        },
    )
    out = tether_ok(repo, "init")
    assert "wrote tether_bench.py" in out and "wrote .pre-commit-config.yaml" in out
    assert "git add -A && tether check" in out  # the check judges the index: stage first
    # The first check, before any sweep, passes: init rendered its region from the empty store.
    stage(repo)
    assert "tether check: clean" in tether_ok(repo, "check")
    hooks = (repo / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    assert hooks.startswith(OWN_HOOKS.decode()) and "entry: tether check --quiet" in hooks
    import yaml

    assert [h["id"] for r in yaml.safe_load(hooks)["repos"] for h in r["hooks"]] == [
        "no-tabs",
        "tether-check",
    ]
    assert "guard held" in tether_ok(repo, "sweep", "example", "--no-progress")
    tether_ok(repo, "render")
    text = (repo / "README.md").read_bytes()
    assert text.startswith(readme) and b"\n" not in text.replace(b"\r\n", b"")
    assert b"| n |" in text and b"sweep `example`" in text
    stage(repo)
    assert "tether check: clean" in tether_ok(repo, "check")
    # A second init refuses rather than writing a second table.
    again = run_tether(repo, "init")
    assert again.returncode == 2 and "already has a [tool.tether] table" in again.stderr


# What the maintainer writes to adopt tether by hand: counted below, under 60 lines in all.
PYPROJECT = b"""\
[tool.tether]
templates = "benchmark/docs_src"
plugins = ["benchmark.tether_bench"]

[tool.tether.fingerprint]
harness = ["benchmark/tether_bench.py"]

[tool.tether.render.region_templates]
"README.md" = { results = "results.md.j2" }
"""
PLUGIN = b"""\
# The repository's softmax, as tether measures it: a case model, two arms, one sweep.
from dataclasses import dataclass

import torch
from tether import registry
from tether.bench.engine import TimingPolicy
from tether.registry import Sweep


@dataclass(frozen=True)
class Case:
    n: int
    work = property(lambda self: 8.0 * self.n)  # bytes moved: one f32 read, one write
    def fields(self):
        return {"n": self.n}
    def inputs(self, device, seed):
        return torch.randn(self.n, generator=torch.Generator(device).manual_seed(seed))
    def reach(self, arch):
        return {}


@dataclass(frozen=True)
class Arm:
    name: str
    fn: object
    allowed_kernels = ()
    def supports(self, case, arch):
        return None
    def prepare(self, case, x, arch):
        return lambda: self.fn(x)
    def kernels_on(self, arch):
        return ()


registry.case("softmax")(lambda fields: Case(int(fields["n"])))
registry.arm(Arm("torch_softmax", lambda x: torch.softmax(x, 0)))
registry.arm(Arm("exp_sum", lambda x: (x - x.max()).exp() / (x - x.max()).exp().sum()))
registry.sweep(Sweep(name="softmax", case="softmax", axes={"n": (16384, 2048)}, fixed={},
    arms={"A": "torch_softmax", "B": "exp_sum"}, unit="B", needs_gpu=False,
    timing=TimingPolicy(min_sample_s=1e-3, min_reps=6, max_reps=12, cell_cap_s=0.5)))
"""
TEMPLATE = b'{% include "tether/results.md.j2" %}\n'
REGION = b"<!-- BEGIN GENERATED: results (tether render) -->\r\n<!-- END GENERATED: results -->\r\n"
HOOK = b"""\
  - repo: local
    hooks:
      - id: tether-check
        name: tether check
        entry: tether check --quiet
        language: system
        pass_filenames: false
"""
README = (
    b"# softmax-kernels\r\n\r\nHand-written by the maintainer; contributors edit it directly.\r\n"
    b"\r\n## Results\r\n\r\n" + REGION + b"\r\n## License\r\n\r\nApache-2.0\r\n"
)


@pytest.mark.slow
@pytest.mark.devtool("pre-commit")  # the repository's own hooks run (under CI it must be there)
def test_an_outside_repository_reaches_a_rendered_region_in_its_own_readme(
    tmp_path: Path,
) -> None:
    written = [PYPROJECT, PLUGIN, TEMPLATE, REGION, HOOK]
    assert sum(part.count(b"\n") for part in written) < 60
    repo = git_repo(
        tmp_path / "softmax-kernels",
        {
            "README.md": README,
            "pyproject.toml": b'[project]\nname = "softmax-kernels"\nversion = "0"\n\n' + PYPROJECT,
            "benchmark/tether_bench.py": PLUGIN,  # benchmark/ has no __init__.py
            "benchmark/docs_src/results.md.j2": TEMPLATE,
            ".pre-commit-config.yaml": OWN_HOOKS + HOOK,
        },
    )
    assert not (repo / "benchmark" / "__init__.py").exists()
    assert "guard held" in tether_ok(repo, "sweep", "softmax", "--no-progress")
    tether_ok(repo, "render")
    text = (repo / "README.md").read_bytes()
    before, _, after = README.partition(REGION)
    assert text.startswith(before + REGION.split(b"\r\n")[0] + b"\r\n")
    assert text.endswith(REGION.split(b"\r\n")[1] + b"\r\n" + after)
    rows = [
        ln
        for ln in text.decode().split("\r\n")
        if ln.startswith("| 2048") or ln.startswith("| 16384")
    ]
    assert [r.split(" |")[0] for r in rows] == ["| 2048", "| 16384"]  # by value, not as text
    stage(repo)
    assert "tether check: clean" in tether_ok(repo, "check")
    # The repository's own pre-commit config, with tether's hook added, passes.
    env = {k: v for k, v in os.environ.items() if k not in ("TETHER_ROOT", "PYTHONPATH")}
    env.update(PRE_COMMIT_HOME=str(tmp_path / "pre-commit"), PATH=f"{TETHER.parent}:{env['PATH']}")
    hooks = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", "--all-files"], cwd=repo, env=env,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert hooks.returncode == 0 and "tether check" in hooks.stdout, hooks.stdout + hooks.stderr
    # A contributor's edit outside the region needs no render; an edit inside it is drift.
    (repo / "README.md").write_bytes(text.replace(b"Apache-2.0", b"MIT"))
    stage(repo)
    tether_ok(repo, "check")
    (repo / "README.md").write_bytes(text.replace(b"| 2048 |", b"| 2049 |"))
    stage(repo)
    drift = run_tether(repo, "check")
    assert drift.returncode == 1 and "tether render" in drift.stdout + drift.stderr


@pytest.mark.parametrize(
    ("files", "argv", "problem"),
    [
        pytest.param({"README.rst": b"Title\n=====\n"}, ("--readme", "README.rst"),
                     "the results table init writes is Markdown", id="rst-readme"),
        pytest.param({".pre-commit-config.yaml": b"repos: []\nci:\n  autofix: false\n"}, (),
                     "`repos:` is not the last top-level key", id="hooks-not-last"),
        pytest.param({"tether_bench.py": b"X = 1\n"}, (), "tether_bench.py: exists",
                     id="plugin-exists"),
    ],
)  # fmt: skip
def test_init_refuses_before_writing_anything(
    tmp_path: Path, files: dict[str, bytes], argv: tuple[str, ...], problem: str
) -> None:
    from validate.suite.fixture_project import run_cli

    for rel, data in files.items():
        (tmp_path / rel).write_bytes(data)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    rc, _, err = run_cli(tmp_path, "init", *argv)
    assert rc == 2 and problem in err, err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


# A README and notes written before tether, typing figures and claim words (FIXTURE text).
TYPED_README = (
    b"# fast-ops\r\n\r\nThe fused kernel runs at 1.8x the speed of the eager ops, "
    b"about 410 GB/s.\r\n"
)
TYPED_NOTES = b"# Notes\n\n- 2024-03: 12.5 TFLOP/s on the long shapes\n"


def test_init_baselines_the_figures_already_typed(tmp_path: Path) -> None:
    """The first `git add -A && tether check` after init passes over figures that were there
    before tether (init writes what `tether check --baseline` writes, and says so in one
    line); a figure typed after it is still found."""
    from validate.suite.fixture_project import git, run_cli

    repo = git_repo(
        tmp_path / "fast-ops",
        {
            "README.md": TYPED_README,
            "docs/notes.md": TYPED_NOTES,
            "pyproject.toml": b'[project]\nname = "fast-ops"\nversion = "0"\n',
        },
    )
    rc, out, err = run_cli(repo, "init")
    assert rc == 0, out + err
    said = [line for line in out.splitlines() if "tether-scan-baseline.json" in line]
    assert len(said) == 1 and said[0].startswith("wrote tether-scan-baseline.json: 3 "), out
    baselined = json.loads((repo / "tether-scan-baseline.json").read_text(encoding="utf-8"))
    assert {e["path"] for e in baselined["findings"]} == {"README.md", "docs/notes.md"}
    # The same file `tether check --baseline` writes from the same text.
    written = (repo / "tether-scan-baseline.json").read_bytes()
    assert run_cli(repo, "check", "--baseline")[0] == 0
    assert (repo / "tether-scan-baseline.json").read_bytes() == written
    git(repo, "add", "-A")
    rc, out, err = run_cli(repo, "check")
    assert rc == 0, out + err
    notes = repo / "docs" / "notes.md"
    notes.write_bytes(TYPED_NOTES + b"- 2024-04: 14.1 TFLOP/s after the fix\n")
    git(repo, "add", "-A")
    rc, out, _ = run_cli(repo, "check")
    assert rc == 1 and "docs/notes.md:4:" in out and out.count("typed by hand") == 1, out
