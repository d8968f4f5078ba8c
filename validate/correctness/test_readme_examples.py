"""The README's usage examples (docs_src/partials/usage.md.j2) run, in order, so they cannot rot."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

PARTIAL = Path(__file__).resolve().parents[2] / "docs_src" / "partials" / "usage.md.j2"
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    """The fenced python blocks of a Markdown (or jinja2 Markdown) text, in order."""
    return _BLOCK.findall(text)


def test_partial_has_examples_without_template_syntax() -> None:
    blocks = python_blocks(PARTIAL.read_text(encoding="utf-8"))
    assert len(blocks) >= 3, "usage section lost its examples"
    for block in blocks:
        # A jinja tag inside a block would make the rendered README differ from what ran here.
        assert "{{" not in block and "{%" not in block and "{#" not in block


def test_extractor_finds_blocks_in_a_fixture() -> None:
    fixture = "text\n```python\nx = 1\n```\n```bash\nls\n```\n```python\ny = x + 1\n```\n"
    assert python_blocks(fixture) == ["x = 1\n", "y = x + 1\n"]


def test_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # The examples route to SDPA on every arch; without a GPU they must not need the interpreter.
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    namespace: dict[str, object] = {"__name__": "readme_example"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for i, block in enumerate(python_blocks(PARTIAL.read_text(encoding="utf-8"))):
            exec(compile(block, f"{PARTIAL.name}[block {i}]", "exec"), namespace)
    # What the example printed is what the router says, whatever the policy holds today.
    route, shape = namespace["route"], namespace["shape"]
    for arch in ("sm90", "gfx942", "gfx1151", "cpu"):
        assert f"{arch} {route('single_prefill', shape, arch)}\n" in printed.getvalue()
