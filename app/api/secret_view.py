"""Secrets as the API shows them (ADR 0048).

The watch cache holds Secrets as stored: ``data`` is an envelope (:mod:`app.core.secretbox`).
Every answer that carries a Secret passes through :func:`reveal` (one object, or a list's
items) or :func:`reveal_stream` (watch lines): a principal allowed ``get`` on that Secret
(asked of the authorizer chain at ``app.state.authz``; ``system:masters`` always) sees
``data`` opened, any other sees it withheld (:func:`app.core.secretbox.redact`). Opened data is
kept in a small LRU keyed by the envelope, so a list of many Secrets does not unwrap each one
on every request. Called by the route handlers and the fast path.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from typing import Any

import msgspec

from app.core import errors, secretbox
from app.core.authz import Attributes
from app.core.kinds import Kind
from app.core.secretbox import SecretKeyError
from app.store import secret_keys
from app.store.tokens import User

log = logging.getLogger(__name__)
MASTERS = "system:masters"
LRU_SIZE = 4096
_dec = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()


# -- who may see what -----------------------------------------------------------------------


def allowed(state: Any, user: User, verb: str, resource: str, namespace: str = "",
            name: str = "", group: str = "quaymaster.io", *, default: bool) -> bool:  # fmt: skip
    """Whether the authorizer chain at ``state.authz`` allows the request; ``system:masters``
    always. ``default`` answers while no authorizer is installed."""
    if MASTERS in user.groups:
        return True
    authz = getattr(state, "authz", None)
    if authz is None:
        return default
    attrs = Attributes(verb=verb, resource=resource, namespace=namespace, name=name, group=group)
    return bool(authz.authorize(user, attrs).allowed)


def may_get(state: Any, user: User, namespace: str, name: str) -> bool:
    return allowed(state, user, "get", "secrets", namespace, name, default=True)


class _Opened:
    """Envelope -> opened data, least recently used first out."""

    def __init__(self, size: int = LRU_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str, str], dict[str, str]] = OrderedDict()

    def open(self, envelope: str, namespace: str, name: str) -> dict[str, str]:
        key = (envelope, namespace, name)
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
            return hit
        data = secret_keys.source().open(envelope, namespace, name)
        self._items[key] = data
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return data


OPENED = _Opened()


def shown(obj: Mapping[str, Any], visible: bool) -> dict[str, Any]:
    """A Secret object as answered: data opened when ``visible``, else withheld."""
    if not visible:
        return secretbox.redact(obj)
    data = obj.get("data")
    if secretbox.is_envelope(data):
        meta = obj.get("metadata") or {}
        try:
            data = OPENED.open(str(data), meta.get("namespace", ""), meta.get("name", ""))
        except SecretKeyError as exc:
            log.error("Secret %s/%s does not open: %s", meta.get("namespace"), meta.get("name"),
                      exc)  # fmt: skip
            raise errors.StatusError(
                f'secrets "{meta.get("name")}" cannot be decrypted: {exc}',
                kind="secrets", name=meta.get("name"),
            ) from exc  # fmt: skip
    return secretbox.open_fields({**obj, "data": data}, secretbox.Keyring())


def reveal(state: Any, user: User, kind: Kind, raw: bytes) -> bytes:
    """One answered object: Secrets shaped for ``user``, every other kind as it is."""
    if kind.kind != "Secret":
        return raw
    obj = _dec.decode(raw)
    meta = obj.get("metadata") or {}
    visible = may_get(state, user, meta.get("namespace", ""), meta.get("name", ""))
    return _enc.encode(shown(obj, visible))


def reveal_all(state: Any, user: User, kind: Kind, items: list[bytes]) -> list[bytes]:
    if kind.kind != "Secret":
        return items
    return [reveal(state, user, kind, raw) for raw in items]


async def reveal_stream(
    state: Any, user: User, kind: Kind, lines: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """Watch chunks (newline-delimited events) with each Secret shaped for ``user``."""
    async for chunk in lines:
        if kind.kind != "Secret":
            yield chunk
            continue
        out = []
        for line in chunk.split(b"\n"):
            if not line:
                continue
            event = _dec.decode(line)
            target = event.get("object") or {}
            if event.get("type") != "BOOKMARK" and target.get("kind") == "Secret":
                event["object"] = _dec.decode(reveal(state, user, kind, _enc.encode(target)))
            out.append(_enc.encode(event) + b"\n")
        yield b"".join(out)
