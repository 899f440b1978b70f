"""Route handlers for every kind, generated from the kind registry.

Each kind gets the Kubernetes set of paths (collection, item, status subresource, and an
all-namespaces list for namespaced kinds); every handler is a thin shell over ``Objects``.
Handlers are generated so that OpenAPI lists each path with its own operation id.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from litestar import Request, Response, delete, get, patch, post, put
from litestar.handlers import HTTPRouteHandler
from litestar.response import Stream

from app.api import fairness, secret_view, tables, watch, watchlist
from app.api.auth import Authenticator
from app.api.authz import authorize_request
from app.api.dry_run import wants_dry_run
from app.api.responses import (
    error_response,
    json_response,
    list_body,
    raw_response,
    success_status,
)
from app.api.service import Objects, decode_body
from app.core import errors
from app.core.authz import Attributes
from app.core.authz import node as node_authz
from app.core.kinds import API_VERSION, KINDS, Kind
from app.store.tokens import User
from app.stream.cache import Matcher, Watcher

PREFIX = f"/apis/{API_VERSION}"
Handler = Callable[[User], Awaitable[Response[Any]]]
T = TypeVar("T")


async def as_user(
    auth: Authenticator, authorization: str | None, fn: Callable[[User], Awaitable[T]],
    count: bool = True,
) -> T:  # fmt: skip
    """Authenticate, wait for the user's fair share of seats (:mod:`app.api.fairness`), run.
    ``count`` false marks a long-running request (a watch, a follow): one seat while it starts."""
    user = await auth.user_for(authorization)
    async with fairness.seat(user, long_running=not count):
        return await fn(user)


async def guarded(
    request: Request[Any, Any, Any], fn: Handler, count: bool = True,
    attrs: Attributes | None = None,
) -> Response[Any]:  # fmt: skip
    """:func:`as_user`, with the request authorised for ``attrs`` first (``app.api.authz``:
    allowed, answered as if its namespace did not exist, or 403), errors mapped to Status."""

    async def run(user: User) -> Response[Any]:
        if attrs is not None:
            authorize_request(request, user, attrs)
        return await fn(user)

    try:
        return await as_user(
            request.app.state.auth, request.headers.get("authorization"), run, count
        )
    except errors.StatusError as exc:
        return error_response(exc)


def _objects(request: Request[Any, Any, Any]) -> Objects:
    """The server's objects, as this request's principal may see them (``app.api.authz``)."""
    objects: Objects = getattr(request.state, "objects", None) or request.app.state.objects
    return objects


def _in_reach(
    request: Request[Any, Any, Any], kind: Kind, fields: Matcher | None
) -> Matcher | None:
    """A watch's field matcher, narrowed to the namespaces its principal may watch (checked
    per event, so RBAC changes apply to open watches)."""
    allowed = getattr(request.state, "namespace_filter", None)
    if allowed is None:
        return fields
    key = "metadata.name" if kind.kind == "Namespace" else "metadata.namespace"
    return lambda f: allowed(f.get(key, "")) and (fields is None or fields(f))


def _reading(request: Request[Any, Any, Any]) -> str:
    return "watch" if _truthy(request.query_params.get("watch")) else "list"


def _int_param(request: Request[Any, Any, Any], name: str) -> int | None:
    value = request.query_params.get(name)
    if value in (None, ""):
        return None
    try:
        n = int(value)
    except ValueError as exc:
        raise errors.BadRequest(f"{name} must be an integer, got {value!r}") from exc
    if n < 0:
        raise errors.BadRequest(f"{name} must not be negative")
    return n


def _truthy(value: str | None) -> bool:
    return value not in (None, "", "0", "false", "False")


async def _list_or_watch(
    request: Request[Any, Any, Any], kind: Kind, namespace: str | None, user: User
) -> Response[Any]:
    objects = _objects(request)
    q = request.query_params
    refusal = node_authz.selector_refusal(user, kind.plural, q.get("fieldSelector"))
    if refusal is not None:  # a node lists and watches only its own pods
        raise errors.Forbidden(refusal, kind=kind.plural)
    if _truthy(q.get("watch")):
        labels, fields = objects.matchers(kind, q.get("labelSelector"), q.get("fieldSelector"))
        w = Watcher(kind, namespace, labels, _in_reach(request, kind, fields))
        rv = q.get("resourceVersion")
        since = None if rv in (None, "", "0") else int(rv) if rv.isdigit() else None
        if rv not in (None, "", "0") and since is None:
            raise errors.BadRequest(f"invalid resourceVersion {rv!r}")
        timeout = _int_param(request, "timeoutSeconds")
        if since is not None and since > objects.cache.revision:
            await objects.cache.wait_revision(since)
        initial = watchlist.wants_initial_events(q)  # client-go's watch-list
        objects.cache.watch(w, None if initial else since)  # last: it must reach the stream
        first = watchlist.initial_events(objects.cache, kind, w) if initial else b""
        gen = watch.stream(
            objects.cache,
            w,
            _truthy(q.get("allowWatchBookmarks")),
            float(timeout) if timeout else None,
            kind,
        )
        if first:
            gen = watchlist.prepend(first, gen)
        gen = secret_view.reveal_stream(request.app.state, user, kind, gen)
        if (ask := tables.table_request(request)) is not None:  # kubectl get -w
            gen = tables.table_stream(kind, ask, gen)
        return Stream(
            gen,
            media_type="application/json",
            headers={"Cache-Control": "no-cache", "Transfer-Encoding": "chunked"},
        )
    items, revision, cont = await objects.list(
        kind,
        namespace,
        label_selector=q.get("labelSelector"),
        field_selector=q.get("fieldSelector"),
        limit=_int_param(request, "limit"),
        cont=q.get("continue"),
        resource_version=q.get("resourceVersion"),
    )
    items = secret_view.reveal_all(request.app.state, user, kind, items)
    if (ask := tables.table_request(request)) is not None:  # kubectl get: the server prints
        return tables.list_response(kind, ask, items, revision, cont)
    return raw_response(list_body(kind, items, revision, cont))


def _delete_options(request: Request[Any, Any, Any], body: bytes) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if body.strip():
        parsed = decode_body(body)
        if not isinstance(parsed, dict):
            raise errors.BadRequest("DeleteOptions must be a JSON object")
        options.update(parsed)
    q = request.query_params
    if q.get("propagationPolicy"):
        options["propagationPolicy"] = q["propagationPolicy"]
    grace = _int_param(request, "gracePeriodSeconds")
    if grace is not None:
        options["gracePeriodSeconds"] = grace
    return options


def kind_handlers(kind: Kind) -> list[HTTPRouteHandler]:
    """All route handlers of one kind."""
    tag = [kind.kind]
    op = kind.kind
    if kind.namespaced:
        coll = f"{PREFIX}/namespaces/{{namespace:str}}/{kind.plural}"
    else:
        coll = f"{PREFIX}/{kind.plural}"
    item = coll + "/{name:str}"
    handlers: list[HTTPRouteHandler] = []

    def ns_of(request: Request[Any, Any, Any]) -> str:
        return str(request.path_params.get("namespace", "")) if kind.namespaced else ""

    def attrs(
        request: Request[Any, Any, Any], verb: str, name: str = "", sub: str = ""
    ) -> Attributes:
        """The request's attributes; a Namespace is authorised within itself, as Kubernetes
        does, so a RoleBinding there may grant reading it."""
        ns = name if kind.kind == "Namespace" else ns_of(request)
        return Attributes(verb, kind.plural, ns, name, sub)

    @get(coll, operation_id=f"list{op}", tags=tag, summary=f"List or watch {kind.plural}")
    async def list_(request: Request[Any, Any, Any]) -> Response[Any]:
        async def run(user: User) -> Response[Any]:
            return await _list_or_watch(
                request, kind, ns_of(request) if kind.namespaced else None, user
            )

        return await guarded(
            request,
            run,
            count=not _truthy(request.query_params.get("watch")),
            attrs=attrs(request, _reading(request)),
        )

    @post(
        coll, operation_id=f"create{op}", tags=tag, summary=f"Create a {kind.kind}", status_code=201
    )
    async def create(request: Request[Any, Any, Any]) -> Response[Any]:
        async def run(user: User) -> Response[Any]:
            c = await _objects(request).create(
                kind, ns_of(request), await request.body(), user, wants_dry_run(request)
            )
            return raw_response(secret_view.reveal(request.app.state, user, kind, c.raw), 201)

        return await guarded(request, run, attrs=Attributes("create", kind.plural, ns_of(request)))

    @get(item, operation_id=f"read{op}", tags=tag, summary=f"Read a {kind.kind}")
    async def read(request: Request[Any, Any, Any], name: str) -> Response[Any]:
        async def run(user: User) -> Response[Any]:
            c = _objects(request).get(kind, ns_of(request), name)
            raw = secret_view.reveal(request.app.state, user, kind, c.raw)
            return tables.object_response(request, kind, raw)

        return await guarded(request, run, attrs=attrs(request, "get", name))

    def writer(status: bool, path: str, suffix: str) -> list[HTTPRouteHandler]:
        @put(
            path,
            operation_id=f"replace{op}{suffix}",
            tags=tag,
            summary=f"Replace a {kind.kind}{' status' if status else ''}",
        )
        async def replace(request: Request[Any, Any, Any], name: str) -> Response[Any]:
            async def run(user: User) -> Response[Any]:
                c = await _objects(request).replace(
                    kind, ns_of(request), name, await request.body(), user, status,
                    wants_dry_run(request),
                )  # fmt: skip
                return raw_response(secret_view.reveal(request.app.state, user, kind, c.raw))

            return await guarded(
                request, run, attrs=attrs(request, "update", name, "status" if status else "")
            )

        @patch(
            path,
            operation_id=f"patch{op}{suffix}",
            tags=tag,
            summary=f"Patch a {kind.kind}{' status' if status else ''} (merge or JSON patch)",
        )
        async def patch_(request: Request[Any, Any, Any], name: str) -> Response[Any]:
            async def run(user: User) -> Response[Any]:
                c = await _objects(request).patch(
                    kind,
                    ns_of(request),
                    name,
                    await request.body(),
                    request.headers.get("content-type", ""),
                    user,
                    status,
                    wants_dry_run(request),
                )
                return raw_response(secret_view.reveal(request.app.state, user, kind, c.raw))

            return await guarded(
                request, run, attrs=attrs(request, "patch", name, "status" if status else "")
            )

        return [replace, patch_]

    @delete(
        item, operation_id=f"delete{op}", tags=tag, summary=f"Delete a {kind.kind}", status_code=200
    )
    async def remove(request: Request[Any, Any, Any], name: str) -> Response[Any]:
        async def run(user: User) -> Response[Any]:
            options = _delete_options(request, await request.body())
            c, uid = await _objects(request).delete(
                kind, ns_of(request), name, options, user, wants_dry_run(request, options)
            )
            if c is None:
                return json_response(success_status(kind, name, uid))
            return raw_response(secret_view.reveal(request.app.state, user, kind, c.raw))

        return await guarded(request, run, attrs=attrs(request, "delete", name))

    handlers += [list_, create, read, remove, *writer(False, item, "")]
    if kind.has_status:

        @get(
            item + "/status",
            operation_id=f"read{op}Status",
            tags=tag,
            summary=f"Read a {kind.kind}'s status",
        )
        async def read_status(request: Request[Any, Any, Any], name: str) -> Response[Any]:
            async def run(user: User) -> Response[Any]:
                return raw_response(_objects(request).get(kind, ns_of(request), name).raw)

            return await guarded(request, run, attrs=attrs(request, "get", name, "status"))

        handlers += [read_status, *writer(True, item + "/status", "Status")]
    if kind.namespaced:

        @get(
            f"{PREFIX}/{kind.plural}",
            operation_id=f"list{op}ForAllNamespaces",
            tags=tag,
            summary=f"List or watch {kind.plural} in all namespaces",
        )
        async def list_all(request: Request[Any, Any, Any]) -> Response[Any]:
            async def run(user: User) -> Response[Any]:
                return await _list_or_watch(request, kind, None, user)

            return await guarded(
                request,
                run,
                count=not _truthy(request.query_params.get("watch")),
                attrs=Attributes(_reading(request), kind.plural),
            )

        handlers.append(list_all)
    return handlers


def all_handlers() -> list[HTTPRouteHandler]:
    return [h for k in KINDS for h in kind_handlers(k)]
