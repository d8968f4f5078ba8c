"""SSH signing keys for the signature tests (test_store_signing, test_signed_evidence): one
definition of how a test makes a key, and of what happens where ssh-keygen is missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


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
