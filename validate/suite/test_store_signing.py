"""Signed evidence (issue 25 item 8): forgeries that a digest cannot catch, caught by signatures.

Each test builds a FIXTURE project in tmp_path (the real templates, a made-up store, the docs
rendered from it) whose ``[tool.tether.signing]`` requires signed evidence, with throwaway SSH
keys made by ssh-keygen in tmp_path: a host key listed in the allowed-signers file and a
forger's key that is not.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
from tether.store import write_run
from tether.store.model import Run
from tether.store.signing import (
    NAMESPACE,
    parse_signature,
    sidecar,
    signature_label,
    verify_run,
)

from validate.suite.fixture_project import fixture_project, run_cli
from validate.suite.runfactory import make_sweep_run, resealed
from validate.suite.signing_keys import keypair, require_ssh_keygen

REPO = Path(__file__).resolve().parents[2]
HOST = "fixture-host"

require_ssh_keygen()


def _render(root: Path) -> None:
    rc, out, err = run_cli(root, "render")
    assert rc == 0, out + err


def _sign(root: Path, key: Path, *refs: str, principal: str = HOST) -> tuple[int, str, str]:
    return run_cli(root, "sign", "--key", str(key), "--principal", principal, *refs)


class Project:
    def __init__(self, root: Path, host_key: Path, forger_key: Path, first: Run) -> None:
        self.root, self.host_key, self.forger_key, self.first = root, host_key, forger_key, first

    @property
    def store(self) -> Path:
        return self.root / "results"

    def check(self) -> tuple[int, str]:
        rc, out, err = run_cli(self.root, "check", "--worktree")
        return rc, out + err

    def add(self, run: Run) -> Run:
        """Write ``run`` into the store and re-render, so the docs cite it as newest."""
        written = replace(run, path=write_run(run, self.store))
        _render(self.root)
        return written


def _project(tmp_path: Path, require: bool = True) -> Project:
    keys = tmp_path / "keys"
    keys.mkdir()
    host_key = keypair(keys, "host")
    forger_key = keypair(keys, "forger")
    extra = (
        "[tool.tether.signing]\n"
        'allowed_signers = "ci/allowed_signers"\n'
        f"require = {'true' if require else 'false'}\n"
    )
    root = fixture_project(tmp_path / "repo", extra=extra)
    shutil.copytree(REPO / "docs_src", root / "docs_src")
    public = (keys / "host.pub").read_text(encoding="utf-8").split()[:2]
    (root / "ci").mkdir()
    (root / "ci" / "allowed_signers").write_text(
        f'{HOST} namespaces="{NAMESPACE}" {" ".join(public)}\n', encoding="utf-8"
    )
    first = make_sweep_run(started="2026-01-01T00:00:00Z", store=root / "results", root=root)
    _render(root)
    return Project(root, host_key, forger_key, first)


@pytest.fixture
def signed(tmp_path: Path) -> Project:
    proj = _project(tmp_path)
    rc, out, err = _sign(proj.root, proj.host_key, "--unsigned")
    assert rc == 0, out + err
    _render(proj.root)  # the docs show the signature
    rc, said = proj.check()
    assert rc == 0, f"FIXTURE signed project is not clean:\n{said}"
    return proj


def _later(run: Run, day: str, factor: float = 2.0) -> Run:
    """``run`` with B made ``factor`` times faster, dated ``day`` and re-sealed under a new id
    with tether's own function: a forgery whose digest is valid."""
    cells = tuple(
        replace(c, samples={**c.samples, "B": tuple(x / factor for x in c.samples["B"])})
        for c in run.cells
    )
    stamp = {"started": f"{day}T00:00:00Z", "ended": f"{day}T01:00:00Z"}
    return resealed(run, cells=cells, provenance=stamp)


def test_signature_shows_in_provenance(signed: Project) -> None:
    sig = sidecar(signed.first.path)
    label = signature_label(signed.first.path)
    assert label is not None and label.startswith("ED25519 SHA256:")
    assert parse_signature(sig.read_text(encoding="ascii")).namespace == NAMESPACE
    from tether.render.context import run_ref

    assert run_ref(replace(signed.first, path=signed.first.path), "x").signature == label


def test_forged_reseal_with_the_copied_signature_fails(signed: Project) -> None:
    forged = signed.add(_later(signed.first, "2026-02-01"))
    shutil.copyfile(sidecar(signed.first.path), sidecar(forged.path))
    rc, said = signed.check()
    assert rc == 1
    assert forged.id in said and "does not match its digest" in said


def test_fabricated_run_with_a_copied_guard_record_fails(signed: Project) -> None:
    fake = make_sweep_run(started="2026-03-01T00:00:00Z", ratio=0.5, root=signed.root)
    fake = resealed(fake, guard=signed.first.guard)
    fake = signed.add(fake)
    rc, said = signed.check()
    assert rc == 1
    assert fake.id in said and "is unsigned" in said
    # Signing it with the forger's own key does not help: the key is not an allowed signer.
    made = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(signed.forger_key), "-n", NAMESPACE],
        input=fake.digest.encode(),
        capture_output=True,
        check=True,
    )
    sidecar(fake.path).write_bytes(made.stdout)
    rc, said = signed.check()
    assert rc == 1
    assert "does not allow" in said


def test_swapped_signature_fails(signed: Project) -> None:
    second = signed.add(make_sweep_run(started="2026-02-01T00:00:00Z", seed=4, root=signed.root))
    assert _sign(signed.root, signed.host_key, second.id)[0] == 0
    _render(signed.root)
    assert signed.check()[0] == 0
    # Each run's signature beside the other run.
    a, b = sidecar(signed.first.path), sidecar(second.path)
    a_text, b_text = a.read_bytes(), b.read_bytes()
    a.write_bytes(b_text)
    b.write_bytes(a_text)
    rc, said = signed.check()
    assert rc == 1
    assert second.id in said and "does not match its digest" in said


def test_unknown_key_is_refused_by_sign_and_by_check(signed: Project) -> None:
    second = signed.add(make_sweep_run(started="2026-02-01T00:00:00Z", seed=5, root=signed.root))
    rc, _, err = _sign(signed.root, signed.forger_key, second.id)
    assert rc == 1 and "does not verify for principal" in err
    assert not sidecar(second.path).exists()  # nothing written
    # The host key under another principal's name is refused too.
    rc, _, err = _sign(signed.root, signed.host_key, second.id, principal="someone-else")
    assert rc == 1 and "someone-else" in err


def test_without_require_unsigned_runs_pass(tmp_path: Path) -> None:
    proj = _project(tmp_path, require=False)
    assert proj.check()[0] == 0
    verdict = verify_run(proj.first.path, proj.first.digest, proj.root / "ci/allowed_signers")
    assert not verdict.ok and verdict.why == "is unsigned"


def test_sign_never_overwrites(signed: Project) -> None:
    before = sidecar(signed.first.path).read_bytes()
    rc, _, err = _sign(signed.root, signed.host_key, signed.first.id)
    assert rc == 0 and "already signed" in err
    assert sidecar(signed.first.path).read_bytes() == before


def test_signature_without_its_run_is_a_store_problem(signed: Project) -> None:
    orphan = signed.store / "sm90" / "no-such-run.sig"
    shutil.copyfile(sidecar(signed.first.path), orphan)
    rc, said = signed.check()
    assert rc == 1 and "without its run" in said
    rc, out, _ = run_cli(signed.root, "store", "validate")
    assert rc == 1 and "no-such-run.sig" in out


def test_malformed_signature_is_a_store_problem(signed: Project) -> None:
    sidecar(signed.first.path).write_text("not a signature\n", encoding="ascii")
    rc, out, _ = run_cli(signed.root, "store", "validate")
    assert rc == 1 and "armored SSH signature" in out


def test_merge_carries_signatures(signed: Project, tmp_path: Path) -> None:
    dest = tmp_path / "merged"
    rc, out, err = run_cli(signed.root, "store", "merge", "--into", str(dest), str(signed.store))
    assert rc == 0, out + err
    copied = dest / "sm90" / sidecar(signed.first.path).name
    assert copied.read_bytes() == sidecar(signed.first.path).read_bytes()


def test_require_without_allowed_signers_is_refused(tmp_path: Path) -> None:
    root = fixture_project(tmp_path / "repo", extra="[tool.tether.signing]\nrequire = true\n")
    rc, _, err = run_cli(root, "check", "--worktree")
    assert rc == 2 and "allowed_signers" in err
