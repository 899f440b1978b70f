"""The ``scale`` subresource of Deployments, ReplicaSets and Jobs: ``GET``, ``PUT`` and
``PATCH .../{plural}/{name}/scale`` with an ``autoscaling/v1`` ``Scale`` (``kubectl scale``).

A thin shell over :mod:`app.core.scale`: reads come from the watch cache; a write becomes a
merge patch of the object through :meth:`Objects.patch`, so it is admitted, conditional on a
``resourceVersion`` when the ``Scale`` carries one, and honours ``dryRun=All`` (ADR 0050).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get, patch, put
from litestar.handlers import HTTPRouteHandler

from app.api import authz
from app.api.dry_run import wants_dry_run
from app.api.responses import json_response
from app.api.routes import PREFIX, guarded
from app.api.service import JSONPATCH, MERGE, Objects, decode_body
from app.core import errors
from app.core import scale as core
from app.core.authz import Attributes
from app.core.kinds import BY_KIND, Kind
from app.core.patch import json_patch, merge_patch
from app.store.tokens import User

_enc = msgspec.json.Encoder()


def _metadata(body: Any) -> dict[str, Any]:
    """A body's ``metadata`` (empty when absent); one that is not an object is a 400."""
    meta = (body.get("metadata") if isinstance(body, dict) else None) or {}
    if not isinstance(meta, dict):
        raise errors.BadRequest("metadata must be an object")
    return meta


async def _write(
    request: Request[Any, Any, Any], kind: Kind, namespace: str, name: str, scale: Any,
    user: User,
) -> Response[Any]:  # fmt: skip
    objects: Objects = authz.objects_of(request)
    replicas = core.wanted_replicas(scale, name)
    rv = _metadata(scale).get("resourceVersion")
    body = _enc.encode(core.object_patch(kind.kind, replicas, rv))
    c = await objects.patch(
        kind, namespace, name, body, MERGE, user, dry_run=wants_dry_run(request)
    )  # fmt: skip
    return json_response(core.to_scale(kind.kind, c.obj()))


def scale_handlers(kind: Kind) -> list[HTTPRouteHandler]:
    path = f"{PREFIX}/namespaces/{{namespace:str}}/{kind.plural}/{{name:str}}/scale"
    tag, op = [kind.kind], kind.kind

    def scaled(namespace: str, name: str) -> tuple[str, str, str, str]:
        return kind.plural, namespace, name, "scale"  # RBAC's view: {plural}/scale

    def current(request: Request[Any, Any, Any], namespace: str, name: str) -> dict[str, Any]:
        objects: Objects = authz.objects_of(request)  # as its principal may see them
        return core.to_scale(kind.kind, objects.get(kind, namespace, name).obj())

    @get(path, operation_id=f"read{op}Scale", tags=tag, summary=f"Read a {op}'s scale")
    async def read(request: Request[Any, Any, Any], namespace: str, name: str) -> Response[Any]:
        async def run(user: User) -> Response[Any]:
            return json_response(current(request, namespace, name))

        return await guarded(request, run, attrs=Attributes("get", *scaled(namespace, name)))

    @put(path, operation_id=f"replace{op}Scale", tags=tag, summary=f"Replace a {op}'s scale")
    async def replace(request: Request[Any, Any, Any], namespace: str, name: str) -> Response[Any]:
        async def run(user: User) -> Response[Any]:
            scale = decode_body(await request.body())
            return await _write(request, kind, namespace, name, scale, user)

        return await guarded(request, run, attrs=Attributes("update", *scaled(namespace, name)))

    @patch(path, operation_id=f"patch{op}Scale", tags=tag, summary=f"Patch a {op}'s scale")
    async def patch_(request: Request[Any, Any, Any], namespace: str, name: str) -> Response[Any]:
        async def run(user: User) -> Response[Any]:
            ops = decode_body(await request.body())
            media = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if media not in (MERGE, JSONPATCH):
                raise errors.UnsupportedMediaType(
                    f"the patch content type {media!r} is not supported; use {MERGE} or {JSONPATCH}"
                )
            base = current(request, namespace, name)
            scale = merge_patch(base, ops) if media == MERGE else json_patch(base, ops)
            if isinstance(scale, dict) and isinstance(ops, dict):
                given = _metadata(ops).get("resourceVersion")
                scale.setdefault("metadata", {})["resourceVersion"] = given  # pinned only if sent
            elif isinstance(scale, dict):
                _metadata(scale).pop("resourceVersion", None)
            return await _write(request, kind, namespace, name, scale, user)

        return await guarded(request, run, attrs=Attributes("patch", *scaled(namespace, name)))

    return [read, replace, patch_]


HANDLERS: list[HTTPRouteHandler] = [
    h for name in core.SCALED for h in scale_handlers(BY_KIND[name])
]
