"""Serving the OpenAPI document: ``/openapi/v3`` (Kubernetes' index and one document per
group-version, which kubectl reads), ``/schema`` and ``/schema/openapi.json`` (the whole
document) and ``/schema/swagger`` (a browser view of it).

The document is built once per process from the routes the app really registered
(:func:`routes_of`), so a handler another module adds is described without touching this one;
what each route accepts and answers is :mod:`app.core.openapi`'s business. Litestar's own
OpenAPI generation is switched off (``openapi_config=None`` in :mod:`app.api.app`): it described
errors in Litestar's shape, which this server never sends.
"""

from __future__ import annotations

import re
from typing import Any

from litestar import Litestar, Request, Response, get
from litestar.handlers import HTTPRouteHandler
from litestar.routes import HTTPRoute

from app import __version__
from app.api.responses import JSON, json_response
from app.core import errors
from app.core.openapi import Route, document, index, split

TITLE = "Quaymaster"
_CONVERTER = re.compile(r"\{([^}:]+):[^}]*\}")
_SWAGGER = """<!doctype html>
<html><head><title>Quaymaster API</title><meta charset="utf-8">
<link rel="stylesheet" href="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css">
</head><body><div id="swagger-ui"></div>
<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"></script>
<script>SwaggerUIBundle({url: "/schema/openapi.json", dom_id: "#swagger-ui"});</script>
</body></html>
"""


def _operation_id(handler: HTTPRouteHandler, method: str, path: str) -> str:
    given = handler.operation_id
    if isinstance(given, str) and given:
        return given
    words = re.sub(r"[^A-Za-z0-9]+", " ", path).title().replace(" ", "")
    return method.lower() + words


def _media_type(handler: HTTPRouteHandler) -> str:
    """The handler's declared media type; one that returns a ``Response`` declares none, and
    ours all answer JSON (:mod:`app.api.responses`)."""
    media = str(getattr(handler.media_type, "value", handler.media_type) or "")
    return media if "/" in media else JSON


def routes_of(app: Litestar) -> list[Route]:
    """Every HTTP method of every path the app routes, as :class:`Route` values."""
    out: list[Route] = []
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        path = _CONVERTER.sub(r"{\1}", route.path)
        for handler in route.route_handlers:
            if handler.include_in_schema is False:
                continue
            for method in sorted(handler.http_methods):
                if method in ("HEAD", "OPTIONS"):
                    continue
                out.append(
                    Route(
                        path=path,
                        method=method.lower(),
                        operation_id=_operation_id(handler, method, path),
                        summary=handler.summary or "",
                        tags=tuple(handler.tags or ()),
                        media_type=_media_type(handler),
                        status_code=handler.status_code,
                    )
                )
    return out


def _documents(app: Litestar) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, Any]]:
    """(whole document, parts by index key, index), built on first use and kept."""
    cached = getattr(app.state, "openapi_documents", None)
    if cached is None:
        whole = document(routes_of(app), TITLE, __version__)
        parts = split(whole)
        cached = (whole, parts, index(parts))
        app.state.openapi_documents = cached
    return cached


@get(
    "/openapi/v3",
    operation_id="getOpenAPIIndex",
    tags=["discovery"],
    summary="The index of the OpenAPI v3 documents, one per group-version",
)
async def openapi_index(request: Request[Any, Any, Any]) -> Response[Any]:
    return json_response(_documents(request.app)[2])


@get(
    "/openapi/v3/{key:path}",
    operation_id="getOpenAPIDocument",
    tags=["discovery"],
    summary="The OpenAPI v3 document of one group-version (apis/quaymaster.io/v1, ...)",
)
async def openapi_part(request: Request[Any, Any, Any], key: str) -> Response[Any]:
    part = _documents(request.app)[1].get(key.strip("/"))
    if part is None:
        raise errors.NotFound(f"no OpenAPI document for {key.strip('/')!r}")
    return json_response(part)


@get(
    ["/schema", "/schema/openapi.json"],
    operation_id="getOpenAPIDocumentWhole",
    tags=["discovery"],
    summary="The whole OpenAPI v3 document",
)
async def openapi_whole(request: Request[Any, Any, Any]) -> Response[Any]:
    return json_response(_documents(request.app)[0])


@get(
    "/schema/swagger",
    operation_id="getOpenAPIBrowser",
    tags=["discovery"],
    media_type="text/html",
    summary="The document in a browser",
    include_in_schema=False,
)
async def swagger() -> str:
    return _SWAGGER


HANDLERS: list[HTTPRouteHandler] = [openapi_index, openapi_part, openapi_whole, swagger]
