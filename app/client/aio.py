"""The asynchronous REST client over any transport that moves bytes: the hollow nodes'.

Ten thousand hollow nodes share a few connections from one event loop
(:mod:`bench.agents.http_pool`, or an ``httpx.AsyncClient`` for tests and comparison), so the
transport is theirs; the requests and the error mapping are not. :class:`AsyncRestClient`
builds every request with :mod:`app.client.build` and decodes every answer with
:mod:`app.client.decode`, the same code the CLI and the agent run, and counts answers by HTTP
status so a benchmark can report errors by kind without wrapping each call.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable
from typing import Any, Protocol

from . import build, decode
from .decode import Unreachable
from .sync import RestClient
from .verbs import Verbs

Obj = dict[str, Any]


class QueueTimeout(Unreachable):
    """The request waited too long for a free connection and was never sent."""


class Transport(Protocol):
    """Sends one request (``target`` is path and query), returns ``(status, body)``; raises
    :class:`Unreachable` when the connection fails (:class:`QueueTimeout` when the request
    never got one)."""

    async def send(
        self, method: str, target: str, body: bytes | None = None, content_type: str = build.JSON
    ) -> tuple[int, bytes]: ...

    async def close(self) -> None: ...


class AsyncRestClient(Verbs[Awaitable[Obj]]):
    """The verbs of :class:`app.client.verbs.Verbs`, awaited, over ``transport``.
    ``codes`` counts every answer by HTTP status (``"unreachable"`` for transport errors,
    ``"queue-timeout"`` for requests that never got a connection)."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self.codes: Counter[str] = Counter()

    async def send(self, request: build.Request) -> Any:
        try:
            status, raw = await self.transport.send(
                request.method, request.target, request.body, request.content_type
            )
        except QueueTimeout:
            self.codes["queue-timeout"] += 1
            raise
        except Unreachable:
            self.codes["unreachable"] += 1
            raise
        self.codes[str(status)] += 1
        return decode.answer(status, raw)

    def call(self, request: build.Request) -> Awaitable[Obj]:
        return self.send(request)


class InThreads(Verbs[Awaitable[Obj]]):
    """The synchronous client's verbs, awaited: each call runs in a thread, so a slow API
    never blocks an event loop (the agent's pod workers)."""

    def __init__(self, client: RestClient) -> None:
        self.client = client

    def call(self, request: build.Request) -> Awaitable[Obj]:
        return asyncio.to_thread(self.client.call, request)
