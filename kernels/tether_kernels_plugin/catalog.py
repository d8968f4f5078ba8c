"""The model catalog (kernels/models.toml): the attention layouts of served open models, and
the rule by which a serving engine shards them across tensor-parallel GPUs.

One definition of each: ``catalog_shard`` is the sharding rule the catalog's per-GPU layouts follow
(the test of the catalog holds every entry to it), ``load_catalog`` parses and validates the file, so a
sweep, a test or a document that reads the catalog reads the same layouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib
from tether.errors import UsageError

CATALOG = Path(__file__).resolve().parents[1] / "models.toml"
TP_DEGREES = (1, 2, 4, 8)


def catalog_shard(hq: int, hkv: int, tp: int) -> tuple[int, int] | None:
    """(query heads, KV heads) one GPU holds at tensor-parallel degree ``tp``, or None where
    the engine refuses that degree. vLLM's and SGLang's rule: query heads split evenly (``tp``
    must divide them); KV heads split when there are at least ``tp`` of them (``tp`` divides
    them), else each GPU holds one replicated KV head (the heads must divide ``tp``)."""

    if tp < 1 or hq < 1 or hkv < 1 or hq % hkv:
        raise UsageError(f"shard: no layout for hq={hq}, hkv={hkv}, tp={tp}")
    if hq % tp:
        return None
    if hkv >= tp:
        return (hq // tp, hkv // tp) if hkv % tp == 0 else None
    return (hq // tp, 1) if tp % hkv == 0 else None


@dataclass(frozen=True)
class CatalogModel:
    name: str
    family: str
    hq: int
    hkv: int
    head_dim: int
    source: str
    tp: dict[int, tuple[int, int] | None]  # degree -> per-GPU (hq, hkv), None: refused


def _catalog_layout(text: str, where: str) -> tuple[int, int] | None:
    if text == "-":
        return None
    try:
        hq, hkv = (int(p) for p in text.split("/"))
    except ValueError:
        raise UsageError(f"{where}: tp layout {text!r} is not 'hq/hkv' or '-'") from None
    return hq, hkv


def load_catalog(path: Path = CATALOG) -> tuple[CatalogModel, ...]:
    """Every model of the catalog, validated: the fields typed, the source a URL, and each tp
    entry the layout ``catalog_shard`` gives (an entry that disagrees is an error naming the model)."""

    try:
        raw: Any = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the model catalog: {exc}") from None
    models = []
    for i, entry in enumerate(raw.get("model", [])):
        where = f"{path}: model {i + 1} ({entry.get('name', '?')})"
        try:
            name, family, source = (str(entry[k]) for k in ("name", "family", "source"))
            hq, hkv, head_dim = (entry[k] for k in ("hq", "hkv", "head_dim"))
            tp_raw = entry["tp"]
        except KeyError as exc:
            raise UsageError(f"{where}: missing {exc.args[0]!r}") from None
        if not all(isinstance(v, int) and v > 0 for v in (hq, hkv, head_dim)):
            raise UsageError(f"{where}: hq, hkv and head_dim must be positive integers")
        if not source.startswith("https://"):
            raise UsageError(f"{where}: source {source!r} is not a URL of the published config")
        if set(tp_raw) != {str(t) for t in TP_DEGREES}:
            raise UsageError(f"{where}: tp must give degrees {TP_DEGREES}, has {sorted(tp_raw)}")
        tp = {t: _catalog_layout(str(tp_raw[str(t)]), where) for t in TP_DEGREES}
        for t in TP_DEGREES:
            if tp[t] != catalog_shard(hq, hkv, t):
                raise UsageError(
                    f"{where}: tp {t} says {tp_raw[str(t)]!r}, the rule gives "
                    f"{catalog_shard(hq, hkv, t)}"
                )
        models.append(CatalogModel(name, family, hq, hkv, head_dim, source, tp))
    names = [m.name for m in models]
    if len(set(names)) != len(names):
        raise UsageError(f"{path}: a model is listed twice")
    return tuple(models)
