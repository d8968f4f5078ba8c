"""Regions a project renders into its own hand-written files (any file with a comment syntax),
declared in [tool.tether.render] region_templates, and tether's built-in results table.

The render keeps every byte outside a region and the file's line endings; `tether check`
re-renders such a region and fails when it drifted. FIXTURE projects in tmp_path.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from tether.render import render_parts, write_all
from tether.render.regions import RegionError, find_regions, replace_regions, syntax_for

from validate.suite.fixture_project import fixture_project, run_cli
from validate.suite.runfactory import grid_cells, make_sweep_run

TABLE = '[tool.tether.render.region_templates]\n"README.md" = { results = "results.md.j2" }\n'


def _project(root: Path, extra: str = TABLE, headline: str | None = "prefill-vs-sdpa") -> Path:
    fixture_project(root, files={}, figures=None, doc_arches=("sm90",), headline=headline,
                    extra=extra)  # fmt: skip
    (root / "docs_src").mkdir(parents=True, exist_ok=True)
    (root / "docs_src" / "results.md.j2").write_text(
        '{% include "tether/results.md.j2" %}\n', encoding="utf-8"
    )
    return root


README_CRLF = (
    b"# Hand-written title\r\n\r\nA contributor's paragraph.\r\n\r\n"
    b"<!-- BEGIN GENERATED: results (tether render) -->\r\nstale\r\n"
    b"<!-- END GENERATED: results -->\r\n\r\nMore prose, no newline at the end"
)


def _store(root: Path, seqlens: tuple[int, ...] = (256, 64, 128), **cell_extra: object) -> Path:
    store = root / "results"
    axes = {"seqlen": list(seqlens)}
    fixed = {"hkv": 8, "head_dim": 128, "dtype": "f16", "causal": True, "batch": 1, "hq": 16}
    cells = grid_cells(axes, fixed)
    if cell_extra:
        cells = tuple(replace(c, extra={**c.extra, **cell_extra}) for c in cells)
    make_sweep_run(axes=axes, fixed=fixed, cells=cells, store=store, root=root)
    return store


def test_a_region_in_a_crlf_readme_keeps_every_other_byte(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (root / "README.md").write_bytes(README_CRLF)
    store = _store(root)
    assert write_all(root, store) == [Path("README.md")]
    after = (root / "README.md").read_bytes()
    head, _, rest = after.partition(b"<!-- BEGIN GENERATED: results (tether render) -->\r\n")
    body, _, tail = rest.partition(b"<!-- END GENERATED: results -->\r\n")
    assert head == README_CRLF.split(b"<!-- BEGIN")[0]
    assert tail == b"\r\nMore prose, no newline at the end"
    assert b"stale" not in body and b"| seqlen |" in body
    assert body.count(b"\n") == body.count(b"\r\n")  # the region's lines are CRLF too
    rc, out, _ = run_cli(root, "check")
    assert rc == 0, out
    # An edit inside the region is drift: the check diffs it and names the fix.
    (root / "README.md").write_bytes(after.replace(b"| 64 |", b"| 65 |"))
    rc, out, _ = run_cli(root, "check")
    assert rc == 1 and "README.md" in out and "tether render" in out


def test_the_results_table_sorts_cells_by_value_and_says_what_was_not_checked(
    tmp_path: Path,
) -> None:
    root = _project(tmp_path)
    (root / "README.md").write_text(README_CRLF.decode().replace("\r\n", "\n"), encoding="utf-8")
    store = _store(root, alloc_counter="none")
    texts, _ = render_parts(root, store)
    text = texts[Path("README.md")].decode()
    rows = [ln for ln in text.splitlines() if ln.startswith("| ") and ln[2].isdigit()]
    assert [r.split(" | ")[0] for r in rows] == ["| 64", "| 128", "| 256"]
    assert "| flags |" in text.splitlines()[text.splitlines().index(rows[0]) - 2]
    assert "could not be checked in 3 of 3 cells" in text


@pytest.mark.parametrize(
    ("name", "begin", "end"),
    [
        pytest.param("ci.yaml", "# BEGIN GENERATED: r (tether render)", "# END GENERATED: r",
                     id="yaml"),
        pytest.param("docs/index.rst", ".. BEGIN GENERATED: r (tether render)",
                     ".. END GENERATED: r", id="rst"),
        pytest.param("conf.toml", "# BEGIN GENERATED: r (tether render)", "# END GENERATED: r",
                     id="toml"),
        pytest.param("kern.cu", "// BEGIN GENERATED: r (tether render)", "// END GENERATED: r",
                     id="cuda"),
    ],
)  # fmt: skip
def test_regions_in_files_of_any_comment_syntax(name: str, begin: str, end: str) -> None:
    syntax = syntax_for(name)
    assert syntax.begin_fmt.format(id="r") == begin and syntax.end_fmt.format(id="r") == end
    text = f"keep: 1\n  {begin}\n  old\n  {end}\ntail\n"
    assert find_regions(text, Path(name))["r"].indent == "  "
    assert replace_regions(text, Path(name), {"r": "new\n"}) == text.replace("old", "new")


def test_a_file_type_without_a_comment_syntax_is_refused_by_name() -> None:
    with pytest.raises(RegionError, match=r"no generated-region syntax for '\.json' files"):
        syntax_for("data.json")


def test_an_undeclared_marker_and_a_missing_one_are_clear_errors(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (root / "README.md").write_text(
        "<!-- BEGIN GENERATED: other (tether render) -->\n<!-- END GENERATED: other -->\n",
        encoding="utf-8",
    )
    with pytest.raises(RegionError, match=r"region_templates\] \"README.md\""):
        render_parts(root, _store(root))
    (root / "README.md").write_text("no markers\n", encoding="utf-8")
    with pytest.raises(RegionError, match="add the lines '<!-- BEGIN GENERATED: results"):
        render_parts(root, root / "results")


def test_a_missing_template_names_the_configured_folder(tmp_path: Path) -> None:
    root = _project(tmp_path, extra=TABLE.replace("results.md.j2", "nope.md.j2"))
    (root / "README.md").write_text(README_CRLF.decode(), encoding="utf-8")
    rc, _, err = run_cli(root, "render")
    assert rc == 1 and "docs_src/nope.md.j2: template not found" in err


def test_pr_comment_prints_markdown_and_writes_nothing(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (root / "README.md").write_bytes(README_CRLF)
    _store(root)
    rc, out, _ = run_cli(root, "render", "--pr-comment")
    assert rc == 0 and out.startswith("### tether: cited runs")
    assert "| sm90 | prefill-vs-sdpa |" in out
    assert (root / "README.md").read_bytes() == README_CRLF


def test_the_results_table_before_any_run_says_so(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (root / "README.md").write_bytes(README_CRLF)
    texts, _ = render_parts(root, root / "results")
    assert b"No runs in the store yet for sweep `prefill-vs-sdpa`" not in texts[Path("README.md")]
    assert b"`prefill-vs-sdpa` not measured." in texts[Path("README.md")]  # a listed arch
    root2 = _project(tmp_path / "bare", headline="mine")
    text = (root2 / "pyproject.toml").read_text(encoding="utf-8")
    (root2 / "pyproject.toml").write_text(text.replace('"sm90"', ""), encoding="utf-8")
    (root2 / "README.md").write_bytes(README_CRLF)
    texts, _ = render_parts(root2, root2 / "results")
    assert b"No runs in the store yet for sweep `mine`" in texts[Path("README.md")]


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        pytest.param('[tool.tether.render.region_templates]\n"README.md" = "x.j2"\n',
                     "must map region ids to template names", id="not-a-table"),
        pytest.param('[tool.tether.render.region_templates]\n"README.md" = { r = 1 }\n',
                     "must name a template", id="not-a-name"),
        pytest.param('[tool.tether.summary]\nrows = [{ label = "x" }]\n',
                     "label and sweep must be non-empty strings", id="summary-row"),
    ],
)  # fmt: skip
def test_config_mistakes_are_named(tmp_path: Path, extra: str, problem: str) -> None:
    from tether import project
    from tether.errors import UsageError

    root = _project(tmp_path, extra=extra)
    with pytest.raises(UsageError, match=re.escape(problem)):
        project.load(root)
