"""Live pages: the watch stream, as server-sent events a page listens to.

A page names the kinds it shows, its namespace and the resourceVersion it was rendered at;
``GET /ui/live`` opens a REST watch of each kind from that version, as the signed-in
principal (so it sees only what that principal may list), and sends one ``change`` event,
whose ``id`` is the newest version seen, at most every ``DEBOUNCE_S``; the page then fetches
its ``main`` block again (``ui.js``). A bookmark moves the ``id`` on without a refetch. The
browser resends the last ``id`` when it reconnects (``Last-Event-ID``), and ``ui.js`` passes
it when a hidden tab becomes visible again, so a page resumes from the last version it has
seen; a version the server no longer holds (410) gets ``reset``, and the page refetches from
now. A kind the principal may not watch gets ``forbidden``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Request, get
from litestar.response import Response, Stream

from app.api.ui import inproc
from app.api.ui.core import asgi_app
from app.api.ui.session import SignedOut, current
from app.client import build
from app.core.kinds import BY_KIND

DEBOUNCE_S = 1.0
KEEPALIVE_S = 15.0
MAX_KINDS = 6


class _Event(msgspec.Struct):
    type: str
    object: dict[str, Any] = {}


_decode = msgspec.json.Decoder(_Event).decode


def _sse(event: str, data: Any = "", event_id: str | None = None) -> bytes:
    out = f"event: {event}\n"
    if event_id:
        out += f"id: {event_id}\n"
    out += f"data: {json.dumps(data)}\n\n"
    return out.encode()


async def _follow(
    request: Request[Any, Any, Any], caller: inproc.Caller, kind: str, ns: str | None, rv: str,
    out: asyncio.Queue[tuple[str, str, str]],
) -> None:  # fmt: skip
    """Put ``(what, kind, version)`` on ``out`` for each event of one watch: ``change``,
    ``bookmark``, ``reset`` (version gone) or ``forbidden``; reconnects when it ends."""
    k = BY_KIND[kind]
    while True:
        req = build.watch(k, ns if k.namespaced else None, rv, timeout_seconds=300)
        async with inproc.stream(asgi_app(request), caller, "GET", req.target) as (answer, body):
            if answer.status in (401, 403, 404):
                await out.put(("forbidden" if answer.status != 401 else "signedout", kind, rv))
                return
            if answer.status == 410:
                await out.put(("reset", kind, ""))
                rv = ""
                continue
            if answer.status >= 400:
                await out.put(("reset", kind, ""))
                await asyncio.sleep(DEBOUNCE_S)
                rv = ""
                continue
            buf = b""
            async for chunk in body:
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    ev = _decode(line)
                    version = str((ev.object.get("metadata") or {}).get("resourceVersion") or "")
                    if ev.type == "ERROR":
                        await out.put(("reset", kind, ""))
                        rv = ""
                        break
                    if version:
                        rv = version
                    await out.put(("bookmark" if ev.type == "BOOKMARK" else "change", kind, rv))


async def _events(request: Request[Any, Any, Any], kinds: list[str], ns: str | None, rv: str
                  ) -> AsyncIterator[bytes]:  # fmt: skip
    session = await current(request)
    out: asyncio.Queue[tuple[str, str, str]] = asyncio.Queue()
    tasks = [asyncio.create_task(_follow(request, session.caller, k, ns, rv, out)) for k in kinds]
    newest, changed = rv, set[str]()
    loop = asyncio.get_running_loop()
    due: float | None = None
    yield b"retry: 2000\n\n" + _sse("open", {"kinds": kinds}, rv or None)
    try:
        while True:
            timeout = KEEPALIVE_S if due is None else max(0.0, due - loop.time())
            try:
                what, kind, version = await asyncio.wait_for(out.get(), timeout)
            except TimeoutError:
                if due is not None and changed:
                    yield _sse("change", {"kinds": sorted(changed)}, newest or None)
                    changed, due = set(), None
                else:
                    yield b": keepalive\n\n"
                continue
            if version and (not newest or int(version) > int(newest or 0)):
                newest = version
            if what == "change":
                changed.add(kind)
                if due is None:
                    due = loop.time() + DEBOUNCE_S
            elif what == "bookmark" and not changed:
                yield _sse("bookmark", "", newest or None)
            elif what in ("reset", "forbidden", "signedout"):
                yield _sse(what, {"kind": kind})
                if what == "signedout":
                    return
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t


@get("/ui/live", include_in_schema=False)
async def live(request: Request[Any, Any, Any]) -> Response[Any]:
    """The change events of the kinds ``kinds`` (comma-separated) in ``ns`` from ``rv``."""
    try:
        await current(request)
    except SignedOut:
        return Response(b"signed out", status_code=401, media_type="text/plain")
    kinds = [k for k in request.query_params.get("kinds", "").split(",") if k in BY_KIND]
    kinds = list(dict.fromkeys(kinds))[:MAX_KINDS]
    ns = request.query_params.get("ns") or None
    rv = request.headers.get("last-event-id") or request.query_params.get("rv") or ""
    if not rv.isdigit():
        rv = ""
    if not kinds:
        return Response(b"name the kinds to follow", status_code=422, media_type="text/plain")
    return Stream(
        _events(request, kinds, ns, rv),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


HANDLERS = [live]
