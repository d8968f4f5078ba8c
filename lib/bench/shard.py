"""Split one sweep across several GPUs of a host, and merge the shards back into one run.

The unit of sharding is the cell, never the arm: a cell's A, its A/A control A2 and its B
are timed by one worker on one GPU, interleaved, so the cell's floor and its ratio describe
the same device and the same minutes. Splitting arms across GPUs would make the A/A floor
compare two devices and the A/B ratio include the difference between them.

A shard is a partial run (the cells of one GPU) wrapped with its place in the split; it is
written to a shard folder, never to the store, because it does not satisfy the run schema
on its own (its cells are not the grid's product). ``merge_shards`` checks that the shards
belong to one sweep, cover every cell exactly once, and builds the one run the store takes.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tether.errors import RunFileError, StoreError, UsageError

SHARD_SCHEMA = "tether.shard/1"
RUN_SCHEMA = "tether.run/1"
Run = dict[str, Any]
Key = dict[str, Any]
ROLES = ("A", "A2", "B")

# Fields every shard of one sweep must agree on; anything else may differ per GPU.
_SAME = ("schema", "id", "kind", "name", "config")
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
    run: Run, shard_dir: Path | str, index: int, count: int, gpu: Mapping[str, Any]
) -> Path:
    """Write the partial run of shard ``index`` of ``count`` (measured on ``gpu``) to ``shard_dir``.

    ``run`` is a run dict whose cells are this shard's cells only; ``gpu`` is
    ``{"index": int, "uuid": str|None, "name": str|None}`` (see ``tether.gpus.Gpu.as_extra``).
    """
    if not 0 <= index < count:
        raise UsageError(f"shard index: {index} is not in 0..{count - 1}")
    if run.get("schema") != RUN_SCHEMA:
        raise UsageError(f"shard {index}: schema: expected {RUN_SCHEMA}, got {run.get('schema')!r}")
    shard_dir = Path(shard_dir)
    shard_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": SHARD_SCHEMA,
        "shard": {"index": index, "count": count, "gpu": dict(gpu)},
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
    if not isinstance(shard, dict) or not {"index", "count", "gpu"} <= set(shard):
        raise RunFileError(path, "shard", "needs index, count and gpu")
    if not isinstance(doc.get("run"), dict):
        raise RunFileError(path, "run", "missing the partial run")
    return doc


def merge_shards(paths: Sequence[Path | str]) -> Run:
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
    seen: dict[int, Path] = {}
    for path, doc in docs:
        run = doc["run"]
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

    merged = copy.deepcopy(base)
    cells: dict[str, dict[str, Any]] = {}
    devices: list[dict[str, Any]] = []
    worst = ("ok", None)
    rank = {"ok": 0, "rejected": 1, "not_measured": 2}
    for path, doc in sorted(docs, key=lambda d: d[1]["shard"]["index"]):
        gpu = dict(doc["shard"]["gpu"])
        run = doc["run"]
        prov = run["provenance"]
        devices.append({**gpu, "device": prov.get("device"), "driver": prov.get("driver")})
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
    prov = merged["provenance"]
    prov["started"] = min(d["run"]["provenance"]["started"] for _, d in docs)
    prov["ended"] = max(d["run"]["provenance"]["ended"] for _, d in docs)
    names = sorted({d["device"] for d in devices if d.get("device")})
    if len(names) == 1:
        prov["device"] = names[0] if len(devices) == 1 else f"{len(devices)}x {names[0]}"
    else:
        prov["device"] = ", ".join(names)
    prov["devices"] = devices
    return merged
