"""Which runs a document may cite, when ``[tool.tether.signing] require = true``.

Every run a document, a policy threshold, a gate or a tuned choice rests on must be signed by
an allowed signer (tether.store.signing). So, under require, the renderer and the check see
the store without the runs that are not (``citable``): a run that is unsigned, signed by a key
the allowed-signers file does not list, or whose signature does not match its digest (a
re-sealed forgery, a signature copied from another run) is never cited, and a document, gate
or policy that names one fails the check. The check also names each such run that is ``ok``
(``refused``), so a forgery in the store is a finding even where nothing cites it.

Runs measured before signatures were required stay in the store (it is append-only) but are
not evidence any more: ``tether legacy`` records them in ``.tether/legacy_runs.toml``
(``[tool.tether.signing] legacy``), each with its digest, who recorded it, when and why, and
under require they are never cited and raise no finding. A legacy entry holds for the run
whose digest it records, never for another run of that id.

Without require nothing is filtered: unsigned runs stay citable, as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

from tether import cache, project
from tether.atomic import utc_stamp, write_atomic
from tether.errors import SigningError, UsageError
from tether.store import ed25519
from tether.store.model import Run, content_digest
from tether.store.signing import (
    SshSignature,
    Verdict,
    keygen,
    keygen_digest,
    listed_principals,
    sidecar,
    signature_of,
    time_bound,
    verify_run,
)
from tether.textfile import read_text

LEGACY_SCHEMA = "tether.legacy-runs/1"
_VERIFY_THREADS = 8  # ssh-keygen calls, one per signed run: they wait, so a few at once


@dataclass(frozen=True)
class LegacyRun:
    """One run recorded as legacy: which run (id and digest), and the record of the act."""

    id: str
    digest: str
    file: str  # where the run lay, relative to the project root
    recorded: str  # UTC stamp
    by: str
    reason: str

    def to_toml(self) -> str:
        fields = ("id", "digest", "file", "recorded", "by", "reason")
        # JSON strings are TOML basic strings (the same escapes), so quoting is json.dumps.
        return "[[run]]\n" + "".join(f"{k} = {json.dumps(getattr(self, k))}\n" for k in fields)


def load_legacy(path: Path | None, label: str | None = None) -> dict[str, LegacyRun]:
    """The legacy runs recorded at ``path``, by id ({} when there is no file). A malformed
    file is a UsageError naming it: a list read in part would cite what it meant to bar."""
    if path is None or not path.is_file():
        return {}
    where = label or str(path)
    try:
        doc = tomllib.loads(read_text(path, where))
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where}: not valid TOML: {exc}") from None
    if doc.get("schema") != LEGACY_SCHEMA:
        raise UsageError(f"{where}: schema {doc.get('schema')!r}, expected {LEGACY_SCHEMA!r}")
    out: dict[str, LegacyRun] = {}
    for i, entry in enumerate(doc.get("run", [])):
        try:
            run = LegacyRun(**{k: entry[k] for k in LegacyRun.__dataclass_fields__})
        except (KeyError, TypeError):
            raise UsageError(
                f"{where}: run[{i}] must have {', '.join(LegacyRun.__dataclass_fields__)}"
            ) from None
        if not all(isinstance(getattr(run, k), str) for k in LegacyRun.__dataclass_fields__):
            raise UsageError(f"{where}: run[{i}]: every field is a string")
        out[run.id] = run
    return out


HEADER = """\
# Runs recorded as legacy: measured before [tool.tether.signing] require, unsigned, and never
# cited once it is true (tether.store.evidence). They stay in the store (append-only); a
# document resting on one needs a signed run measured again. Written by `tether legacy`, one
# entry per run with its digest, who recorded it, when and why; entries are only ever added.
"""


def write_legacy(path: Path, entries: Iterable[LegacyRun]) -> Path:
    """Write the legacy list ``entries`` (sorted by id) to ``path``, atomically."""
    body = "".join("\n" + e.to_toml() for e in sorted(entries, key=lambda e: e.id))
    text = f"{HEADER}schema = {json.dumps(LEGACY_SCHEMA)}\n{body}"
    return write_atomic(path, text.encode("utf-8"))


def record_legacy(
    root: Path,
    runs: Iterable[Run],
    by: str,
    reason: str,
    now: str | None = None,
    named: bool = False,
) -> tuple[list[LegacyRun], Path]:
    """Add each unsigned ``ok`` run of ``runs`` not yet listed to the project's legacy file;
    (the entries added, the file). A run with a signature is not listed by default: a good
    one needs no excuse, and a bad one is a forgery or a damaged file, not history. With
    ``named`` every run of ``runs`` is listed whatever its signature: the runs a maintainer
    names, such as those a revoked key signed."""
    proj = project.get(root)
    path = proj.legacy_runs
    assert path is not None  # project.load always sets it
    have = load_legacy(path, proj.rel(path))
    stamp = now or utc_stamp()
    added = []
    for run in sorted(runs, key=lambda r: r.id):
        if run.id in have or run.path is None:
            continue
        if not named and (run.status != "ok" or sidecar(run.path).exists()):
            continue
        entry = LegacyRun(run.id, run.digest, proj.rel(run.path), stamp, by, reason)
        added.append(entry)
    if added:
        write_legacy(path, [*have.values(), *added])
    return added, path


# -- under require: what may be cited --------------------------------------------------------

# A verdict is a pure function of what ``verify_run`` reads: the run's digest, its sidecar's
# bytes, the allowed-signers file (its bytes and its name, which a refusal names) and what
# judges them (ssh-keygen, and the in-process verifier that confirms plain signatures). So it
# is kept by exactly those (in this process, and across checks in the active
# ``tether.cache``), except where the allowed-signers file makes it a function of the clock as
# well (``signing.time_bound``): such verdicts are judged every time.
_VERDICTS: dict[str, Verdict] = {}
SIGNATURE = "signature"  # the kind of entry (tether.cache)


def _verdict_key(run: Run, sig_bytes: bytes, judge: str) -> str:
    return cache.digest(content_digest(run), hashlib.sha256(sig_bytes).hexdigest(), judge)


def verdicts(runs: Sequence[Run], allowed: Path) -> list[Verdict]:
    """``verify_run``'s verdict on each of ``runs`` against the allowed-signers file
    ``allowed``, each judged once per content (see ``_VERDICTS``); the judgements still to
    make run a few at once, since those that ssh-keygen makes mostly wait on its process."""
    try:
        allowed_bytes = allowed.read_bytes()
    except OSError:
        allowed_bytes = None
    keep = cache.current() if allowed_bytes is not None and not time_bound(allowed_bytes) else None
    # What every verdict of this batch is judged by: the file (its name is in a refusal), the
    # ssh-keygen and the in-process verifier that confirms plain signatures.
    judge = repr(
        (
            allowed.name,
            hashlib.sha256(allowed_bytes or b"").hexdigest(),
            keygen_digest(),
            ed25519.verifier(),
        )
    )
    out: list[Verdict | None] = []
    todo: dict[int, str | None] = {}  # index in runs -> its key (None: not keepable)
    for i, run in enumerate(runs):
        key = None
        if run.path is not None and allowed_bytes is not None:
            try:
                sig_bytes: bytes | None = sidecar(run.path).read_bytes()
            except OSError:
                sig_bytes = None  # unsigned, or unreadable: verify_run says which, every time
            if sig_bytes is not None:
                key = _verdict_key(run, sig_bytes, judge)
        found = None if key is None else _VERDICTS.get(key)
        if found is None and key is not None and keep is not None:
            entry = keep.get(SIGNATURE, key, Verdict)
            found = entry if entry is not None and _whole(entry) else None
        out.append(found)
        if found is None:
            todo[i] = key
    judged: list[Verdict] = []
    if todo:
        with ThreadPoolExecutor(_VERIFY_THREADS) as pool:
            judged = list(pool.map(lambda i: _judge(runs[i], allowed), todo))
    for (i, key), verdict in zip(todo.items(), judged, strict=True):
        out[i] = verdict
        if key is not None:
            _VERDICTS[key] = verdict
            if keep is not None:
                keep.put(SIGNATURE, key, verdict)
    return [v for v in out if v is not None]


def _judge(run: Run, allowed: Path) -> Verdict:
    if run.path is None:
        return Verdict(False, "is unsigned (it has no file)")
    return verify_run(run.path, content_digest(run), allowed)


def _whole(verdict: Verdict) -> bool:
    return (
        isinstance(verdict.ok, bool)
        and isinstance(verdict.why, str)
        and isinstance(verdict.principals, tuple)
        and all(isinstance(p, str) for p in verdict.principals)
    )


@dataclass(frozen=True)
class Barred:
    """The runs that may not be cited under require: ``legacy`` (recorded, by id) and
    ``refused`` (why each other run is not signed by an allowed signer, by id)."""

    legacy: frozenset[str] = frozenset()
    refused: Mapping[str, str] = field(default_factory=dict)

    def __contains__(self, run_id: object) -> bool:
        return run_id in self.legacy or run_id in self.refused


def barred(root: Path, runs: Iterable[Run]) -> Barred:
    """Under require, the runs of ``runs`` that may not be cited; none without require.
    Needs ssh-keygen under require (SigningError)."""
    proj = project.get(root)
    runs = list(runs)
    if not proj.require_signed or proj.allowed_signers is None or not runs:
        return Barred()
    allowed = proj.allowed_signers
    if not allowed.is_file():
        raise UsageError(
            f"[tool.tether.signing] allowed_signers {proj.rel(allowed)} is not in the tree; "
            "no run can be verified"
        )
    keygen()
    legacy_file = proj.legacy_runs
    legacy = load_legacy(legacy_file, proj.rel(legacy_file) if legacy_file else None)
    old = frozenset(r.id for r in runs if _is_legacy(r, legacy))
    judged = [r for r in runs if r.id not in old]
    why = {r.id: v.why for r, v in zip(judged, verdicts(judged, allowed), strict=True) if not v.ok}
    return Barred(old, why)


def _is_legacy(run: Run, legacy: Mapping[str, LegacyRun]) -> bool:
    entry = legacy.get(run.id)
    return entry is not None and entry.digest == content_digest(run)


def citable(root: Path, runs: Iterable[Run], bar: Barred | None = None) -> list[Run]:
    """``runs`` less those that may not be cited (``barred``; pass ``bar`` if already
    computed). Without require: all of them."""
    runs = list(runs)
    bar = barred(root, runs) if bar is None else bar
    return [r for r in runs if r.id not in bar]


__all__ = [
    "LEGACY_SCHEMA",
    "Barred",
    "LegacyRun",
    "barred",
    "citable",
    "load_legacy",
    "record_legacy",
    "signing_summary",
    "verdicts",
    "write_legacy",
]


# -- what docs/signing.md states about this store ------------------------------------------


def signing_summary(root: Path, runs: Iterable[Run]) -> dict[str, object]:
    """The project's signing setup and how the store stands, for the signing page: read in
    pure Python from the config, the allowed-signers file, the legacy list and the sidecars
    (no ssh-keygen, so every machine renders the same page; the check verifies)."""
    proj = project.get(root)
    allowed = proj.allowed_signers
    principals: list[str] = []
    if allowed is not None and allowed.is_file():
        for line in read_text(allowed, proj.rel(allowed)).splitlines():
            words = line.split()
            if words and not words[0].startswith("#"):
                principals.extend(p for p in words[0].split(",") if p)
    legacy_file = proj.legacy_runs
    legacy = load_legacy(legacy_file, proj.rel(legacy_file) if legacy_file else None)
    by_signer: dict[str, int] = {}
    unsigned = 0
    runs = list(runs)
    for run in runs:
        sig = _parsed(run)
        if sig is None:
            unsigned += 1
            continue
        names = listed_principals(sig.key_blob, allowed) if allowed is not None else ()
        who = ", ".join(names) or f"a key not listed ({sig.label})"
        by_signer[who] = by_signer.get(who, 0) + 1
    return {
        "require": proj.require_signed,
        "allowed_signers": proj.rel(allowed) if allowed is not None else None,
        "principals": principals,
        "legacy_file": proj.rel(legacy_file) if legacy_file is not None else None,
        "legacy": len(legacy),
        "runs": len(runs),
        "unsigned": unsigned,
        "by_signer": sorted(by_signer.items()),
    }


def _parsed(run: Run) -> SshSignature | None:
    try:
        return signature_of(run.path)
    except SigningError:
        return None
