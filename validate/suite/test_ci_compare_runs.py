"""ci/compare_runs.py on FIXTURE runs from validate/suite/runfactory.py (made-up samples)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from validate.suite.runfactory import make_sweep_run

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "ci"))

import compare_runs

AXES = {"hq": [16, 32], "seqlen": [256, 512]}


def _pair(tmp_path: Path, other_ratio: float, other_axes: dict | None = None) -> list[str]:
    # Same seed: the "other" run is the base run's samples with B scaled, so only the
    # ratio under test differs.
    base = make_sweep_run(axes=AXES, ratio=0.9, store=tmp_path / "a")
    other = make_sweep_run(axes=other_axes or AXES, ratio=other_ratio, store=tmp_path / "b")
    return [str(base.path), str(other.path)]


def test_same_cells_same_ratio_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert compare_runs.main(_pair(tmp_path, 0.9)) == 0
    assert "4 of 4 cells agree" in capsys.readouterr().out


def test_a_shifted_run_is_flagged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert compare_runs.main(_pair(tmp_path, 0.6)) == 1
    assert "OUTSIDE" in capsys.readouterr().out


def test_different_cells_are_refused(tmp_path: Path) -> None:
    assert compare_runs.main(_pair(tmp_path, 0.9, {"hq": [16], "seqlen": [256, 512]})) == 2


def test_a_control_run_sets_the_run_to_run_band(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The other run is three percent off (outside the floors). A control as far off as that
    # makes it reproduce; a control identical to the base does not.
    args = _pair(tmp_path, 0.9 * 1.03)
    far = make_sweep_run(axes=AXES, ratio=0.9 * 1.04, store=tmp_path / "c")
    assert compare_runs.main([*args, "--control", str(far.path)]) == 0
    out = capsys.readouterr().out
    assert "band ok" in out and "4 of 4 cells inside their floors or the band" in out
    same = make_sweep_run(axes=AXES, ratio=0.9, store=tmp_path / "d")
    assert compare_runs.main([*args, "--control", str(same.path)]) == 1
    assert "band OUTSIDE" in capsys.readouterr().out
    other_cells = make_sweep_run(axes={"hq": [16], "seqlen": [256]}, store=tmp_path / "e")
    assert compare_runs.main([*args, "--control", str(other_cells.path)]) == 2
