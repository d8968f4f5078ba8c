"""Signed evidence: who measured a run, by the SSH-signature convention git uses for commits.

A run's digest proves its content is intact, not where it came from: anyone can edit a run's
samples and re-seal it under a new id with tether's own function, or fabricate a later run
around a copied guard record. A host that measures evidence therefore signs each run:

- the signed message is the run's digest string (its ``digest`` field, UTF-8, no newline);
- ``ssh-keygen -Y sign -f KEY -n tether-run``, the armored signature stored as a sidecar
  ``<store>/<arch>/<run-id>.sig`` beside the run (runs are sealed and never rewritten, so the
  signature cannot live inside one; a sidecar without its run is a store problem);
- verification with ``ssh-keygen -Y find-principals`` and ``-Y verify`` against an
  allowed-signers file in the repository (``[tool.tether.signing] allowed_signers``), with
  the namespace ``tether-run`` so no other SSH signature (a commit's, an email's) passes.
  A good Ed25519 signature on a plain allowed-signers line is confirmed in this process
  instead (``confirmed_principals``, by OpenSSL's libcrypto): a cold check verifies every
  signed run, and a process per run was most of that work. It only confirms; every refusal,
  and every key or line of another kind, is ssh-keygen's verdict.

With ``[tool.tether.signing] require = true`` the check fails on a cited run that is
unsigned, signed by a key the file does not allow, or whose signature does not match its
digest (and no document cites such a run: tether.store.evidence). Nothing here needs a GPU or
a network: only python and ssh-keygen.

A host that measures signs as it writes when it is given a key: ``TETHER_SIGNING_KEY`` (the
private key file) and ``TETHER_SIGNING_PRINCIPAL`` (its name in the allowed-signers file) make
the measuring verbs, ``tether verify`` and ``tether compile`` sign each run they write
(``sign_written``), with the same function ``tether sign`` uses. A key is the host's, never the
project's, so it is named by the environment, not by pyproject.toml.

What a document shows (``signature_label``) is read from the sidecar alone, in pure Python
(the signing key's type and SHA256 fingerprint, as ``ssh-keygen -l`` prints it), so rendering
is the same on every machine, with or without ssh-keygen.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tether.errors import SigningError
from tether.store import ed25519
from tether.store.io import write_bytes_once
from tether.store.layout import sig_path

NAMESPACE = "tether-run"
ARMOR_BEGIN = "-----BEGIN SSH SIGNATURE-----"
ARMOR_END = "-----END SSH SIGNATURE-----"
MAX_SIG_BYTES = 64 * 1024  # an SSH signature is under 2 KB; anything larger is not one
KEYGEN_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class SshSignature:
    """A parsed SSHSIG blob: the signing public key and the namespace it was made for."""

    key_type: str  # ssh-ed25519, ecdsa-sha2-nistp256, ...
    key_blob: bytes  # the public key in SSH wire format
    namespace: str
    hash_algorithm: str = ""  # what hashed the message: sha256 or sha512
    signature: bytes = b""  # the signature in SSH wire format (its type, then its bytes)

    @property
    def fingerprint(self) -> str:
        """``SHA256:<base64>``, the form ``ssh-keygen -l`` and ``-Y verify`` print."""
        digest = base64.b64encode(hashlib.sha256(self.key_blob).digest()).decode("ascii")
        return "SHA256:" + digest.rstrip("=")

    @property
    def label(self) -> str:
        """The key's type and fingerprint, for a document: ``ED25519 SHA256:...``."""
        kind = self.key_type.removeprefix("ssh-").split("-")[0].upper()
        return f"{kind} {self.fingerprint}"


def sidecar(run_path: Path) -> Path:
    """Where the signature of the run file ``run_path`` lives: ``<id>.sig`` beside it (for a
    packed run too: a signature signs the run's digest, whatever its file's form)."""
    return sig_path(Path(run_path))


def _strings(blob: bytes, count: int, source: object) -> tuple[list[bytes], bytes]:
    out = []
    for _ in range(count):
        if len(blob) < 4:
            raise SigningError(f"{source}: truncated SSH signature")
        (size,) = struct.unpack(">I", blob[:4])
        if size > len(blob) - 4:
            raise SigningError(f"{source}: truncated SSH signature")
        out.append(blob[4 : 4 + size])
        blob = blob[4 + size :]
    return out, blob


def parse_signature(text: str, source: object = "<signature>") -> SshSignature:
    """The key and namespace of an armored SSH signature; SigningError names ``source``."""
    lines = [line.strip() for line in text.strip().splitlines()]
    if len(lines) < 3 or lines[0] != ARMOR_BEGIN or lines[-1] != ARMOR_END:
        raise SigningError(f"{source}: not an armored SSH signature ({ARMOR_BEGIN} ... )")
    try:
        blob = base64.b64decode("".join(lines[1:-1]), validate=True)
    except (binascii.Error, ValueError):
        raise SigningError(f"{source}: the SSH signature is not valid base64") from None
    if not blob.startswith(b"SSHSIG") or len(blob) < 10:
        raise SigningError(f"{source}: not an SSHSIG blob")
    (version,) = struct.unpack(">I", blob[6:10])
    if version != 1:
        raise SigningError(f"{source}: SSHSIG version {version}, expected 1")
    (key, namespace, _reserved, hashed, signed), _rest = _strings(blob[10:], 5, source)
    (key_type,), _ = _strings(key, 1, source)
    try:
        return SshSignature(
            key_type.decode("ascii"),
            key,
            namespace.decode("utf-8"),
            hashed.decode("ascii", "replace"),
            signed,
        )
    except UnicodeDecodeError:
        raise SigningError(f"{source}: the SSH signature's key type is not text") from None


def read_signature_text(path: Path) -> str:
    """The text of a sidecar, read as a regular file of bounded size."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise SigningError(f"{path}: cannot read the signature: {exc.strerror or exc}") from None
    try:
        raw = os.read(fd, MAX_SIG_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_SIG_BYTES:
        raise SigningError(f"{path}: over {MAX_SIG_BYTES} bytes; not an SSH signature")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise SigningError(f"{path}: not ASCII; not an armored SSH signature") from None


def signature_of(run_path: Path | None) -> SshSignature | None:
    """The parsed signature beside the run file ``run_path``, or None when it has none."""
    if run_path is None:
        return None
    path = sidecar(run_path)
    if not path.exists():
        return None
    return parse_signature(read_signature_text(path), path)


def signature_label(run_path: Path | None) -> str | None:
    """What a document says about a run's signature: ``ED25519 SHA256:...`` (the signing
    key), or None when unsigned. A malformed sidecar is a store problem, reported by the
    check and ``tether store validate``; here it reads as unsigned."""
    try:
        sig = signature_of(run_path)
    except SigningError:
        return None
    return sig.label if sig is not None and sig.namespace == NAMESPACE else None


# -- ssh-keygen -----------------------------------------------------------------------------


def keygen() -> str:
    """The ssh-keygen executable; SigningError when it is not on PATH."""
    found = shutil.which("ssh-keygen")
    if found is None:
        raise SigningError("ssh-keygen is not on PATH; signing and verifying runs need it")
    return found


def keygen_digest() -> str:
    """What judges a signature, for a kept verdict's key: the ssh-keygen on PATH, by its path
    and the SHA-256 of its bytes (another OpenSSH may judge another way); "absent" without one.
    Read afresh on each call (once per batch of verdicts): PATH or the file may change."""
    found = shutil.which("ssh-keygen")
    if found is None:
        return "absent"
    try:
        return found + ":" + hashlib.sha256(Path(found).read_bytes()).hexdigest()
    except OSError:
        return found + ":unreadable"


# Allowed-signers options under which ``-Y verify`` also reads the clock: a key's validity
# interval, or a certificate authority (its certificates expire).
_TIME_OPTIONS = (b"valid-after", b"valid-before", b"cert-authority")


def time_bound(allowed: bytes) -> bool:
    """Whether the allowed-signers file ``allowed`` (its bytes) can make a verdict depend on
    when it is asked, so that a verdict must not be kept: any line naming a validity interval
    or a certificate authority (matched anywhere in the file, so a comment counts too: a
    false "bound" only costs a recheck)."""
    lowered = allowed.lower()
    return any(option in lowered for option in _TIME_OPTIONS)


def _keygen(args: list[str], message: bytes) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            [keygen(), *args],
            input=message,
            capture_output=True,
            timeout=KEYGEN_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise SigningError(f"ssh-keygen {args[1]} took over {KEYGEN_TIMEOUT_S:.0f}s") from None


def sign_message(message: str, key: Path) -> str:
    """The armored signature of ``message`` by the private key file ``key``."""
    if not Path(key).is_file():
        raise SigningError(f"{key}: no such key file")
    done = _keygen(["-Y", "sign", "-f", str(key), "-n", NAMESPACE], message.encode("utf-8"))
    if done.returncode != 0 or ARMOR_BEGIN.encode() not in done.stdout:
        said = done.stderr.decode("utf-8", "replace").strip()
        raise SigningError(f"{key}: ssh-keygen could not sign: {said or 'no signature'}")
    return done.stdout.decode("ascii")


def listed_principals(key_blob: bytes, allowed: Path) -> tuple[str, ...]:
    """The principals whose line in ``allowed`` carries ``key_blob``, read in Python (one
    ssh-keygen call per run saved; ``-Y verify`` still judges the line's options). Lines are
    ``principals [options] keytype base64-key [comment]``."""
    try:
        text = allowed.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ()
    wanted = base64.b64encode(key_blob).decode("ascii")
    found: list[str] = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if wanted in words[1:]:
            found.extend(p for p in words[0].split(",") if p)
    return tuple(dict.fromkeys(found))


def principals_of(signature: Path, allowed: Path) -> tuple[str, ...]:
    """The principals ``allowed`` (an allowed-signers file) lists for the key that made
    ``signature``; empty when the key is not an allowed signer."""
    done = _keygen(["-Y", "find-principals", "-s", str(signature), "-f", str(allowed)], b"")
    if done.returncode != 0:
        return ()
    return tuple(line.strip() for line in done.stdout.decode().splitlines() if line.strip())


def verify_message(message: str, signature: Path, allowed: Path, principal: str) -> bool:
    """Whether ``signature`` is ``principal``'s signature of ``message`` per ``allowed``."""
    done = _keygen(
        [
            "-Y",
            "verify",
            "-f",
            str(allowed),
            "-I",
            principal,
            "-n",
            NAMESPACE,
            "-s",
            str(signature),
        ],
        message.encode("utf-8"),
    )
    return done.returncode == 0


# -- in-process confirmation of plain Ed25519 signatures ------------------------------------

_MAGIC = b"SSHSIG"
_HASHES = ("sha256", "sha512")  # what ssh-keygen -Y verify accepts
# An allowed-signers line of the plain kind: literal principals, at most a literal namespaces
# list, a key type and its base64 key, then an optional comment. Anything else (patterns,
# negations, cert-authority, validity intervals, quoting, options in other cases) is
# ssh-keygen's to judge.
_LITERAL = re.compile(r"[^\s,*?!\"]+(?:,[^\s,*?!\"]+)*")
_NAMESPACES = re.compile(r'namespaces="([^\s,*?!"]+(?:,[^\s,*?!"]+)*)"')
_KEY_TYPE = re.compile(r"(?:ssh|ecdsa|sk|rsa)-[A-Za-z0-9@.-]+")


@dataclass(frozen=True)
class _Line:
    principals: frozenset[str]
    namespaces: frozenset[str] | None  # None: the line names none, so every one is allowed
    key_type: str  # as written: ssh-keygen refuses a line whose key is of another type
    key: str  # base64, as written


@functools.lru_cache(maxsize=16)
def _plain_lines(text: str) -> tuple[_Line, ...] | None:
    """The lines of an allowed-signers file, when every one is of the plain kind; else None."""
    out = []
    for raw in text.splitlines():
        words = raw.split()
        if not words or words[0].startswith("#"):
            continue
        namespaces = None
        if len(words) > 1 and (match := _NAMESPACES.fullmatch(words[1])) is not None:
            namespaces = frozenset(match.group(1).split(","))
            words = [words[0], *words[2:]]
        if len(words) < 3 or not _LITERAL.fullmatch(words[0]):
            return None
        if not _KEY_TYPE.fullmatch(words[1]):
            return None
        out.append(_Line(frozenset(words[0].split(",")), namespaces, words[1], words[2]))
    return tuple(out)


def _ed25519_parts(sig: SshSignature) -> tuple[bytes, bytes] | None:
    """The raw public key and signature of an ``ssh-ed25519`` SSHSIG, or None when it is of
    another kind or its encodings carry anything more."""
    try:
        (kind, public), rest = _strings(sig.key_blob, 2, "<key>")
        (sig_kind, raw), sig_rest = _strings(sig.signature, 2, "<signature>")
    except SigningError:
        return None
    if rest or sig_rest or kind != b"ssh-ed25519" or sig_kind != b"ssh-ed25519":
        return None
    if len(public) != ed25519.PUBLIC_KEY_BYTES or len(raw) != ed25519.SIGNATURE_BYTES:
        return None
    return public, raw


def _signed_data(namespace: str, hash_algorithm: str, message: bytes) -> bytes:
    """What an SSHSIG signs (OpenSSH's PROTOCOL.sshsig): the preamble, the namespace, an empty
    reserved field, the hash's name and the message's hash. The reserved field of the blob is
    not part of it: ssh-keygen signs and verifies it empty."""

    def string(data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + data

    hashed = hashlib.new(hash_algorithm, message).digest()
    return (
        _MAGIC
        + string(namespace.encode("utf-8"))
        + string(b"")
        + string(hash_algorithm.encode("ascii"))
        + string(hashed)
    )


def confirmed_principals(sig: SshSignature, message: str, allowed: Path) -> frozenset[str]:
    """The principals of ``allowed`` for whom ``sig`` is confirmed, in this process, to be a
    good signature of ``message`` in the namespace ``tether-run``: an Ed25519 key listed on a
    plain line (``_plain_lines``) that names the principal and allows the namespace, and a
    signature that libcrypto verifies (``tether.store.ed25519``).

    Empty whenever any of that does not hold, and then ssh-keygen judges: this only ever
    confirms, so a refusal is always ssh-keygen's word, as it was before."""
    parts = _ed25519_parts(sig)
    if parts is None or sig.namespace != NAMESPACE or sig.hash_algorithm not in _HASHES:
        return frozenset()
    try:
        lines = _plain_lines(allowed.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return frozenset()
    if lines is None:
        return frozenset()
    wanted = base64.b64encode(sig.key_blob).decode("ascii")
    names = frozenset().union(
        *(
            line.principals
            for line in lines
            if line.key == wanted
            and line.key_type == sig.key_type
            and (line.namespaces is None or NAMESPACE in line.namespaces)
        )
    )
    if not names:
        return frozenset()
    public, raw = parts
    data = _signed_data(sig.namespace, sig.hash_algorithm, message.encode("utf-8"))
    return names if ed25519.verify(public, raw, data) else frozenset()


@dataclass(frozen=True)
class Verdict:
    """Whether one run's signature holds: ``ok``, the principals it verified for, and why not."""

    ok: bool
    why: str
    principals: tuple[str, ...] = ()


def verify_run(run_path: Path, digest: str, allowed: Path) -> Verdict:
    """Judge the sidecar of the run file ``run_path`` (whose digest is ``digest``) against
    the allowed-signers file ``allowed``."""
    path = sidecar(run_path)
    if not path.is_file():
        return Verdict(False, "is unsigned")
    try:
        sig = parse_signature(read_signature_text(path), path)
    except SigningError as exc:
        return Verdict(False, f"has a malformed signature: {exc}")
    if sig.namespace != NAMESPACE:
        return Verdict(False, f"is signed for namespace {sig.namespace!r}, not {NAMESPACE!r}")
    found = listed_principals(sig.key_blob, allowed) or principals_of(path, allowed)
    if not found:
        return Verdict(False, f"is signed by {sig.label}, which {allowed.name} does not allow")
    fast = confirmed_principals(sig, digest, allowed)
    good = tuple(p for p in found if p in fast or verify_message(digest, path, allowed, p))
    if not good:
        return Verdict(
            False,
            f"has a signature by {', '.join(found)} ({sig.label}) that does not match its digest",
        )
    return Verdict(True, "", good)


def sign_run_file(
    run_path: Path, digest: str, key: Path, principal: str, allowed: Path | None
) -> Path:
    """Sign the run file ``run_path`` with ``key`` and write its sidecar (never overwriting).

    With ``allowed`` the new signature must verify for ``principal`` first, so a host never
    writes a signature that the check would refuse (a key not listed, or listed under another
    name)."""
    armored = sign_message(digest, key)
    if allowed is not None:
        with tempfile.TemporaryDirectory(prefix="tether-sign-") as tmp:
            probe = Path(tmp) / "run.sig"
            probe.write_text(armored, encoding="ascii")
            if not verify_message(digest, probe, allowed, principal):
                raise SigningError(
                    f"{key}: its signature does not verify for principal {principal!r} in "
                    f"{allowed}; add the key's public half there under that name"
                )
    return write_bytes_once(sidecar(run_path), armored.encode("ascii"))


# -- the host's own key: signing as runs are written -----------------------------------------

ENV_KEY = "TETHER_SIGNING_KEY"
ENV_PRINCIPAL = "TETHER_SIGNING_PRINCIPAL"


@dataclass(frozen=True)
class Signer:
    """The key this host signs its runs with, and its name in the allowed-signers file."""

    key: Path
    principal: str


def configured_signer() -> Signer | None:
    """The signer the environment names (``TETHER_SIGNING_KEY``, ``TETHER_SIGNING_PRINCIPAL``),
    or None when no key is set. Checked before anything is measured: a key that is set but
    missing, or set without its principal, is a SigningError, not a run left unsigned."""
    key = os.environ.get(ENV_KEY, "").strip()
    if not key:
        return None
    principal = os.environ.get(ENV_PRINCIPAL, "").strip()
    if not principal:
        raise SigningError(
            f"{ENV_KEY} is set but {ENV_PRINCIPAL} is not: name the key's principal in the "
            "allowed-signers file"
        )
    if not Path(key).is_file():
        raise SigningError(f"{ENV_KEY}={key}: no such private key file")
    keygen()
    return Signer(Path(key), principal)


def sign_written(run_path: Path | None, digest: str, allowed: Path | None) -> Path | None:
    """Sign the run just written at ``run_path`` with the configured signer (``sign_run_file``:
    verified against ``allowed`` before the sidecar is written); the sidecar, or None when no
    signer is configured (or nothing was written)."""
    signer = configured_signer()
    if signer is None or run_path is None:
        return None
    return sign_run_file(run_path, digest, signer.key, signer.principal, allowed)
