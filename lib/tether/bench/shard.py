"""Split one sweep across several GPUs of a host, and merge the shards back into one run.

The unit of sharding is the cell, never the arm: a cell's A, its A/A control A2 and its B
are timed by one worker on one GPU, interleaved, so the cell's floor and its ratio describe
the same device and the same minutes. Splitting arms across GPUs would make the A/A floor
compare two devices and the A/B ratio include the difference between them.

A shard is a partial run (the cells of one GPU) wrapped with its place in the split; it is
written to a shard folder, never to the store, because it does not satisfy the run schema
on its own (its cells are not the grid's product). ``merge_shards`` checks that the shards
belong to one sweep, cover each grid cell exactly once, and builds the one run the store takes.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import RunFileError, StoreError, UsageError
from tether.store.model import SCHEMA as RUN_SCHEMA
from tether.store.model import digest_of
from tether.store.provenance import make_id
from tether.store.schema import run_from_json

if TYPE_CHECKING:
    from tether.bench.sweep import Bench
    from tether.registry import Sweep
    from tether.store.model import Run as StoreRun

SHARD_SCHEMA = "tether.shard/1"
Key = dict[str, Any]
ROLES = ("A", "A2", "B")

# Fields every shard of one sweep must agree on; anything else may differ per GPU. A shard's
# own run declares ``axes: {}`` (its cells are not the product), the full axes ride in the
# shard record, so config is compared with the axes put back.
_SAME = ("schema", "kind", "name")
_SAME_PROVENANCE = (
    "git_sha",
    "git_dirty",
    "harness_fingerprint",
    "kernels_fingerprint",
    "host",
    "arch",
)


def grid_keys(grid: Mapping[str, Any]) -> list[Key]:
    """The grid's cells in a stable order: the cartesian product of ``axes`` by sorted name."""
    axes = grid.get("axes", {})
    names = sorted(axes)
    return [
        dict(zip(names, vals, strict=True)) for vals in itertools.product(*(axes[n] for n in names))
    ]


def _key_id(key: Mapping[str, Any]) -> str:
    return json.dumps(key, sort_keys=True)


def shard_keys(keys: Sequence[Key], n_shards: int) -> list[list[Key]]:
    """Deal ``keys`` round-robin into ``n_shards`` lists, so each GPU gets small and large cells."""
    if n_shards < 1:
        raise UsageError(f"shards: need at least 1, got {n_shards}")
    out: list[list[Key]] = [[] for _ in range(n_shards)]
    for i, key in enumerate(keys):
        out[i % n_shards].append(dict(key))
    return out


def shard_of(key: Mapping[str, Any], keys: Sequence[Key], n_shards: int) -> int:
    """Which shard measures ``key`` (all of its roles)."""
    wanted = _key_id(key)
    for i, k in enumerate(keys):
        if _key_id(k) == wanted:
            return i % n_shards
    raise UsageError(f"key {wanted}: not a cell of this grid")


def _atomic_write(path: Path, text: str) -> None:
    # O_EXCL link so an existing shard is never replaced: a re-run writes a new shard dir.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError as exc:
            raise StoreError(f"{path}: shard already written; refusing to replace it") from exc
    finally:
        os.unlink(tmp)


def write_shard(
    run: StoreRun | Mapping[str, Any],
    shard_dir: Path | str,
    index: int,
    count: int,
    gpu: Mapping[str, Any],
    axes: Mapping[str, Sequence[Any]] | None = None,
) -> Path:
    """Write the partial run of shard ``index`` of ``count`` (measured on ``gpu``) to ``shard_dir``.

    ``run`` is a partial run whose cells are this shard's cells only; ``gpu`` is
    ``{"index": int, "uuid": str|None, "name": str|None}`` (see ``tether.gpus.Gpu.as_extra``);
    ``axes`` are the whole sweep's grid axes (default: the run's own ``config.grid.axes``).
    """
    # A shard's run is a partial record (its cells are not the grid's product), kept as the
    # JSON it will merge from; a Run is turned into that form here.
    run = run.to_json() if hasattr(run, "to_json") else dict(run)
    if not 0 <= index < count:
        raise UsageError(f"shard index: {index} is not in 0..{count - 1}")
    if run.get("schema") != RUN_SCHEMA:
        raise UsageError(f"shard {index}: schema: expected {RUN_SCHEMA}, got {run.get('schema')!r}")
    shard_dir = Path(shard_dir)
    shard_dir.mkdir(parents=True, exist_ok=True)
    if axes is None:
        axes = run["config"]["grid"]["axes"]
    doc = {
        "schema": SHARD_SCHEMA,
        "shard": {
            "index": index,
            "count": count,
            "gpu": dict(gpu),
            "axes": {k: list(v) for k, v in axes.items()},
        },
        "run": run,
    }
    path = shard_dir / f"{run['id']}.shard{index}.json"
    _atomic_write(path, json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n")
    return path


def _reject_constant(token: str) -> float:
    raise ValueError(f"non-finite number {token}")


def load_shard(path: Path | str) -> dict[str, Any]:
    """Read one shard file; a malformed one is an error naming the file and field."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (OSError, ValueError) as exc:
        raise RunFileError(path, "(file)", f"not a readable shard: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("schema") != SHARD_SCHEMA:
        raise RunFileError(path, "schema", f"expected {SHARD_SCHEMA}")
    shard = doc.get("shard")
    if not isinstance(shard, dict) or not {"index", "count", "gpu", "axes"} <= set(shard):
        raise RunFileError(path, "shard", "needs index, count, gpu and axes")
    if not isinstance(doc.get("run"), dict):
        raise RunFileError(path, "run", "missing the partial run")
    return doc


def _full_config(doc: Mapping[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = copy.deepcopy(doc["run"]["config"])
    config.setdefault("grid", {"axes": {}, "fixed": {}})["axes"] = copy.deepcopy(
        doc["shard"]["axes"]
    )
    return config


def merge_shards(paths: Sequence[Path | str]) -> StoreRun:
    """One run from the shards of one sweep: every grid cell once, each with ``extra.gpu``.

    Refuses shards of different sweeps (id, config, harness, host), a missing or repeated
    shard, and a cell measured twice. The merged status is the worst of the shards'
    (``not_measured`` over ``rejected`` over ``ok``) with the shard named in the reason.
    """
    if not paths:
        raise UsageError("merge_shards: no shard files given")
    docs = [(Path(p), load_shard(p)) for p in paths]
    first_path, first = docs[0]
    base = first["run"]
    count = first["shard"]["count"]
    axes = first["shard"]["axes"]
    seen: dict[int, Path] = {}
    for path, doc in docs:
        run = doc["run"]
        if doc["shard"]["axes"] != axes or _full_config(doc) != _full_config(first):
            raise StoreError(f"{path}: config: differs from {first_path}; not one sweep")
        for field in _SAME:
            if run.get(field) != base.get(field):
                raise StoreError(f"{path}: {field}: differs from {first_path}; not one sweep")
        for field in _SAME_PROVENANCE:
            if run["provenance"].get(field) != base["provenance"].get(field):
                raise StoreError(
                    f"{path}: provenance.{field}: differs from {first_path}; not one sweep"
                )
        if doc["shard"]["count"] != count:
            raise StoreError(f"{path}: shard.count: {doc['shard']['count']} != {count}")
        idx = doc["shard"]["index"]
        if idx in seen:
            raise StoreError(f"{path}: shard.index: {idx} already given by {seen[idx]}")
        seen[idx] = path
    missing = sorted(set(range(count)) - set(seen))
    if missing:
        raise StoreError(f"{first_path}: shards {missing} of {count} missing; not merging")

    # The merged run starts from shard 0's run and becomes a new run of its own content.
    merged = copy.deepcopy(next(d for _, d in docs if d["shard"]["index"] == 0)["run"])
    merged["config"] = _full_config(first)
    cells: dict[str, dict[str, Any]] = {}
    devices: list[dict[str, Any]] = []
    guards: list[dict[str, Any]] = []
    worst: tuple[str, str | None] = ("ok", None)
    rank = {"ok": 0, "rejected": 1, "not_measured": 2}
    for path, doc in sorted(docs, key=lambda d: d[1]["shard"]["index"]):
        gpu = dict(doc["shard"]["gpu"])
        run = doc["run"]
        prov = run["provenance"]
        devices.append({**gpu, "device": prov.get("device"), "driver": prov.get("driver")})
        guards.append(run["guard"])
        status = run.get("status", "ok")
        if rank.get(status, 2) > rank[worst[0]]:
            worst = (
                status,
                f"shard {doc['shard']['index']} (gpu {gpu.get('index')}): {run.get('reason')}",
            )
        for cell in run.get("cells", []):
            kid = _key_id(cell["key"])
            if kid in cells:
                raise StoreError(f"{path}: cell {kid}: measured by two shards")
            missing_roles = [r for r in ROLES if r not in cell.get("samples", {})]
            if status == "ok" and run["kind"] == "sweep" and missing_roles:
                raise RunFileError(path, f"cell {kid}.samples", f"missing roles {missing_roles}")
            cell = copy.deepcopy(cell)
            cell.setdefault("extra", {})["gpu"] = gpu
            cells[kid] = cell

    order = {_key_id(k): i for i, k in enumerate(grid_keys(merged["config"]["grid"]))}
    if merged["config"]["grid"].get("axes") and worst[0] == "ok":
        absent = sorted(set(order) - set(cells))
        extra = sorted(set(cells) - set(order))
        if absent or extra:
            raise StoreError(
                f"{first_path}: shards cover the grid wrongly: missing {absent}, extra {extra}"
            )
    merged["cells"] = sorted(cells.values(), key=lambda c: order.get(_key_id(c["key"]), len(order)))
    merged["status"] = worst[0]
    merged["reason"] = worst[1]
    merged["guard"] = _merged_guard(guards)
    prov = merged["provenance"]
    prov["started"] = min(d["run"]["provenance"]["started"] for _, d in docs)
    prov["ended"] = max(d["run"]["provenance"]["ended"] for _, d in docs)
    # The schema's provenance has one device string; it lists every GPU the shards ran on,
    # and each cell's extra.gpu says which one measured it.
    prov["device"] = ", ".join(f"gpu{d.get('index')}: {d.get('device')}" for d in devices)

    merged["digest"] = digest_of(merged)
    merged["id"] = make_id(
        merged["kind"], merged["name"], prov["arch"], prov["started"], merged["digest"]
    )
    return run_from_json(merged, f"merge of {len(docs)} shards starting {first_path}")


def _merged_guard(guards: list[dict[str, Any]]) -> dict[str, Any]:
    """One guard record for the merged run: held only when every shard held its GPU; the
    first shard's holder and evidence before, the last one's after, every shard's arm checks."""
    modes = {g["mode"] for g in guards}
    first, last = guards[0], guards[-1]
    if not modes <= {"held", "nested"}:
        bad = sorted(modes - {"held", "nested"})
        return {
            "mode": "unguarded", "lock": None, "holder": None, "before": None, "after": None,
            "arms": [a for g in guards for a in g["arms"]], "waited_s": 0.0,
            "reason": f"a shard ran {', '.join(bad)}",
        }  # fmt: skip
    return {
        "mode": "nested" if "nested" in modes else "held",
        "lock": first["lock"],
        "holder": first["holder"],
        "before": first["before"],
        "after": last["after"],
        "arms": [a for g in guards for a in g["arms"]],
        "waited_s": max(g["waited_s"] for g in guards),
        "reason": None,
    }


def run_shard(
    bench: Bench,
    sweep: Sweep,
    index: int,
    count: int,
    shard_dir: Path | str,
    *,
    gpu: Mapping[str, Any],
) -> Path:
    """Measure shard ``index`` of ``count`` of ``sweep`` on ``bench`` and write it.

    The process must already be pinned to its GPU (``tether.gpus.pin_worker``), so the bench
    sees that GPU as device 0. Arms are resolved over the whole grid, as the unsharded sweep
    does, so every shard times the same arms.
    """
    keys = sweep.keys()
    position = {_key_id(k): i for i, k in enumerate(keys)}
    mine = {position[_key_id(k)] for k in shard_keys(keys, count)[index]}
    started = _now()
    grid = bench.measure_grid(sweep, only=lambda i: i in mine)
    config = {
        "grid": {"axes": {}, "fixed": dict(sweep.fixed)},
        "arms": dict(grid.arms),
        "case": sweep.case,
        "unit": sweep.unit,
        "entry_points": list(sweep.entry_points),
        "timing": bench.timing_of(sweep).to_json(),
        "replicates": max(
            1, bench.replicates if bench.replicates is not None else sweep.replicates
        ),
        "device_index": bench.target.index,
        **({"aliases": {k: list(v) for k, v in sweep.aliases.items()}} if sweep.aliases else {}),
    }
    run = bench.new_run(
        "sweep", sweep.name, config=config, status=grid.status, reason=grid.reason,
        cells=grid.cells, started=started, ended=_now(),
    )  # fmt: skip
    return write_shard(run, shard_dir, index, count, gpu, axes=dict(sweep.axes))


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
