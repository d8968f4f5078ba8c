"""Issue 47: claims typed in words or into templates reach no document unchecked.

Every text below is a FIXTURE typed to exercise the scanner; none of it is a measurement.
This file is excepted from the scan by declaration ([tool.tether.scan] exclude).
"""

from __future__ import annotations

from pathlib import Path

from tether._scan import scan_template, scan_tree

from validate.suite.fixture_project import fixture_project, run_cli

SUBJECTS = 'subjects = ["Gluon", "fa3", "single_prefill"]\n'


def _project(tmp_path: Path, scan: str = SUBJECTS) -> Path:
    return fixture_project(tmp_path / "proj", extra=scan)


def test_project_subjects_make_named_comparisons_findings(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (root / "NOTES.md").write_text(
        "Gluon is well ahead.\nsingle_prefill trails at 4K.\nGluon is faster to read.\n",
        encoding="utf-8",
    )
    assert [f.line for f in scan_tree(root)] == [1, 2]
    # without the project's subjects the names are not measured things
    plain = fixture_project(tmp_path / "plain")
    (plain / "NOTES.md").write_text("Gluon is well ahead.\n", encoding="utf-8")
    assert scan_tree(plain) == []


def test_the_comparative_vocabulary_is_configurable(tmp_path: Path) -> None:
    root = _project(tmp_path, SUBJECTS + 'allow_words = ["beats"]\nclaim_words = ["outruns"]\n')
    (root / "NOTES.md").write_text("Gluon beats it.\nGluon outruns it.\n", encoding="utf-8")
    assert [f.line for f in scan_tree(root)] == [2]


def test_a_claim_beside_a_rendered_verdict_passes_a_typed_one_does_not(tmp_path: Path) -> None:
    from tether._scan import project_vocabulary

    vocab = project_vocabulary(_project(tmp_path))
    text = (
        "Gluon against fa3: {{ r.whole.geomean | ratio }}, {{ r.whole.word }}: faster\n"
        "Gluon is faster on every shape ({{ run.id }}).\n"
        "The Gluon kernel reaches 700 TFLOP/s.\n"
        "{{ x | rate }} TFLOP/s, so the kernel is faster\n"
        '{{ "the kernel never regresses" }}\n'
        "{% set claim = 'Gluon beats fa3' %}\n"
        "{{ r.word }}\n"
        "so Gluon is faster\n"
    )
    found = scan_template(text, "docs_src/x.md.j2", vocab)
    by_line = {f.line for f in found}
    # 1 and 7 pass (a verdict rendered beside the word); 2 rests on a run id, 3 and 4 type a
    # unit (a figure is never supported by another), 5 and 6 type a claim in a string
    # literal, 8 sits on no line of its verdict
    assert by_line == {2, 3, 4, 5, 6, 8}, found
    assert any("string literal" in f.what for f in found if f.line == 5)


def test_check_finds_a_figure_typed_into_a_top_level_template(tmp_path: Path) -> None:
    # The case: a figure typed into docs_src/README.md.j2 rendered into README.md and
    # passed the check (the include glob's ``/**/`` matched no top-level template).
    root = _project(tmp_path)
    (root / "docs_src").mkdir()
    (root / "docs_src" / "README.md.j2").write_text(
        "# fixture\nThe Gluon kernel reaches 700 TFLOP/s.\nIt never regresses.\n",
        encoding="utf-8",
    )
    found = {(f.path, f.line) for f in scan_tree(root)}
    assert ("docs_src/README.md.j2", 2) in found
    assert ("docs_src/README.md.j2", 3) in found
    rc, out, _ = run_cli(root, "check", "--worktree")
    assert rc == 1
    assert "docs_src/README.md.j2:2:" in out


def test_templates_are_scanned_whatever_the_include_globs(tmp_path: Path) -> None:
    root = _project(tmp_path, 'include = ["*.md"]\n')
    (root / "docs_src" / "partials").mkdir(parents=True)
    (root / "docs_src" / "partials" / "p.md.j2").write_text("every cell wins\n", encoding="utf-8")
    assert [f.path for f in scan_tree(root)] == ["docs_src/partials/p.md.j2"]
    excluded = fixture_project(
        tmp_path / "x", scan_exclude=("docs_src/**",), extra='include = ["*.md"]\n'
    )
    (excluded / "docs_src").mkdir()
    (excluded / "docs_src" / "p.md.j2").write_text("every cell wins\n", encoding="utf-8")
    assert scan_tree(excluded) == []
