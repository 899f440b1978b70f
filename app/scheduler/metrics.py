"""The scheduler's metrics and its small HTTP endpoint.

``REGISTRY`` holds the scheduler's metrics (the types come from ``app.core.metrics``). ``serve``
answers ``GET /metrics`` with a render of them and ``GET /healthz`` with the process's health,
on plain asyncio streams: the scheduler has no web framework and needs none for two paths.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from app.core.metrics import (
    CONTENT_TYPE,
    DEFAULT_BUCKETS,
    Counter,
    Gauge,
    Histogram,
    Registry,
)

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_BUCKETS",
    "REGISTRY",
    "Counter",
    "Gauge",
    "Histogram",
    "Registry",
    "serve",
]

log = logging.getLogger(__name__)

REGISTRY = Registry()

_READ_TIMEOUT = 10.0
_MAX_HEADERS = 100
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_TEXT = "text/plain; charset=utf-8"


def _always_healthy() -> bool:
    return True


async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    render: Callable[[], str] = REGISTRY.render,
    healthy: Callable[[], bool] = _always_healthy,
) -> asyncio.base_events.Server:
    """Start answering on ``host:port`` (port 0: any free port; see ``server.sockets``).

    ``GET /metrics`` returns ``render()`` as exposition format 0.0.4; ``GET /healthz`` returns
    200 ``ok`` while ``healthy()`` is true and 503 otherwise; any other path is 404. Each
    response closes its connection. The caller closes the returned server."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, ctype, body, head_only = await asyncio.wait_for(
                _answer(reader, render, healthy), _READ_TIMEOUT
            )
            writer.write(_response(status, ctype, body, head_only))
            await writer.drain()
        except (
            TimeoutError,
            ConnectionError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
        ):
            pass
        except Exception:
            log.exception("metrics endpoint failed to answer")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, host, port)
    return server


async def _answer(
    reader: asyncio.StreamReader, render: Callable[[], str], healthy: Callable[[], bool]
) -> tuple[int, str, bytes, bool]:
    """(status, content type, body, whether to send the head only) for one request."""
    request_line = (await reader.readuntil(b"\r\n")).decode("latin-1").strip()
    for _ in range(_MAX_HEADERS):
        if await reader.readuntil(b"\n") in (b"\r\n", b"\n"):
            break
    else:
        return 400, _TEXT, b"too many headers\n", False
    parts = request_line.split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return 400, _TEXT, b"bad request\n", False
    method, target = parts[0], parts[1].split("?", 1)[0]
    head_only = method == "HEAD"
    if target not in ("/metrics", "/healthz"):
        return 404, _TEXT, b"not found\n", head_only
    if method not in ("GET", "HEAD"):
        return 405, _TEXT, b"method not allowed\n", False
    if target == "/healthz":
        try:
            ok = healthy()
        except Exception:
            log.exception("health check failed")
            ok = False
        return (200, _TEXT, b"ok", head_only) if ok else (503, _TEXT, b"unhealthy\n", head_only)
    try:
        body = render().encode()
    except Exception:
        log.exception("rendering metrics failed")
        return 500, _TEXT, b"could not render metrics\n", head_only
    return 200, CONTENT_TYPE, body, head_only


def _response(status: int, ctype: str, body: bytes, head_only: bool) -> bytes:
    head = (
        f"HTTP/1.1 {status} {_REASONS[status]}\r\n"
        f"Content-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\n"
        + ("Allow: GET, HEAD\r\n" if status == 405 else "")
        + "Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + (b"" if head_only else body)
