"""In-process confirmation of plain Ed25519 run signatures (issue 46: a cold check's signature
verification without a process per run), judged against ssh-keygen itself.

``signing.confirmed_principals`` may only ever confirm: every verdict of ``verify_run`` with
it must equal the verdict ssh-keygen alone gives, over good signatures and every way a
signature, its message or its allowed-signers line can be wrong or unusual. Keys and
signatures are made by ssh-keygen in tmp_path.
"""

from __future__ import annotations

import base64
import os
import struct
import subprocess
from pathlib import Path

import pytest
from tether.store import ed25519, signing
from tether.store.signing import (
    ARMOR_BEGIN,
    ARMOR_END,
    NAMESPACE,
    confirmed_principals,
    parse_signature,
    verify_run,
)

from validate.suite.signing_keys import require_ssh_keygen

require_ssh_keygen()

if not ed25519.available():
    if os.environ.get("CI") == "true":
        raise RuntimeError("libcrypto's Ed25519 must load under CI (the cold check relies on it)")
    pytest.skip("this Python's OpenSSL has no usable Ed25519", allow_module_level=True)

DIGEST = "sha256:" + "ab" * 32
PRINCIPAL = "host@tether"


def _key(folder: Path, name: str, kind: str = "ed25519") -> tuple[Path, str]:
    """A fresh key and its public half as ``keytype base64``."""
    key = folder / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", name, "-f", str(key)],
        check=True,
        capture_output=True,
    )
    return key, " ".join((folder / f"{name}.pub").read_text().split()[:2])


def _sign(key: Path, message: str, *options: str) -> str:
    made = subprocess.run(
        ["ssh-keygen", "-Y", "sign", "-f", str(key), "-n", NAMESPACE, *options],
        input=message.encode(),
        capture_output=True,
        check=True,
    )
    return made.stdout.decode("ascii")


def _run_file(tmp_path: Path, armored: str) -> Path:
    """A run file's path whose sidecar holds ``armored`` (verify_run reads only the sidecar)."""
    run = tmp_path / "sm90" / "run.json"
    run.parent.mkdir(parents=True, exist_ok=True)
    signing.sidecar(run).write_text(armored, encoding="ascii")
    return run


def _allowed(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "allowed_signers"
    path.write_text("# allowed signers\n" + "".join(f"{line}\n" for line in lines))
    return path


def _keygen_alone(monkeypatch: pytest.MonkeyPatch, run: Path, digest: str, allowed: Path):
    with monkeypatch.context() as m:
        m.setattr(signing, "confirmed_principals", lambda *a: frozenset())
        return verify_run(run, digest, allowed)


def _rearmored(armored: str, edit) -> str:
    """``armored`` with its SSHSIG blob changed by ``edit`` (bytes -> bytes)."""
    body = "".join(armored.strip().splitlines()[1:-1])
    blob = edit(base64.b64decode(body))
    text = base64.b64encode(blob).decode("ascii")
    lines = [text[i : i + 70] for i in range(0, len(text), 70)]
    return "\n".join([ARMOR_BEGIN, *lines, ARMOR_END]) + "\n"


def _flip_last(blob: bytes) -> bytes:
    return blob[:-1] + bytes([blob[-1] ^ 1])


def _reserved(blob: bytes) -> bytes:
    """The blob with its reserved field made non-empty: ssh-keygen signs the field empty and
    does not read it back, so it still verifies, and the fast path must agree."""
    at = 10
    for _ in range(2):  # the public key, the namespace
        (size,) = struct.unpack(">I", blob[at : at + 4])
        at += 4 + size
    (size,) = struct.unpack(">I", blob[at : at + 4])
    assert size == 0
    return blob[:at] + struct.pack(">I", 1) + b"x" + blob[at + 4 :]


def test_rfc8032_second_vector() -> None:
    # RFC 8032 section 7.1, TEST 2 (the module's own self-test uses TEST 1).
    public = bytes.fromhex("3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c")
    sig = bytes.fromhex(
        "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da"
        "085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"
    )
    assert ed25519.verify(public, sig, b"\x72")
    assert not ed25519.verify(public, sig, b"\x73")
    assert not ed25519.verify(public, sig[:-1], b"\x72")  # a short signature is refused
    assert not ed25519.verify(public[:-1], sig, b"\x72")


def test_plain_good_signature_needs_no_process(tmp_path: Path, monkeypatch) -> None:
    key, public = _key(tmp_path, "host")
    allowed = _allowed(tmp_path, f'{PRINCIPAL} namespaces="{NAMESPACE}" {public}')
    run = _run_file(tmp_path, _sign(key, DIGEST))

    def no_process(*args, **kwargs):
        raise AssertionError(f"ssh-keygen was called: {args}")

    monkeypatch.setattr(signing, "_keygen", no_process)
    verdict = verify_run(run, DIGEST, allowed)
    assert verdict.ok and verdict.principals == (PRINCIPAL,)


# Each case: (allowed-signers line for the host key, how the sidecar is made, the message
# verified, whether the fast path may confirm it). Every verdict must be ssh-keygen's.
CASES = {
    "plain": ('{p} namespaces="{ns}" {pub}', "good", DIGEST, True),
    "no-options": ("{p} {pub}", "good", DIGEST, True),
    "two-principals": ('other@x,{p} namespaces="{ns}" {pub} a comment', "good", DIGEST, True),
    "namespace-list": ('{p} namespaces="git,{ns}" {pub}', "good", DIGEST, True),
    "sha256": ('{p} namespaces="{ns}" {pub}', "sha256", DIGEST, True),
    "tampered-message": ('{p} namespaces="{ns}" {pub}', "good", DIGEST[:-1] + "0", False),
    "other-namespace-line": ('{p} namespaces="git" {pub}', "good", DIGEST, False),
    "pattern-principal": ('host@* namespaces="{ns}" {pub}', "good", DIGEST, False),
    "valid-after": ('{p} valid-after="20200101",namespaces="{ns}" {pub}', "good", DIGEST, False),
    "expired": ('{p} valid-before="20200101",namespaces="{ns}" {pub}', "good", DIGEST, False),
    "cert-authority": ('{p} cert-authority,namespaces="{ns}" {pub}', "good", DIGEST, False),
    "key-not-listed": ('{p} namespaces="{ns}" {other}', "good", DIGEST, False),
    "other-key-type-word": ('{p} namespaces="{ns}" ssh-rsa {pub_b64}', "good", DIGEST, False),
    "flipped-signature": ('{p} namespaces="{ns}" {pub}', "flipped", DIGEST, False),
    "reserved-field": ('{p} namespaces="{ns}" {pub}', "reserved", DIGEST, True),
    "ecdsa-key": ('{p} namespaces="{ns}" {ecdsa}', "ecdsa", DIGEST, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_verdict_is_ssh_keygens(tmp_path: Path, monkeypatch, case: str) -> None:
    line, made, message, confirms = CASES[case]
    key, public = _key(tmp_path, "host")
    _, other = _key(tmp_path, "other")
    ecdsa_key, ecdsa = _key(tmp_path, "ec", kind="ecdsa")
    allowed = _allowed(
        tmp_path,
        line.format(
            p=PRINCIPAL,
            ns=NAMESPACE,
            pub=public,
            pub_b64=public.split()[1],
            other=other,
            ecdsa=ecdsa,
        ),
    )
    armored = {
        "good": lambda: _sign(key, DIGEST),
        "sha256": lambda: _sign(key, DIGEST, "-O", "hashalg=sha256"),
        "flipped": lambda: _rearmored(_sign(key, DIGEST), _flip_last),
        "reserved": lambda: _rearmored(_sign(key, DIGEST), _reserved),
        "ecdsa": lambda: _sign(ecdsa_key, DIGEST),
    }[made]()
    run = _run_file(tmp_path, armored)
    sig = parse_signature(armored)
    fast = confirmed_principals(sig, message, allowed)
    assert bool(fast) is confirms, f"{case}: confirmed {sorted(fast)}"
    assert verify_run(run, message, allowed) == _keygen_alone(monkeypatch, run, message, allowed)


def test_an_unparsable_line_leaves_the_whole_file_to_ssh_keygen(tmp_path: Path) -> None:
    key, public = _key(tmp_path, "host")
    good = f'{PRINCIPAL} namespaces="{NAMESPACE}" {public}'
    sig = parse_signature(_sign(key, DIGEST))
    assert confirmed_principals(sig, DIGEST, _allowed(tmp_path, good)) == {PRINCIPAL}
    odd = _allowed(tmp_path, good, 'someone "quoted principal" ssh-ed25519 AAAA')
    assert confirmed_principals(sig, DIGEST, odd) == frozenset()
