"""FIXTURE projects: a tmp folder configured for tether the way an adopting repository is.

    root = fixture_project(tmp_path / "repo", policy="kernels/policy.py")

writes ``pyproject.toml`` with a ``[tool.tether]`` table (the real project's render targets
and templates, the given policy file and plugins) so the CLI, the renderer and the check treat
the folder as a project. Nothing here is a result; it only lays out folders for tests.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _toml_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def fixture_project(
    root: Path,
    *,
    policy: str | Iterable[str] | None = None,
    plugins: Iterable[str] = (),
    files: Mapping[str, str] | None = None,
    figures: str | None = "docs/figures",
    regions: Iterable[str] | None = None,
    harness: Iterable[str] = (),
    kernels: Iterable[str] = ("kernels/**/*.py",),
    compiled: Iterable[str] | None = None,
    doc_arches: Iterable[str] = ("sm90", "gfx942", "gfx950", "gfx1151"),
    headline: str | None = "prefill-vs-sdpa",
    scan_exclude: Iterable[str] = (),
    data: Mapping[str, str] | None = None,
    extra: str = "",
) -> Path:
    """Write a FIXTURE ``pyproject.toml`` for tether under ``root``; returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    if files is None:
        files = {"README.md": "README.md.j2", "docs/backends.md": "backends.md.j2"}
    policies = [policy] if isinstance(policy, str) else list(policy or ())
    if regions is None:
        regions = policies
    lines = [
        "# FIXTURE project for tether's own tests",
        "[project]",
        'name = "fixture"',
        'version = "0"',
        "",
        "[tool.tether]",
        'store = "results"',
        'scratch = "scratch"',
        'templates = "docs_src"',
    ]
    if isinstance(policy, str):
        lines.append(f"policy = {json.dumps(policy)}")
    elif policies:
        lines.append(f"policy = {_toml_list(policies)}")
    lines.append(f"plugins = {_toml_list(plugins)}")
    lines.append(f"doc_arches = {_toml_list(doc_arches)}")
    if headline:
        lines.append(f"headline = {json.dumps(headline)}")
    lines += [
        "",
        "[tool.tether.fingerprint]",
        f"harness = {_toml_list(harness)}",
        f"kernels = {_toml_list(kernels)}",
        *([] if compiled is None else [f"compiled = {_toml_list(compiled)}"]),
        "",
        "[tool.tether.render]",
        "files = {"
        + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in files.items())
        + "}",
    ]
    if figures:
        lines.append(f"figures = {json.dumps(figures)}")
    if data:
        lines.append(
            "data = {" + ", ".join(f"{k} = {json.dumps(v)}" for k, v in data.items()) + "}"
        )
    lines.append(f"regions = {_toml_list(regions)}")
    lines += ["", "[tool.tether.scan]", f"exclude = {_toml_list(scan_exclude)}", "", extra]
    (root / "pyproject.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def run_cli(root: Path, *argv: str) -> tuple[int, str, str]:
    """``tether --root ROOT ARGV...`` in this process: (exit code, stdout, stderr)."""
    import io

    from tether.cli import main

    out, err = io.StringIO(), io.StringIO()
    rc = main(["--root", str(root), *argv], out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def git(root: Path, *args: str) -> str:
    """FIXTURE: ``git *args`` in ``root`` as a fixture author (name and email set, so commits
    work on a host with no git identity); its stdout, CalledProcessError on failure."""
    return subprocess.run(
        ["git", "-c", "user.name=fixture", "-c", "user.email=fixture@example.invalid", *args],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
