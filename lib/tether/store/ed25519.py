"""Ed25519 signature verification in this process, by the OpenSSL library Python links.

A check of a fresh clone verifies every signed run, and ``ssh-keygen -Y verify`` is a
process each, whose start-up is most of what a verification costs. The
arithmetic is one call into libcrypto (``EVP_DigestVerify`` with an ``ED25519`` key), the same
OpenSSL build ``hashlib`` uses, so it adds no dependency.

This module only ever *confirms*: ``tether.store.signing`` trusts a True for a signature it
has checked is of the plain kind (an ``ssh-ed25519`` key on a plain allowed-signers line), and
hands every other case (a False, no libcrypto, a key or line of another kind) to ssh-keygen,
which stays the judge of every refusal. So a signature the two libraries could judge apart (a
non-canonical scalar, which only a forger makes) is judged by ssh-keygen, as before.

The library is checked at load against RFC 8032's first test vector, the good signature and
one with a bit flipped; a library that fails it is not used.
"""

from __future__ import annotations

import ctypes
import functools

# NID_ED25519 / EVP_PKEY_ED25519 in OpenSSL's obj_mac.h (stable since OpenSSL 1.1.1).
_EVP_PKEY_ED25519 = 1087
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
# The sonames to try, newest first; dlopen of a soname already loaded (by _hashlib) returns it.
_SONAMES = ("libcrypto.so.3", "libcrypto.so.1.1", "libcrypto.3.dylib", "libcrypto.1.1.dylib")

# RFC 8032 section 7.1, TEST 1: the empty message.
_RFC_PUBLIC = bytes.fromhex("d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a")
_RFC_SIGNATURE = bytes.fromhex(
    "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
)


class _Crypto:
    """The few libcrypto entry points verification needs, typed for ctypes."""

    def __init__(self, lib: ctypes.CDLL):
        p, size, i = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        self.new_key = lib.EVP_PKEY_new_raw_public_key
        self.new_key.argtypes, self.new_key.restype = [i, p, ctypes.c_char_p, size], p
        self.free_key = lib.EVP_PKEY_free
        self.free_key.argtypes, self.free_key.restype = [p], None
        self.new_ctx = lib.EVP_MD_CTX_new
        self.new_ctx.argtypes, self.new_ctx.restype = [], p
        self.free_ctx = lib.EVP_MD_CTX_free
        self.free_ctx.argtypes, self.free_ctx.restype = [p], None
        self.init = lib.EVP_DigestVerifyInit
        self.init.argtypes, self.init.restype = [p, p, p, p, p], i
        self.verify = lib.EVP_DigestVerify
        self.verify.argtypes = [p, ctypes.c_char_p, size, ctypes.c_char_p, size]
        self.verify.restype = i
        version = lib.OpenSSL_version  # OpenSSL 1.1 and later
        version.argtypes, version.restype = [i], ctypes.c_char_p
        self.version = (version(0) or b"OpenSSL (no version)").decode("ascii", "replace")

    def check(self, public_key: bytes, signature: bytes, message: bytes) -> bool:
        key = self.new_key(_EVP_PKEY_ED25519, None, public_key, len(public_key))
        if not key:
            return False
        ctx = self.new_ctx()
        try:
            if not ctx or self.init(ctx, None, None, None, key) != 1:
                return False
            done: int = self.verify(ctx, signature, len(signature), message, len(message))
            return done == 1
        finally:
            if ctx:
                self.free_ctx(ctx)
            self.free_key(key)


@functools.cache
def _crypto() -> _Crypto | None:
    """libcrypto, once it has passed the known-answer test; None where it cannot be loaded
    or fails it (verification then goes to ssh-keygen)."""
    for name in _SONAMES:
        try:
            found = _Crypto(ctypes.CDLL(name))
        except (OSError, AttributeError):
            continue
        flipped = bytes([_RFC_SIGNATURE[0] ^ 1]) + _RFC_SIGNATURE[1:]
        if found.check(_RFC_PUBLIC, _RFC_SIGNATURE, b"") and not found.check(
            _RFC_PUBLIC, flipped, b""
        ):
            return found
    return None


def available() -> bool:
    """Whether signatures can be verified in this process."""
    return _crypto() is not None


def verifier() -> str:
    """What judges a signature here, for a kept verdict's key: the version of the libcrypto
    loaded (not necessarily the one the ssl module names), or "absent"."""
    crypto = _crypto()
    return crypto.version if crypto is not None else "absent"


def verify(public_key: bytes, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is a valid Ed25519 signature of ``message`` by ``public_key``
    (False too where libcrypto is unavailable or the sizes are not Ed25519's)."""
    crypto = _crypto()
    if crypto is None or len(public_key) != PUBLIC_KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    return crypto.check(public_key, signature, message)
