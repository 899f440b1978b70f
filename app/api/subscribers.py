"""Every discovery subscriber's acknowledged version and lag, through the API (ADR 0038).

``GET /apis/discovery.quaymaster.io/v1/subscribers`` asks each discovery replica named in
``QM_DISCOVERY_HTTP`` (comma-separated base URLs, the same setting the node agents read) for its
``/v1/subscribers`` at once and answers one list: each node proxy and edge balancer with the
replica it is connected to, the version it acknowledged, and how far and how long it lags. A
replica that does not answer is listed under ``replicas`` with its error rather than failing
the request, so an operator sees which part of the tier is away.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

import httpx
from litestar import Request, Response, get
from litestar.handlers import HTTPRouteHandler

from app.api.responses import json_response
from app.api.routes import guarded
from app.core.authz import Attributes
from app.core.kinds import GROUP, VERSION
from app.store.tokens import User

DISCOVERY_GROUP = f"discovery.{GROUP}"
GROUP_VERSION = f"{DISCOVERY_GROUP}/{VERSION}"
TIMEOUT = 2.0


def replicas(env: Mapping[str, str] = os.environ) -> list[str]:
    return [u.strip().rstrip("/") for u in env.get("QM_DISCOVERY_HTTP", "").split(",") if u.strip()]


def subscriber(replica: str, raw: dict[str, Any]) -> dict[str, Any]:
    """One replica's entry as the API shows it."""
    return {
        "metadata": {"name": raw.get("id", "")},
        "replica": replica,
        "node": raw.get("node", ""),
        "zone": raw.get("zone", ""),
        "scope": raw.get("scope", ""),
        "ackedVersion": raw.get("acked"),
        "sentVersion": raw.get("sent"),
        "lagVersions": raw.get("lag_versions"),
        "lagSeconds": raw.get("lag_seconds"),
        "connectedSeconds": raw.get("connected_seconds"),
        "nacks": raw.get("nacks"),
    }


async def _ask(client: httpx.AsyncClient, url: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    try:
        answer = await client.get(f"{url}/v1/subscribers")
        answer.raise_for_status()
        body = answer.json()
    except (httpx.HTTPError, ValueError) as exc:
        return {"url": url, "error": f"{type(exc).__name__}: {exc}"}, []
    items = [subscriber(url, raw) for raw in body.get("subscribers") or []]
    return {"url": url, "version": body.get("version"), "subscribers": len(items)}, items


async def gather(urls: list[str]) -> dict[str, Any]:
    """The merged list from every replica."""
    async with httpx.AsyncClient(timeout=TIMEOUT) as client:
        answers = await asyncio.gather(*(_ask(client, url) for url in urls))
    items = sorted(
        (item for _, found in answers for item in found), key=lambda i: i["metadata"]["name"]
    )
    return {
        "kind": "SubscriberList",
        "apiVersion": GROUP_VERSION,
        "metadata": {},
        "replicas": [replica for replica, _ in answers],
        "items": items,
    }


@get(
    f"/apis/{GROUP_VERSION}/subscribers",
    operation_id="listDiscoverySubscribers",
    tags=["Discovery"],
    summary="Every discovery subscriber's acknowledged version and lag",
)
async def list_subscribers(request: Request[Any, Any, Any]) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        return json_response(await gather(replicas()))

    group = GROUP_VERSION.split("/")[0]
    return await guarded(request, run, attrs=Attributes("list", "subscribers", group=group))


HANDLERS: list[HTTPRouteHandler] = [list_subscribers]
