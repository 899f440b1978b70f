"""Each request's write context: request id, client address, user agent and reason.

:class:`RequestContext`, an ASGI layer of the API server, reads them once per request and keeps
them for the code that writes (:func:`write_context`), so every path (Litestar's routes and the
fast ``PUT`` path of :mod:`app.api.fastpath`) records the same facts in the history:

* **request id**: the client's ``X-Request-Id`` when it is a short token (no spaces, no
  control characters), otherwise a new one; echoed as the response's ``X-Request-Id`` so a
  client can find its write in ``qm_history``.
* **client address**: the peer of the connection (a load balancer's address when there is
  one; forwarded headers are not trusted).
* **user agent**: ``User-Agent``, cut and with control characters replaced.
* **reason**: ``X-Reason`` (``qm --reason``, ``qm drain --reason``); a reason that is too long
  or holds control characters is refused with 400 before anything runs, as a record must not
  be silently altered.
"""

from __future__ import annotations

import contextvars
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from app.api.responses import error_parts
from app.core import errors
from app.core.audit import (
    MAX_USER_AGENT,
    WriteContext,
    check_reason,
    printable,
    valid_request_id,
)
from app.store.tokens import User

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

REQUEST_ID = "x-request-id"
REASON = "x-reason"


@dataclass(frozen=True, slots=True)
class RequestFacts:
    request_id: str
    client: str | None = None
    user_agent: str | None = None
    reason: str | None = None


_current: contextvars.ContextVar[RequestFacts | None] = contextvars.ContextVar(
    "qm_request_facts", default=None
)


def current() -> RequestFacts | None:
    """The facts of the request being served (None outside one)."""
    return _current.get()


def write_context(
    user: User, *, verb: str | None = None, subresource: str | None = None
) -> WriteContext:
    """The write context of ``user``'s write in the current request."""
    facts = _current.get()
    return WriteContext(
        principal=user.name,
        groups=tuple(user.groups),
        request_id=facts.request_id if facts else None,
        client=facts.client if facts else None,
        user_agent=facts.user_agent if facts else None,
        reason=facts.reason if facts else None,
        verb=verb,
        subresource=subresource,
    )


def facts_of(scope: Scope) -> RequestFacts:
    """The request's facts from its ASGI scope; BadRequest for an unacceptable reason."""
    headers: dict[str, str] = {}
    for key, value in scope.get("headers") or ():
        headers.setdefault(key.decode("latin-1").lower(), value.decode("utf-8", "replace"))
    given = headers.get(REQUEST_ID, "")
    request_id = given if valid_request_id(given) else uuid.uuid4().hex
    reason = headers.get(REASON)
    if reason is not None:
        why = check_reason(reason)
        if why is not None:
            raise errors.BadRequest(f"the X-Reason header {why}")
    client = scope.get("client")
    agent = headers.get("user-agent")
    return RequestFacts(
        request_id=request_id,
        client=str(client[0]) if client else None,
        user_agent=printable(agent, MAX_USER_AGENT) if agent else None,
        reason=reason or None,
    )


class RequestContext:
    """ASGI wrapper: gives each HTTP request its facts and echoes its request id."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:  # ``state`` and the like of the wrapped app
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        try:
            facts = facts_of(scope)
        except errors.StatusError as exc:
            await _refuse(send, exc)
            return
        token = _current.set(facts)
        echo = (b"x-request-id", facts.request_id.encode())

        async def sending(message: Message) -> None:
            if message.get("type") == "http.response.start":
                message = {**message, "headers": [*(message.get("headers") or []), echo]}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            _current.reset(token)


async def _refuse(send: Send, exc: errors.StatusError) -> None:
    code, body, _ = error_parts(exc)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
