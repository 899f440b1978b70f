"""Answering a request that asks for a ``Table`` (``kubectl get``): the shell around
``app.core.table``.

A list, a get and every event of a watch are the same objects the JSON path sends, rendered
to rows at the moment they are sent; ``Accept`` decides, as in Kubernetes, and a client that
does not ask gets the objects unchanged. Called by the handlers in ``app.api.routes``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
from litestar import Request, Response

from app.api.responses import raw_response
from app.core import errors
from app.core import table as core
from app.core.kinds import Kind

_dec = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()


@dataclass(frozen=True)
class TableRequest:
    """What a request asked for: the Table version and what each row carries."""

    version: str
    include: core.Include


def table_request(request: Request[Any, Any, Any]) -> TableRequest | None:
    """The request's Table ask from its ``Accept`` and ``includeObject``; ``None``: plain JSON."""
    version = core.wants_table(request.headers.get("accept", ""))
    if version is None:
        return None
    given = request.query_params.get("includeObject")
    include = core.include_object(given)
    if include is None:
        raise errors.BadRequest(f"includeObject must be None, Metadata or Object, got {given!r}")
    return TableRequest(version, include)


def _render(
    kind: Kind, ask: TableRequest, raws: list[bytes], rv: str, cont: str | None = None
) -> bytes:
    objs = [_dec.decode(raw) for raw in raws]
    now = datetime.now(UTC)
    body = core.table(
        kind, objs, now, resource_version=rv, cont=cont, include=ask.include, version=ask.version
    )
    return _enc.encode(body)


def list_response(
    kind: Kind, ask: TableRequest, items: list[bytes], revision: int, cont: str | None
) -> Response[bytes]:
    return raw_response(_render(kind, ask, items, str(revision), cont))


def object_response(request: Request[Any, Any, Any], kind: Kind, raw: bytes) -> Response[bytes]:
    """One object, as a Table of one row when the request asks for a Table."""
    ask = table_request(request)
    if ask is None:
        return raw_response(raw)
    rv = str((_dec.decode(raw).get("metadata") or {}).get("resourceVersion") or "")
    return raw_response(_render(kind, ask, [raw], rv))


def watch_renderer(kind: Kind, ask: TableRequest) -> Callable[[bytes], bytes]:
    """Each watch event's object as a Table of one row (a bookmark: a Table with no row)."""

    def render(raw: bytes) -> bytes:
        obj = _dec.decode(raw)
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        if "name" not in (obj.get("metadata") or {}):  # a bookmark
            empty = core.table(
                kind, [], datetime.now(UTC), resource_version=rv, version=ask.version
            )
            return _enc.encode(empty)
        return _render(kind, ask, [raw], rv)

    return render


async def table_stream(
    kind: Kind, ask: TableRequest, events: AsyncIterator[bytes]
) -> AsyncIterator[bytes]:
    """A watch's newline-delimited events with each object rendered by :func:`watch_renderer`;
    an ``ERROR`` event's ``Status`` passes unchanged."""
    render = watch_renderer(kind, ask)
    async for chunk in events:
        out = []
        for line in chunk.splitlines():
            if not line.strip():
                continue
            event = _dec.decode(line)
            if event.get("type") != "ERROR":
                event["object"] = msgspec.Raw(render(_enc.encode(event.get("object"))))
            out.append(_enc.encode(event) + b"\n")
        yield b"".join(out)
