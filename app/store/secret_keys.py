"""The Secret encryption keys file, and this process's view of it (ADR 0048).

Every process that writes or reads Secret data (API servers, controller workers) reads the keys
file named by ``QM_SECRET_KEYS``: JSON with the key-encryption keys by id, which one is
active, and the digest key. ``make up`` and the test fixtures create it (mode 0600); ``qm
secrets rotate-key`` adds a key and makes it active. A process notices a changed file within
:data:`RELOAD_S` (it compares the file's identity, checked at most that often on use), and at
once when it meets an envelope naming a key it does not know, so a Secret written by a server
that switched first still opens everywhere else.

Without ``QM_SECRET_KEYS`` Secrets cannot be written or read: nothing falls back to plaintext.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fcntl
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from app.core import secretbox
from app.core.secretbox import Keyring, SecretKeyError

ENV = "QM_SECRET_KEYS"
RELOAD_S = 1.0


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def new_key_id(now: dt.datetime | None = None) -> str:
    """``k<UTC time>-<random>``: sortable by creation, unique without coordination."""
    stamp = (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%dT%H%M%S")
    return f"k{stamp}-{secrets.token_hex(3)}"


def _document(ring: Keyring, created: Mapping[str, str]) -> dict[str, Any]:
    return {
        "active": ring.active,
        "digestKey": _b64(ring.digest_key),
        "keys": [
            {"id": kid, "key": _b64(key), "created": created.get(kid, "")}
            for kid, key in ring.keys.items()
        ],
    }


def parse(text: str) -> tuple[Keyring, dict[str, str]]:
    """The keyring a keys file holds, and each key's creation time."""
    try:
        doc = json.loads(text)
        keys = {str(k["id"]): base64.b64decode(k["key"]) for k in doc["keys"]}
        created = {str(k["id"]): str(k.get("created", "")) for k in doc["keys"]}
        ring = Keyring(keys, str(doc["active"]), base64.b64decode(doc.get("digestKey", "")))
    except (ValueError, KeyError, TypeError) as exc:
        raise SecretKeyError(f"the Secret keys file is malformed: {exc}") from exc
    return ring, created


def _write(path: Path, ring: Keyring, created: Mapping[str, str]) -> None:
    """Replace the file atomically (readers see the old or the new file), mode 0600."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(_document(ring, created), f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One writer of the keys file at a time (two rotations at once would lose a key)."""
    fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ensure_keys_file(path: Path) -> bool:
    """Create the keys file with one active key if it does not exist; True if created."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        if path.exists():
            return False
        kid = new_key_id()
        ring = Keyring({kid: secretbox.new_key()}, kid, secretbox.new_key())
        _write(path, ring, {kid: dt.datetime.now(dt.UTC).isoformat()})
        return True


def add_key(path: Path) -> str:
    """Add a new key and make it the active one; the old keys stay for opening. Its id."""
    with _locked(path):
        ring, created = parse(path.read_text())
        kid = new_key_id()
        keys = {**ring.keys, kid: secretbox.new_key()}
        _write(
            path,
            Keyring(keys, kid, ring.digest_key),
            {**created, kid: dt.datetime.now(dt.UTC).isoformat()},
        )
        return kid


def remove_keys(path: Path, drop: set[str]) -> list[str]:
    """Remove the keys ``drop`` names (never the active one); the ids removed."""
    with _locked(path):
        ring, created = parse(path.read_text())
        gone = sorted(k for k in drop if k in ring.keys and k != ring.active)
        keys = {k: v for k, v in ring.keys.items() if k not in gone}
        _write(path, Keyring(keys, ring.active, ring.digest_key), created)
        return gone


class KeySource:
    """The keyring of one keys file, reloaded when the file changes."""

    def __init__(self, path: Path | None, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._monotonic = monotonic
        self._ring: Keyring | None = None
        self._identity: tuple[int, int, int] | None = None
        self._checked = float("-inf")
        self._lock = threading.Lock()

    def ring(self, force: bool = False) -> Keyring:
        if self.path is None:
            raise SecretKeyError(f"no Secret encryption keys: set {ENV} to the keys file")
        now = self._monotonic()
        if force or self._ring is None or now - self._checked >= RELOAD_S:
            with self._lock:
                self._reload(now)
        assert self._ring is not None
        return self._ring

    def _reload(self, now: float) -> None:
        assert self.path is not None
        try:
            st = self.path.stat()
        except OSError as exc:
            raise SecretKeyError(f"cannot read the Secret keys file {self.path}: {exc}") from exc
        identity = (st.st_ino, st.st_mtime_ns, st.st_size)
        if identity != self._identity or self._ring is None:
            self._ring, _ = parse(self.path.read_text())
            self._identity = identity
        self._checked = now

    def open(self, envelope: str, namespace: str, name: str) -> dict[str, str]:
        """Open, reloading the file first if the envelope names a key not yet seen."""
        ring = self.ring()
        if secretbox.key_id(envelope) not in ring.keys:
            ring = self.ring(force=True)
        return secretbox.open_envelope(envelope, ring, namespace, name)


_default: KeySource | None = None


def source() -> KeySource:
    """This process's key source (``$QM_SECRET_KEYS``, read on first use)."""
    global _default
    configured = os.environ.get(ENV) or None
    path = Path(configured) if configured else None
    if _default is None or _default.path != path:
        _default = KeySource(path)
    return _default


def seal_spec(spec: Mapping[str, Any], namespace: str, name: str) -> dict[str, Any]:
    """A Secret's stored fields with ``data`` sealed under the active key. Data that is an
    envelope already (a Secret read from the store and written back) is kept only if it opens
    for this very Secret: one copied from another Secret must be opened first
    (:func:`open_object`), or it would be stored unreadable."""
    data = spec.get("data")
    if secretbox.is_envelope(data):
        source().open(str(data), namespace, name)  # SecretKeyError: sealed for another Secret
    return secretbox.seal_spec(spec, source().ring(), namespace, name)


def open_object(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Secret object (API shape) with its ``data`` in the clear."""
    data = obj.get("data")
    if not secretbox.is_envelope(data):
        return secretbox.open_fields(obj, Keyring())
    meta = obj.get("metadata") or {}
    opened = source().open(str(data), meta.get("namespace", ""), meta.get("name", ""))
    return secretbox.open_fields({**obj, "data": opened}, Keyring())


def content_digest(obj: Mapping[str, Any]) -> str:
    """The fingerprint of a Secret's plaintext (its ``type`` and ``data``), sealed or not:
    what config rollouts hash. Unchanged by re-encryption under another key."""
    plain = open_object(obj)
    return secretbox.digest(plain.get("data"), source().ring(), str(plain.get("type") or ""))
