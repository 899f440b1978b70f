"""The REST API called from inside its own process, as the signed-in principal.

Every read and every action of the web UI is a request to the REST API, sent to the whole
ASGI application (request context, ``Warning`` headers, fair share, fast path, Litestar) with
the session's bearer token: the same authentication, authorisation, admission, fair share
and history context as ``qm`` or ``curl`` get, and no second implementation of any of them.
The request never touches a socket: :func:`call` runs the application on a scope built here
and collects what it sends; :func:`stream` hands the body over chunk by chunk (a log follow,
a watch) and disconnects when the caller stops reading.

:class:`Transport` is :class:`app.client.aio.Transport` over this, so the UI builds requests
with :mod:`app.client.build` and decodes answers with :mod:`app.client.decode` like every
other client of the API.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from app.client import build

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
                   Awaitable[None]]  # fmt: skip
USER_AGENT = "qm-ui"


@dataclass(frozen=True)
class Caller:
    """Who the UI acts for: the session's token, the browser's address and agent, and the
    reason the operator typed (sent as ``X-Reason``, recorded in the history)."""

    token: str
    client: tuple[str, int] = ("127.0.0.1", 0)
    user_agent: str = USER_AGENT
    request_id: str = ""

    def headers(self, content_type: str | None, reason: str = "") -> list[tuple[bytes, bytes]]:
        out = [
            (b"authorization", f"Bearer {self.token}".encode()),
            (b"user-agent", f"{USER_AGENT} ({self.user_agent})"[:512].encode("latin-1", "replace")),
            (b"accept", b"application/json"),
        ]
        if content_type:
            out.append((b"content-type", content_type.encode()))
        if reason:
            out.append((b"x-reason", reason.encode("utf-8")))
        if self.request_id:
            out.append((b"x-request-id", self.request_id.encode()))
        return out


@dataclass
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""


def _scope(
    caller: Caller, method: str, target: str, body: bytes | None, content_type: str | None,
    reason: str,
) -> Scope:  # fmt: skip
    parts = urlsplit(target)
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": parts.path,
        "raw_path": parts.path.encode(),
        "query_string": parts.query.encode(),
        "root_path": "",
        "headers": caller.headers(content_type if body is not None else None, reason),
        "client": caller.client,
        "server": ("127.0.0.1", 0),
        "state": {},
    }


@contextlib.asynccontextmanager
async def stream(
    app: ASGIApp, caller: Caller, method: str, target: str, body: bytes | None = None,
    content_type: str | None = build.JSON, reason: str = "",
) -> AsyncIterator[tuple[Answer, AsyncIterator[bytes]]]:  # fmt: skip
    """Run one request; yields its status and headers once they are sent, and its body as it
    comes. Leaving the block disconnects the request (a follow ends there)."""
    scope = _scope(caller, method, target, body, content_type, reason)
    inbox: asyncio.Queue[Message | None] = asyncio.Queue()
    gone = asyncio.Event()
    sent_body = False

    async def receive() -> Message:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body or b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if gone.is_set():
            raise OSError("the UI stopped reading")  # how a server sees a closed socket
        await inbox.put(message)

    async def run() -> None:
        try:
            await app(scope, receive, send)
        finally:
            await inbox.put(None)

    task = asyncio.create_task(run())
    try:
        start = await inbox.get()
        if start is None or start.get("type") != "http.response.start":
            await task  # raises what the application raised
            raise RuntimeError("the API sent no response")
        answer = Answer(int(start["status"]), list(start.get("headers") or []))

        async def chunks() -> AsyncIterator[bytes]:
            while (message := await inbox.get()) is not None:
                if message.get("type") == "http.response.body":
                    if data := message.get("body", b""):
                        yield bytes(data)
                    if not message.get("more_body", False):
                        return

        yield answer, chunks()
    finally:
        gone.set()
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, OSError):
            await task


async def call(
    app: ASGIApp, caller: Caller, method: str, target: str, body: bytes | None = None,
    content_type: str | None = build.JSON, reason: str = "",
) -> Answer:  # fmt: skip
    """Run one request to completion: its status, headers and whole body."""
    async with stream(app, caller, method, target, body, content_type, reason) as (answer, body_):
        answer.body = b"".join([c async for c in body_])
    return answer


class Transport:
    """:class:`app.client.aio.Transport` over :func:`call`, for one caller and one reason."""

    def __init__(self, app: ASGIApp, caller: Caller, reason: str = "") -> None:
        self.app, self.caller, self.reason = app, caller, reason

    async def send(
        self, method: str, target: str, body: bytes | None = None, content_type: str = build.JSON
    ) -> tuple[int, bytes]:
        answer = await call(self.app, self.caller, method, target, body, content_type, self.reason)
        return answer.status, answer.body

    async def close(self) -> None:
        return None
