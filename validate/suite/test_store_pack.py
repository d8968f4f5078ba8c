"""Packed run files (``<id>.json.gz``, ``tether store pack``) on FIXTURE stores: read as the JSON
they hold, the same runs and digests after packing, signatures beside them, merges and the
append-only rule taking a packed run for the run it was, and every bad packed file named."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
from pathlib import Path

import pytest
from tether.cli import main
from tether.errors import RunFileError, StoreError
from tether.freshness import store_changes_since
from tether.store import load_store, merge
from tether.store.audit import audit
from tether.store.history import added_order
from tether.store.io import load_run, pack_bytes, read_run_bytes, store_files, write_run
from tether.store.layout import run_id_of, scan, sig_path
from tether.store.pack import pack_store
from tether.store.signing import NAMESPACE, sign_run_file, verify_run

from validate.suite.fixture_project import fixture_project, git
from validate.suite.runfactory import make_gate_run, make_sweep_run, make_verify_run


def _store(tmp_path: Path) -> tuple[Path, list]:
    store = tmp_path / "store"
    runs = [make_sweep_run(store=store), make_gate_run(store=store), make_verify_run(store=store)]
    return store, runs


def _signed(run_path: Path, digest: str, tmp_path: Path) -> Path:
    """A real signature of the run beside it, and the allowed-signers file naming its key."""
    key = tmp_path / "host_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fixture", "-f", str(key)],
        check=True,
        capture_output=True,
    )
    allowed = tmp_path / "allowed_signers"
    public = key.with_suffix(".pub").read_text().split()
    allowed.write_text(f'fixture namespaces="{NAMESPACE}" {public[0]} {public[1]}\n')
    sign_run_file(run_path, digest, key, "fixture", allowed)
    return allowed


def test_a_packed_store_holds_the_same_runs(tmp_path: Path) -> None:
    store, runs = _store(tmp_path)
    raw = {r.id: Path(r.path).read_bytes() for r in runs}
    signer = shutil.which("ssh-keygen")
    allowed = _signed(Path(runs[0].path), runs[0].digest, tmp_path) if signer else None
    sig = sig_path(Path(runs[0].path))
    report = pack_store(store)
    assert len(report.packed) == 3 and report.already == 0
    files = store_files(store)
    assert all(p.name.endswith(".json.gz") for p in files)
    assert {run_id_of(p) for p in files} == set(raw)
    for path in files:
        # The packed file holds exactly the JSON file's bytes, packed deterministically.
        assert gzip.decompress(path.read_bytes()) == raw[run_id_of(path)]
        assert path.read_bytes() == pack_bytes(raw[run_id_of(path)])
    before = {r.id: r.digest for r in runs}
    assert {r.id: r.digest for r in load_store(store)} == before
    packed_first = next(p for p in files if run_id_of(p) == runs[0].id)
    assert sig_path(packed_first) == sig
    assert not audit(store).problems  # a signature sits beside its packed run
    if allowed is not None:  # and still verifies: it signs the run's digest, not its file
        assert verify_run(packed_first, runs[0].digest, allowed).ok
    assert pack_store(store).packed == () and pack_store(store).already == 3


def test_a_run_in_both_forms_is_a_problem(tmp_path: Path) -> None:
    store, runs = _store(tmp_path)
    path = Path(runs[0].path)
    twin = path.with_name(path.name + ".gz")
    twin.write_bytes(pack_bytes(path.read_bytes()))
    found = scan(store)
    assert any("here twice, packed and not" in p.what for p in found.problems)
    with pytest.raises(StoreError, match="here twice"):
        load_store(store)
    with pytest.raises(StoreError, match="nothing packed"):
        pack_store(store)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        pytest.param(b"not gzip at all", "not gzip", id="not-gzip"),
        pytest.param("cut", "cut off", id="truncated"),
        pytest.param("trailing", "trailing bytes", id="trailing"),
    ],
)
def test_a_bad_packed_file_is_named(tmp_path: Path, content: object, why: str) -> None:
    _, runs = _store(tmp_path)
    path = Path(runs[0].path)
    packed = pack_bytes(path.read_bytes())
    data = {"cut": packed[: len(packed) // 2], "trailing": packed + b"junk"}.get(
        str(content), content
    )
    target = path.with_name(path.name + ".gz")
    path.unlink()
    target.write_bytes(data)  # type: ignore[arg-type]
    with pytest.raises(RunFileError, match=why) as info:
        load_run(target)
    assert str(target) in str(info.value)


def test_a_packed_file_never_inflates_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bomb = tmp_path / "store" / "cpu" / "20260101T000000Z-sweep-bomb-cpu-000000000000.json.gz"
    bomb.parent.mkdir(parents=True)
    bomb.write_bytes(gzip.compress(b" " * (4 << 20)))  # a few KB that inflate to 4 MiB
    monkeypatch.setenv("TETHER_MAX_RUN_BYTES", str(1 << 20))
    with pytest.raises(RunFileError, match="unpacks past the 1048576-byte limit"):
        read_run_bytes(bomb)


def test_merges_compare_what_the_files_hold(tmp_path: Path) -> None:
    store, runs = _store(tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(store, copy)
    pack_store(store)
    # A packed source merges as JSON into an empty store; an unpacked copy of the same runs
    # is the same runs, skipped, beside a packed destination.
    fresh = tmp_path / "fresh"
    report = merge([store], fresh)
    assert len(report.copied) == 3
    assert all(p.name.endswith(".json") for p in store_files(fresh))
    again = merge([copy], store)
    assert again.copied == () and again.skipped == 3
    assert {r.digest for r in load_store(fresh)} == {r.digest for r in runs}


def test_store_pack_and_show_on_the_command_line(tmp_path: Path) -> None:
    root = fixture_project(tmp_path / "proj")
    store = root / "results"
    run = write_run(make_sweep_run(root=root), store)
    out, err = io.StringIO(), io.StringIO()
    assert main(["--root", str(root), "store", "pack"], out, err) == 0, err.getvalue()
    assert "packed 1 run file(s)" in out.getvalue()
    out = io.StringIO()
    run_id = run_id_of(run)
    assert main(["--root", str(root), "store", "show", str(run_id)], out, err) == 0
    assert str(run_id) in out.getvalue()


def test_packing_keeps_the_store_append_only_and_the_runs_history(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.fail("git is needed: the append-only rule reads the store's history")
    repo = fixture_project(tmp_path / "repo")
    store = repo / "results"
    kept = write_run(make_sweep_run(root=repo), store)
    edited = write_run(make_sweep_run(root=repo, seed=1, started="2026-01-02T00:00:00Z"), store)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "FIXTURE: two runs")
    first = added_order(store)
    git(repo, "checkout", "-q", "-b", "topic")
    pack_store(store)
    # Packed in the working tree, then staged and committed: neither is a change to a run.
    assert store_changes_since(repo, store, "main") == []
    git(repo, "add", "-A")
    assert store_changes_since(repo, store, "main") == []
    git(repo, "commit", "-q", "-m", "FIXTURE: packed")
    assert store_changes_since(repo, store, "main") == []
    assert added_order(store) == first  # a run's place in history is where it was first added
    # A packed file that holds other JSON than the run it replaced is the run modified.
    packed = Path(str(edited) + ".gz")
    text = gzip.decompress(packed.read_bytes()).decode().replace('"ok"', '"ok" ', 1)
    packed.write_bytes(pack_bytes(text.encode()))
    changes = dict(store_changes_since(repo, store, "main"))
    assert set(changes) == {Path(edited).relative_to(repo).as_posix()}
    # And a packed run removed as well is the run removed.
    Path(str(kept) + ".gz").unlink()
    changes = dict(store_changes_since(repo, store, "main"))
    assert Path(kept).relative_to(repo).as_posix() in changes


def test_the_repository_store_reads_alike_in_either_form(tmp_path: Path) -> None:
    repo_store = Path(__file__).resolve().parents[2] / "results"
    files = store_files(repo_store)[:12]
    for path in files:
        raw = read_run_bytes(path)
        copy = tmp_path / path.parent.name / path.name
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(path.read_bytes())
        assert read_run_bytes(copy) == raw
    pack_store(tmp_path)
    for path in files:
        packed = store_files(tmp_path)
        match = next(p for p in packed if run_id_of(p) == run_id_of(path))
        assert load_run(match).digest == load_run(path).digest
