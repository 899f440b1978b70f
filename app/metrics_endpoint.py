"""The small HTTP endpoint every long-running process serves its metrics on.

``serve`` answers ``GET /metrics`` with a render of a process's metrics (``app.core.metrics``)
and ``GET /healthz`` with its health, on plain asyncio streams: the scheduler, the Celery
workers, the dispatcher and the controller manager have no web framework and need none for
two paths. A process may add a few read-only paths of its own (``routes``: the discovery
service's subscriber list and drain query), answered the same way. ``serve_in_thread`` runs
it on a loop of its own, for a process whose own loop is not always running (a Celery worker's
main process).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping

from app.core.metrics import CONTENT_TYPE

log = logging.getLogger(__name__)

_READ_TIMEOUT = 10.0
_MAX_HEADERS = 100
_REASONS = {
    200: "OK",
    400: "Bad Request",
    422: "Unprocessable Entity",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_TEXT = "text/plain; charset=utf-8"
JSON = "application/json"
_QUERY_MAX = 4096

# An extra path's handler: the query's parameters in, (status, content type, body) out.
Route = Callable[[dict[str, str]], Awaitable[tuple[int, str, bytes]]]


def _always_healthy() -> bool:
    return True


async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    render: Callable[[], str] = lambda: "",
    healthy: Callable[[], bool] = _always_healthy,
    routes: Mapping[str, Route] | None = None,
    read_timeout: float = _READ_TIMEOUT,
) -> asyncio.base_events.Server:
    """Start answering on ``host:port`` (port 0: any free port; see ``server.sockets``).

    ``GET /metrics`` returns ``render()`` as exposition format 0.0.4; ``GET /healthz`` returns
    200 ``ok`` while ``healthy()`` is true and 503 otherwise; a path of ``routes`` is
    answered by its handler (which may take up to ``read_timeout`` seconds); any other path is
    404. Each response closes its connection. The caller closes the returned server."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, ctype, body, head_only = await asyncio.wait_for(
                _answer(reader, render, healthy, routes or {}), read_timeout
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
    reader: asyncio.StreamReader,
    render: Callable[[], str],
    healthy: Callable[[], bool],
    routes: Mapping[str, Route],
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
    method, (target, _, query) = parts[0], parts[1].partition("?")
    head_only = method == "HEAD"
    if target in routes and method in ("GET", "HEAD") and len(query) <= _QUERY_MAX:
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
        status, ctype, body = await routes[target](params)
        return status, ctype, body, head_only
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


def serve_in_thread(host: str, port: int, render: Callable[[], str]) -> int:
    """Serve ``render`` from a daemon thread with its own event loop; the port bound (``port``
    0: any free one). ``render`` runs on that thread, so it must not share unlocked state
    with the process's other threads (read it from elsewhere, as the workers do from Redis)."""
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(serve(host, port, render))
    threading.Thread(target=loop.run_forever, name="metrics", daemon=True).start()
    return int(server.sockets[0].getsockname()[1])
