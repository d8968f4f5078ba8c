"""Every error names its file (issue 47 item 5): a text file tether renders from or judges
that is not UTF-8, is binary (a NUL byte) or cannot be read gives ``tether: error: <file>``
with the exit code ``tether.errors`` maps its error to, never an internal error (rc 70).

A FIXTURE project holds one of each kind of file the render and the check read: a template,
a partial it includes, a region file, a policy file, a render data file, a hand-written file
the scan reads, and the project config. Each is spoiled in turn and both verbs are run.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

import pytest
from tether.errors import OSFailure, TextFileError, exit_code_for
from tether.textfile import decode_text, read_text

from validate.suite.fixture_project import fixture_project, run_cli

REPO = Path(__file__).resolve().parents[2]
INTERNAL_ERROR = 70

# The bytes each spoiled file gets, after its own text (so the error has a line to name).
SPOILERS = {
    "latin-1": b"caf\xe9\n",  # not UTF-8
    "utf-16": "hi\n".encode("utf-16"),  # a BOM of 0xff 0xfe, then NULs
    "binary": b"\x00\x01\x02\x7fELF\x00",
}

SCANNED = "guide.md"  # hand-written: the check scans it, the render never reads it
# Each file the render and check read, project-relative.
FILES = (
    pytest.param("docs_src/README.md.j2", id="template"),
    pytest.param("docs_src/partials/usage.md.j2", id="partial"),
    pytest.param("NOTES.md", id="region-file"),
    pytest.param("kernels/gates.py", id="policy-file"),
    pytest.param("models.toml", id="render-data"),
    pytest.param(SCANNED, id="scanned-file"),
    pytest.param("pyproject.toml", id="config"),
)


def _project(tmp_path: Path) -> Path:
    root = fixture_project(
        tmp_path / "repo",
        plugins=["tether_kernels_plugin"],
        policy="kernels/gates.py",
        regions=["NOTES.md", "kernels/gates.py"],
        data={"models": "models.toml"},
    )
    shutil.copytree(REPO / "docs_src", root / "docs_src")
    (root / "kernels").mkdir()
    shutil.copy2(REPO / "kernels" / "tether_kernels" / "gates.py", root / "kernels" / "gates.py")
    shutil.copy2(REPO / "kernels" / "models.toml", root / "models.toml")
    (root / "NOTES.md").write_text("# Notes\n\nHand-written.\n", encoding="utf-8")
    (root / "guide.md").write_text("# Guide\n\nHand-written.\n", encoding="utf-8")
    rc, out, err = run_cli(root, "render")
    assert rc == 0, out + err  # the unspoiled project renders
    return root


def _named(rel: str, rc: int, out: str, err: str) -> None:
    """The file is named by a `tether: error:` (or, for the check, a finding at the file),
    with the exit code of the error's class, and no internal error or traceback."""
    said = out + err
    assert rc != INTERNAL_ERROR and "internal error" not in said, said
    assert "Traceback" not in said
    assert rc == exit_code_for(TextFileError(rel, "x")), said
    # The config is named by its full path (as every error about it is), the rest by their
    # path in the project.
    named = re.compile(rf"(^|\n)(tether: error: )?(\S*/)?{re.escape(rel)}:")
    assert named.search(err) or named.search(out), said


# The render never reads a hand-written file (only the check scans it), so it is not asked.
VERB_FILES = [
    pytest.param(verb, *f.values, id=f"{name}-{f.id}")
    for name, verb in (("render", ("render",)), ("check", ("check", "--worktree")))
    for f in FILES
    if not (name == "render" and f.values[0] == SCANNED)
]


@pytest.mark.parametrize("spoiler", list(SPOILERS), ids=list(SPOILERS))
@pytest.mark.parametrize(("verb", "rel"), VERB_FILES)
def test_a_file_that_is_not_text_is_named(
    tmp_path: Path, rel: str, spoiler: str, verb: tuple[str, ...]
) -> None:
    root = _project(tmp_path)
    path = root / rel
    path.write_bytes(path.read_bytes() + SPOILERS[spoiler])
    rc, out, err = run_cli(root, *verb)
    _named(rel, rc, out, err)
    if verb[0] == "render":
        assert err.startswith("tether: error: ") and f"{rel}:" in err.splitlines()[0], err


def test_the_line_is_named(tmp_path: Path) -> None:
    root = _project(tmp_path)
    template = root / "docs_src" / "README.md.j2"
    lines = template.read_bytes().count(b"\n")
    template.write_bytes(template.read_bytes() + b"caf\xe9\n")
    rc, _, err = run_cli(root, "render")
    assert rc == 1
    assert f"docs_src/README.md.j2:{lines + 1}: not UTF-8 text (byte 0xe9" in err, err


@pytest.mark.parametrize("rel", [f for f in FILES if f.values[0] != SCANNED])
def test_a_file_the_system_will_not_read_is_named(
    tmp_path: Path, rel: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A permission error injected at the read: the suite often runs as root, which reads a
    # mode-000 file (the test below does it for real where it can).
    root = _project(tmp_path)
    target = (root / rel).resolve()
    real = Path.read_bytes

    def refuse(self: Path) -> bytes:
        if self.resolve() == target:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", refuse)
    stat = target.stat()  # a new stamp, so the project config is read again, not cached
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    rc, out, err = run_cli(root, "render")
    assert rc == exit_code_for(OSFailure(rel, "read it", "x")) == 74, out + err
    assert rel in err and "Permission denied" in err and "Traceback" not in err


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root reads a mode-000 file; the test above injects the refusal"
)
def test_a_mode_000_template_is_named(tmp_path: Path) -> None:
    root = _project(tmp_path)
    template = root / "docs_src" / "README.md.j2"
    template.chmod(0)
    try:
        rc, out, err = run_cli(root, "render")
    finally:
        template.chmod(0o644)
    assert rc == 74 and "docs_src/README.md.j2" in err and "Permission denied" in err, out + err


def test_the_reader_keeps_or_folds_line_endings(tmp_path: Path) -> None:
    path = tmp_path / "crlf.txt"
    path.write_bytes(b"a\r\nb\rc\n")
    assert read_text(path, exact=True) == "a\r\nb\rc\n"
    assert read_text(path) == "a\nb\nc\n"
    with pytest.raises(TextFileError, match=r"^x:2: a NUL byte"):
        decode_text(b"ok\n\x00", "x")
