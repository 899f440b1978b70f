"""Events under Kubernetes' core path, ``GET /api/v1/namespaces/{ns}/events``, for ``kubectl
describe``.

kubectl describes a kind it does not know (all of ours) by getting the object and then
searching the core group's Events with ``fieldSelector=involvedObject.name=…,
involvedObject.namespace=…,involvedObject.kind=…,involvedObject.uid=…``; it never asks
discovery for that path. This answers that search from our Events (the same cache, the same
selectors) as a core ``v1`` ``EventList``, so describe lists what ``qm describe`` lists. Only
that list is served here: discovery does not announce core resources, so every other kubectl
verb on events keeps using ``quaymaster.io/v1`` (ADR 0050).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get
from litestar.handlers import HTTPRouteHandler

from app.api import authz
from app.api.responses import raw_response
from app.api.routes import guarded
from app.api.service import Objects
from app.core import errors
from app.core.authz import Attributes
from app.core.kinds import BY_KIND
from app.store.tokens import User

EVENT = BY_KIND["Event"]
NAMESPACE_FIELD = "involvedObject.namespace"
_dec = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()


def split_selector(selector: str | None, namespace: str) -> tuple[str | None, bool]:
    """The field selector without its ``involvedObject.namespace`` terms (an Event's object is
    in the Event's namespace, the one on the path), and whether those terms can match."""
    kept: list[str] = []
    matches = True
    for term in (selector or "").split(","):
        key, op, value = _term(term.strip())
        if key != NAMESPACE_FIELD:
            if term.strip():
                kept.append(term.strip())
            continue
        matches = matches and (value == namespace) == (op != "!=")
    return (",".join(kept) or None), matches


def _term(term: str) -> tuple[str, str, str]:
    for op in ("!=", "==", "="):
        key, found, value = term.partition(op)
        if found:
            return key.strip(), op, value.strip()
    return term, "", ""


def event_list(items: list[bytes], revision: int, cont: str | None) -> bytes:
    """Our Events as a core ``v1`` ``EventList``."""
    out = []
    for raw in items:
        obj = _dec.decode(raw)
        obj["apiVersion"] = "v1"
        out.append(obj)
    meta: dict[str, Any] = {"resourceVersion": str(revision)}
    if cont:
        meta["continue"] = cont
    return _enc.encode({"kind": "EventList", "apiVersion": "v1", "metadata": meta, "items": out})


@get(
    "/api/v1/namespaces/{namespace:str}/events",
    operation_id="listCoreV1NamespacedEvent",
    tags=["Event"],
    summary="List Events as core v1 Events (kubectl describe's search)",
)
async def list_core_events(request: Request[Any, Any, Any], namespace: str) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        objects: Objects = authz.objects_of(request)  # as its principal may see them
        q = request.query_params
        fields, matches = split_selector(q.get("fieldSelector"), namespace)
        limit = q.get("limit")
        if limit not in (None, "") and not str(limit).isdigit():
            raise errors.BadRequest(f"limit must be a non-negative integer, got {limit!r}")
        items, revision, cont = await objects.list(
            EVENT,
            namespace,
            label_selector=q.get("labelSelector"),
            field_selector=fields,
            limit=int(limit) if limit else None,
            cont=q.get("continue"),
            resource_version=q.get("resourceVersion"),
        )
        return raw_response(event_list(items if matches else [], revision, cont))

    return await guarded(request, run, attrs=Attributes("list", EVENT.plural, namespace))


HANDLERS: list[HTTPRouteHandler] = [list_core_events]
