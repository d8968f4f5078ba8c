"""The run, in memory: one typed model (``Run`` with its ``Provenance``, ``GuardRecord`` and
``Cell``s) used everywhere, and its canonical JSON form (schema ``tether.run/2``).

    run = Run.new("sweep", "x", arch="sm90", device="NVIDIA H200", config=..., cells=...)
    run.write(store)                  # validated, atomic, never overwrites
    run = Run.load(path)              # validated; the digest must match the content
    text = run.dumps()                # the canonical file text

Every run carries a digest over its canonical content (``digest``), and its id ends with the
digest's first hex digits: editing one raw sample anywhere in a file is caught when it is
loaded, even when no published figure moves, and a forger who recomputes the digest must also
rename the file, which breaks every document and policy that cites the run.
Validation lives in ``schema.py`` (the rules, each naming the file and the field); this module
says what a run is.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TypedDict

SCHEMA = "tether.run/2"
# Run's lifecycle is implemented in the modules that build on this one: builder (new),
# schema (from_json, validate) and io (load, write). They import the model, so the model
# imports none of them; tether.store's __init__ (which Python runs before any module of the
# package) registers their functions here. One way through for a write: model -> schema
# (validate) -> io (write), with no import circle and no function-level import.


class Lifecycle(TypedDict, total=False):
    """The lifecycle functions, by the Run method that dispatches to each."""

    new: Callable[..., Run]  # builder.new_run(kind, name, *, arch, device, ...)
    from_json: Callable[..., Run]  # schema.run_from_json(data, source, *, stem, ...)
    load: Callable[[Path], Run]
    validate: Callable[[Run, object], None]
    write: Callable[[Run, Path], Path]


LIFECYCLE: Lifecycle = {}
KINDS: tuple[str, ...] = ("sweep", "gate", "probe", "tune", "verify", "compile")
STATUSES: tuple[str, ...] = ("ok", "rejected", "not_measured")
# How a run held the host: took the lock itself, ran under an enclosing hold (a parent
# `tether guard --hold`), ran without it (only with --unguarded; never evidence), or was
# refused the host (a not_measured record of the attempt).
GUARD_MODES: tuple[str, ...] = ("held", "nested", "unguarded", "refused")
# Kinds whose ok runs are measurements and may be cited as evidence when guarded.
MEASURED_KINDS: tuple[str, ...] = ("sweep", "gate", "probe", "tune")
# The A/A control of role A.
CONTROL = "A2"


@dataclass(frozen=True)
class Provenance:
    """Where a run came from: commit, fingerprints, host, device, versions, start and end."""

    git_sha: str
    git_dirty: bool | None
    harness_fingerprint: str
    kernels_fingerprint: str
    host: str
    arch: str
    device: str
    driver: str | None
    runtime: Mapping[str, str | None]
    started: str  # UTC YYYY-MM-DDTHH:MM:SSZ; sorts as text in time order
    ended: str
    # What in the process environment changes what a sample means: TRITON_INTERPRET (kernels
    # in the CPU interpreter), thread counts, the devices visible. None: not recorded (older).
    environment: Mapping[str, str | None] | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            k: (dict(v) if k in ("runtime", "environment") and v is not None else v)
            for k, v in self.__dict__.items()
        }
        if out["environment"] is None:
            del out["environment"]  # an older run's canonical content, and so its digest, stays
        return out


@dataclass(frozen=True)
class GuardRecord:
    """How the run held the host, and the idle evidence around it (see GUARD_MODES).

    ``holder`` is the lock's holder record (pid, start time, host, boot id, user, argv, commit,
    CI URL); ``before``/``after`` are idle snapshots (probe outputs); ``arms`` the per-arm
    process checks. A refused attempt carries the lock status and last snapshot in ``before``.
    """

    mode: str
    lock: str | None = None
    holder: Mapping[str, Any] | None = None
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    arms: tuple[Mapping[str, Any], ...] = ()
    waited_s: float = 0.0
    reason: str | None = None  # why unguarded or refused

    @property
    def held(self) -> bool:
        """The run held the host (itself or through an enclosing hold): it can be evidence."""
        return self.mode in ("held", "nested")

    @property
    def contaminated(self) -> bool:
        """A foreign process showed up around some arm."""
        return any(bool(a.get("contaminated")) for a in self.arms)

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "lock": self.lock,
            "holder": None if self.holder is None else dict(self.holder),
            "before": None if self.before is None else dict(self.before),
            "after": None if self.after is None else dict(self.after),
            "arms": [dict(a) for a in self.arms],
            "waited_s": self.waited_s,
            "reason": self.reason,
        }


UNGUARDED = GuardRecord(mode="unguarded", reason="run with --unguarded")


@dataclass(frozen=True)
class Cell:
    """One point of a grid: its key, the work one call does (in the run's unit), and raw
    seconds per call per role, in replicate blocks.

    ``blocks`` are the number of samples of each replicate block, in time order: the grid is
    measured ``len(blocks)`` times over the run, so a cell's ratio can be judged against how
    much it moves between blocks (its replicate band), not only against its A/A floor. Every
    role holds ``sum(blocks)`` samples, block after block.
    """

    key: Mapping[str, Any]
    work: float
    samples: Mapping[str, tuple[float, ...]]
    blocks: tuple[int, ...] = ()
    kernels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    reach: Mapping[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    def block_samples(self, role: str) -> list[tuple[float, ...]]:
        """The samples of ``role`` split into its replicate blocks (one block when none)."""
        values = tuple(self.samples[role])
        sizes = self.blocks or (len(values),)
        out, at = [], 0
        for n in sizes:
            out.append(values[at : at + n])
            at += n
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "key": dict(self.key),
            "work": self.work,
            "samples": {role: list(vals) for role, vals in self.samples.items()},
            "blocks": list(self.blocks),
            "kernels": {role: list(names) for role, names in self.kernels.items()},
            "reach": dict(self.reach),
            "flags": list(self.flags),
            "extra": dict(self.extra),
        }


def canonical_text(data: Mapping[str, Any]) -> str:
    """The digest's input: sorted keys, no whitespace, UTF-8, no NaN."""
    return json.dumps(
        data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


# The id ends with this many hex digits of the digest: the id is content-addressed.
ID_DIGITS = 12


def digest_of(data: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` over the canonical JSON of ``data`` without its ``id`` and ``digest``.

    The id is left out because it ends with the digest's first ID_DIGITS hex digits: an edit
    that recomputes the digest must also rename the file, which breaks every citation of it.
    """
    body = {k: v for k, v in data.items() if k not in ("id", "digest")}
    return "sha256:" + hashlib.sha256(canonical_text(body).encode("utf-8")).hexdigest()


def id_tail(digest: str) -> str:
    """The part of a run id that the digest determines."""
    return digest.split(":", 1)[1][:ID_DIGITS]


@dataclass(frozen=True)
class Run:
    """One run file. ``path`` is where it was loaded from or written to (None in memory)."""

    id: str
    kind: str
    name: str
    status: str
    reason: str | None
    provenance: Provenance
    guard: GuardRecord
    config: Mapping[str, Any]
    cells: tuple[Cell, ...]
    results: Mapping[str, Any]
    path: Path | None = None
    # Position of the commit that added the run's file (0 = oldest; None: not committed, or no
    # git): "newest" orders by it before the stamp (tether.store.history). Not content.
    added: int | None = field(default=None, compare=False)

    # -- derived ---------------------------------------------------------------------------

    @property
    def arch(self) -> str:
        return self.provenance.arch

    @property
    def started(self) -> str:
        return self.provenance.started

    @property
    def harness_fingerprint(self) -> str:
        return self.provenance.harness_fingerprint

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def unit(self) -> str:
        """What ``Cell.work`` counts (``FLOP`` unless the sweep declared another unit)."""
        return str(self.config.get("unit", "FLOP"))

    @property
    def arms(self) -> Mapping[str, str]:
        return dict(self.config.get("arms", {}) or {})

    @property
    def fixed(self) -> Mapping[str, Any]:
        grid = self.config.get("grid") or {}
        return dict(grid.get("fixed", {}) or {})

    @property
    def aliases(self) -> Mapping[str, Any]:
        """Axes the sweep declared as standing for other fields (``config.aliases``)."""
        return dict(self.config.get("aliases", {}) or {})

    @property
    def evidence_grade(self) -> bool:
        """An ok measurement that held the guard: the only kind of run a policy, a gate, a
        headline or a trend may cite."""
        return self.ok and self.kind in MEASURED_KINDS and self.guard.held

    @property
    def sharded(self) -> bool:
        return any(c.extra.get("gpu") for c in self.cells)

    # -- JSON ------------------------------------------------------------------------------

    def body(self) -> dict[str, Any]:
        """The file's content without its digest (``path`` is not part of it)."""
        return {
            "schema": SCHEMA,
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "status": self.status,
            "reason": self.reason,
            "provenance": self.provenance.to_json(),
            "guard": self.guard.to_json(),
            "config": dict(self.config),
            "cells": [cell.to_json() for cell in self.cells],
            "results": dict(self.results),
        }

    def to_json(self) -> dict[str, Any]:
        """The file's content as a JSON-ready dict, digest included."""
        body = self.body()
        body["digest"] = digest_of(body)
        return body

    @property
    def digest(self) -> str:
        return digest_of(self.body())

    def dumps(self) -> str:
        """The canonical file text: sorted keys, indent 1, UTF-8, trailing newline."""
        return (
            json.dumps(
                self.to_json(), sort_keys=True, indent=1, ensure_ascii=False, allow_nan=False
            )
            + "\n"
        )

    def with_path(self, path: Path | None) -> Run:
        return replace(self, path=path)

    # -- the lifecycle (implemented in builder, schema and io; here so callers see one API,
    #    dispatched through LIFECYCLE so this module imports none of them: see below)

    @staticmethod
    def new(kind: str, name: str, **kwargs: Any) -> Run:
        """A validated new run with full provenance and a fresh unique id (see
        ``tether.store.builder.new_run`` for the arguments)."""
        return LIFECYCLE["new"](kind, name, **kwargs)

    @staticmethod
    def from_json(data: object, source: object = "<run>") -> Run:
        """Validate parsed JSON and build the Run; RunFileError names the field."""
        return LIFECYCLE["from_json"](data, source)

    @staticmethod
    def load(path: Path) -> Run:
        """Load and validate one run file (id == stem, arch == folder, digest matches)."""
        return LIFECYCLE["load"](path)

    def validate(self, source: object = "<run>") -> None:
        """Validate this run by the same rules as a file (a JSON round trip)."""
        LIFECYCLE["validate"](self, source)

    def write(self, store: Path) -> Path:
        """Validate and write to ``store/<arch>/<id>.json``; never overwrites."""
        return LIFECYCLE["write"](self, store)


# id(run) -> (the run, its content digest): the digest run_from_json verified against the
# file, or one computed here, remembered per object (runs are frozen, and an edited copy,
# dataclasses.replace, is another object). The entry holds the run so its id cannot be reused
# while it is kept. A digest is a canonical JSON dump of every sample, so it is not redone.
_DIGESTS: dict[int, tuple[Run, str]] = {}
_DIGESTS_MAX = 65536  # as stats._JUDGED_MAX: a long process (a test session) holds no more


def remember_digest(run: Run, digest: str) -> None:
    """Record ``digest`` as ``run``'s content digest (a caller that has just verified it)."""
    if len(_DIGESTS) >= _DIGESTS_MAX:
        _DIGESTS.clear()
    _DIGESTS[id(run)] = (run, digest)


def placed(run: Run, **place: Any) -> Run:
    """``run`` with fields that are not file content (NOT_CONTENT: where it was read from,
    when git added it) replaced, its remembered content digest carried over."""
    unknown = set(place) - set(NOT_CONTENT)
    if unknown:
        raise ValueError(f"placed() changes only {NOT_CONTENT}, not {sorted(unknown)}")
    moved = replace(run, **place)
    hit = _DIGESTS.get(id(run))
    if hit is not None and hit[0] is run:
        remember_digest(moved, hit[1])
    return moved


def content_digest(run: Run) -> str:
    """``run.digest`` (what its file's ``digest`` field must hold), computed once per object:
    the key by which a run's statistics are kept (``tether.stats.cell_stats``)."""
    hit = _DIGESTS.get(id(run))
    if hit is not None and hit[0] is run:
        return hit[1]
    found = run.digest
    remember_digest(run, found)
    return found


# -- the run's shape, derived from the dataclasses (SCHEMA.md describes the same) -----------

# Fields of a Run that are not file content: where it was loaded from, when git added it.
NOT_CONTENT: tuple[str, ...] = ("path", "added")
# The keys of a run file, its provenance, guard record and cells: the schema rejects any other.
TOP_KEYS: tuple[str, ...] = (
    "schema",
    *(f.name for f in fields(Run) if f.name not in NOT_CONTENT),
    "digest",
)
# Provenance keys a run may leave out: runs written before they existed keep loading, with
# their digests unchanged (a key that is absent is not serialised).
PROVENANCE_OPTIONAL: tuple[str, ...] = ("environment",)
PROVENANCE_KEYS: tuple[str, ...] = tuple(
    f.name for f in fields(Provenance) if f.name not in PROVENANCE_OPTIONAL
)
GUARD_KEYS: tuple[str, ...] = tuple(f.name for f in fields(GuardRecord))
CELL_KEYS: tuple[str, ...] = tuple(f.name for f in fields(Cell))
