"""Atomic writes, loads, ordering and the citing rule, on FIXTURE stores in tmp_path."""

from __future__ import annotations

import json
import multiprocessing
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tether.errors import RunFileError, StoreError
from tether.store import (
    is_superseded,
    load_run,
    load_store,
    run_from_json,
    write_run,
)

from validate.suite.runfactory import (
    make_fixture_store,
    make_not_measured_run,
    make_sweep_run,
)

WRITERS = 8
RUNS_PER_WRITER = 50


def test_write_then_load_round_trips(tmp_path: Path) -> None:
    run = make_sweep_run()
    path = write_run(run, tmp_path)
    assert path == tmp_path / "sm90" / f"{run.id}.json"
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n")
    assert text == json.dumps(json.loads(text), sort_keys=True, indent=1, ensure_ascii=False) + "\n"
    loaded = load_run(path)
    assert loaded.to_json() == run.to_json()
    assert loaded.path == path
    assert [p.name for p in (tmp_path / "sm90").iterdir()] == [path.name]  # no temp left


def test_never_overwrites(tmp_path: Path) -> None:
    run = make_sweep_run()
    path = write_run(run, tmp_path)
    before = path.read_bytes()
    with pytest.raises(StoreError, match="already exists"):
        write_run(run, tmp_path)
    assert path.read_bytes() == before
    assert len(list((tmp_path / "sm90").iterdir())) == 1


def test_ids_are_content_addressed() -> None:
    a = make_sweep_run(seed=1)
    b = make_sweep_run(seed=2)  # the same run but for its samples
    assert a.id != b.id and a.id.endswith(a.digest.split(":")[1][:12])


def test_invalid_run_is_not_written(tmp_path: Path) -> None:
    run = make_sweep_run()
    bad_cell = replace(run.cells[0], samples={"A": (1e-4,), "B": (1e-4,)}, blocks=())
    with pytest.raises(RunFileError, match=r"cells\[0\]\.samples\.A2"):
        write_run(replace(run, cells=(bad_cell, *run.cells[1:])), tmp_path)
    assert not (tmp_path / "sm90").exists() or not any((tmp_path / "sm90").iterdir())


def _writer(store: str, runs: list[dict[str, Any]]) -> None:
    for data in runs:
        write_run(run_from_json(data, "fixture"), Path(store))


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    # Distinct content per run (its seed), so distinct content-addressed ids.
    batches = [
        [
            make_sweep_run(axes={"seqlen": [256]}, n=2, seed=w * RUNS_PER_WRITER + i).to_json()
            for i in range(RUNS_PER_WRITER)
        ]
        for w in range(WRITERS)
    ]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), batch)) for batch in batches]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    runs = load_store(tmp_path)
    assert len(runs) == WRITERS * RUNS_PER_WRITER
    assert len({r.id for r in runs}) == WRITERS * RUNS_PER_WRITER


def test_load_store_orders_and_refuses_bad_files(tmp_path: Path) -> None:
    assert load_store(tmp_path / "missing") == []
    written = make_fixture_store(tmp_path)
    runs = load_store(tmp_path)
    assert [r.id for r in runs] == [r.id for r in sorted(written, key=lambda r: (r.started, r.id))]
    (tmp_path / "sm90" / ".half-written.tmp").write_text("{", encoding="utf-8")  # ignored
    assert len(load_store(tmp_path)) == len(written)
    broken = tmp_path / "sm90" / "broken.json"
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(RunFileError, match=r"broken\.json: json"):
        load_store(tmp_path)


def test_cited_is_newest_guarded_ok_by_started(tmp_path: Path) -> None:
    from tether.store.cite import cited, newest_attempt

    from validate.suite.runfactory import UNGUARDED

    old = make_sweep_run(started="2026-01-01T00:00:00Z")
    new = make_sweep_run(started="2026-01-05T00:00:00Z")
    unguarded = make_sweep_run(started="2026-01-07T00:00:00Z", guard=UNGUARDED)
    failed = make_not_measured_run(started="2026-01-09T00:00:00Z")
    runs = [new, failed, unguarded, old]
    assert cited(runs, "sweep", new.name, "sm90") == new  # never the unguarded one
    assert newest_attempt(runs, "sweep", new.name, "sm90") == failed
    assert cited(runs, "sweep", new.name, "gfx942") is None
    assert cited(runs, "gate", new.name, "sm90") is None


def test_cited_prefers_the_newest_run_of_the_current_kernels() -> None:
    """A newer run of kernels since changed (an exploration measured, then reverted) never
    hides a run of the kernels as they are; only where none describes them is the newest
    cited (and shown stale)."""
    from tether.store.cite import cited

    fresh = make_sweep_run(started="2026-01-01T00:00:00Z")
    explored = make_sweep_run(started="2026-01-05T00:00:00Z")
    runs = [explored, fresh]

    def stale(run: Any) -> tuple[str, ...]:
        return ("kernels/attn.py",) if run is explored else ()

    assert cited(runs, "sweep", fresh.name, "sm90") == explored  # no staleness: the newest
    assert cited(runs, "sweep", fresh.name, "sm90", stale) == fresh
    assert cited([explored], "sweep", fresh.name, "sm90", stale) == explored
    assert cited(runs, "sweep", fresh.name, "sm90", lambda run: ("kernels/attn.py",)) == explored


def test_is_superseded() -> None:
    run = make_sweep_run()
    assert not is_superseded(run, run.harness_fingerprint)
    assert is_superseded(run, "sha256:" + "0" * 64)
