"""``Warning`` response headers, as Kubernetes sends them (``Warning: 299 - "text"``).

Code deep in a request (admission policies in warn mode, :mod:`app.api.policy`) calls
:func:`warn`; :class:`WarningHeaders`, the outermost ASGI layer of the API server, gives each
request its own list and adds one header per distinct warning to the response's start, so every
path (Litestar's routes and the fast ``PUT`` path of :mod:`app.api.fastpath`) carries them.
``kubectl`` and ``qm`` print these headers to the user.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_WARNINGS = 20  # as Kubernetes bounds them, so a response's headers stay small
MAX_LENGTH = 4096
_pending: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "qm_warnings", default=None
)


def warn(*texts: str) -> None:
    """Add warnings to the current request's response (none outside a request)."""
    pending = _pending.get()
    if pending is None:
        return
    for text in texts:
        if text not in pending and len(pending) < MAX_WARNINGS:
            pending.append(text)


def header_value(text: str) -> str:
    """``299 - "text"``: the warn-code, no agent, the text quoted with ``"`` and ``\\``
    escaped, cut to ``MAX_LENGTH`` and to what a header may carry."""
    text = text[:MAX_LENGTH].encode("ascii", "replace").decode()
    quoted = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{quoted}"'


class WarningHeaders:
    """ASGI wrapper: collects each request's warnings and sends them as ``Warning`` headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:  # ``state`` and the like of the wrapped app
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        pending: list[str] = []
        token = _pending.set(pending)

        async def sending(message: Message) -> None:
            if message.get("type") == "http.response.start" and pending:
                headers = list(message.get("headers") or [])
                headers += [(b"warning", header_value(t).encode()) for t in pending]
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            _pending.reset(token)
