"""The in-memory run: ``Run`` and ``Cell``, frozen, and their JSON form (``tether.run/1``).

Validation lives in ``schema.py``; this module only says what a run is and how it is written
out, so readers can see the shape of the data without the rules around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "tether.run/1"
ARCHES: tuple[str, ...] = ("sm90", "gfx942", "gfx950", "gfx1151", "cpu")
KINDS: tuple[str, ...] = ("sweep", "gate", "verify", "probe", "compile")
STATUSES: tuple[str, ...] = ("ok", "rejected", "not_measured")

TOP_KEYS: tuple[str, ...] = (
    "schema",
    "id",
    "kind",
    "name",
    "status",
    "reason",
    "provenance",
    "guard",
    "config",
    "cells",
    "results",
)
PROVENANCE_KEYS: tuple[str, ...] = (
    "git_sha",
    "git_dirty",
    "harness_fingerprint",
    "kernels_fingerprint",
    "host",
    "arch",
    "device",
    "driver",
    "runtime",
    "started",
    "ended",
)
CELL_KEYS: tuple[str, ...] = ("key", "flops", "samples", "kernels", "reach", "flags", "extra")


@dataclass(frozen=True)
class Cell:
    """One point of a grid: its shape key, FLOPs per call, and raw seconds per call per role."""

    key: dict[str, Any]
    flops: float
    samples: dict[str, tuple[float, ...]]
    kernels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    reach: dict[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": dict(self.key),
            "flops": self.flops,
            "samples": {role: list(vals) for role, vals in self.samples.items()},
            "kernels": {role: list(names) for role, names in self.kernels.items()},
            "reach": self.reach,
            "flags": list(self.flags),
            "extra": self.extra,
        }


@dataclass(frozen=True)
class Run:
    """One run file. ``path`` is where it was loaded from or written to (None in memory)."""

    id: str
    kind: str
    name: str
    status: str
    reason: str | None
    provenance: dict[str, Any]
    guard: dict[str, Any]
    config: dict[str, Any]
    cells: tuple[Cell, ...]
    results: dict[str, Any]
    path: Path | None = None

    @property
    def arch(self) -> str:
        return str(self.provenance["arch"])

    @property
    def started(self) -> str:
        """UTC ``YYYY-MM-DDTHH:MM:SSZ``; sorts as text in time order."""
        return str(self.provenance["started"])

    @property
    def harness_fingerprint(self) -> str:
        return str(self.provenance["harness_fingerprint"])

    def to_json(self) -> dict[str, Any]:
        """The file's content as a JSON-ready dict (``path`` is not part of it)."""
        return {
            "schema": SCHEMA,
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "provenance": self.provenance,
            "guard": self.guard,
            "config": self.config,
            "cells": [cell.to_json() for cell in self.cells],
            "results": self.results,
        }
