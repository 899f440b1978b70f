"""The API server's composition root: pools, cache, revisioner and routes wired together."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

from litestar import Litestar, Request, Response
from litestar.exceptions import HTTPException

from app.api.auth import Authenticator
from app.api.authz import RBAC, Authorization, escalation_guard
from app.api.background import RevisionerProcess, housekeeping
from app.api.core_events import HANDLERS as CORE_EVENT_HANDLERS
from app.api.discovery import HANDLERS
from app.api.eviction import HANDLERS as EVICTION_HANDLERS
from app.api.fairness import FairShare, fairness_lifespan
from app.api.fastpath import FastWrites
from app.api.history import HANDLERS as HISTORY_HANDLERS
from app.api.logs import HANDLERS as LOG_HANDLERS
from app.api.nodeauth import HANDLERS as NODE_AUTH_HANDLERS
from app.api.nodeauth import credential_lifespan
from app.api.openapi import HANDLERS as OPENAPI_HANDLERS
from app.api.request_context import RequestContext
from app.api.responses import error_response
from app.api.reviews import HANDLERS as REVIEW_HANDLERS
from app.api.routes import all_handlers
from app.api.scale import HANDLERS as SCALE_HANDLERS
from app.api.secrets import HANDLERS as SECRET_KEY_HANDLERS
from app.api.secrets import secrets_lifespan
from app.api.service import Objects
from app.api.subscribers import HANDLERS as SUBSCRIBER_HANDLERS
from app.api.tokens import HANDLERS as TOKEN_HANDLERS
from app.api.ui import HANDLERS as UI_HANDLERS
from app.api.usage import HANDLERS as USAGE_HANDLERS
from app.api.usage import usage_lifespan
from app.api.warning_headers import WarningHeaders
from app.core import collector, errors
from app.core.audit import system
from app.core.kinds import BY_KIND
from app.store.db import create_pool, database_url, stream_database_url
from app.store.service_range import apply_range
from app.store.store import Store
from app.store.tokens import ensure_token
from app.stream.cache import WatchCache
from app.stream.summary import ClusterSummary

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def lifespan(app: Litestar) -> AsyncIterator[None]:
    # No session state outlives a request (the housekeeping lock and the cache's LISTEN live on
    # connections of their own), so released connections skip the reset round trip.
    pool = await create_pool(
        database_url(),
        max_size=int(os.environ.get("QM_DB_POOL", "20")),
        reset_sessions=False,
    )
    token = os.environ.get("QM_BOOTSTRAP_TOKEN")
    if token:
        await ensure_token(pool, token)
    service_cidr = os.environ.get("QM_SERVICE_CIDR")
    if service_cidr and await apply_range(pool, service_cidr):
        log.warning("the services' virtual IP range is now %s", service_cidr)
    cache = WatchCache(
        window=int(os.environ.get("QM_WATCH_WINDOW", "100000")),
        window_bytes=int(os.environ.get("QM_WATCH_WINDOW_MB", "256")) * 2**20,
    )
    revisioner = RevisionerProcess()
    revisioner.start()
    await cache.start(stream_database_url())
    store = Store(pool, group_commit=True)
    app.state.objects = Objects(store, cache)
    app.state.authz = Authorization(RBAC(cache))  # others append to .chain
    app.state.authz.rbac.current()  # the policy built before the first request, not in it
    app.state.objects.guards.append(escalation_guard(app.state.authz))
    app.state.auth = Authenticator(pool)
    app.state.revisioner = revisioner
    await _ensure_default_namespace(store, cache)
    keeper = asyncio.create_task(housekeeping(store, stream_database_url(), revisioner))
    # The cache holds the cluster: keep full collections from walking it (app.core.collector).
    collector.settle()
    young = asyncio.create_task(collector.keep_collections_young())
    # Revoked tokens stop working here as soon as this server's cache shows the change.
    follower = asyncio.create_task(app.state.auth.follow(cache))
    # Node and pod totals for the web UI's overview, kept current from the cache.
    app.state.summary = ClusterSummary(cache)
    app.state.summary.start()
    try:
        yield
    finally:
        await app.state.summary.stop()
        for task in (keeper, young, follower):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await store.close()
        await cache.stop()
        await asyncio.get_running_loop().run_in_executor(None, revisioner.close)
        await pool.close()


async def _ensure_default_namespace(store: Store, cache: WatchCache) -> None:
    """Clusters start with a ``default`` namespace, as Kubernetes users expect. The server
    starts serving only once its cache shows it, so a first ``qm get namespaces`` lists it."""
    with contextlib.suppress(errors.AlreadyExists):
        stored = await store.create(
            BY_KIND["Namespace"],
            {"metadata": {"name": "default"}, "status": {"phase": "Active"}},
            system("system:apiserver", reason="clusters start with a default namespace"),
        )
        await cache.wait_for(stored.uid, stored.row_version)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    code = exc.status_code
    cls = {
        404: errors.NotFound,
        405: errors.MethodNotAllowed,
        413: errors.RequestEntityTooLarge,
        401: errors.Unauthorized,
        429: errors.TooManyRequests,
    }.get(code, errors.BadRequest)
    err = cls(str(exc.detail))
    err.code = code
    return error_response(err)


def _status_error(request: Request[Any, Any, Any], exc: errors.StatusError) -> Response[Any]:
    return error_response(exc)


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(errors.StatusError(f"internal error: {type(exc).__name__}"))


def create_app() -> RequestContext:
    """The Litestar app, behind the fast path for object ``PUT``s (:mod:`app.api.fastpath`),
    behind flow control's view of each request (:mod:`app.api.fairness`), behind the
    ``Warning`` headers every response may carry (:mod:`app.api.warning_headers`), behind
    each request's write context (:mod:`app.api.request_context`)."""
    litestar = create_litestar()
    outer = RequestContext(WarningHeaders(FairShare(FastWrites(litestar), litestar)))
    litestar.state.asgi = outer  # the web UI calls the REST API through the whole stack
    return outer


def create_litestar() -> Litestar:
    return Litestar(
        route_handlers=[
            *HANDLERS,
            *all_handlers(),
            *EVICTION_HANDLERS,
            *USAGE_HANDLERS,
            *LOG_HANDLERS,
            *SCALE_HANDLERS,
            *CORE_EVENT_HANDLERS,
            *NODE_AUTH_HANDLERS,
            *SUBSCRIBER_HANDLERS,
            *REVIEW_HANDLERS,
            *TOKEN_HANDLERS,
            *SECRET_KEY_HANDLERS,
            *HISTORY_HANDLERS,
            *OPENAPI_HANDLERS,
            *UI_HANDLERS,
        ],
        lifespan=[
            lifespan,
            usage_lifespan,
            fairness_lifespan,
            credential_lifespan,
            secrets_lifespan,
        ],
        exception_handlers={
            errors.StatusError: _status_error,
            HTTPException: _http_error,
            Exception: _unexpected,
        },
        openapi_config=None,  # app.api.openapi serves the document
        request_max_body_size=8 * 1024 * 1024,
    )
