"""The eviction subresource and node drains over HTTP.

``POST .../namespaces/{ns}/pods/{name}/eviction`` validates an ``Eviction`` body and evicts the
pod under its disruption budget (``app.store.eviction``): 201 when evicted, 200 when the pod was
already terminating, 429 ``TooManyRequests`` naming the budget when refused.

``POST .../nodes/{name}/drain`` cordons the node and makes one pass over its pods, evicting
each through the same path, and answers a ``DrainStatus`` report; clients (``qm drain``) call it
again until ``done``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from litestar import Request, Response, post
from litestar.handlers import HTTPRouteHandler

from app.api import authz
from app.api.request_context import write_context
from app.api.responses import json_response
from app.api.routes import PREFIX, guarded
from app.api.service import MERGE, Objects, decode_body
from app.core import errors
from app.core.authz import Attributes
from app.core.disruption import REFUSED
from app.core.errors import Cause
from app.core.kinds import API_VERSION, BY_KIND
from app.store.eviction import Outcome, evict, pods_on_node
from app.store.store import PROPAGATIONS
from app.store.tokens import User

POD = BY_KIND["Pod"]
NODE = BY_KIND["Node"]
API_VERSIONS = (API_VERSION, "policy/v1")
TOP_LEVEL = ("apiVersion", "kind", "metadata", "deleteOptions")
OPTION_KEYS = (
    "apiVersion",
    "kind",
    "gracePeriodSeconds",
    "preconditions",
    "propagationPolicy",
    "orphanDependents",
    "dryRun",
)
MAX_GRACE = 2**31 - 1


class _Causes:
    def __init__(self) -> None:
        self.items: list[Cause] = []

    def add(self, field: str, reason: str, message: str) -> None:
        self.items.append(Cause(field, reason, message))


def _check_options(c: _Causes, opts: Any) -> dict[str, Any]:
    if opts is None:
        return {}
    if not isinstance(opts, dict):
        c.add("deleteOptions", "FieldValueInvalid", "must be an object")
        return {}
    for key in opts:
        if key not in OPTION_KEYS:
            c.add(f"deleteOptions.{key}", "FieldValueNotSupported", "unknown field")
    if opts.get("kind") not in (None, "DeleteOptions"):
        c.add("deleteOptions.kind", "FieldValueNotSupported", 'must be "DeleteOptions"')
    grace = opts.get("gracePeriodSeconds")
    if grace is not None and (
        not isinstance(grace, int) or isinstance(grace, bool) or not 0 <= grace <= MAX_GRACE
    ):
        c.add("deleteOptions.gracePeriodSeconds", "FieldValueInvalid",
              "must be a non-negative integer")  # fmt: skip
    policy = opts.get("propagationPolicy")
    if policy is not None and policy not in PROPAGATIONS:
        c.add("deleteOptions.propagationPolicy", "FieldValueNotSupported",
              f"supported values: {', '.join(PROPAGATIONS)}")  # fmt: skip
    if opts.get("orphanDependents") not in (None, True, False):
        c.add("deleteOptions.orphanDependents", "FieldValueInvalid", "must be a boolean")
    dry = opts.get("dryRun")
    if dry is not None and (not isinstance(dry, list) or any(d != "All" for d in dry)):
        c.add("deleteOptions.dryRun", "FieldValueNotSupported", 'must be a list of "All"')
    pre = opts.get("preconditions")
    if pre is not None:
        if not isinstance(pre, dict):
            c.add("deleteOptions.preconditions", "FieldValueInvalid", "must be an object")
        else:
            for key, value in pre.items():
                if key not in ("uid", "resourceVersion"):
                    c.add(f"deleteOptions.preconditions.{key}", "FieldValueNotSupported",
                          "unknown field")  # fmt: skip
                elif value is not None and not isinstance(value, str):
                    c.add(f"deleteOptions.preconditions.{key}", "FieldValueInvalid",
                          "must be a string")  # fmt: skip
            rv = pre.get("resourceVersion")
            if isinstance(rv, str) and rv and not rv.isdigit():
                c.add("deleteOptions.preconditions.resourceVersion", "FieldValueInvalid",
                      "must be a resource version")  # fmt: skip
    return opts


def parse_eviction(body: bytes, namespace: str, name: str) -> dict[str, Any]:
    """The eviction's delete options, or ``Invalid`` naming every bad field."""
    doc = decode_body(body)
    if not isinstance(doc, dict):
        raise errors.BadRequest("the request body must be a JSON object")
    c = _Causes()
    for key in doc:
        if key not in TOP_LEVEL:
            c.add(str(key)[:64], "FieldValueNotSupported", "unknown field")
    if doc.get("apiVersion") not in (None, *API_VERSIONS):
        c.add(
            "apiVersion", "FieldValueNotSupported", f"supported values: {', '.join(API_VERSIONS)}"
        )
    if doc.get("kind") not in (None, "Eviction"):
        c.add("kind", "FieldValueNotSupported", 'must be "Eviction"')
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        c.add("metadata", "FieldValueRequired", "must be an object naming the pod")
    else:
        if meta.get("name") in (None, ""):
            c.add("metadata.name", "FieldValueRequired", "name is required")
        elif meta.get("name") != name:
            c.add("metadata.name", "FieldValueInvalid",
                  f"must match the pod name in the URL ({name!r})")  # fmt: skip
        if meta.get("namespace") not in (None, "", namespace):
            c.add("metadata.namespace", "FieldValueInvalid",
                  f"must match the namespace in the URL ({namespace!r})")  # fmt: skip
    opts = _check_options(c, doc.get("deleteOptions"))
    if c.items:
        raise errors.invalid("Eviction", name, c.items)
    return opts


def _success(code: int, name: str, uid: str, message: str) -> Response[Any]:
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "message": message,
        "code": code,
        "details": {"name": name, "group": "quaymaster.io", "kind": "pods", "uid": uid},
    }
    return json_response(body, code)


def refusal(outcome: Outcome, name: str) -> errors.TooManyRequests:
    """The 429 a refused eviction gets, its cause naming the budget and its numbers."""
    return errors.TooManyRequests(
        REFUSED, kind="pods", name=name, causes=[Cause("", "DisruptionBudget", outcome.message)]
    )


async def _settle(objects: Objects, outcome: Outcome) -> None:
    """Answer once this server's watch cache shows the eviction, like every other write."""
    if outcome.result != "evicted":
        return
    if outcome.pod is None:
        await objects.cache.wait_deleted(outcome.uid)
    else:
        await objects.cache.wait_for(outcome.pod.uid, outcome.pod.row_version)


async def run_eviction(
    objects: Objects, namespace: str, name: str, body: bytes, user: User
) -> Response[Any]:
    opts = parse_eviction(body, namespace, name)
    cached = objects.get(POD, namespace, name)  # 404 unless there and visible to the caller
    pre = opts.get("preconditions") or {}
    expected_row = None
    if pre.get("resourceVersion"):
        if str(cached.revision) != pre["resourceVersion"]:
            raise errors.Conflict(
                f'Operation cannot be fulfilled on pods "{name}": the precondition does not '
                "match the current object",
                kind="pods",
                name=name,
            )
        expected_row = cached.row_version
    policy = opts.get("propagationPolicy") or (
        "Orphan" if opts.get("orphanDependents") is True else "Background"
    )
    outcome = await evict(
        objects.store,
        namespace,
        name,
        now=datetime.now(UTC),
        grace_seconds=opts.get("gracePeriodSeconds"),
        propagation=policy,
        expected_uid=pre.get("uid") or None,
        expected_row_version=expected_row,
        ctx=write_context(user, verb="create", subresource="eviction"),
        dry_run=bool(opts.get("dryRun")),
    )
    if outcome.result == "blocked":
        raise refusal(outcome, name)
    if outcome.result == "terminating":
        return _success(200, name, outcome.uid, "the pod is already terminating")
    await _settle(objects, outcome)
    return _success(201, name, outcome.uid, "evicted")


async def _cordon(objects: Objects, node: str, user: User) -> None:
    current = objects.get(NODE, "", node).obj()
    if (current.get("spec") or {}).get("unschedulable") is not True:
        await objects.patch(NODE, "", node, b'{"spec":{"unschedulable":true}}', MERGE, user)


async def run_drain(objects: Objects, node: str, user: User) -> dict[str, Any]:
    """Cordon ``node`` and try once to evict every pod bound to it."""
    await _cordon(objects, node, user)
    evicted: list[dict[str, str]] = []
    blocked: list[dict[str, Any]] = []
    now = datetime.now(UTC)
    ctx = write_context(user, verb="create", subresource="eviction")
    ctx = ctx.using(reason=ctx.reason or f"draining node {node}")
    for p in await pods_on_node(objects.store, node):
        if p.terminating:
            continue
        ref = {"namespace": p.namespace, "name": p.name}
        try:
            outcome = await evict(
                objects.store, p.namespace, p.name, now=now, expected_uid=p.uid,
                ctx=ctx, note=f"Evicted while draining node {node}",
            )  # fmt: skip
        except (errors.NotFound, errors.Conflict):
            continue  # gone or replaced since the listing: the next pass sees what is there
        except errors.StatusError as exc:
            blocked.append({**ref, "reason": exc.message, "budget": None})
            continue
        if outcome.result == "blocked":
            blocked.append({**ref, "reason": outcome.message, "budget": outcome.budget})
        elif outcome.result == "evicted":
            await _settle(objects, outcome)
            evicted.append(ref)
    left = await pods_on_node(objects.store, node)
    return {
        "kind": "DrainStatus",
        "apiVersion": API_VERSION,
        "node": node,
        "cordoned": True,
        "evicted": evicted,
        "blocked": blocked,
        "terminating": [{"namespace": p.namespace, "name": p.name} for p in left if p.terminating],
        "remaining": len(left),
        "done": not left,
    }


@post(
    f"{PREFIX}/namespaces/{{namespace:str}}/pods/{{name:str}}/eviction",
    operation_id="createPodEviction",
    tags=["Pod"],
    summary="Evict a pod, respecting its PodDisruptionBudget",
    status_code=201,
)
async def create_eviction(
    request: Request[Any, Any, Any], namespace: str, name: str
) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        objects: Objects = authz.objects_of(request)
        return await run_eviction(objects, namespace, name, await request.body(), user)

    attrs = Attributes("create", "pods", namespace, name, "eviction")
    return await guarded(request, run, attrs=attrs)


@post(
    f"{PREFIX}/nodes/{{name:str}}/drain",
    operation_id="createNodeDrain",
    tags=["Node"],
    summary="Cordon a node and evict its pods once (call again until done)",
    status_code=200,
)
async def create_drain(request: Request[Any, Any, Any], name: str) -> Response[Any]:
    async def run(user: User) -> Response[Any]:
        objects: Objects = request.app.state.objects
        objects.get(NODE, "", name)  # 404 for an unknown node, before anything is written
        return json_response(await run_drain(objects, name, user))

    return await guarded(request, run, attrs=Attributes("create", "nodes", "", name, "drain"))


HANDLERS: list[HTTPRouteHandler] = [create_eviction, create_drain]
