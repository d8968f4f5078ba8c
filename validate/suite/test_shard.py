"""Sharding a sweep across GPUs and merging the shards (tether.bench.shard).

Shards are built here from FIXTURE runs (validate/suite/runfactory.py): made-up samples.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from tether.bench.shard import load_shard, merge_shards, shard_keys, shard_of, write_shard
from tether.errors import RunFileError, StoreError, UsageError
from tether.store import Run, validate_run, write_run
from tether.store.io import load_run

from validate.suite.runfactory import make_sweep_run

AXES = {"batch": [1, 4], "hq": [16, 32], "seqlen": [256, 512]}
GPUS = [
    {"index": 0, "uuid": "GPU-fixture-0", "name": "FIXTURE-GPU"},
    {"index": 1, "uuid": "GPU-fixture-1", "name": "FIXTURE-GPU"},
]


def _keys() -> list[dict[str, Any]]:
    return [dataclasses.asdict(c)["key"] for c in make_sweep_run(axes=AXES).cells]


def _shard_runs(count: int) -> tuple[Run, list[dict[str, Any]]]:
    """FIXTURE: one full sweep run and its cells split into ``count`` shard runs."""
    full = make_sweep_run(axes=AXES)
    keys = [dict(c.key) for c in full.cells]
    parts = []
    for index, mine in enumerate(shard_keys(keys, count)):
        wanted = [json.dumps(k, sort_keys=True) for k in mine]
        doc = copy.deepcopy(full.to_json())  # to_json shares config with the Run
        doc["cells"] = [c for c in doc["cells"] if json.dumps(c["key"], sort_keys=True) in wanted]
        doc["config"]["grid"]["axes"] = {}  # a shard is not the product; its run says so
        doc["id"] = f"{full.id}-s{index}"
        parts.append(doc)
    return full, parts


def _write(tmp_path: Path, count: int) -> tuple[Run, list[Path]]:
    full, parts = _shard_runs(count)
    paths = [
        write_shard(doc, tmp_path / "shards", i, count, GPUS[i % 2], axes=AXES)
        for i, doc in enumerate(parts)
    ]
    return full, paths


def test_shard_keys_deal_every_cell_once() -> None:
    keys = _keys()
    shards = shard_keys(keys, 3)
    flat = [json.dumps(k, sort_keys=True) for s in shards for k in s]
    assert sorted(flat) == sorted(json.dumps(k, sort_keys=True) for k in keys)
    assert [len(s) for s in shards] == [3, 3, 2]
    assert shard_of(keys[4], keys, 3) == 1
    with pytest.raises(UsageError):
        shard_keys(keys, 0)


def test_merge_keeps_roles_together_and_validates(tmp_path: Path) -> None:
    full, paths = _write(tmp_path, 2)
    merged = merge_shards(paths)
    validate_run(merged)  # the store's own rules: grid product, A/A control, provenance
    assert merged.status == "ok"
    assert len(merged.cells) == len(full.cells)
    by_key = {json.dumps(c.key, sort_keys=True): c for c in full.cells}
    for cell in merged.cells:
        original = by_key[json.dumps(cell.key, sort_keys=True)]
        # A, A2 and B of a cell come from one shard, so from one GPU, unchanged.
        assert set(cell.samples) == {"A", "A2", "B"}
        assert cell.samples == original.samples
        gpu = cell.extra["gpu"]
        assert gpu == GPUS[shard_of(cell.key, [dict(c.key) for c in full.cells], 2)]
    assert merged.provenance.device == "gpu0: FIXTURE-GPU, gpu1: FIXTURE-GPU"
    assert merged.guard.mode == "held" and merged.sharded
    assert merged.config["grid"]["axes"] == AXES
    # It can be written to a store and loaded back like any run.
    loaded = load_run(write_run(merged, tmp_path / "results"))
    assert loaded.id == merged.id


def test_merge_refuses_missing_or_repeated_shard(tmp_path: Path) -> None:
    _, paths = _write(tmp_path, 3)
    with pytest.raises(StoreError, match=r"shards \[2\] of 3 missing"):
        merge_shards(paths[:2])
    with pytest.raises(StoreError, match="already given"):
        merge_shards([paths[0], paths[0], paths[1], paths[2]])


def test_merge_refuses_a_cell_measured_twice(tmp_path: Path) -> None:
    _, parts = _shard_runs(2)
    parts[1]["cells"].append(parts[0]["cells"][0])
    paths = [
        write_shard(doc, tmp_path / "shards", i, 2, GPUS[i], axes=AXES)
        for i, doc in enumerate(parts)
    ]
    with pytest.raises(StoreError, match="measured by two shards"):
        merge_shards(paths)


def test_merge_refuses_shards_of_different_sweeps(tmp_path: Path) -> None:
    _, parts = _shard_runs(2)
    parts[1]["config"]["arms"]["B"] = "triton_eager"
    paths = [
        write_shard(doc, tmp_path / "shards", i, 2, GPUS[i], axes=AXES)
        for i, doc in enumerate(parts)
    ]
    with pytest.raises(StoreError, match="not one sweep"):
        merge_shards(paths)


def test_shard_never_replaced_and_bad_file_named(tmp_path: Path) -> None:
    _, parts = _shard_runs(1)
    write_shard(parts[0], tmp_path, 0, 1, GPUS[0], axes=AXES)
    with pytest.raises(StoreError, match="refusing to replace"):
        write_shard(parts[0], tmp_path, 0, 1, GPUS[0], axes=AXES)
    broken = tmp_path / "broken.shard0.json"
    broken.write_text('{"schema": "tether.shard/1", "shard": {"index": 0}}', encoding="utf-8")
    with pytest.raises(RunFileError, match=r"broken\.shard0\.json: shard"):
        load_shard(broken)


def test_merge_of_a_busy_shard_is_not_measured(tmp_path: Path) -> None:
    _, parts = _shard_runs(2)
    parts[1].update(status="not_measured", reason="gpu 1 busy", cells=[])
    paths = [
        write_shard(doc, tmp_path / "shards", i, 2, GPUS[i], axes=AXES)
        for i, doc in enumerate(parts)
    ]
    merged = merge_shards(paths)
    assert merged.status == "not_measured"
    assert "shard 1 (gpu 1): gpu 1 busy" in (merged.reason or "")
