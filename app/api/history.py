"""The history read API: who changed what, when, from where and why (ADR 0061).

Under ``/apis/audit.quaymaster.io/v1``, read-only, served from ``qm_history`` (ADR 0052) by
``app.store.history_read``:

* ``GET history`` -- the whole cluster's changes; needs ``list`` on ``history`` in the audit
  group at the cluster scope, or, for a query naming one cluster-scoped object (``kind`` and
  ``name``), ``get`` on that kind (``list`` for a ``kind`` without a name).
* ``GET namespaces/{ns}/history`` -- one namespace's; needs ``list`` on ``history`` there
  (ClusterRole ``admin``), or ``get`` on the kind of the one object the query names (so whoever
  may read an object may read its history), or ``list`` on the kind a query names without a
  name. A namespace its principal holds nothing in answers an empty list, as a missing one.

Query parameters (every one optional): ``kind`` (a kind as the CLI spells it: ``Deployment``,
``deploy``, ``deployments``), ``table`` (a table, for the internal ones), ``namespace`` (cluster
route only), ``name``, ``uid``, ``principal``, ``op`` (comma-separated ``insert``, ``update``,
``delete``, ``summary``; summaries are left out unless named), ``since`` and ``until``
(RFC 3339), ``limit`` (1 to 500, default 100), ``continue``. Each bad one is a cause of a 422.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from litestar import Request, Response, get
from litestar.handlers import HTTPRouteHandler

from app.api.authz import Authorization
from app.api.discovery import group as api_group
from app.api.responses import json_response
from app.api.routes import guarded
from app.core import errors
from app.core.authz import Attributes, forbidden_message
from app.core.authz.builtin import AUDIT_GROUP
from app.core.errors import Cause
from app.core.kinds import BY_PLURAL, BY_TABLE, STREAMED, VERSION, Kind, resolve
from app.store import history_read
from app.store.history_read import MAX_LIMIT, OPS, BadToken, Query
from app.store.tokens import User

GROUP_VERSION = f"{AUDIT_GROUP}/{VERSION}"
PREFIX = f"/apis/{GROUP_VERSION}"
RESOURCE = "history"
LIST_KIND = "HistoryList"
TAGS = ["History"]
PARAMS = ("kind", "table", "namespace", "name", "uid", "principal", "op", "since", "until",
          "limit", "continue")  # fmt: skip
# What the API calls each column (the store's names are the database's).
FIELDS = {"request_id": "requestId", "client_addr": "clientAddr", "user_agent": "userAgent",
          "db_role": "dbRole", "application_name": "applicationName",
          "summary_count": "summaryCount"}  # fmt: skip


@dataclass(frozen=True)
class HistoryRequest:
    """A validated request: the store's query and the kind it names (for authorisation)."""

    query: Query
    kind: Kind | None
    token: str | None


def kind_of(text: str) -> Kind | None:
    """A kind as users type it, internal kinds (Token) included."""
    found = resolve(text)
    if found is not None:
        return found
    low = text.lower()
    return next((k for k in STREAMED if low in (k.kind.lower(), k.plural)), None)


def _time(params: Mapping[str, str], key: str, causes: list[Cause]) -> datetime | None:
    raw = params.get(key)
    if raw in (None, ""):
        return None
    try:
        at = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        at = None
    if at is None or at.tzinfo is None:
        causes.append(
            Cause(
                key,
                "FieldValueInvalid",
                f"must be an RFC 3339 time with a zone, such as 2026-12-02T10:00:00Z; got {raw!r}",
            )
        )
        return None
    return at


def _limit(params: Mapping[str, str], causes: list[Cause]) -> int:
    raw = params.get("limit")
    if raw in (None, ""):
        return history_read.DEFAULT_LIMIT
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_LIMIT:
        causes.append(
            Cause(
                "limit",
                "FieldValueInvalid",
                f"must be an integer from 1 to {MAX_LIMIT}; got {raw!r}",
            )
        )
        return history_read.DEFAULT_LIMIT
    return int(raw)


def _ops(params: Mapping[str, str], causes: list[Cause]) -> tuple[str, ...]:
    raw = params.get("op") or ""
    ops = tuple(dict.fromkeys(o.strip() for o in raw.split(",") if o.strip()))
    bad = [o for o in ops if o not in OPS]
    if bad:
        causes.append(
            Cause(
                "op",
                "FieldValueNotSupported",
                f"{', '.join(bad)}: supported values are {', '.join(OPS)}",
            )
        )
    return ops


def _uid(params: Mapping[str, str], causes: list[Cause]) -> str | None:
    raw = params.get("uid") or None
    if raw is None:
        return None
    try:
        return str(uuid.UUID(raw))
    except ValueError:
        causes.append(Cause("uid", "FieldValueInvalid", f"must be a UUID; got {raw!r}"))
        return None


def parse(params: Mapping[str, str], namespace: str | None) -> HistoryRequest:
    """Validate the query parameters of a request (``namespace``: the path's, or None for the
    cluster route) into a store query; 422 naming every bad parameter."""
    causes: list[Cause] = []
    kind: Kind | None = None
    table = params.get("table") or None
    if params.get("kind"):
        kind = kind_of(params["kind"])
        if kind is None:
            causes.append(
                Cause("kind", "FieldValueNotFound", f"no kind {params['kind']!r} in this API")
            )
        elif table is not None and table != kind.table:
            causes.append(
                Cause(
                    "table",
                    "FieldValueInvalid",
                    f"kind {kind.kind} is table {kind.table}, not {table}",
                )
            )
        else:
            table = kind.table
    elif table is not None:
        kind = BY_TABLE.get(table)
    if namespace is not None and params.get("namespace") not in (None, "", namespace):
        causes.append(Cause("namespace", "FieldValueForbidden",
                            "the path names the namespace already"))  # fmt: skip
    ns = namespace if namespace is not None else (params.get("namespace") or None)
    if kind is not None and not kind.namespaced:
        if namespace is not None:
            causes.append(
                Cause(
                    "kind",
                    "FieldValueInvalid",
                    f"{kind.kind} is cluster-scoped: ask {PREFIX}/{RESOURCE}",
                )
            )
        ns = ""  # its rows carry no namespace
    name = params.get("name") or None
    if name is not None and table is None:
        causes.append(Cause("name", "FieldValueInvalid", "a name needs a kind (or a table)"))
    uid, ops = _uid(params, causes), _ops(params, causes)
    since, until = _time(params, "since", causes), _time(params, "until", causes)
    if since is not None and until is not None and since >= until:
        causes.append(Cause("until", "FieldValueInvalid", "must be later than since"))
    query = Query(table=table, namespace=ns, name=name, uid=uid,
                  principal=params.get("principal") or None, ops=ops, since=since, until=until,
                  limit=_limit(params, causes))  # fmt: skip
    token = params.get("continue") or None
    if token is not None and not causes:
        try:
            query = replace(query, after=history_read.decode_token(token, query))
        except BadToken as exc:
            causes.append(Cause("continue", "FieldValueInvalid", str(exc)))
    if causes:
        raise errors.invalid("HistoryListOptions", None, causes)
    return HistoryRequest(query, kind, token)


def _narrow(req: HistoryRequest, namespace: str | None) -> Attributes | None:
    """What reading the history of the kind (or the one object) a query names needs besides
    the history itself: ``get`` on that object, ``list`` on that kind, in the route's scope."""
    q, kind = req.query, req.kind
    if kind is None or BY_PLURAL.get(kind.plural) is not kind:
        return None  # an internal table or kind: the history grant only
    if kind.namespaced != (namespace is not None):
        return None
    verb = "get" if q.name is not None else "list"
    ns = q.name if kind.kind == "Namespace" and q.name else (namespace or "")
    return Attributes(verb, kind.plural, ns, q.name or "")


def authorize(authz: Authorization, user: User, req: HistoryRequest, namespace: str | None) -> bool:
    """Whether ``user`` may read what ``req`` asks (False: answer an empty list, as for a
    missing namespace, since the principal holds nothing there); raise 403 otherwise."""
    whole = Attributes("list", RESOURCE, namespace or "", group=AUDIT_GROUP)
    if authz.allowed(user, whole):
        return True
    narrow = _narrow(req, namespace)
    if narrow is not None and authz.allowed(user, narrow):
        return True
    if namespace and not authz.visible(user, namespace):
        return False
    message = forbidden_message(user, whole)
    if narrow is not None:
        message += f", nor {narrow.verb} {narrow.combined}" + (
            f' "{narrow.name}"' if narrow.name else ""
        )
    raise errors.Forbidden(message, kind=RESOURCE)


def rfc3339(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def entry(row: dict[str, Any]) -> dict[str, Any]:
    """A store row as the API's JSON: camelCase names, RFC 3339 times in UTC."""
    out = {FIELDS.get(k, k): v for k, v in row.items()}
    out["at"] = rfc3339(row["at"])
    return out


def history_list(items: list[dict[str, Any]], cont: str | None) -> dict[str, Any]:
    meta = {"continue": cont} if cont else {}
    return {"kind": LIST_KIND, "apiVersion": GROUP_VERSION, "metadata": meta, "items": items}


async def _serve(request: Request[Any, Any, Any], namespace: str | None) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        req = parse(request.query_params, namespace)
        if not authorize(request.app.state.authz, user, req, namespace):
            return json_response(history_list([], None))
        page = await history_read.read(request.app.state.objects.store.pool, req.query)
        return json_response(history_list([entry(r) for r in page.items], page.cont))

    return await guarded(request, run)


@get(f"{PREFIX}/{RESOURCE}", operation_id="listHistory", tags=TAGS,
     summary="The cluster's change history, newest first")  # fmt: skip
async def list_history(request: Request[Any, Any, Any]) -> Response[Any]:
    return await _serve(request, None)


@get(f"{PREFIX}/namespaces/{{namespace:str}}/{RESOURCE}", operation_id="listNamespacedHistory",
     tags=TAGS, summary="A namespace's change history, newest first")  # fmt: skip
async def list_namespaced_history(request: Request[Any, Any, Any], namespace: str) -> Response[Any]:
    return await _serve(request, namespace)


def resources() -> dict[str, Any]:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [{"name": RESOURCE, "singularName": "", "namespaced": True,
                       "kind": "HistoryEntry", "verbs": ["list"]}],
    }  # fmt: skip


@get(f"/apis/{AUDIT_GROUP}", operation_id="getAuditAPIGroup", tags=["discovery"])
async def read_group(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        return json_response(api_group(AUDIT_GROUP))

    return await guarded(request, run)


@get(PREFIX, operation_id="getAuditAPIResources", tags=["discovery"])
async def read_resources(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        return json_response(resources())

    return await guarded(request, run)


HANDLERS: list[HTTPRouteHandler] = [list_history, list_namespaced_history, read_group,
                                    read_resources]  # fmt: skip
