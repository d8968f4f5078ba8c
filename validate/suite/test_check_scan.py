"""The stray-figure scanner on its own: what it flags, what it leaves alone, and where.

Every text below is a FIXTURE typed to exercise the scanner; the figures in it are made up.
Lines that hold a figure on purpose carry the allow marker so ``tether check`` on this
repository does not flag its own tests (validate/ is not scanned, but the marker documents it).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tether._scan import ALLOW_MARKER, Finding, scan_line, scan_markdown, scan_python, scan_tree

from validate.suite.fixture_project import fixture_project

FLAGGED = [
    pytest.param("Triton is 1.21x over cuDNN", id="ratio-x"),  # tether: allow-figure
    pytest.param("Triton is 1.21× over cuDNN", id="ratio-times"),  # tether: allow-figure
    pytest.param("a x1.2 win", id="ratio-prefix"),  # tether: allow-figure
    pytest.param("reaches 390 TFLOP/s", id="tflop-s"),  # tether: allow-figure
    pytest.param("reaches 390 TFLOPS", id="tflops"),  # tether: allow-figure
    pytest.param("copies at 4.2 GB/s", id="gb-s"),  # tether: allow-figure
    pytest.param("takes 0.31 ms/call", id="ms-call"),  # tether: allow-figure
    pytest.param("takes 31 us/call", id="us-call"),  # tether: allow-figure
    pytest.param("12% faster than flash", id="pct-faster"),  # tether: allow-figure
    pytest.param("throughput up 3.5 %", id="pct-throughput"),  # tether: allow-figure
    pytest.param("a 7% regression", id="pct-regress"),  # tether: allow-figure
    pytest.param("rises monotonically with kv_len", id="monotonically"),  # tether: allow-figure
    pytest.param("the curve is monotonic", id="monotonic"),  # tether: allow-figure
    pytest.param("no regressions anywhere", id="no-regressions"),  # tether: allow-figure
    pytest.param("nothing regresses", id="nothing-regresses"),  # tether: allow-figure
    pytest.param("every cell wins", id="every-cell"),  # tether: allow-figure
    pytest.param("all cells win", id="all-cells"),  # tether: allow-figure
    # issue 21: claims written in words
    pytest.param("about ten percent quicker", id="number-word-pct"),  # tether: allow-figure
    pytest.param("a speedup of 1.4 on long rows", id="speedup-of"),  # tether: allow-figure
    pytest.param("a speedup of about two", id="speedup-of-word"),  # tether: allow-figure
    pytest.param("reaches 650 teraflops", id="teraflops"),  # tether: allow-figure
    pytest.param("reaches 650 TFLOPs", id="tflops-lower-s"),  # tether: allow-figure
    pytest.param("up 7 pct", id="pct-abbrev"),  # tether: allow-figure
    pytest.param("trails cuDNN on every shape", id="trails-every"),  # tether: allow-figure
    pytest.param("a loss at every shape", id="loss-at-every"),  # tether: allow-figure
    pytest.param("1.5× faster", id="n-times-sign"),  # tether: allow-figure
    pytest.param("two times faster", id="times-in-words"),  # tether: allow-figure
    pytest.param("a twofold gain", id="twofold"),  # tether: allow-figure
    pytest.param("a 3-fold gain", id="n-fold"),  # tether: allow-figure
    pytest.param("twice as fast as flash", id="twice-as-fast"),  # tether: allow-figure
    pytest.param("moves two terabytes per second", id="bandwidth-words"),  # tether: allow-figure
    # Worded claims with no digits (issue 47): each is a finding wherever it is typed.
    pytest.param("It is faster on every shape.", id="faster-on-every-shape"),
    pytest.param("The kernel never regresses.", id="never-regresses"),
    pytest.param("never regresses", id="never-regresses-bare"),
    pytest.param("Triton always wins.", id="always-wins"),
    pytest.param("The Gluon kernel beats fa3.", id="beats"),
    pytest.param("This arm is ahead of the other.", id="arm-ahead"),
    pytest.param("The kernel is faster than the peer.", id="kernel-faster"),
    pytest.param("The arm regressed after the change.", id="arm-regressed"),
    pytest.param("The backend lags at long rows.", id="backend-lags"),
    pytest.param("The kernel outperforms the library.", id="outperforms"),
    pytest.param("A loss against the peer on the kernel.", id="loss-against"),
    pytest.param("The arm is consistently slower.", id="consistently-slower"),
]

CLEAN = [
    pytest.param("2048 × 2048 tokens", id="shape-product"),
    pytest.param("tile 2x2 of warps", id="tile-2x2"),
    pytest.param("runs on x86 hosts", id="x86"),
    pytest.param("mask 0x1F", id="hex"),
    pytest.param("results['threshold_tflops'] is read", id="field-name"),
    pytest.param("100% of the samples are kept", id="pct-without-perf-word"),
    pytest.param("batch x4 is not reachable", id="batch-x4"),
    # Ordinary prose sharing a word with a claim (issue 47): never a finding.
    pytest.param("The loss is computed in f32.", id="loss-noun"),
    pytest.param("The arm computes the loss.", id="arm-computes-loss"),
    pytest.param("This table is faster to read.", id="faster-to-read"),
    pytest.param("The kernel doc is faster to read than the code.", id="kernel-faster-to-read"),
    pytest.param("The kernel compiles ahead of time.", id="ahead-of-time"),
    pytest.param("A regression test for the kernel.", id="regression-test"),
    pytest.param("Route order puts the Triton kernel ahead of it.", id="route-order"),
    pytest.param("The first arm that matches wins.", id="first-wins"),
    pytest.param("The guard never creates a GPU context.", id="never-no-perf-word"),
    pytest.param("Every run holds the guard.", id="every-no-perf-word"),
]


@pytest.mark.parametrize("text", FLAGGED)
def test_figures_and_claim_words_are_flagged(text: str) -> None:
    assert scan_line(text), f"scanner missed {text!r}"


@pytest.mark.parametrize("text", FLAGGED)
def test_allow_marker_silences_a_line(text: str) -> None:
    assert scan_line(f"{text}  <!-- {ALLOW_MARKER} -->") == []


@pytest.mark.parametrize("text", CLEAN)
def test_ordinary_text_is_not_flagged(text: str) -> None:
    assert scan_line(text) == []


def test_markdown_skips_generated_regions_but_not_the_rest() -> None:
    text = (
        "# Notes\n"
        "<!-- BEGIN GENERATED: headline (tether render) -->\n"
        "geomean 1.21x\n"  # tether: allow-figure
        "<!-- END GENERATED: headline -->\n"
        "we measured 1.21x by hand\n"  # tether: allow-figure
    )
    assert [(f.path, f.line) for f in scan_markdown(text, "NOTES.md")] == [("NOTES.md", 5)]


def test_unclosed_region_is_a_finding_not_a_hiding_place() -> None:
    text = "<!-- BEGIN GENERATED: headline (tether render) -->\nrises monotonically\n"  # tether: allow-figure
    findings = scan_markdown(text, "NOTES.md")
    assert any("never closed" in f.what for f in findings)


def test_mismatched_end_marker_is_a_finding() -> None:
    text = "# BEGIN GENERATED: a (tether render)\n# END GENERATED: b\n"
    assert any("closes region" in f.what for f in scan_markdown(text, "x.md"))


def test_python_comments_and_docstrings_are_scanned_code_is_not() -> None:
    text = (
        '"""Module doc: 1.21x over cuDNN."""\n'  # tether: allow-figure
        "\n"
        "LABEL = 'a 1.21x string literal is data, not prose'\n"  # tether: allow-figure
        "\n"
        "\n"
        "def f() -> None:\n"
        '    """Returns nothing.\n'
        "\n"
        "    The curve is monotonic.\n"  # tether: allow-figure
        '    """\n'
        "    x = 1  # 390 TFLOP/s on sm90\n"  # tether: allow-figure
    )
    lines = [f.line for f in scan_python(text, "lib/x.py")]
    assert lines == [1, 9, 11]


def test_python_generated_region_is_skipped() -> None:
    text = (
        "# BEGIN GENERATED: policy-x (tether render)\n"
        "# geomean 1.21x over 12 cells\n"  # tether: allow-figure
        "# END GENERATED: policy-x\n"
        "X = None  # was 1.21x\n"  # tether: allow-figure
    )
    assert [f.line for f in scan_python(text, "kernels/a.py")] == [4]


def test_unparsable_python_with_a_figure_is_reported() -> None:
    # A figure in a file that does not parse must not pass just because comments are unknowable.
    findings = scan_python("def broken(:  # 1.21x\n", "lib/broken.py")  # tether: allow-figure
    assert findings and findings[0].what.startswith("does not parse")


def test_tree_walk_covers_every_hand_written_file_but_declared_fixtures(tmp_path: Path) -> None:
    # FIXTURE tree: one stray figure in each scanned place, and copies in places never scanned
    # (wholly rendered files, the store, scratch, environments, declared fixtures).
    stray = "# 1.21x over cuDNN\n"  # tether: allow-figure
    fixture_project(tmp_path, scan_exclude=("validate/fixtures/*",))
    for rel in (
        "NOTES.md",
        "kernels/k.py",
        "lib/l.py",
        "validate/t.py",
        "ci/c.py",
        "README.md",
        "docs/backends.md",
        "results/sm90/x.md",
        "scratch/docs/README.md",
        ".venv/lib/site.md",
        "validate/fixtures/f.py",
    ):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(stray, encoding="utf-8")
    found = sorted({f.path for f in scan_tree(tmp_path)})
    assert found == ["NOTES.md", "ci/c.py", "kernels/k.py", "lib/l.py", "validate/t.py"]


def test_finding_prints_as_path_line_what() -> None:
    assert str(Finding("a.md", 3, "claim word")) == "a.md:3: claim word"


TEMPLATE = (
    "{# a comment may say 1.2x #}\n"  # tether: allow-figure
    "geomean {{ a.geomean | ratio }} over {{ a.count }} cells\n"
    "{% if a.verdict == 'win' %}every cell wins{% endif %}\n"  # tether: allow-figure
    "{{ rate }} TFLOP/s\n"  # tether: allow-figure
    "{{ word }} and {{ 'monotonic' }}\n"  # tether: allow-figure
    "it is ten percent faster\n"  # tether: allow-figure
)


def test_templates_are_scanned_like_markdown_outside_expressions() -> None:
    from tether._scan import scan_template

    found = scan_template(TEMPLATE, "x.md.j2")
    lines = sorted({f.line for f in found})
    # line 1 is a jinja comment, line 2 only formats data; 3, 4 and 6 type a claim, a bare
    # unit (the same unit patterns as in Markdown) and a percentage in words, and 5 a claim in
    # a string literal, which reads nothing from the store (issue 47)
    assert lines == [3, 4, 5, 6], found


def _project_with(tmp_path: Path, scan_table: str, text: str) -> Path:
    root = tmp_path / "proj"
    fixture_project(root, extra=scan_table)  # the fixture's last table is [tool.tether.scan]
    (root / "NOTES.md").write_text(text, encoding="utf-8")
    return root


def test_the_claim_vocabulary_is_configurable(tmp_path: Path) -> None:
    text = "the loss on every row stays small\nit outruns flash on every shape\n"
    root = _project_with(tmp_path, 'include = ["*.md"]\n', text)
    assert [f.line for f in scan_tree(root)] == [1]  # "loss" is a claim word by default
    root2 = _project_with(
        tmp_path / "b",
        'include = ["*.md"]\nallow_words = ["loss"]\nclaim_words = ["outruns"]\n',
        text,
    )
    assert [f.line for f in scan_tree(root2)] == [2]


def test_a_baseline_keeps_old_findings_and_fails_new_ones(tmp_path: Path) -> None:
    from tether._scan import apply_baseline, baseline_path, write_baseline

    old = "intro\nTriton is 1.21x over cuDNN\n"  # tether: allow-figure
    root = _project_with(tmp_path, 'include = ["*.md"]\n', old)
    found = scan_tree(root)
    assert len(found) == 1
    write_baseline(root, found)
    assert baseline_path(root).is_file()
    assert apply_baseline(root, scan_tree(root)) == []
    # the old line moves down: still the old finding; a new figure: reported
    (root / "NOTES.md").write_text(
        "intro\nmore intro\nTriton is 1.21x over cuDNN\nnow 650 teraflops\n",  # tether: allow-figure
        encoding="utf-8",
    )
    left = apply_baseline(root, scan_tree(root))
    assert [f.line for f in left] == [4]


def test_check_baseline_on_the_command_line(tmp_path: Path) -> None:
    import io

    from tether.cli import main

    root = _project_with(
        tmp_path,
        'include = ["*.md"]\n',
        "Triton is 1.21x over cuDNN\n",  # tether: allow-figure
    )
    out, err = io.StringIO(), io.StringIO()
    assert main(["--root", str(root), "check", "--baseline"], out, err) == 0
    assert "wrote 1 scan finding" in out.getvalue()
    out = io.StringIO()
    main(["--root", str(root), "check"], out, io.StringIO())
    assert "1.21x" not in out.getvalue()  # tether: allow-figure


def test_this_repository_has_no_stray_figures_in_the_checks_own_modules() -> None:
    repo = Path(__file__).resolve().parents[2]
    own = [repo / "lib" / "tether" / "_scan.py", repo / "lib" / "tether" / "check.py"]
    findings = [f for p in own for f in scan_python(p.read_text(encoding="utf-8"), p.name)]
    assert findings == []
