"""The Secret key administration endpoints, under ``encryption.quaymaster.io/v1``
(ADR 0048; ``qm secrets ...``).

``GET secretkeys`` (key ids, how many Secrets each seals, the re-encryption's progress),
``POST secretkeys/rotate`` (add a key, make it active, re-encrypt in the background on this
server), ``POST secretkeys/reencrypt`` (re-encrypt only) and ``POST secretkeys/prune`` (drop
the keys nothing uses). Only principals allowed the verb on ``secretkeys`` in that group
(``system:masters`` always) may call them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from litestar import Litestar, Request, Response, get, post
from litestar.handlers import HTTPRouteHandler

from app.api.responses import json_response
from app.api.routes import guarded
from app.api.secret_view import allowed
from app.core import errors
from app.core.secretbox import SecretKeyError
from app.store import secret_keys, secret_rotation
from app.store.tokens import User

log = logging.getLogger(__name__)
GROUP = "encryption.quaymaster.io"
PREFIX = f"/apis/{GROUP}/v1/secretkeys"


# -- key administration ---------------------------------------------------------------------


def _keys_path() -> Path:
    path = secret_keys.source().path
    if path is None:
        raise errors.ServiceUnavailable(
            f"this server has no Secret keys file (set {secret_keys.ENV})"
        )
    return path


def _admin(request: Request[Any, Any, Any], user: User, verb: str) -> None:
    if not allowed(request.app.state, user, verb, "secretkeys", group=GROUP, default=False):
        raise errors.Forbidden(
            f'secretkeys is forbidden: User "{user.name}" cannot {verb} resource "secretkeys"'
            f' in API group "{GROUP}" at the cluster scope',
            kind="secretkeys",
        )


def _progress(request: Request[Any, Any, Any]) -> secret_rotation.Progress:
    state = request.app.state
    if getattr(state, "secret_rotation", None) is None:
        state.secret_rotation = secret_rotation.Progress()
        state.secret_rotation_task = None
    progress: secret_rotation.Progress = state.secret_rotation
    return progress


def _start(request: Request[Any, Any, Any]) -> None:
    _progress(request)
    _start_on(request.app.state)


def _start_on(state: Any) -> None:
    """Start a re-encryption unless one runs in this server already."""
    task: asyncio.Task[Any] | None = state.secret_rotation_task
    if task is not None and not task.done():
        return
    progress = state.secret_rotation = secret_rotation.Progress()
    pool = state.objects.store.pool

    async def run() -> None:
        try:
            await secret_rotation.reencrypt(pool, progress)
            log.warning("Secrets re-encrypted under %s: %d rewritten, %d failed",
                        progress.active, progress.reencrypted, len(progress.failed))  # fmt: skip
        except Exception:  # the task's end is its report: qm secrets status shows it idle
            log.exception("the re-encryption of Secrets stopped")

    state.secret_rotation_task = asyncio.create_task(run())


async def _status(request: Request[Any, Any, Any]) -> dict[str, Any]:
    ring = secret_keys.source().ring(force=True)
    counts = await secret_rotation.counts_by_key(request.app.state.objects.store.pool)
    keys = [
        {"id": kid, "active": kid == ring.active, "secrets": counts.get(kid, 0)}
        for kid in sorted(ring.keys)
    ]
    return {
        "kind": "SecretKeyStatus",
        "apiVersion": f"{GROUP}/v1",
        "activeKeyId": ring.active,
        "keys": keys,
        "plaintextSecrets": counts.get("", 0),
        "unknownKeySecrets": sum(n for k, n in counts.items() if k and k not in ring.keys),
        "reencryption": _progress(request).as_dict(),
    }


def _action(path: str, verb: str, op: str, summary: str, act: Any) -> HTTPRouteHandler:
    @post(path, operation_id=op, tags=["SecretKeys"], summary=summary, status_code=200)
    async def handler(request: Request[Any, Any, Any]) -> Response[Any]:
        async def run(user: User) -> Response[Any]:
            _admin(request, user, verb)
            extra = await act(request)
            return json_response({**await _status(request), **extra})

        return await guarded(request, run)

    return handler


async def _rotate(request: Request[Any, Any, Any]) -> dict[str, Any]:
    kid = await asyncio.to_thread(secret_keys.add_key, _keys_path())
    secret_keys.source().ring(force=True)
    log.warning("new active Secret encryption key %s", kid)
    _start(request)
    return {"addedKeyId": kid}


async def _reencrypt(request: Request[Any, Any, Any]) -> dict[str, Any]:
    _start(request)
    return {}


async def _prune(request: Request[Any, Any, Any]) -> dict[str, Any]:
    """Remove the keys no Secret is sealed with (the active key always stays)."""
    task = getattr(request.app.state, "secret_rotation_task", None)
    if task is not None and not task.done():
        raise errors.Conflict("a re-encryption is still running; prune once it has finished")
    counts = await secret_rotation.counts_by_key(request.app.state.objects.store.pool)
    ring = secret_keys.source().ring(force=True)
    unused = {kid for kid in ring.keys if counts.get(kid, 0) == 0}
    removed = await asyncio.to_thread(secret_keys.remove_keys, _keys_path(), unused)
    secret_keys.source().ring(force=True)
    return {"removedKeyIds": removed}


@contextlib.asynccontextmanager
async def secrets_lifespan(app: Litestar) -> AsyncIterator[None]:
    """At start, Secrets stored before encryption was on (plaintext ``data``) are sealed in the
    background, as by ``reencrypt``; at stop, a running re-encryption is cancelled (``qm secrets
    reencrypt`` finishes it)."""
    state = app.state
    state.secret_rotation, state.secret_rotation_task = secret_rotation.Progress(), None
    try:
        secret_keys.source().ring()
    except SecretKeyError as exc:
        log.error("Secrets can be neither written nor read: %s", exc)
    else:
        plaintext = (await secret_rotation.counts_by_key(state.objects.store.pool)).get("", 0)
        if plaintext:
            log.warning("sealing %d Secrets stored in plaintext", plaintext)
            _start_on(state)
    try:
        yield
    finally:
        task = state.secret_rotation_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


@get(PREFIX, operation_id="readSecretKeyStatus", tags=["SecretKeys"],
     summary="Secret encryption keys and re-encryption progress")  # fmt: skip
async def key_status(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        _admin(request, user, "get")
        return json_response(await _status(request))

    return await guarded(request, run)


HANDLERS: list[HTTPRouteHandler] = [
    key_status,
    _action(f"{PREFIX}/rotate", "create", "rotateSecretKey",
            "Add a new active key and re-encrypt every Secret with it", _rotate),
    _action(f"{PREFIX}/reencrypt", "create", "reencryptSecrets",
            "Re-encrypt every Secret not sealed with the active key", _reencrypt),
    _action(f"{PREFIX}/prune", "delete", "pruneSecretKeys",
            "Remove the keys no Secret is sealed with", _prune),
]  # fmt: skip
