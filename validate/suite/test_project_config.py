"""``[tool.tether]`` values are validated by name (issue 25 items 4 and 7): every path it names
stays inside the project, doc_arches are arch names, the headline names a registered sweep.

Each test writes a FIXTURE project in tmp_path with one bad value and asserts that loading it
(or the verb that needs the value) refuses it, naming the key and the value.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tether import project, registry
from tether.errors import UsageError

from validate.suite.fixture_project import fixture_project


def _load(root: Path) -> project.Project:
    return project.load(root)


@pytest.mark.parametrize(
    ("files", "needle"),
    [
        pytest.param({"../../x.md": "README.md.j2"}, "../../x.md", id="target-dotdot"),
        pytest.param({"/tmp/x.md": "README.md.j2"}, "/tmp/x.md", id="target-absolute"),
        pytest.param({"README.md": "../../etc/passwd"}, "../../etc/passwd", id="template-dotdot"),
    ],
)
def test_render_paths_outside_the_project_are_refused(
    tmp_path: Path, files: dict[str, str], needle: str
) -> None:
    root = fixture_project(tmp_path / "repo", files=files)
    with pytest.raises(UsageError, match="inside") as refused:
        _load(root)
    assert needle in str(refused.value)


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        pytest.param('store = "../elsewhere"', "store", id="store"),
        pytest.param('templates = "/etc"', "templates", id="templates"),
        pytest.param('scratch = "../../tmp"', "scratch", id="scratch"),
    ],
)
def test_folders_outside_the_project_are_refused(tmp_path: Path, extra: str, key: str) -> None:
    root = fixture_project(tmp_path / "repo")
    cfg = root / "pyproject.toml"
    text = cfg.read_text(encoding="utf-8")
    line = next(ln for ln in text.splitlines() if ln.startswith(f"{key} = "))
    cfg.write_text(text.replace(line, extra), encoding="utf-8")
    with pytest.raises(UsageError, match=key):
        _load(root)


def test_figures_and_regions_outside_are_refused(tmp_path: Path) -> None:
    root = fixture_project(tmp_path / "a", figures="../figs")
    with pytest.raises(UsageError, match=r"render\.figures"):
        _load(root)
    root = fixture_project(tmp_path / "b", regions=["/etc/hosts"])
    with pytest.raises(UsageError, match=r"render\.regions"):
        _load(root)


def test_a_symlink_out_of_the_project_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    root = fixture_project(tmp_path / "repo", files={"out/README.md": "README.md.j2"})
    (root / "out").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UsageError, match="outside the project"):
        _load(root)


def test_fingerprint_globs_stay_inside(tmp_path: Path) -> None:
    root = fixture_project(tmp_path / "repo", harness=["../**/*.py"])
    with pytest.raises(UsageError, match=r"fingerprint\.harness"):
        _load(root)


@pytest.mark.parametrize("arch", ["../../etc", "SM90", "h100", ""])
def test_doc_arches_must_be_arch_names(tmp_path: Path, arch: str) -> None:
    root = fixture_project(tmp_path / "repo", doc_arches=["sm90", arch])
    with pytest.raises(UsageError, match="doc_arches"):
        _load(root)


def test_the_headline_must_name_a_registered_sweep(tmp_path: Path) -> None:
    root = fixture_project(
        tmp_path / "repo", plugins=["tether_kernels_plugin"], headline="no-such-sweep"
    )
    with pytest.raises(UsageError, match="headline 'no-such-sweep' is not a registered sweep"):
        registry.for_project(_load(root))
    good = fixture_project(tmp_path / "good", plugins=["tether_kernels_plugin"])
    assert "prefill-vs-sdpa" in registry.for_project(_load(good)).sweeps


def test_paths_inside_are_kept(tmp_path: Path) -> None:
    root = fixture_project(tmp_path / "repo", files={"docs/x/README.md": "README.md.j2"})
    proj = _load(root)
    assert proj.store == (root / "results").resolve()
    assert proj.render_files == {"docs/x/README.md": "README.md.j2"}


CONFIG = """\
[project]
name = "fast_ops"

[tool.tether]
plugins = [
  "fast_ops",
  'fast_ops.bench',
]

[[tool.mypy.overrides]]
module = "fast_ops.missing"
"""


@pytest.mark.parametrize(
    ("value", "line"),
    [
        pytest.param("fast_ops", 6, id="inside-not-the-project-name"),
        pytest.param("fast_ops.bench", 7, id="single-quoted"),
        pytest.param("fast_ops.missing", 1, id="outside-the-table"),
        pytest.param("nowhere", 1, id="absent"),
    ],
)
def test_config_line_finds_a_value_inside_the_tether_table(
    tmp_path: Path, value: str, line: int
) -> None:
    """Where a finding about a configured name points (a plugin typo, a compiled pattern)."""
    (tmp_path / "pyproject.toml").write_text(CONFIG, encoding="utf-8")
    assert project.config_line(tmp_path, value) == line
