"""Time you can trust (issue 25 item 3): "newest" orders by git history, then the stamp, and a
run dated in the future of the checking machine is a finding.

FIXTURE repositories are made with ``git init`` in tmp_path; the runs come from runfactory.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from tether.store import load_store
from tether.store.cite import cited
from tether.store.history import added_order

from validate.suite.fixture_project import fixture_project, git, run_cli
from validate.suite.runfactory import make_sweep_run

REPO = Path(__file__).resolve().parents[2]
SWEEP = "prefill-vs-sdpa"


def _stamp(delta: timedelta) -> str:
    return (datetime.now(timezone.utc) + delta).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is needed: newest orders by git history")
    root = fixture_project(tmp_path / "repo")
    shutil.copytree(REPO / "docs_src", root / "docs_src")
    git(root, "init", "--quiet")
    return root


def test_a_run_from_a_clock_a_year_ahead_does_not_win(repo: Path) -> None:
    store = repo / "results"
    ahead = make_sweep_run(started=_stamp(timedelta(days=365)), seed=1, store=store, root=repo)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "FIXTURE: a run from a host a year ahead")
    real = make_sweep_run(started=_stamp(-timedelta(hours=1)), seed=2, store=store, root=repo)
    runs = load_store(store)
    # Uncommitted: newer than every committed run.
    assert cited(runs, "sweep", SWEEP, "sm90").id == real.id
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "FIXTURE: a later real run")
    order = added_order(store)
    assert order[ahead.id] < order[real.id]
    assert cited(load_store(store), "sweep", SWEEP, "sm90").id == real.id
    # And the check names the future-dated run.
    assert run_cli(repo, "render")[0] == 0
    rc, out, _ = run_cli(repo, "check", "--worktree")
    assert rc == 1
    assert ahead.id in out and "in the future" in out


def test_the_index_check_orders_by_the_repository_history(repo: Path) -> None:
    store = repo / "results"
    make_sweep_run(started=_stamp(-timedelta(days=1)), seed=3, store=store, root=repo)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "FIXTURE: newer by history")
    # Added later but stamped earlier: history says it is the newest.
    late = make_sweep_run(started=_stamp(-timedelta(days=30)), seed=4, store=store, root=repo)
    git(repo, "add", "-A")
    git(repo, "commit", "--quiet", "-m", "FIXTURE: stamped earlier, committed later")
    assert cited(load_store(store), "sweep", SWEEP, "sm90").id == late.id
    assert run_cli(repo, "render")[0] == 0
    git(repo, "add", "-A")
    rc, out, err = run_cli(repo, "check")  # the index, on a copy without .git
    assert rc == 0, out + err


def test_outside_git_the_stamp_decides(tmp_path: Path) -> None:
    store = tmp_path / "store"
    old = make_sweep_run(started="2026-01-01T00:00:00Z", seed=5, store=store)
    new = make_sweep_run(started="2026-01-02T00:00:00Z", seed=6, store=store)
    assert added_order(store) == {}
    assert cited(load_store(store), "sweep", SWEEP, "sm90").id == new.id
    del old


def test_small_clock_skew_is_not_a_finding(tmp_path: Path) -> None:
    from tether.check import check_future_runs

    store = tmp_path / "store"
    skewed = make_sweep_run(started=_stamp(timedelta(minutes=2)), seed=7, store=store)
    ahead = make_sweep_run(started=_stamp(timedelta(days=2)), seed=8, store=store)
    found = check_future_runs(tmp_path, [skewed, ahead])
    assert [ahead.id in f.what for f in found] == [True]


def test_order_in_asks_git_once_per_store_within_a_steady_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One check asks the store's history twice (its loader, its cache key); inside
    # history.steady() git is asked once, and a caller's copy is its own.
    from tether.store import history

    asked: list[tuple[str, ...]] = []

    def fake_git(cwd: Path, *args: str) -> str:
        asked.append(args)
        return "\0\nresults/sm90/20260101T000000Z-sweep-x-sm90-0123456789ab.json\n"

    monkeypatch.setattr(history, "_git", fake_git)
    with history.steady():
        first = history.order_in(tmp_path, "results")
        first.clear()
        assert history.order_in(tmp_path, "results") == {
            "20260101T000000Z-sweep-x-sm90-0123456789ab": 0
        }
        history.order_in(tmp_path, "results", "HEAD~1")
    assert len(asked) == 2
    history.order_in(tmp_path, "results")
    assert len(asked) == 3  # outside the block, git is asked again
