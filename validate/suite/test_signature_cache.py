"""Signature verdicts kept by content (tether.store.evidence.verdicts) never change a verdict.

Each verdict ssh-keygen gives is kept in the check's cache by the run's digest, its sidecar's
bytes, the allowed-signers file and the ssh-keygen. These tests judge a signed run and two
forgeries of it with a warm cache, then change each thing the key names (the sidecar, the
allowed-signers file), damage the entries, and make the allowed-signers file depend on the
clock, asserting every verdict is the one ``verify_run`` gives from nothing.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from tether.cache import Cache, active
from tether.store import Run
from tether.store import evidence as ev
from tether.store.signing import NAMESPACE, Verdict, sidecar, verify_run

from validate.suite.runfactory import make_sweep_run, resealed
from validate.suite.signing_keys import keypair, require_ssh_keygen, sign_with

require_ssh_keygen()


def _allowed(path: Path, key: Path, options: str = f'namespaces="{NAMESPACE}"') -> Path:
    public = " ".join(key.with_suffix(".pub").read_text(encoding="utf-8").split()[:2])
    path.write_text(f"host@fixture {options} {public}\n", encoding="utf-8")
    return path


@pytest.fixture
def signed(tmp_path: Path) -> tuple[list[Run], Path, Path]:
    """(a signed run, a re-sealed forgery carrying its signature, an unsigned run), the
    allowed-signers file listing the key, and the key."""
    key = keypair(tmp_path, "host")
    store = tmp_path / "results"
    good = make_sweep_run(ratio=0.9, store=store)
    sign_with(key, good)
    forged = resealed(
        good, provenance={"started": "2026-01-03T00:00:00Z", "ended": "2026-01-03T00:00:00Z"}
    ).write(store)
    forged_run = Run.load(forged)
    assert good.path is not None
    sidecar(forged).write_bytes(sidecar(good.path).read_bytes())
    unsigned = make_sweep_run(ratio=0.8, seed=4, started="2026-01-04T00:00:00Z", store=store)
    allowed = _allowed(tmp_path / "allowed_signers", key)
    ev._VERDICTS.clear()
    return [good, forged_run, unsigned], allowed, key


def _fresh(runs: list[Run], allowed: Path) -> list[Verdict]:
    assert all(r.path is not None for r in runs)
    return [verify_run(r.path, r.digest, allowed) for r in runs if r.path is not None]


def _kept(runs: list[Run], allowed: Path, cache: Cache) -> list[Verdict]:
    ev._VERDICTS.clear()  # a new process: only the cache on disk remembers
    with active(cache):
        return ev.verdicts(runs, allowed)


def test_kept_verdicts_are_verify_runs(signed: tuple[list[Run], Path, Path], tmp_path: Path):
    runs, allowed, _ = signed
    cache = Cache(tmp_path / "cache")
    want = _fresh(runs, allowed)
    assert [v.ok for v in want] == [True, False, False]
    assert _kept(runs, allowed, cache) == want
    entries = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert len(entries) == 2, entries  # the two sidecars; an unsigned run is judged each time
    hits = cache.hits
    assert _kept(runs, allowed, cache) == want
    assert cache.hits == hits + 2


@pytest.mark.parametrize("damage", ["truncate", "flip", "other-verdict"])
def test_damaged_verdicts_are_judged_again(
    signed: tuple[list[Run], Path, Path], tmp_path: Path, damage: str
) -> None:
    runs, allowed, _ = signed
    cache = Cache(tmp_path / "cache")
    want = _fresh(runs, allowed)
    _kept(runs, allowed, cache)
    entries = sorted(p for p in (tmp_path / "cache").rglob("*") if p.is_file())
    if damage == "other-verdict":
        # The good run's entry copied over the forgery's: its header names another key.
        datas = {p: p.read_bytes() for p in entries}
        for path, other in zip(entries, entries[::-1], strict=True):
            path.write_bytes(datas[other])
    for entry in entries if damage != "other-verdict" else ():
        data = entry.read_bytes()
        entry.write_bytes(data[: len(data) // 2] if damage == "truncate" else data[:-1] + b"X")
    assert _kept(runs, allowed, cache) == want


def test_a_changed_sidecar_or_allowed_file_is_judged_again(
    signed: tuple[list[Run], Path, Path], tmp_path: Path
) -> None:
    runs, allowed, _ = signed
    cache = Cache(tmp_path / "cache")
    _kept(runs, allowed, cache)
    good = runs[0]
    assert good.path is not None
    # The key dropped from the allowed signers: the kept "ok" is another key's, not read.
    other = keypair(tmp_path, "other")
    _allowed(allowed, other)
    now = _kept(runs, allowed, cache)
    assert now == _fresh(runs, allowed) and not now[0].ok
    # A sidecar replaced by a signature of another message: another key again.
    _allowed(allowed, tmp_path / "host")
    assert _kept(runs, allowed, cache)[0].ok
    made = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(tmp_path / "host"), "-n", NAMESPACE],
        input=b"sha256:not-this-run",
        capture_output=True,
        check=True,
    )
    sidecar(good.path).write_bytes(made.stdout)
    now = _kept(runs, allowed, cache)
    assert now == _fresh(runs, allowed) and not now[0].ok


def test_verdicts_under_a_clock_bound_allowed_file_are_not_kept(
    signed: tuple[list[Run], Path, Path], tmp_path: Path
) -> None:
    # A validity interval makes ssh-keygen's verdict a function of the time it is asked.
    runs, allowed, key = signed
    _allowed(allowed, key, f'namespaces="{NAMESPACE}",valid-before="29991231"')
    cache = Cache(tmp_path / "cache")
    assert _kept(runs, allowed, cache) == _fresh(runs, allowed)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
