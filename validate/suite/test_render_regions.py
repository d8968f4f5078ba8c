"""Generated regions: only the text between markers changes; broken markers are errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from tether.render.regions import RegionError, find_regions, region_body, replace_regions

PY = Path("kernels/example.py")
MD = Path("docs/example.md")

# FIXTURE source with two regions and hand-written text around them.
SOURCE = """\
x = 1  # hand-written
# BEGIN GENERATED: one (tether render)
# old one
# END GENERATED: one
y = 2
    # BEGIN GENERATED: two (tether render)
    # old two
    # END GENERATED: two
z = 3
"""


def test_replaces_only_between_markers() -> None:
    new = replace_regions(SOURCE, PY, {"one": "# new one\n# second line\n", "two": "# new two\n"})
    assert new == SOURCE.replace("# old one\n", "# new one\n# second line\n").replace(
        "    # old two\n", "    # new two\n"
    )
    assert region_body(new, PY, "one") == "# new one\n# second line\n"


def test_untouched_regions_keep_their_text() -> None:
    new = replace_regions(SOURCE, PY, {"one": "# fresh\n"})
    assert "    # old two\n" in new


def test_markdown_markers() -> None:
    text = "intro\n<!-- BEGIN GENERATED: t (tether render) -->\nold\n<!-- END GENERATED: t -->\n"
    assert replace_regions(text, MD, {"t": "new\n"}) == text.replace("old", "new")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("# BEGIN GENERATED: a (tether render)\n", "BEGIN without END", id="unclosed"),
        pytest.param("# END GENERATED: a\n", "END without a matching BEGIN", id="stray-end"),
        pytest.param(
            "# BEGIN GENERATED: a (tether render)\n# END GENERATED: a\n" * 2,
            "duplicated",
            id="duplicate",
        ),
        pytest.param(
            "# BEGIN GENERATED: a (tether render)\n# BEGIN GENERATED: b (tether render)\n",
            "begins inside",
            id="nested",
        ),
        pytest.param(
            "# BEGIN GENERATED: a (tether render)\n# END GENERATED: b\n",
            "END without a matching BEGIN",
            id="mismatched",
        ),
        pytest.param("#BEGIN GENERATED a\n", "malformed marker", id="malformed"),
    ],
)
def test_broken_markers_name_file_and_region(text: str, problem: str) -> None:
    with pytest.raises(RegionError, match=problem) as info:
        find_regions(text, PY)
    assert str(PY) in str(info.value)


def test_missing_region_is_an_error() -> None:
    with pytest.raises(RegionError, match=r"'three'.*marker not found"):
        replace_regions(SOURCE, PY, {"three": "# x\n"})


def test_prose_mentioning_markers_is_not_a_marker() -> None:
    text = '"""Regions between ``BEGIN GENERATED`` / ``END GENERATED`` are rendered."""\n'
    assert find_regions(text, PY) == {}
