"""The agents' hot writes, ``PUT`` of one object or its status and ``POST`` of a usage sample,
answered without the web framework's per-request machinery.

At 10,000 nodes most of an API server's requests are agents' ``PUT``s: a Lease renewal every
10 s per node, plus pod and node status. In a profile at 1,000 renewals/s, Litestar's own
layers around our handler (routing, the handler's signature model, request and response
objects) were about 15 % of the server's CPU. :class:`FastWrites` wraps the Litestar app as
plain ASGI. For a ``PUT`` whose path names an object (or its ``/status``) of a known kind, it
runs what the route would run: :func:`app.api.routes.as_user` (the bearer token and the
user's fair share), then :meth:`Objects.replace`, and it maps errors to the same ``kind:
Status`` bodies (:func:`app.api.responses.error_parts`). Every other request goes to Litestar
unchanged, including ``PUT`` paths this module does not recognise, so Litestar still gives
their 404 or 405. The routes stay registered in Litestar, which keeps them in OpenAPI.

Each agent also posts a usage sample every 10 s: as many requests as renewals. A ``POST`` to
``/apis/metrics.quaymaster.io/v1/nodes/{name}/samples`` runs
:func:`app.api.usage.record_sample` the same way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import msgspec
from litestar import Litestar

from app.api import authz, secret_view
from app.api.responses import JSON, error_parts
from app.api.routes import PREFIX, as_user
from app.api.service import MAX_BODY, Objects
from app.api.usage import PREFIX as USAGE_PREFIX
from app.api.usage import record_sample, sample_attributes
from app.core import errors
from app.core.authz import Attributes
from app.core.kinds import BY_PLURAL, Kind
from app.store.tokens import User

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_ITEM = re.compile(
    "^" + re.escape(PREFIX) + r"/(?:namespaces/(?P<ns>[^/]+)/)?(?P<plural>[^/]+)/(?P<name>[^/]+)"
    r"(?P<status>/status)?$"
)
_SAMPLES = re.compile("^" + re.escape(USAGE_PREFIX) + r"/nodes/(?P<name>[^/]+)/samples$")
_JSON_HEADER = (b"content-type", JSON.encode())
Answer = tuple[int, bytes, dict[str, str] | None]  # status code, body, extra headers
_encode = msgspec.json.Encoder().encode


class FastWrites:
    """ASGI wrapper: object ``PUT``s answered here, everything else by ``app``."""

    def __init__(self, app: Litestar) -> None:
        # Called as plain ASGI (its own typed-dict messages are not needed here); its
        # ``state`` holds ``objects`` and ``auth`` once it has started.
        self.app: Any = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = _target(scope)
        if target is not None:
            kind, namespace, name, status = target
            answer = await self._replace(scope, receive, kind, namespace, name, status)
        elif (node := _sample_target(scope)) is not None:
            answer = await self._sample(scope, receive, node)
        else:
            await self.app(scope, receive, send)
            return
        code, body, headers = answer
        raw_headers = [_JSON_HEADER, (b"content-length", str(len(body)).encode())]
        raw_headers += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": code, "headers": raw_headers})
        await send({"type": "http.response.body", "body": body})

    async def _replace(
        self, scope: Scope, receive: Receive, kind: Kind, namespace: str, name: str, status: bool
    ) -> Answer:
        async def run(user: User) -> bytes:
            attrs = Attributes(
                "update",
                kind.plural,
                name if kind.kind == "Namespace" else namespace,
                name,
                "status" if status else "",
            )
            objects: Objects = authz.scope(self.app.state, user, attrs)[0]
            body = await _body(receive)
            cached = await objects.replace(kind, namespace, name, body, user, status)
            return secret_view.reveal(self.app.state, user, kind, cached.raw)

        return await self._answer(scope, 200, run)

    async def _sample(self, scope: Scope, receive: Receive, node: str) -> Answer:
        state = self.app.state

        async def run(user: User) -> bytes:
            authz.scope(state, user, sample_attributes(node))
            return _encode(await record_sample(state, node, await _body(receive)))

        return await self._answer(scope, 201, run)

    async def _answer(
        self, scope: Scope, code: int, run: Callable[[User], Awaitable[bytes]]
    ) -> Answer:
        """``run`` as the caller's user, in their fair share; errors as ``Status`` bodies."""
        try:
            return code, await as_user(self.app.state.auth, _authorization(scope), run), None
        except errors.StatusError as exc:
            return error_parts(exc)
        except Exception as exc:
            where = f"{scope.get('method')} {scope.get('path')}"
            log.exception("unhandled error on %s", where, exc_info=exc)
            return error_parts(errors.StatusError(f"internal error: {type(exc).__name__}"))


def _sample_target(scope: Scope) -> str | None:
    """The node when ``scope`` is a ``POST`` of a usage sample; None otherwise."""
    if scope.get("type") != "http" or scope.get("method") != "POST":
        return None
    m = _SAMPLES.match(scope.get("path", ""))
    return m["name"] if m else None


def _target(scope: Scope) -> tuple[Kind, str, str, bool] | None:
    """(kind, namespace, name, status) when ``scope`` is a ``PUT`` of an object this module
    answers; None for anything Litestar should see."""
    if scope.get("type") != "http" or scope.get("method") != "PUT":
        return None
    m = _ITEM.match(scope.get("path", ""))
    if m is None or b"dryRun" in scope.get("query_string", b""):  # the route honours dryRun
        return None
    kind = BY_PLURAL.get(m["plural"])
    namespaced = m["ns"] is not None
    if kind is None or kind.namespaced != namespaced or (m["status"] and not kind.has_status):
        return None
    return kind, m["ns"] or "", m["name"], bool(m["status"])


def _authorization(scope: Scope) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == b"authorization":
            return bytes(value).decode("latin-1")
    return None


async def _body(receive: Receive) -> bytes:
    """The whole request body; past ``MAX_BODY`` bytes it stops reading and refuses it."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise errors.BadRequest("the client went away before sending the whole body")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise errors.RequestEntityTooLarge(
                f"the request body is over {MAX_BODY} bytes; the limit is {MAX_BODY}"
            )
        parts.append(chunk)
        if not message.get("more_body", False):
            return b"".join(parts)
