"""Each arch section of the front page names the Triton its figures were measured under
(issue 45 item 2): the summary reads it from the runs' provenance, never from the host."""

from __future__ import annotations

from types import SimpleNamespace

from tether.render.context import RunRef
from tether.render.summary import SummaryArch, SummaryRow


def _ref(triton: str | None) -> RunRef:
    return RunRef(
        id="r", kind="sweep", name="s", arch="sm90", date="2026-12-04",
        started="2026-12-04T00:00:00Z", git_sha="0" * 12, git_dirty=False, device="H200",
        superseded=False, status="ok", reason=None, holder=None, guard="held", evidence=True,
        triton=triton,
    )  # fmt: skip


def _row(triton: str | None, measured: bool = True) -> SummaryRow:
    doc = SimpleNamespace(run=_ref(triton) if measured else None)
    return SummaryRow("label", "sweep", doc, None, None)


def test_tritons_are_the_measured_runs_releases_sorted_once() -> None:
    arch = SummaryArch(
        "sm90", "gluon", (_row("3.6.0"), _row("3.7.1"), _row("3.6.0"), _row("9.9", False)), None
    )
    assert arch.tritons == ("3.6.0", "3.7.1")


def test_a_run_with_no_triton_says_not_recorded() -> None:
    assert SummaryArch("cpu", None, (_row(None),), None).tritons == ("not recorded",)


def test_readme_section_states_the_release() -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    sm90 = readme.split("### sm90", 1)[1].split("### ", 1)[0]
    assert "Measured under Triton " in sm90
