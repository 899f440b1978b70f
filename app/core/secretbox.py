"""Envelope encryption of a Secret's ``data`` (ADR 0048), pure: no files, no clock.

A Secret is stored with its ``data`` replaced by one envelope string::

    qm1.<key id>.<wrapped data key>.<sealed data>

Each write draws a fresh 256-bit data key and seals the JSON of ``data`` with it (AES-256-GCM,
96-bit random nonce); the data key is itself sealed ("wrapped") by the key-encryption key the
key id names. Both seals carry the Secret's ``namespace/name`` as associated data, so an
envelope copied onto another Secret does not open, and the wrap also carries the key id, so a
header edited to name another key does not open either. Everything after the key id is
base64url without padding. The rest of the object (``type``, ``immutable``, metadata) stays in
the clear: it is what lists, field selectors and the audit trail need.

Callers: the store seals on every Secret write (:mod:`app.store.secret_keys`), the API opens
when answering a principal allowed ``get`` (:mod:`app.api.secrets`), the re-encryption after a
key rotation opens and seals again. :func:`digest` is the plaintext's fingerprint for config
rollouts: it does not change when a Secret is re-encrypted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

PREFIX = "qm1"
KEY_BYTES = 32
NONCE_BYTES = 12
REDACTED_ANNOTATION = "secrets.quaymaster.io/data-redacted"
_enc = msgspec.json.Encoder(order="sorted")
_dec = msgspec.json.Decoder()


class SecretKeyError(Exception):
    """An envelope that cannot be opened: unknown key id, tampered or malformed."""


@dataclass(frozen=True)
class Keyring:
    """Key-encryption keys by id; ``active`` is the one new writes use, the others only open."""

    keys: Mapping[str, bytes] = field(default_factory=dict)
    active: str = ""
    # Keys :func:`digest`, never rotated: fingerprints stay equal across rotations, and
    # are no oracle for guessing a low-entropy value without the keys file.
    digest_key: bytes = b""

    def __post_init__(self) -> None:
        if self.active and self.active not in self.keys:
            raise SecretKeyError(f"the active key {self.active!r} is not among the keys")
        for kid, key in self.keys.items():
            if len(key) != KEY_BYTES or not valid_key_id(kid):
                raise SecretKeyError(f"key {kid!r}: needs a {KEY_BYTES}-byte key and a plain id")


def valid_key_id(kid: str) -> bool:
    return bool(kid) and len(kid) <= 64 and all(c.isalnum() or c in "-_" for c in kid)


def new_key() -> bytes:
    return AESGCM.generate_key(bit_length=KEY_BYTES * 8)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise SecretKeyError("the envelope is not valid base64url") from exc


def _seal(key: bytes, plain: bytes, aad: bytes, nonce: bytes | None = None) -> bytes:
    nonce = nonce or os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plain, aad)


def _open(key: bytes, sealed: bytes, aad: bytes) -> bytes:
    if len(sealed) < NONCE_BYTES + 16:
        raise SecretKeyError("the envelope is truncated")
    try:
        return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], aad)
    except InvalidTag as exc:
        raise SecretKeyError("the envelope does not authenticate (tampered or misplaced)") from exc


def binding(namespace: str, name: str) -> bytes:
    """The associated data: the object's identity, so a ciphertext only opens where written."""
    return f"secrets/{namespace}/{name}".encode()


def is_envelope(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(PREFIX + ".")


def key_id(envelope: str) -> str:
    """The key id an envelope names (without opening it)."""
    parts = envelope.split(".")
    if len(parts) != 4 or parts[0] != PREFIX:
        raise SecretKeyError("not a Secret envelope")
    return parts[1]


def seal(data: Mapping[str, str], ring: Keyring, namespace: str, name: str) -> str:
    """``data`` sealed under a fresh data key wrapped by the active key."""
    if not ring.active:
        raise SecretKeyError("no active Secret encryption key is configured")
    aad = binding(namespace, name)
    dek = new_key()
    wrapped = _seal(ring.keys[ring.active], dek, ring.active.encode() + b"\0" + aad)
    body = _seal(dek, _enc.encode(dict(data)), aad)
    return f"{PREFIX}.{ring.active}.{_b64(wrapped)}.{_b64(body)}"


def open_envelope(envelope: str, ring: Keyring, namespace: str, name: str) -> dict[str, str]:
    """The ``data`` map an envelope holds; :class:`SecretKeyError` if it does not open."""
    kid = key_id(envelope)
    key = ring.keys.get(kid)
    if key is None:
        raise SecretKeyError(f"unknown Secret encryption key id {kid!r}")
    _, _, wrapped, body = envelope.split(".")
    aad = binding(namespace, name)
    dek = _open(key, _unb64(wrapped), kid.encode() + b"\0" + aad)
    data = _dec.decode(_open(dek, _unb64(body), aad))
    if not isinstance(data, dict):
        raise SecretKeyError("the envelope does not hold a data map")
    return data


def seal_spec(spec: Mapping[str, Any], ring: Keyring, namespace: str, name: str) -> dict[str, Any]:
    """A Secret's stored fields with ``data`` sealed (an already sealed ``data`` is kept)."""
    out = dict(spec)
    data = out.get("data")
    if not is_envelope(data):
        out["data"] = seal(data if isinstance(data, dict) else {}, ring, namespace, name)
    out.pop("stringData", None)  # folded into data by admission; never stored
    return out


def open_fields(obj: Mapping[str, Any], ring: Keyring) -> dict[str, Any]:
    """A Secret object (API shape) with ``data`` opened; no ``data`` when it is empty."""
    out = dict(obj)
    data = out.get("data")
    if is_envelope(data):
        meta = out.get("metadata") or {}
        data = open_envelope(str(data), ring, meta.get("namespace", ""), meta.get("name", ""))
    if data:
        out["data"] = data
    else:
        out.pop("data", None)
    return out


def redact(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Secret as a principal without ``get`` on it sees it in a list or watch: no ``data``,
    and an annotation saying it was withheld (so it is not mistaken for an empty Secret)."""
    out = {k: v for k, v in obj.items() if k not in ("data", "stringData")}
    meta = dict(out.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), REDACTED_ANNOTATION: "true"}
    out["metadata"] = meta
    return out


def digest(data: Mapping[str, str] | None, ring: Keyring, secret_type: str = "Opaque") -> str:
    """A stable fingerprint of a Secret's plaintext content (type and data, order-free):
    equal for equal content whatever key or nonce sealed it. Hex HMAC-SHA256 under the
    keyring's digest key."""
    raw = _enc.encode({"type": secret_type or "Opaque", "data": dict(data or {})})
    return hmac.new(ring.digest_key or b"qm-secret-digest", raw, hashlib.sha256).hexdigest()
