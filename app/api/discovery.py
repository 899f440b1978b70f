"""Discovery, version, health and metrics endpoints (the unauthenticated ones except /apis)."""

from __future__ import annotations

import platform
import sys
from typing import Any

from litestar import Request, Response, get

from app import __version__
from app.api.fairness import metric_lines
from app.api.pool_metrics import metric_lines as pgbouncer_lines
from app.api.responses import json_response
from app.api.routes import guarded
from app.core.kinds import API_VERSION, GROUP, KINDS, VERSION
from app.core.scale import SCALED
from app.store.backup import metric_lines as archive_metric_lines
from app.store.history import metric_lines as history_metric_lines
from app.store.tokens import User

VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]
METRICS_GROUP = f"metrics.{GROUP}"  # usage figures, served from the usage store (ADR 0020)
# What ``kubectl get all`` lists, as Kubernetes' ``all`` category (workloads and services).
CATEGORY_ALL = ("Pod", "Service", "Deployment", "ReplicaSet", "Job", "CronJob")
POD_SUBRESOURCES = (("pods/log", ["get"]), ("pods/eviction", ["create"]))


def group(name: str = GROUP) -> dict[str, Any]:
    gv = {"groupVersion": f"{name}/{VERSION}", "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": [gv],
        "preferredVersion": gv,
    }


def metrics_resources() -> dict[str, Any]:
    items = [
        {"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics"},
        {"name": "pods", "singularName": "", "namespaced": True, "kind": "PodMetrics"},
    ]
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{METRICS_GROUP}/{VERSION}",
        "resources": [{**item, "verbs": ["get", "list"]} for item in items],
    }


def resources() -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for k in KINDS:
        items.append(
            {
                "name": k.plural,
                "singularName": k.singular,
                "namespaced": k.namespaced,
                "kind": k.kind,
                "verbs": VERBS,
                "shortNames": list(k.short_names),
            }
            | ({"categories": ["all"]} if k.kind in CATEGORY_ALL else {})
        )
        if k.has_status:
            items.append(
                {
                    "name": f"{k.plural}/status",
                    "singularName": "",
                    "namespaced": k.namespaced,
                    "kind": k.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if k.kind in SCALED:  # kubectl scale finds Scale's group and version here
            items.append(
                {"name": f"{k.plural}/scale", "singularName": "", "namespaced": True}
                | {"group": "autoscaling", "version": "v1", "kind": "Scale"}
                | {"verbs": ["get", "patch", "update"]}
            )
        if k.kind == "Pod":
            for name, verbs in POD_SUBRESOURCES:
                items.append(
                    {"name": name, "singularName": "", "namespaced": True, "kind": k.kind}
                    | {"verbs": verbs}
                )
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": API_VERSION,
        "resources": items,
    }


@get("/apis", operation_id="getAPIGroups", tags=["discovery"])
async def apis(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        groups = [group(), group(METRICS_GROUP)]
        # The access reviews (app.api.reviews), also where kubectl posts them.
        groups += [group(f"authorization.{GROUP}"), group("authorization.k8s.io")]
        groups.append(group(f"audit.{GROUP}"))  # the change history (app.api.history)
        return json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})

    return await guarded(request, run)


@get(f"/apis/{GROUP}", operation_id="getAPIGroup", tags=["discovery"])
async def api_group(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        return json_response(group())

    return await guarded(request, run)


@get(f"/apis/{API_VERSION}", operation_id="getAPIResources", tags=["discovery"])
async def api_resources(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        return json_response(resources())

    return await guarded(request, run)


@get(f"/apis/{METRICS_GROUP}", operation_id="getMetricsAPIGroup", tags=["discovery"])
async def metrics_group(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        return json_response(group(METRICS_GROUP))

    return await guarded(request, run)


@get(f"/apis/{METRICS_GROUP}/{VERSION}", operation_id="getMetricsAPIResources", tags=["discovery"])
async def metrics_api_resources(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        return json_response(metrics_resources())

    return await guarded(request, run)


@get("/version", operation_id="getVersion", tags=["discovery"])
async def version() -> Response[Any]:
    major, minor, *_ = __version__.split(".")
    return json_response(
        {
            "major": major,
            "minor": minor,
            "gitVersion": f"v{__version__}",
            "platform": f"{platform.system().lower()}/{platform.machine()}",
            "pythonVersion": sys.version.split()[0],
        }
    )


@get("/healthz", operation_id="getHealth", tags=["health"], media_type="text/plain")
async def healthz() -> str:
    return "ok"


@get("/livez", operation_id="getLive", tags=["health"], media_type="text/plain")
async def livez() -> str:
    return "ok"


@get("/readyz", operation_id="getReady", tags=["health"], media_type="text/plain")
async def readyz(request: Request[Any, Any, Any]) -> Response[str]:
    ready = request.app.state.objects.cache.ready.is_set()
    return Response(
        "ok" if ready else "watch cache loading",
        status_code=200 if ready else 503,
        media_type="text/plain",
    )


@get("/metrics", operation_id="getMetrics", tags=["health"], media_type="text/plain")
async def metrics(request: Request[Any, Any, Any]) -> str:
    state = request.app.state
    cache = state.objects.cache
    lines = [
        "# TYPE qm_watch_cache_revision gauge",
        f"qm_watch_cache_revision {cache.revision}",
        "# TYPE qm_watch_cache_window_floor gauge",
        f"qm_watch_cache_window_floor {cache.window_floor}",
        "# TYPE qm_watch_cache_watchers gauge",
        f"qm_watch_cache_watchers {len(cache.watchers)}",
        "# TYPE qm_revisioner_child_alive gauge",
        f"qm_revisioner_child_alive {int(state.revisioner.alive())}",
        "# TYPE qm_watch_cache_objects gauge",
    ]
    for k in KINDS:
        lines.append(f'qm_watch_cache_objects{{kind="{k.kind}"}} {len(cache.objects[k.kind])}')
    lines += metric_lines(state.get("fairness"))
    lines += await pgbouncer_lines()  # when QM_PGBOUNCER_ADMIN_URL is set (ADR 0057)
    lines += await history_metric_lines(state.objects.store.pool)  # ADR 0052
    lines += await archive_metric_lines(state.objects.store.pool)  # ADR 0058
    return "\n".join(lines) + "\n"


HANDLERS = [
    apis,
    api_group,
    api_resources,
    metrics_group,
    metrics_api_resources,
    version,
    healthz,
    livez,
    readyz,
    metrics,
]
