"""The metrics API: agents push usage samples, people and controllers read current usage.

Under ``/apis/metrics.quaymaster.io/v1``, shaped like Kubernetes' ``metrics.k8s.io``:

* ``POST nodes/{name}/samples`` -- an agent's ``NodeUsageSample`` (its pods' CPU in millicores
  and memory in bytes, per container too). Validated field by field (422 ``Invalid`` naming
  every bad field), the node must exist (a lookup in this server's watch cache, no query), and
  recorded in the usage store in Redis (``app.store.usage``), never in PostgreSQL. Answers 201
  with a ``Status``.
* ``GET nodes``, ``GET nodes/{name}`` -- ``NodeMetrics``: the node's latest fresh figures.
* ``GET pods``, ``GET namespaces/{ns}/pods``, ``GET namespaces/{ns}/pods/{name}`` --
  ``PodMetrics`` with per-container figures.

The Redis URL is ``QM_USAGE_REDIS_URL``, else a ``redis://`` ``QM_BROKER_URL`` (the dev stack's one
Redis); with neither (or ``QM_USAGE_REDIS_URL`` set empty) every route answers 503, the rest of the
API is unaffected. Same authentication and fair-share slots as every other route.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import redis.asyncio as aioredis
from litestar import Litestar, Request, Response, get, post
from litestar.handlers import HTTPRouteHandler
from redis.exceptions import RedisError

from app.api import authz
from app.api.responses import json_response
from app.api.routes import guarded
from app.api.service import Objects
from app.api.usage_schema import GROUP_VERSION, parse_sample
from app.core import errors
from app.core.authz import Attributes
from app.core.authz.builtin import METRICS_GROUP
from app.core.kinds import BY_KIND
from app.store.tokens import User
from app.store.usage import NodeSample, PodUsage, UsageStore

PREFIX = f"/apis/{GROUP_VERSION}"
NODE = BY_KIND["Node"]
TAGS = ["Metrics"]


def redis_url(env: Mapping[str, str] = os.environ) -> str | None:
    explicit = env.get("QM_USAGE_REDIS_URL")
    if explicit is not None:
        return explicit or None
    broker = env.get("QM_BROKER_URL", "")
    return broker if broker.startswith(("redis://", "rediss://", "unix://")) else None


@contextlib.asynccontextmanager
async def usage_lifespan(app: Litestar) -> AsyncIterator[None]:
    """Opens the usage store's Redis client (lazily connected) for the server's lifetime."""
    url = redis_url()
    client = aioredis.Redis.from_url(url) if url else None
    app.state.usage = UsageStore(client) if client is not None else None
    try:
        yield
    finally:
        if client is not None:
            await client.aclose()


def store_of(request: Request[Any, Any, Any]) -> UsageStore:
    return _store(request.app.state)


def _store(state: Any) -> UsageStore:
    store: UsageStore | None = getattr(state, "usage", None)
    if store is None:
        raise errors.ServiceUnavailable(
            "resource usage is not configured on this server (set QM_USAGE_REDIS_URL)"
        )
    return store


async def record_sample(state: Any, name: str, body: bytes) -> dict[str, Any]:
    """What ``POST nodes/{name}/samples`` does, for the route and for the fast path
    (``app.api.fastpath``): validate, check the node in the watch cache, record; the
    answer's body. Raises ``StatusError``."""
    store = _store(state)
    sample = parse_sample(body, name, time.time(), store.retention_s)
    objects: Objects = state.objects
    objects.get(NODE, "", name)  # 404 for an unknown node; a watch-cache read, no query
    try:
        await store.record(sample)
    except RedisError as exc:
        raise errors.ServiceUnavailable(f"the usage store is unreachable: {exc}") from exc
    return _recorded(name)


def rfc3339(at: float) -> str:
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def usage_of(cpu_millis: int, memory_bytes: int) -> dict[str, str]:
    """Kubernetes' metrics spelling: millicores and whole kibibytes."""
    return {"cpu": f"{cpu_millis}m", "memory": f"{memory_bytes // 1024}Ki"}


def window(seconds: float) -> str:
    return f"{seconds:g}s"


def node_metrics(s: NodeSample) -> dict[str, Any]:
    return {
        "kind": "NodeMetrics",
        "apiVersion": GROUP_VERSION,
        "metadata": {"name": s.node, "creationTimestamp": rfc3339(s.at)},
        "timestamp": rfc3339(s.at),
        "window": window(s.window_s),
        "usage": usage_of(s.cpu_millis, s.memory_bytes),
        "pods": len(s.pods),
    }


def pod_metrics(p: PodUsage) -> dict[str, Any]:
    return {
        "kind": "PodMetrics",
        "apiVersion": GROUP_VERSION,
        "metadata": {
            "name": p.name,
            "namespace": p.namespace,
            "uid": p.uid,
            "creationTimestamp": rfc3339(p.at),
        },
        "timestamp": rfc3339(p.at),
        "window": window(p.window_s),
        "node": p.node,
        "priority": p.priority,
        "usage": usage_of(p.cpu_millis, p.memory_bytes),
        "containers": [
            {"name": c.name, "usage": usage_of(c.cpu_millis, c.memory_bytes)} for c in p.containers
        ],
    }


def metrics_list(kind: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"kind": kind, "apiVersion": GROUP_VERSION, "metadata": {}, "items": items}


def _recorded(node: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "code": 201, "details": {"name": node, "kind": "nodes"}}  # fmt: skip


async def _with_store(
    request: Request[Any, Any, Any], fn: Callable[[UsageStore], Awaitable[Any]],
    attrs: Attributes | None = None,
) -> Response[Any]:  # fmt: skip
    async def run(user: User) -> Response[Any]:
        try:
            return json_response(await fn(store_of(request)))
        except RedisError as exc:
            raise errors.ServiceUnavailable(f"the usage store is unreachable: {exc}") from exc

    return await guarded(request, run, attrs=attrs)


@post(
    f"{PREFIX}/nodes/{{name:str}}/samples",
    operation_id="createNodeUsageSample",
    tags=TAGS,
    summary="Record a node agent's usage sample (best effort, kept in Redis)",
    status_code=201,
)
async def create_sample(request: Request[Any, Any, Any], name: str) -> Response[Any]:
    """Answered by ``app.api.fastpath`` as a rule; registered here for OpenAPI and as the
    fallback."""

    async def run(user: User) -> Response[Any]:
        return json_response(
            await record_sample(request.app.state, name, await request.body()), 201
        )

    return await guarded(request, run, attrs=sample_attributes(name))


def sample_attributes(node: str) -> Attributes:
    """A usage sample is a ``create`` of ``nodes/samples`` in the metrics group."""
    return Attributes("create", "nodes", "", node, "samples", METRICS_GROUP)


@get(f"{PREFIX}/nodes", operation_id="listNodeMetrics", tags=TAGS, summary="Usage of every node")
async def list_nodes(request: Request[Any, Any, Any]) -> Response[Any]:
    async def read(store: UsageStore) -> dict[str, Any]:
        items = [node_metrics(s) for s in await store.latest_nodes()]
        return metrics_list("NodeMetricsList", items)

    return await _with_store(request, read, Attributes("list", "nodes", group=METRICS_GROUP))


@get(f"{PREFIX}/nodes/{{name:str}}", operation_id="readNodeMetrics", tags=TAGS,
     summary="Usage of one node")  # fmt: skip
async def read_node(request: Request[Any, Any, Any], name: str) -> Response[Any]:
    async def read(store: UsageStore) -> dict[str, Any]:
        sample = await store.latest(name)
        if sample is None:
            raise errors.NotFound(f'nodemetrics "{name}" not found', kind="nodes", name=name)
        return node_metrics(sample)

    attrs = Attributes("get", "nodes", "", name, group=METRICS_GROUP)
    return await _with_store(request, read, attrs)


@get(f"{PREFIX}/pods", operation_id="listPodMetricsForAllNamespaces", tags=TAGS,
     summary="Usage of every pod")  # fmt: skip
async def list_all_pods(request: Request[Any, Any, Any]) -> Response[Any]:
    async def read(store: UsageStore) -> dict[str, Any]:
        pods = [p for p in await store.pods(None) if authz.in_reach(request, p.namespace)]
        return metrics_list("PodMetricsList", [pod_metrics(p) for p in pods])

    return await _with_store(request, read, Attributes("list", "pods", group=METRICS_GROUP))


@get(f"{PREFIX}/namespaces/{{namespace:str}}/pods", operation_id="listPodMetrics", tags=TAGS,
     summary="Usage of a namespace's pods")  # fmt: skip
async def list_pods(request: Request[Any, Any, Any], namespace: str) -> Response[Any]:
    async def read(store: UsageStore) -> dict[str, Any]:
        reach = authz.in_reach(request, namespace)  # else answered as a missing namespace
        items = [pod_metrics(p) for p in await store.pods(namespace) if reach]
        return metrics_list("PodMetricsList", items)

    attrs = Attributes("list", "pods", namespace, group=METRICS_GROUP)
    return await _with_store(request, read, attrs)


@get(f"{PREFIX}/namespaces/{{namespace:str}}/pods/{{name:str}}", operation_id="readPodMetrics",
     tags=TAGS, summary="Usage of one pod")  # fmt: skip
async def read_pod(request: Request[Any, Any, Any], namespace: str, name: str) -> Response[Any]:
    async def read(store: UsageStore) -> dict[str, Any]:
        pod = await store.pod(namespace, name)
        if pod is None or not authz.in_reach(request, namespace):
            raise errors.NotFound(f'podmetrics "{name}" not found', kind="pods", name=name)
        return pod_metrics(pod)

    attrs = Attributes("get", "pods", namespace, name, group=METRICS_GROUP)
    return await _with_store(request, read, attrs)


HANDLERS: list[HTTPRouteHandler] = [
    create_sample, list_nodes, read_node, list_all_pods, list_pods, read_pod,
]  # fmt: skip
