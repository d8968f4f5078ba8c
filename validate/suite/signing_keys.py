"""SSH signing keys for the signature tests (test_store_signing, test_signed_evidence,
test_signature_cache): one definition of how a test makes a key, signs a run with it, and of
what happens where ssh-keygen is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from tether.store import Run
from tether.store.signing import NAMESPACE, sidecar


def require_ssh_keygen() -> None:
    """Skip the calling test module where ssh-keygen is not on PATH; under CI, fail instead
    (CI must exercise signatures, not skip them). Call at module level."""
    if shutil.which("ssh-keygen") is None:
        if os.environ.get("CI") == "true":
            raise RuntimeError("ssh-keygen is required under CI to test signed evidence")
        pytest.skip("ssh-keygen is not on PATH: signatures cannot be made", allow_module_level=True)


def keypair(folder: Path, name: str) -> Path:
    """A fresh passphrase-less ed25519 key ``folder/name`` (its ``.pub`` beside it)."""
    key = folder / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)],
        check=True,
        capture_output=True,
    )
    return key


def sign_with(key: Path, run: Run) -> None:
    """FIXTURE: ``run``'s sidecar made by ``key`` directly (no allowed-signers check)."""
    assert run.path is not None
    made = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(key), "-n", NAMESPACE],
        input=run.digest.encode(),
        capture_output=True,
        check=True,
    )
    sidecar(run.path).write_bytes(made.stdout)
