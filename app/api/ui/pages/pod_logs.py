"""A pod's container log in the UI: the last lines, a download, and a follow.

All three read the REST log subresource (:mod:`app.api.logs`: ``container``, ``tailLines``,
``previous``, ``follow``) in this process as the signed-in principal, so the API's
authorisation (``get pods/log``), its errors (not bound yet, no previous run, the agent away)
and its seat accounting apply unchanged: a follow holds a seat only while it starts.

* ``/ui/pods/{ns}/{name}/logs`` shows the last ``tail`` lines (at most ``MAX_TAIL``).
* ``.../logs/download`` hands the same lines (or the whole log without ``tail``) over as a
  ``text/plain`` attachment, streamed through.
* ``.../logs/follow`` is a server-sent event stream: one ``line`` event per line of the REST
  follow, ``end`` when the API ends it (the run ended), ``refused`` with the API's message when
  it refuses. ``ui.js`` appends the lines to the page, keeps the last few thousand, closes the
  stream while the tab is hidden and reopens it from the last ``tail`` lines when shown (the
  log API has no ``sinceTime``, so a resumed follow replaces what the page holds).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

from litestar import Request, Response, get
from litestar.response import Stream

from app.api.ui import inproc
from app.api.ui.core import View, asgi_app, ui_page
from app.api.ui.pages.pod_detail import pod_url, read
from app.api.ui.pages.pods import POD
from app.api.ui.session import SignedOut, current
from app.client import build, decode
from app.core import errors

DEFAULT_TAIL = 500
MAX_TAIL = 10_000
KEEPALIVE_S = 15.0
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def tail_of(raw: str | None, default: int | None = DEFAULT_TAIL) -> int | None:
    """The ``tail`` parameter, bounded to 1..``MAX_TAIL`` (``default`` when absent or bad)."""
    if raw is None or not raw.strip().isdigit():
        return default
    return max(1, min(MAX_TAIL, int(raw)))


def container_names(pod: dict[str, Any]) -> list[str]:
    spec = pod.get("spec") or {}
    both = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    return [str(c.get("name")) for c in both if isinstance(c, dict) and c.get("name")]


def log_params(container: str, tail: int | None, previous: bool, follow: bool = False
               ) -> dict[str, str]:  # fmt: skip
    params = {"container": container}
    if tail is not None:
        params["tailLines"] = str(tail)
    if previous:
        params["previous"] = "true"
    if follow:
        params["follow"] = "true"
    return params


def attachment_name(ns: str, name: str, container: str, previous: bool) -> str:
    stem = "_".join([ns, name, container] + (["previous"] if previous else []))
    return _UNSAFE.sub("-", stem) + ".log"


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def lines_to_events(buf: bytes, chunk: bytes) -> tuple[bytes, bytes]:
    """``line`` events for the complete lines of ``buf + chunk``, and what is left over."""
    *done, rest = (buf + chunk).split(b"\n")
    return b"".join(sse("line", line.decode(errors="replace")) for line in done), rest


class _Choice:
    """What a log request asks for: the container (the pod's first when not named), the
    tail, the previous run."""

    def __init__(self, pod: dict[str, Any], q: Any, default_tail: int | None) -> None:
        self.names = container_names(pod)
        asked = str(q.get("container") or "")
        self.container = asked if asked else (self.names[0] if self.names else "")
        self.tail = tail_of(q.get("tail"), default_tail)
        self.previous = q.get("previous", "") in ("1", "on", "true")

    def params(self, follow: bool = False) -> dict[str, str]:
        return log_params(self.container, self.tail, self.previous and not follow, follow)


async def _log_text(view: View, ns: str, name: str, params: dict[str, str]) -> tuple[str, str]:
    """The log's text, or '' and the API's reason for not giving it."""
    target = build.log(ns, name, params).target
    answer = await inproc.call(asgi_app(view.request), view.session.caller, "GET", target)
    if answer.status >= 400:
        exc = decode.error(answer.status, answer.body)
        if isinstance(exc, errors.Forbidden):
            raise exc
        return "", str(exc)
    return answer.body.decode(errors="replace"), ""


@get("/ui/pods/{ns:str}/{name:str}/logs", include_in_schema=False)
@ui_page
async def pod_logs(view: View) -> Any:
    ns, name = view.request.path_params["ns"], view.request.path_params["name"]
    pod = await read(view, POD, ns, name)
    choice = _Choice(pod, view.request.query_params, DEFAULT_TAIL)
    text, problem = await _log_text(view, ns, name, choice.params())
    base = f"{pod_url(ns, name)}/logs"
    return view.render(
        "pods/logs.html", ns=ns, name=name, pod_url=pod_url(ns, name), names=choice.names,
        container=choice.container, tail=choice.tail, previous=choice.previous,
        max_tail=MAX_TAIL, text=text, problem=problem,
        lines=text.count("\n") + (1 if text and not text.endswith("\n") else 0),
        download_url=f"{base}/download?" + urlencode(
            {"container": choice.container, "tail": choice.tail,
             **({"previous": "1"} if choice.previous else {})}),
        follow_url=f"{base}/follow?" + urlencode({"container": choice.container}),
    )  # fmt: skip


@get("/ui/pods/{ns:str}/{name:str}/logs/download", include_in_schema=False)
@ui_page
async def download_logs(view: View) -> Any:
    ns, name = view.request.path_params["ns"], view.request.path_params["name"]
    pod = await read(view, POD, ns, name)
    choice = _Choice(pod, view.request.query_params, None)
    target = build.log(ns, name, choice.params()).target
    stack = contextlib.AsyncExitStack()
    answer, body = await stack.enter_async_context(
        inproc.stream(asgi_app(view.request), view.session.caller, "GET", target)
    )
    if answer.status >= 400:
        raw = b"".join([c async for c in body])
        await stack.aclose()
        raise decode.error(answer.status, raw)

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in body:
                yield chunk
        finally:
            await stack.aclose()

    filename = attachment_name(ns, name, choice.container, choice.previous)
    return Stream(
        relay(), media_type="text/plain; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{filename}"',
                 "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )  # fmt: skip


async def _follow(request: Request[Any, Any, Any], caller: inproc.Caller, target: str
                  ) -> AsyncIterator[bytes]:  # fmt: skip
    """The REST follow as ``line`` events; keepalives while it is quiet."""
    yield b"retry: 5000\n\n" + sse("open", "")
    async with inproc.stream(asgi_app(request), caller, "GET", target) as (answer, body):
        if answer.status >= 400:
            raw = b"".join([c async for c in body])
            yield sse("refused", str(decode.error(answer.status, raw)))
            return
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=64)

        async def pump() -> None:
            try:
                async for chunk in body:
                    await chunks.put(chunk)
            finally:
                await chunks.put(None)

        task = asyncio.create_task(pump())
        buf = b""
        try:
            while True:
                try:
                    chunk = await asyncio.wait_for(chunks.get(), KEEPALIVE_S)
                except TimeoutError:
                    yield b": keepalive\n\n"
                    continue
                if chunk is None:
                    break
                events, buf = lines_to_events(buf, chunk)
                if events:
                    yield events
            if buf:
                yield sse("line", buf.decode(errors="replace"))
            yield sse("end", "The log stream ended: the container's run ended or the node "
                             "closed it.")  # fmt: skip
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


@get("/ui/pods/{ns:str}/{name:str}/logs/follow", include_in_schema=False)
async def follow_logs(request: Request[Any, Any, Any]) -> Response[Any]:
    """Server-sent events of a container's log as it is written (``container``, ``tail``)."""
    try:
        session = await current(request)
    except SignedOut:
        return Response(b"signed out", status_code=401, media_type="text/plain")
    ns, name = request.path_params["ns"], request.path_params["name"]
    q = request.query_params
    params = log_params(str(q.get("container") or ""), tail_of(q.get("tail"), 100), False, True)
    if not params["container"]:
        del params["container"]
    target = build.log(ns, name, params).target
    return Stream(
        _follow(request, session.caller, target),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


HANDLERS = [pod_logs, download_logs, follow_logs]
