"""``tether check`` and figures: digests decide what is redrawn; ``--full`` redraws everything.

FIXTURE checkouts: the real templates and policy.py copied into a temp folder, a store of
synthetic runs from validate/suite/runfactory.py, docs rendered into the checkout.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tether.cli import main
from tether.render import plots, write_all
from tether.render.figures import embedded_digest, stamp

from validate.suite.fixture_project import fixture_project
from validate.suite.runfactory import (
    CONSERVATIVE_POLICY,
    make_sweep_run,
    write_conservative_policy,
)

REPO = Path(__file__).resolve().parents[2]
CURVE = Path("docs/figures/sm90-prefill-vs-sdpa.svg")
TREND = Path("docs/figures/trend-sm90-prefill-vs-sdpa.svg")


def _check(root: Path, store: Path, *extra: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--root", str(root), "--store", str(store), "check", *extra], out, err)
    return code, out.getvalue() + err.getvalue()


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root, store = tmp_path / "repo", tmp_path / "store"
    fixture_project(root, policy=CONSERVATIVE_POLICY)
    shutil.copytree(REPO / "docs_src", root / "docs_src")
    write_conservative_policy(root)
    make_sweep_run(ratio=0.9, started="2026-11-01T02:00:00Z", store=store, root=root)
    make_sweep_run(ratio=0.8, seed=1, started="2026-11-02T02:00:00Z", store=store, root=root)
    write_all(root, store)
    assert (root / CURVE).is_file() and (root / TREND).is_file()
    return root, store


def _refuse_to_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("a figure was drawn")

    monkeypatch.setattr(plots, "curve_svg", refuse)
    monkeypatch.setattr("tether.trends.trend_svg", refuse)


def test_clean_tree_checks_without_drawing(
    tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    _refuse_to_draw(monkeypatch)
    code, said = _check(*tree)
    assert code == 0, said


def test_full_draws_every_figure(tree: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    assert _check(*tree, "--full")[0] == 0
    _refuse_to_draw(monkeypatch)
    # main reports an unexpected error in one line (exit 70); --debug lets it through.
    code, said = _check(*tree, "--full")
    assert code == 70 and "a figure was drawn" in said
    with pytest.raises(AssertionError, match="a figure was drawn"):
        _check(*tree, "--full", "--debug")


def test_stale_inputs_digest_is_drift(tree: tuple[Path, Path]) -> None:
    root, store = tree
    svg = (root / CURVE).read_bytes()
    digest = embedded_digest(svg)
    assert digest is not None
    (root / CURVE).write_bytes(svg.replace(digest.encode(), b"0" * 64, 1))
    code, said = _check(root, store)
    assert code == 1
    assert f"{CURVE.as_posix()}:" in said and "tether render" in said


def test_hand_edit_of_the_drawing_is_caught_without_full(tree: tuple[Path, Path]) -> None:
    root, store = tree
    svg = (root / CURVE).read_bytes()
    edited = svg.replace(b"tab:blue", b"tab:red").replace(b"#1f77b4", b"#d62728")
    assert edited != svg
    (root / CURVE).write_bytes(edited)
    code, said = _check(root, store)
    assert code == 1 and CURVE.as_posix() in said


def test_forged_digests_pass_the_fast_check_and_fail_full(tree: tuple[Path, Path]) -> None:
    root, store = tree
    svg = (root / TREND).read_bytes()
    digest = embedded_digest(svg)
    assert digest is not None
    unstamped = re.sub(rb"<!-- tether-figure [^>]*-->\n", b"", svg, count=1)
    forged = stamp(unstamped.replace(b"headline geomean", b"a typed-in curve"), digest)
    assert forged != svg
    (root / TREND).write_bytes(forged)
    assert _check(root, store)[0] == 0  # the documented trade-off of the fast check
    code, said = _check(root, store, "--full")
    assert code == 1 and TREND.as_posix() in said


def test_stamp_round_trip_and_body_digest() -> None:
    svg = b'<?xml version="1.0"?>\n<svg>x</svg>\n'
    stamped = stamp(svg, "a" * 64)
    assert embedded_digest(stamped) == "a" * 64
    assert embedded_digest(svg) is None
    assert embedded_digest(stamped.replace(b">x<", b">y<")) is None
    body = hashlib.sha256(svg).hexdigest()
    assert f"body={body}".encode() in stamped


def test_help_documents_the_trade_off(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse writes help to sys.stdout, not to the injected stream.
    out, err = io.StringIO(), io.StringIO()
    assert main(["check", "--help"], out, err) == 0
    said = capsys.readouterr()
    text = " ".join((out.getvalue() + err.getvalue() + said.out + said.err).split())
    assert "--full" in text and "forges both digests" in text


def test_check_imports_no_matplotlib_when_figures_match(tree: tuple[Path, Path]) -> None:
    root, store = tree
    probe = (
        "import io, sys\n"
        "from tether.cli import main\n"
        f"code = main(['--root', {str(root)!r}, '--store', {str(store)!r}, 'check'],"
        " io.StringIO(), io.StringIO())\n"
        "print(code, 'matplotlib' in sys.modules)\n"
    )
    # This checkout's packages, not an installed copy of another (a git worktree of the repo).
    paths = (REPO / "lib", REPO / "kernels", REPO)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in paths)}
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "False"], done.stdout
