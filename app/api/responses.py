"""Building JSON responses from cached bytes and errors, in one place."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec
from litestar import Response

from app.core.errors import StatusError
from app.core.kinds import API_VERSION, Kind

JSON = "application/json"
_enc = msgspec.json.Encoder()


def json_response(
    body: Any, status: int = 200, headers: dict[str, str] | None = None
) -> Response[bytes]:
    return Response(content=_enc.encode(body), status_code=status, media_type=JSON, headers=headers)


def raw_response(raw: bytes, status: int = 200) -> Response[bytes]:
    return Response(content=raw, status_code=status, media_type=JSON)


def error_parts(exc: StatusError) -> tuple[int, bytes, dict[str, str] | None]:
    """An error's HTTP status, ``kind: Status`` body and headers (``Retry-After``)."""
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    return exc.code, _enc.encode(exc.to_status()), headers


def error_response(exc: StatusError) -> Response[bytes]:
    code, body, headers = error_parts(exc)
    return Response(content=body, status_code=code, media_type=JSON, headers=headers)


def list_body(
    kind: Kind,
    items: Iterable[bytes],
    revision: int,
    cont: str | None,
) -> bytes:
    meta: dict[str, Any] = {"resourceVersion": str(revision)}
    if cont:
        meta["continue"] = cont
    head = _enc.encode({"kind": kind.list_kind, "apiVersion": API_VERSION, "metadata": meta})
    return head[:-1] + b',"items":[' + b",".join(items) + b"]}"


def success_status(kind: Kind, name: str, uid: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {"name": name, "group": "quaymaster.io", "kind": kind.plural, "uid": uid},
    }
