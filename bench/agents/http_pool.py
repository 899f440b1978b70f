"""A minimal HTTP/1.1 keep-alive client for hollow nodes: a fixed pool of connections per server.

Ten thousand hollow nodes send a thousand requests a second from one process. Through
``httpx.AsyncClient`` each one cost the load generator about 2.4 ms of CPU (request and
response models, header objects, httpcore's pool bookkeeping, an ``anyio`` stream), more than
the API server spent answering it, so the benchmark measured its own client. The hollow nodes
need none of that: one server, JSON in and out, ``Content-Length`` or chunked bodies.

:class:`HttpPool` keeps up to ``connections`` sockets to one server, each an
:class:`asyncio.Protocol` that parses responses straight from ``data_received`` (no reader
task, no stream objects) and carries one request at a time. Requests that find no free
connection wait in one FIFO queue and are handed to the next connection that frees up. A
housekeeping task, ten times a second, gives up on requests that waited ``queue_timeout``
seconds for a connection (:class:`QueueTimeout`, as an agent's request to an overloaded server
times out), aborts connections whose answer is ``timeout`` seconds late, and closes
connections idle for ``idle_close`` seconds, before the server's keep-alive timeout (uvicorn's
is 5 s) could close one under a request being written. A broken or refused connection fails
its request with :class:`app.client.Unreachable`, as the shared client's other transport does.
Time is read from the ``clock`` the pool is given (the monotonic clock unless a test passes
its own), so the sweep's deadlines can be tested without waiting for them.
:meth:`HttpPool.close` aborts every socket and fails everything outstanding at once.

The caller (:class:`app.client.AsyncRestClient`, through which the hollow nodes of
:mod:`bench.agents.hollow` speak) builds the requests and maps status codes to errors; this
module only moves bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from typing import cast
from urllib.parse import urlsplit

from app.client import QueueTimeout, Unreachable
from app.client.build import JSON

Response = tuple[int, bytes]
_NO_BODY = {204, 304}
_EMPTY_BODY = b"Content-Length: 0\r\n\r\n"


class HttpError(Exception):
    """The server's bytes were not an HTTP/1.1 response this client understands."""


def parse_head(head: bytes) -> tuple[int, int | None, bool]:
    """Status code, body length (``None`` for chunked) and whether the server will close,
    from a response head up to (not including) its blank line. Only the three headers this
    client needs are looked for."""
    if not head.startswith(b"HTTP/1.") or not head[9:12].isdigit() or head[12:13] not in b" \r":
        raise HttpError(f"bad status line {head[:80]!r}")
    code = int(head[9:12])
    low = head.lower()
    close = b"close" in _header(low, b"\r\nconnection:")
    if code in _NO_BODY or 100 <= code < 200:
        return code, 0, close
    if b"chunked" in _header(low, b"\r\ntransfer-encoding:"):
        return code, None, close
    length = _header(low, b"\r\ncontent-length:")
    return code, int(length) if length else 0, close


def _header(head: bytes, name: bytes) -> bytes:
    at = head.find(name)
    if at < 0:
        return b""
    start = at + len(name)
    end = head.find(b"\r\n", start)
    return head[start : end if end >= 0 else len(head)].strip()


def parse_chunked(buf: bytes | bytearray, start: int) -> tuple[bytes, int] | None:
    """A chunked body beginning at ``buf[start]``: ``(body, end)`` once complete, else
    ``None`` (more bytes needed). Trailers are skipped."""
    parts: list[bytes] = []
    pos = start
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        pos = eol + 2
        if size == 0:
            end = buf.find(b"\r\n\r\n", pos - 2)
            return (b"".join(parts), end + 4) if end >= 0 else None
        if len(buf) < pos + size + 2:
            return None
        parts.append(bytes(buf[pos : pos + size]))
        pos += size + 2


class _Conn(asyncio.Protocol):
    """One keep-alive connection carrying one request at a time."""

    def __init__(self, pool: HttpPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.future: asyncio.Future[Response] | None = None
        self.sent_at = 0.0
        self.idle_since = pool.clock()
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def send(self, data: bytes, future: asyncio.Future[Response]) -> None:
        assert self.transport is not None
        self.future, self.sent_at = future, self.pool.clock()
        self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.future is None:
            self.abort(HttpError("bytes from the server with no request outstanding"))
            return
        try:
            done = self._response()
        except (HttpError, ValueError) as exc:
            self.abort(exc)
            return
        if done is None:
            return
        code, body, close = done
        future, self.future = self.future, None
        if not future.done():  # a caller that gave up (cancelled) gets nothing
            future.set_result((code, body))
        self.idle_since = self.pool.clock()
        if close or self.buf:
            self.close()
        else:
            self.pool._free(self)

    def _response(self) -> tuple[int, bytes, bool] | None:
        head_end = self.buf.find(b"\r\n\r\n")
        if head_end < 0:
            return None
        code, length, close = parse_head(bytes(self.buf[:head_end]))
        start = head_end + 4
        if length is None:
            got = parse_chunked(self.buf, start)
            if got is None:
                return None
            body, end = got
        else:
            end = start + length
            if len(self.buf) < end:
                return None
            body = bytes(self.buf[start:end])
        del self.buf[:end]
        return code, body, close

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def abort(self, exc: BaseException | None = None) -> None:
        self.closing = True
        self._fail(exc)
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, exc: BaseException | None) -> None:
        future, self.future = self.future, None
        if future is not None and not future.done():
            future.set_exception(Unreachable(f"{self.pool.url}: {exc!r}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self._fail(exc or ConnectionResetError("the server closed the connection"))
        self.pool._lost(self)


class HttpPool:
    """Up to ``connections`` keep-alive HTTP/1.1 connections to the server at ``url``
    (``http://host:port``), shared by every caller in this event loop; ``headers`` go on
    every request. :meth:`send` returns ``(status, body)`` or raises ``Unreachable``."""

    def __init__(self, url: str, headers: dict[str, str], connections: int = 32, *,
                 timeout: float = 30.0, queue_timeout: float = 10.0, idle_close: float = 4.0,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"{url}: only http://host[:port] is supported")
        self.url, self.host, self.port = url, parts.hostname, parts.port or 80
        host = f"{self.host}:{self.port}"
        fixed = {"Host": host, "Accept": "application/json", **headers}
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode()
        self.connections, self.timeout, self.clock = connections, timeout, clock
        self.queue_timeout, self.idle_close = queue_timeout, idle_close
        self._idle: list[_Conn] = []
        self._busy: set[_Conn] = set()
        self._connecting = 0
        self._waiting: deque[tuple[float, bytes, asyncio.Future[Response]]] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self.closed = False
        self.sent = 0

    def encode(
        self, method: str, target: str, body: bytes | None, content_type: str = JSON
    ) -> bytes:
        line = f"{method} {target} HTTP/1.1\r\n".encode()
        if body is None:
            return line + self._head + (b"\r\n" if method == "GET" else _EMPTY_BODY)
        length = b"Content-Type: %s\r\nContent-Length: %d\r\n\r\n" % (
            content_type.encode(),
            len(body),
        )
        return line + self._head + length + body

    async def send(
        self, method: str, target: str, body: bytes | None = None, content_type: str = JSON
    ) -> Response:
        if self.closed:
            raise Unreachable(f"{self.url}: the client is closed")
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        data = self.encode(method, target, body, content_type)
        if self._idle:
            self._dispatch(self._idle.pop(), data, future)
        else:
            self._waiting.append((self.clock() + self.queue_timeout, data, future))
            if len(self._busy) + len(self._idle) + self._connecting < self.connections:
                self._connect()
        return await future

    def _dispatch(self, conn: _Conn, data: bytes, future: asyncio.Future[Response]) -> None:
        self._busy.add(conn)
        self.sent += 1
        conn.send(data, future)

    def _free(self, conn: _Conn) -> None:
        """A connection finished a response: give it the oldest live waiting request."""
        self._busy.discard(conn)
        while self._waiting:
            _, data, future = self._waiting.popleft()
            if not future.done():
                self._dispatch(conn, data, future)
                return
        self._idle.append(conn)

    def _lost(self, conn: _Conn) -> None:
        self._busy.discard(conn)
        with contextlib.suppress(ValueError):
            self._idle.remove(conn)
        if self._waiting and not self.closed:
            self._connect()

    def _connect(self) -> None:
        self._connecting += 1
        task = asyncio.get_running_loop().create_task(self._open())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await loop.create_connection(lambda: _Conn(self), self.host, self.port)
        except OSError as exc:
            self._connecting -= 1
            if not self._busy and not self._idle and not self._connecting:
                self._fail_waiting(Unreachable(f"{self.url}: {exc!r}"))
            return
        self._connecting -= 1
        if self.closed:
            conn.abort()
            return
        self._free(conn)

    def _fail_waiting(self, exc: Unreachable) -> None:
        while self._waiting:
            _, _, future = self._waiting.popleft()
            if not future.done():
                future.set_exception(exc)

    async def _sweep(self) -> None:
        while not self.closed:
            await asyncio.sleep(0.1)
            self.sweep(self.clock())

    def sweep(self, now: float) -> None:
        """Expire waiting requests, abort late answers, close idle connections."""
        while self._waiting and (self._waiting[0][0] <= now or self._waiting[0][2].done()):
            _, _, future = self._waiting.popleft()
            if not future.done():
                future.set_exception(QueueTimeout(f"{self.url}: no connection free within "
                                                  f"{self.queue_timeout}s"))  # fmt: skip
        for conn in [c for c in self._busy if now - c.sent_at > self.timeout]:
            conn.abort(TimeoutError(f"no answer within {self.timeout}s"))
        for conn in [c for c in self._idle if now - c.idle_since > self.idle_close]:
            self._idle.remove(conn)
            conn.close()

    async def close(self) -> None:
        """Fail every outstanding request and abort every connection, at once."""
        self.closed = True
        for task in [*self._tasks, *([self._sweeper] if self._sweeper else [])]:
            task.cancel()
        self._fail_waiting(Unreachable(f"{self.url}: the client is closed"))
        for conn in [*self._busy, *self._idle]:
            conn.abort(ConnectionAbortedError("the client is closed"))
        self._busy.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the aborted transports run connection_lost
