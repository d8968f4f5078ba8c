"""Tuned choices: a default picked from a tuning run by the stated rule, held by tether check.

The rule (``TunedChoice.judge``) on rows made here; the check (``check_tuned_choices``) on the
project's own store, against the project's own choice and copies of it made wrong one way each.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from tether import project
from tether.check import check_tuned_choices, evidence_runs
from tether.policy import TunedChoice
from tether.render.context import kernel_staleness, tuned_doc
from tether.render.policy_file import tuned_choices
from tether.store import load_store
from tether.store.harness import CurrentHarness

ROOT = Path(__file__).resolve().parents[2]
CHOICE = TunedChoice(id="t", arch="sm90", sweep="tune-x", chosen="b", run="r")


def test_the_best_candidate_holds() -> None:
    assert CHOICE.judge([("a", 0.95, 1.01), ("b", 1.02, 1.01)]) == ("b", True)


def test_a_lead_inside_the_leaders_noise_keeps_the_default() -> None:
    # a leads b by 1.5%, inside its cells' noise (up to 2%): no change of default for it.
    assert CHOICE.judge([("a", 1.015, 1.02), ("b", 1.0, 1.01)]) == ("a", True)


def test_a_lead_beyond_the_noise_fails_the_default() -> None:
    assert CHOICE.judge([("a", 1.05, 1.02), ("b", 1.0, 1.01)]) == ("a", False)


def test_without_a_noise_only_the_best_holds() -> None:
    assert CHOICE.judge([("a", 1.001, None), ("b", 1.0, None)]) == ("a", False)


def test_a_chosen_candidate_the_run_lacks_does_not_hold() -> None:
    assert CHOICE.judge([("a", 1.0, 1.01)]) == ("a", False)
    assert CHOICE.judge([]) == (None, False)


# --- the check, on the project's store -------------------------------------------------------


@pytest.fixture(scope="module")
def store_runs() -> list:
    return load_store(project.get(ROOT).store)


def _findings(runs: list, choice: TunedChoice) -> list[str]:
    return [f.what for f in check_tuned_choices(ROOT, [choice], runs, CurrentHarness(ROOT))]


def _own() -> TunedChoice:
    (choice,) = tuned_choices(ROOT)
    return choice


def test_the_projects_choice_holds_on_the_run_it_cites(store_runs: list) -> None:
    choice = _own()
    assert _findings(store_runs, choice) == []
    assert any(
        run.id == choice.run and why == f"tuned choice {choice.id} rests on it"
        for run, why in evidence_runs(store_runs, (), (), [choice])
    ), "the freshness check judges the tuning run the choice rests on"


def test_a_candidate_the_rule_does_not_pick_is_refused(store_runs: list) -> None:
    choice = _own()
    # The slowest candidate of the cited run (read from the run, so the test follows the grid).
    doc = tuned_doc(store_runs, choice, CurrentHarness(ROOT), kernel_staleness(ROOT, store_runs))
    assert doc.tune is not None and len(doc.tune.rows) > 1, "the cited run has candidates"
    slowest = min(doc.tune.rows, key=lambda row: row.geomean).config
    (msg,) = _findings(store_runs, dataclasses.replace(choice, chosen=slowest))
    assert "does not hold by its rule" in msg and "beyond the noise" in msg


def test_an_older_tuning_run_is_refused(store_runs: list) -> None:
    choice = _own()
    older = sorted(
        r.id for r in store_runs if r.kind == "tune" and r.name == choice.sweep and r.ok
    )[0]
    assert older != choice.run
    msgs = _findings(store_runs, dataclasses.replace(choice, run=older))
    assert any(f"but {choice.run} is the newest" in m for m in msgs), msgs


def test_a_run_that_is_not_a_tuning_run_is_refused(store_runs: list) -> None:
    choice = _own()
    sweep = next(r.id for r in store_runs if r.kind == "sweep")
    for run in (sweep, "20990101T000000Z-tune-nothing"):
        (msg,) = _findings(store_runs, dataclasses.replace(choice, run=run))
        assert "not an ok tuning run of the store" in msg


def _newer_copy(runs: list, run_id: str, *, other: bool) -> Any:
    """The cited tuning run again, made later: of other kernels (another fingerprint, from a
    dirty tree, so tether cannot place the change) or of this checkout's kernels."""
    run = next(r for r in runs if r.id == run_id)
    later = "2099" + run.id[4:]
    prov = dataclasses.replace(run.provenance, started="2099" + run.provenance.started[4:])
    if other:
        prov = dataclasses.replace(prov, git_dirty=True, kernels_fingerprint="sha256:" + "0" * 64)
    return dataclasses.replace(run, id=later, provenance=prov, path=None)


def test_a_newer_tuning_run_of_other_kernels_does_not_overrule_the_choice(
    store_runs: list,
) -> None:
    # A variant tried and reverted leaves its tuning run in the store (append-only); the
    # choice rests on the newest run that measured the kernels it chooses among.
    choice = _own()
    other = _newer_copy(store_runs, choice.run, other=True)
    assert _findings([*store_runs, other], choice) == []


def test_a_newer_tuning_run_of_these_kernels_must_be_cited(store_runs: list) -> None:
    choice = _own()
    newer = _newer_copy(store_runs, choice.run, other=False)
    msgs = _findings([*store_runs, newer], choice)
    assert any(f"but {newer.id} is the newest" in m for m in msgs), msgs
