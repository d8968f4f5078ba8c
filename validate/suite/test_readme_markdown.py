"""The README reads in 30 seconds, checked on the parsed Markdown (markdown-it-py), not by
eye: one sentence on what tether is, the two commands, one small table per arch, the tested
line, links to the detail; no paragraph over 80 words, no run ids, and list items that stay list
items (a template that eats a newline glues a nested item into its parent's prose).

Checked on the committed README (which `tether check` keeps equal to its render) and on
renders of FIXTURE stores in tmp_path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from tether.render import render_all

from validate.suite.runfactory import make_not_measured_run, make_sweep_run, make_verify_run

# Made-up unsigned FIXTURE runs rendered with this repository's templates and config: its
# signing requirement is off for them (what it does is test_signed_evidence's).
pytestmark = pytest.mark.usefixtures("repo_without_signing")


ROOT = Path(__file__).resolve().parents[2]
RUN_ID = re.compile(r"\d{8}T\d{6}Z-[a-z]+-")
MAX_WORDS = 80
ARCHES = ("sm90", "gfx942", "gfx950", "gfx1151")


def _tokens(text: str):
    return MarkdownIt("commonmark").enable("table").parse(text)


def _paragraphs(tokens) -> list[str]:
    return [
        tokens[i + 1].content
        for i, t in enumerate(tokens)
        if t.type == "paragraph_open" and tokens[i + 1].type == "inline"
    ]


def _readme_checks(text: str, arches: tuple[str, ...]) -> None:
    tokens = _tokens(text)
    paragraphs = _paragraphs(tokens)
    long = [p for p in paragraphs if len(p.split()) > MAX_WORDS]
    assert not long, f"paragraphs over {MAX_WORDS} words: {long}"
    first = paragraphs[0]
    assert first.startswith("tether is ") and first.count(". ") == 0 and first.endswith(".")
    assert not RUN_ID.search(text), RUN_ID.search(text)
    fences = [t.content for t in tokens if t.type == "fence" and t.info == "sh"]
    commands = [ln.split("#")[0].strip() for ln in fences[0].splitlines()]
    assert commands == ["make setup demo", "make setup test"]
    headings = [
        tokens[i + 1].content
        for i, t in enumerate(tokens)
        if t.type == "heading_open" and t.tag == "h3"
    ]
    assert headings[: len(arches)] == list(arches)
    links = [t.attrGet("href") for t in tokens if t.type == "inline" for t in t.children or []]
    assert "docs/backends.md" in links
    assert any(p.startswith("Tested: ") for p in paragraphs)
    assert not prose_items(text)


def prose_items(text: str) -> list[str]:
    """Lines that look like list items but that the parser read as prose (a lazy paragraph
    continuation, an item glued under another block)."""
    tokens = _tokens(text)
    items = {t.map[0] for t in tokens if t.type == "list_item_open" and t.map}
    return [
        f"line {n + 1}: {line!r}"
        for n, line in enumerate(text.split("\n"))
        if re.match(r"^\s*[-*] ", line) and not _in_fence(tokens, n) and n not in items
    ]


def _in_fence(tokens, line: int) -> bool:
    return any(t.type == "fence" and t.map and t.map[0] <= line < t.map[1] for t in tokens)


def test_the_committed_readme_reads_in_30_seconds() -> None:
    _readme_checks((ROOT / "README.md").read_text(encoding="utf-8"), ARCHES)


def test_a_measured_arch_gets_one_small_table(tmp_path: Path) -> None:
    from tether import project

    proj = project.get(ROOT)
    store = tmp_path / "results"
    assert proj.headline is not None
    make_sweep_run(name=proj.headline, store=store)  # the first configured row's sweep
    make_not_measured_run(arch="gfx942", reason="host busy: lock held", store=store)
    make_verify_run(arch="sm90", vendor="cuda", passed=3, store=store)
    text = render_all(ROOT, store)[Path("README.md")].decode()
    _readme_checks(text, ARCHES)
    tokens = _tokens(text)
    tables = [i for i, t in enumerate(tokens) if t.type == "table_open"]
    assert len(tables) == 1  # sm90's; the others say why they are not timed
    header = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "th_open"]
    regions = ["whole map", "the policy's region", "cells: faster / level / slower"]
    assert header == ["against", "B against A", *regions]
    rows = sum(1 for t in tokens if t.type == "tr_open") - 1
    assert rows == len(proj.summary_rows)  # one per [tool.tether.summary] row


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param("- **sm90**: a line\n\n        - indented into code\n", id="code-in-item"),
        pytest.param("Results.\n    - not an item\n", id="lazy-paragraph"),
    ],
)
def test_the_list_check_can_fail(broken: str) -> None:
    """FIXTURE Markdown whose item lines the parser reads as prose."""
    assert prose_items(broken)
    assert not prose_items("- **sm90**: a line\n  - a nested item\n")


# How another repository installs tether: a PEP 508 requirement with a URL, pip installing it.
INSTALL = re.compile(r'`(pip install "tether\[kernels\] @ [^"`]+")`')


def install_command(text: str) -> list[str]:
    """The install commands a front page gives (test_adoption_venv runs the README's)."""
    return INSTALL.findall(text)


def test_both_front_pages_say_in_one_command_how_a_repository_installs_tether() -> None:
    found = {
        rel: install_command((ROOT / rel).read_text(encoding="utf-8"))
        for rel in ("README.md", "examples/rmsnorm/README.md")
    }
    assert all(len(commands) == 1 for commands in found.values()), found
    (command,) = {c for commands in found.values() for c in commands}
    assert not re.search(r"&&|;|\|", command), command  # one command, not a pipeline
