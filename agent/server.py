"""The agent's own HTTP server: container logs for the API server, health, and metrics.

The API server answers ``GET .../pods/{name}/log`` by calling the agent of the pod's node
(ADR 0019), so each agent listens on ``--address``/``--port`` (default 127.0.0.1:10250) and
reports the real port in its node's ``status.daemonEndpoints``. Endpoints:

- ``GET /healthz``: ``ok``, never authenticated.
- ``GET /containerLogs/{namespace}/{pod}/{container}?tailLines=&follow=&previous=``: the
  container's log as ``text/plain``; with ``follow`` a chunked stream that goes on until the
  client goes away or the run ends (the container terminated or was restarted, or its pod left
  the node) and everything it wrote has been sent.
- ``GET /metrics``: Prometheus text, the concatenation of what the producers registered with
  :meth:`AgentServer.add_metrics` return.

It is ``asyncio.start_server`` with just enough HTTP/1.1 (one request per connection, GET only)
because it runs in the agent's event loop beside the pod workers: a follow is one coroutine
polling a file, no thread per client, and the agent's state needs no locks. With a reviewer
(the agent always has one: :class:`agent.credentials.ApiServerReviewer`), every request but
``/healthz`` must carry ``Authorization: Bearer <token>`` of an API server, which the reviewer
checks with the API (ADR 0045); no shared secret is accepted. Without one (tests of the server
alone) it serves whoever can reach it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from agent.logs import ContainerLogs, LogLookupError, LogTarget, keep_rotated, rotated, tail

log = logging.getLogger(__name__)
DEFAULT_PORT = 10250
FOLLOW_POLL = 0.2
MAX_HEADER_BYTES = 16 * 1024
HEAD_TIMEOUT = 10.0  # a client that sends no request in time is dropped
_REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
            405: "Method Not Allowed", 500: "Internal Server Error"}  # fmt: skip
_STATUS_REASONS = {400: "BadRequest", 401: "Unauthorized", 404: "NotFound",
                   405: "MethodNotAllowed", 500: "InternalError"}  # fmt: skip


class Reviewer(Protocol):
    """Decides whether a bearer token may call this server (``agent.credentials``)."""

    async def allows(self, token: str) -> bool: ...


class HttpError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def status_body(code: int, message: str) -> bytes:
    """A ``kind: Status`` failure, as the API server's own errors look."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": _STATUS_REASONS.get(code, "InternalError"),
            "code": code}  # fmt: skip
    return json.dumps(body).encode()


def flag(query: dict[str, list[str]], name: str) -> bool:
    value = (query.get(name) or [""])[-1]
    if value in ("", "false", "False", "0"):
        return False
    if value in ("true", "True", "1"):
        return True
    raise HttpError(400, f"{name} must be true or false, got {value!r}")


def tail_lines(query: dict[str, list[str]]) -> int | None:
    value = (query.get("tailLines") or [""])[-1]
    if value == "":
        return None
    if not value.isdigit():
        raise HttpError(400, f"tailLines must be a non-negative integer, got {value!r}")
    return int(value)


def _head(code: int, content_type: str, length: int | None) -> bytes:
    lines = [f"HTTP/1.1 {code} {_REASONS.get(code, 'Error')}", f"Content-Type: {content_type}",
             "Connection: close", "Cache-Control: no-cache"]  # fmt: skip
    lines.append(
        f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    )
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class AgentServer:
    def __init__(
        self,
        logs: ContainerLogs | None,
        *,
        address: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        reviewer: Reviewer | None = None,
        poll: float = FOLLOW_POLL,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.logs, self.address, self.port, self.poll = logs, address, port, poll
        self.reviewer = reviewer  # who may call: the API servers (agent.credentials)
        self.tls = tls  # with a server context, HTTPS only (ADR 0050)
        self._metrics: list[Callable[[], str]] = []
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()
        self._rotation: asyncio.Task[None] | None = None

    @property
    def connections(self) -> int:
        """Requests being served now (a follow counts until its client or run goes)."""
        return len(self._clients)

    def add_metrics(self, producer: Callable[[], str]) -> None:
        """Register a producer of Prometheus text lines served on ``/metrics``."""
        self._metrics.append(producer)

    async def start(self) -> int:
        """Listen; the real port (``port`` 0 picks a free one) is returned and kept. While
        the server runs, the logs it serves are kept rotated."""
        self._server = await asyncio.start_server(
            self._accept, self.address, self.port, ssl=self.tls
        )
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("agent server listening on %s:%d", self.address, self.port)
        if self.logs is not None:
            self._rotation = asyncio.create_task(keep_rotated(self.logs))
        return self.port

    async def stop(self) -> None:
        if self._rotation is not None:
            self._rotation.cancel()
            await asyncio.gather(self._rotation, return_exceptions=True)
            self._rotation = None
        if self._server is not None:
            self._server.close()
            for task in list(self._clients):
                task.cancel()
            await asyncio.gather(*self._clients, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        try:
            await self._serve(reader, writer)
        except (
            ConnectionError,
            TimeoutError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
        ):
            pass
        except HttpError as exc:
            with contextlib.suppress(ConnectionError):
                await self._send(writer, exc.code, status_body(exc.code, str(exc)))
        finally:
            self._clients.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT)
        if len(head) > MAX_HEADER_BYTES:
            raise HttpError(400, "request head too large")
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        parts = request_line.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            raise HttpError(400, "malformed request line")
        headers = {}
        for line in header_lines:
            key, _, value = line.partition(":")
            headers[key.strip().lower()] = value.strip()
        if parts[0] != "GET":
            raise HttpError(405, f"method {parts[0]} is not allowed")
        url = urlsplit(parts[1])
        if url.path == "/healthz":
            await self._send(writer, 200, b"ok", "text/plain")
            return
        await self._authorize(headers.get("authorization", ""))
        if url.path == "/metrics":
            await self._send(
                writer, 200, self._metrics_text().encode(), "text/plain; version=0.0.4"
            )
            return
        segments = [unquote(s) for s in url.path.split("/")]
        if len(segments) == 5 and segments[1] == "containerLogs" and all(segments[2:]):
            await self._logs(reader, writer, segments[2:], parse_qs(url.query))
            return
        raise HttpError(404, f"no such path {url.path}")

    async def _authorize(self, header: str) -> None:
        if self.reviewer is None:
            return
        given = header[len("Bearer ") :].strip() if header.startswith("Bearer ") else ""
        if not await self.reviewer.allows(given):
            raise HttpError(401, "an API server's bearer token is required")

    def _metrics_text(self) -> str:
        out = []
        for producer in self._metrics:
            try:
                text = producer()
            except Exception:
                log.exception("metrics producer %r failed", producer)
                continue
            out.append(text if text.endswith("\n") or not text else text + "\n")
        return "".join(out)

    async def _send(
        self,
        writer: asyncio.StreamWriter,
        code: int,
        body: bytes,
        content_type: str = "application/json",
    ) -> None:
        writer.write(_head(code, content_type, len(body)) + body)
        await writer.drain()

    async def _logs(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        where: list[str],
        query: dict[str, list[str]],
    ) -> None:
        if self.logs is None:
            raise HttpError(404, "this agent keeps no container logs")
        n, follow, previous = tail_lines(query), flag(query, "follow"), flag(query, "previous")
        try:
            target = self.logs.find(where[0], where[1], where[2], previous)
        except LogLookupError as exc:
            raise HttpError(exc.code, str(exc)) from None
        if not follow or previous:
            data = await asyncio.to_thread(tail, target.files, n)
            await self._send(writer, 200, data, "text/plain; charset=utf-8")
            return
        await self._follow(reader, writer, target, n)

    async def _follow(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        target: LogTarget,
        n: int | None,
    ) -> None:
        assert self.logs is not None
        current = target.files[-1]
        try:
            f = current.open("rb")
        except FileNotFoundError:
            raise HttpError(404, f'container "{target.container}" has no log yet') from None
        gone = asyncio.create_task(reader.read(1))  # the client closing ends the follow
        with f:
            appended = _Reader(f, current, os.fstat(f.fileno()).st_size)
            writer.write(_head(200, "text/plain; charset=utf-8", None))
            first = await asyncio.to_thread(tail, target.files, n, appended.offset)
            if first:
                writer.write(_chunk(first))
            await writer.drain()
            try:
                while not gone.done():
                    live = self.logs.running(target) and _same_file(current, f)
                    data = appended.read()
                    if data:
                        writer.write(_chunk(data))
                        await writer.drain()
                    elif not live:
                        break
                    else:
                        await asyncio.wait({gone}, timeout=self.poll)
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            finally:
                gone.cancel()


def _same_file(path: Path, f: BinaryIO) -> bool:
    """Whether ``path`` still names the open file (a restart renames it to the previous run's)."""
    try:
        return os.stat(path).st_ino == os.fstat(f.fileno()).st_ino
    except FileNotFoundError:
        return False


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except FileNotFoundError:
        return None


@dataclass
class _Reader:
    """Reads what a run appends to its open log, across copy-truncate rotations.

    A rotation shows as a new ``.1`` (a fresh copy, so a new inode) or a file shorter than
    what was read: the bytes past ``offset`` are then in ``.1``, and the file starts over.
    Rotations run in the event loop (``keep_rotated``), so a poll never sees one half done."""

    f: BinaryIO
    path: Path
    offset: int
    rotated_inode: int | None = None

    def __post_init__(self) -> None:
        self.rotated_inode = _inode(rotated(self.path, 1))

    def read(self) -> bytes:
        fd = self.f.fileno()
        size = os.fstat(fd).st_size
        copy_inode = _inode(rotated(self.path, 1))
        if copy_inode != self.rotated_inode or size < self.offset:
            self.rotated_inode, rest = copy_inode, b""
            if copy_inode is not None:
                with contextlib.suppress(FileNotFoundError), rotated(self.path, 1).open("rb") as c:
                    c.seek(self.offset)
                    rest = c.read()
            self.offset = 0
            return rest
        if size == self.offset:
            return b""
        data = os.pread(fd, min(size - self.offset, 1 << 20), self.offset)
        self.offset += len(data)
        return data
