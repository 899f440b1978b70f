"""Nodes: the list, one node's page, and taking a node out of service and back.

The list is the REST list of Nodes, 50 a page with ``continue``; its filters are the list's
own: a label selector and cordoned or not (``spec.unschedulable``, a selectable field). A
name is exact: a GET of that node, the other filters applied to it here. Lease ages come from
the API server's watch cache through the cluster summary (:mod:`app.stream.summary`), one
dictionary read per row, and only for a principal who may ``get`` Leases in
``quaymaster-node-lease``.

A node's page shows its conditions, its agent's Lease (when it last renewed), taints, labels,
its pods (REST list with ``fieldSelector spec.nodeName``, 200 a page), what they request
against what the node offers, and observed usage from the metrics API. A node holds at most
its pod capacity, so its pods are read whole to sum their requests.

Actions: cordon and uncordon patch ``spec.unschedulable``; drain calls the ``drain``
subresource (``app.api.eviction``), which cordons and makes one pass of evictions under the
pods' disruption budgets, as ``qm drain`` does each interval. One click is one pass: the flash
message says what was evicted and which pods which budgets held back, and the page (live)
shows the pods still there, those being evicted, and the budgets that refused an eviction
(an ``EvictionBlocked`` Event on the budget in the last ``BLOCKED_WINDOW_S``) or allow none
now (published ``status.disruptionsAllowed`` of 0). Drain again to make another pass.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from litestar import get, post

from app.api.ui.core import View, ui_action, ui_page
from app.client import build
from app.core import errors
from app.core.capacity import timestamp
from app.core.disruption import selects
from app.core.kinds import BY_KIND
from app.core.labels import parse_selector
from app.core.objects import condition
from app.core.quantity import cpu_millis, to_bytes, to_int

NODE = BY_KIND["Node"]
POD = BY_KIND["Pod"]
PDB = BY_KIND["PodDisruptionBudget"]
EVENT = BY_KIND["Event"]
LEASE = BY_KIND["Lease"]
LEASE_NAMESPACE = "quaymaster-node-lease"
ZONE_KEY = "topology.kubernetes.io/zone"
PAGE = 50
PODS_PAGE = 200
MAX_NODE_PODS = 5000  # read no more than this to sum requests (pod capacity is far below)
BUDGETS_LIMIT = 500
BLOCKED_WINDOW_S = 900.0
MAX_BUDGET_NAMESPACES = 20  # per-namespace reads when the cluster-wide ones are forbidden
CORDONED = {"yes": "true", "no": "false"}


# -- formatting --------------------------------------------------------------------------
def cores(millis: int) -> str:
    """``250m``, ``1.5``, ``16``: CPU as a person reads it."""
    if millis < 1000:
        return f"{millis}m"
    return f"{millis / 1000:.1f}".removesuffix(".0")


def size(amount: int) -> str:
    """``512Mi``, ``3.5Gi``: bytes as a person reads them."""
    for suffix, power in (("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)):
        unit = 1024**power
        if amount >= unit:
            return f"{amount / unit:.1f}".removesuffix(".0") + suffix
    return str(amount)


def seconds(value: float | None) -> str:
    """``12s``, ``4m``, ``3h``: a duration in seconds, short ('' for none)."""
    if value is None:
        return ""
    s = int(value)
    for unit, size_s in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size_s * (2 if unit != "m" else 1):
            return f"{s // size_s}{unit}"
    return f"{s}s"


def percent(part: int, whole: int) -> int:
    return round(100 * part / whole) if whole else 0


def _amount(table: Any, key: str, parse: Any) -> int:
    if not isinstance(table, dict) or key not in table:
        return 0
    try:
        return int(parse(table[key]))
    except (ValueError, TypeError):
        return 0


# -- rows ----------------------------------------------------------------------------------
def node_row(n: dict[str, Any], lease_age: float | None = None) -> dict[str, Any]:
    """What the list shows of one node."""
    meta, spec, status = n.get("metadata") or {}, n.get("spec") or {}, n.get("status") or {}
    ready = condition(n, "Ready")
    alloc = status.get("allocatable") or {}
    return {
        "name": meta.get("name", ""),
        "zone": (meta.get("labels") or {}).get(ZONE_KEY, ""),
        "ready": ready.get("status", "Unknown"),
        "ready_reason": ready.get("reason", ""),
        "cordoned": bool(spec.get("unschedulable")),
        "taints": len(spec.get("taints") or []),
        "cpu": cores(_amount(alloc, "cpu", cpu_millis)) if "cpu" in alloc else "",
        "memory": size(_amount(alloc, "memory", to_bytes)) if "memory" in alloc else "",
        "pods": alloc.get("pods", ""),
        "created": meta.get("creationTimestamp", ""),
        "lease_age": seconds(lease_age),
    }


def requests_of(pod: dict[str, Any]) -> tuple[int, int]:
    """A pod's CPU (millicores) and memory (bytes) requests: the sum of its containers'."""
    cpu = mem = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        req = (c.get("resources") or {}).get("requests") if isinstance(c, dict) else None
        cpu += _amount(req, "cpu", cpu_millis)
        mem += _amount(req, "memory", to_bytes)
    return cpu, mem


def holds_room(pod: dict[str, Any]) -> bool:
    """Counted against its node, as the scheduler counts it: bound and not terminal."""
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def being_evicted(pod: dict[str, Any]) -> bool:
    return bool((pod.get("metadata") or {}).get("deletionTimestamp")) or (
        condition(pod, "DisruptionTarget").get("status") == "True"
    )


def pod_row(p: dict[str, Any]) -> dict[str, Any]:
    meta, status = p.get("metadata") or {}, p.get("status") or {}
    cpu, mem = requests_of(p)
    statuses = status.get("containerStatuses") or []
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "phase": status.get("phase", "Pending"),
        "ready": sum(1 for cs in statuses if isinstance(cs, dict) and cs.get("ready")),
        "containers": len((p.get("spec") or {}).get("containers") or []),
        "cpu": cores(cpu) if cpu else "",
        "memory": size(mem) if mem else "",
        "created": meta.get("creationTimestamp", ""),
        "evicting": being_evicted(p),
    }


def allocation(node: dict[str, Any], pods: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Requested against allocatable, per resource, for the node's pods that hold room."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    cpu = mem = count = 0
    for p in pods:
        if holds_room(p):
            c, m = requests_of(p)
            cpu, mem, count = cpu + c, mem + m, count + 1
    rows = []
    for label, used, total, fmt in (
        ("CPU", cpu, _amount(alloc, "cpu", cpu_millis), cores),
        ("Memory", mem, _amount(alloc, "memory", to_bytes), size),
        ("Pods", count, _amount(alloc, "pods", to_int), str),
    ):
        rows.append(
            {
                "label": label,
                "used": used,
                "total": total,
                "used_text": fmt(used),
                "total_text": fmt(total),
                "percent": percent(used, total),
            }
        )
    return rows


# -- reads ---------------------------------------------------------------------------------
def _summary(view: View) -> Any:
    return getattr(view.request.app.state, "summary", None)


async def lease_ages(view: View, names: list[str]) -> dict[str, float | None]:
    """Seconds since each node's agent renewed its Lease, from the watch cache, for a
    principal who may read those Leases (otherwise none)."""
    summary = _summary(view)
    if summary is None or not names:
        return {}
    if not await view.access.can("get", LEASE.plural, LEASE_NAMESPACE):
        return {}
    return {n: summary.lease_age(n) for n in names}


def _node_fields(cordoned: str) -> str | None:
    """``spec.unschedulable`` is absent on most nodes: "schedulable" is ``!=true``."""
    if cordoned == "yes":
        return "spec.unschedulable=true"
    if cordoned == "no":
        return "spec.unschedulable!=true"
    return None


async def _named(view: View, name: str, selector: str, cordoned: str) -> dict[str, Any]:
    """The list of the one node called ``name`` if it passes the other filters: a GET (the
    cheapest read there is), filtered here as the list would on the server."""
    try:
        obj = await view.api.get(NODE, None, name)
    except errors.NotFound:
        return {"items": [], "metadata": {}}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    flag = bool((obj.get("spec") or {}).get("unschedulable"))
    keep = (not selector or parse_selector(selector).matches(labels)) and (
        cordoned == "" or flag == (cordoned == "yes")
    )
    rv = (obj.get("metadata") or {}).get("resourceVersion", "")
    return {"items": [obj] if keep else [], "metadata": {"resourceVersion": rv}}


@get("/ui/nodes", include_in_schema=False)
@ui_page
async def nodes(view: View) -> Any:
    q = view.request.query_params
    selector = q.get("selector", "").strip()
    name = q.get("name", "").strip()
    cordoned = q.get("cordoned", "") if q.get("cordoned", "") in CORDONED else ""
    token = q.get("continue") or None
    filters: dict[str, Any] = {"selector": selector, "name": name, "cordoned": cordoned}
    try:
        if name:
            listed = await _named(view, name, selector, cordoned)
        else:
            listed = await view.api.send(
                build.list_page(
                    NODE,
                    None,
                    token,
                    limit=PAGE,
                    label_selector=selector or None,
                    field_selector=_node_fields(cordoned),
                )
            )
    except errors.Forbidden as exc:
        return view.render(
            "nodes/list.html", rows=[], forbidden=str(exc), invalid="", next_token="", **filters
        )
    except errors.StatusError as exc:
        if exc.code not in (400, 410, 422):
            raise
        return view.render(
            "nodes/list.html", rows=[], forbidden="", invalid=str(exc), next_token="", **filters
        )
    meta = listed.get("metadata") or {}
    items = listed.get("items") or []
    ages = await lease_ages(view, [(n.get("metadata") or {}).get("name", "") for n in items])
    rows = [node_row(n, ages.get((n.get("metadata") or {}).get("name", ""))) for n in items]
    return view.render(
        "nodes/list.html",
        rows=rows,
        forbidden="",
        invalid="",
        leases=bool(ages),
        next_token=meta.get("continue") or "",
        remaining=meta.get("remainingItemCount"),
        live={"kinds": ["Node"], "ns": "", "rv": meta.get("resourceVersion", "")},
        **filters,
    )


async def node_pods(view: View, name: str, token: str | None) -> tuple[list[Any], str, str]:
    """The page of the node's pods to show, its continue token and the list's version."""
    listed = await view.api.send(
        build.list_page(POD, None, token, limit=PODS_PAGE, field_selector=f"spec.nodeName={name}")
    )
    meta = listed.get("metadata") or {}
    return (
        list(listed.get("items") or []),
        meta.get("continue") or "",
        meta.get("resourceVersion", ""),
    )


async def all_node_pods(
    view: View, name: str, first: list[Any] | None = None, more: str = ""
) -> list[Any]:
    """Every pod on the node: ``first`` (the first page, read here if not given) and the
    pages after it."""
    if first is None:
        first, more, _ = await node_pods(view, name, None)
    pods = list(first)
    while more and len(pods) < MAX_NODE_PODS:
        page, more, _ = await node_pods(view, name, more)
        pods.extend(page)
    return pods


async def observed(view: View, name: str) -> dict[str, Any] | None:
    """The node's latest usage from the metrics API (None: none fresh, or not available)."""
    try:
        m = await view.api.send(build.metrics("nodes", None, name))
    except errors.StatusError:
        return None
    usage = m.get("usage") or {}
    cpu, mem = _amount(usage, "cpu", cpu_millis), _amount(usage, "memory", to_bytes)
    return {
        "cpu": cpu,
        "memory": mem,
        "cpu_text": cores(cpu),
        "memory_text": size(mem),
        "at": m.get("timestamp", ""),
    }


async def lease(view: View, name: str) -> dict[str, Any]:
    """The node agent's Lease: renewed when, for how long, expired or not."""
    try:
        obj = await view.api.get(LEASE, LEASE_NAMESPACE, name)
    except errors.Forbidden:
        return {"state": "forbidden"}
    except errors.NotFound:
        return {"state": "missing"}
    spec = obj.get("spec") or {}
    renewed = timestamp(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    age = max(0.0, time.time() - renewed) if renewed else None
    expired = age is not None and isinstance(duration, int) and age > duration
    return {
        "state": "expired" if expired else "held",
        "age": seconds(age),
        "renewed": spec.get("renewTime", ""),
        "duration": duration,
        "holder": spec.get("holderIdentity", ""),
    }


async def _list_all(view: View, kind: Any, ns: str | None, fields: str | None) -> list[Any]:
    listed = await view.api.send(
        build.list_page(kind, ns, None, limit=BUDGETS_LIMIT, field_selector=fields)
    )
    return list(listed.get("items") or [])


async def budgets_and_refusals(
    view: View, namespaces: list[str]
) -> tuple[list[Any], list[Any], bool]:
    """The disruption budgets and ``EvictionBlocked`` Events of these namespaces: read
    cluster-wide (both are few), else per namespace; the flag says some were forbidden."""
    refused_fields = "involvedObject.kind=PodDisruptionBudget,reason=EvictionBlocked"
    try:
        return (
            await _list_all(view, PDB, None, None),
            await _list_all(view, EVENT, None, refused_fields),
            False,
        )
    except errors.Forbidden:
        pass
    budgets: list[Any] = []
    events: list[Any] = []
    hidden = False
    for ns in namespaces[:MAX_BUDGET_NAMESPACES]:
        try:
            budgets += await _list_all(view, PDB, ns, None)
        except errors.Forbidden:
            hidden = True
            continue
        try:
            events += await _list_all(view, EVENT, ns, refused_fields)
        except errors.Forbidden:
            hidden = True
    return budgets, events, hidden or len(namespaces) > MAX_BUDGET_NAMESPACES


def blockers(
    pods: list[Any], budgets: list[Any], events: list[Any], now: float
) -> list[dict[str, Any]]:
    """The budgets guarding pods still on the node that refuse evictions: one that refused one
    within ``BLOCKED_WINDOW_S`` (its ``EvictionBlocked`` Event), or allows none now."""
    refusals: dict[tuple[str, str], dict[str, Any]] = {}
    for ev in events:
        obj = ev.get("involvedObject") or {}
        seen = timestamp(ev.get("lastTimestamp") or ev.get("firstTimestamp"))
        if seen and now - seen <= BLOCKED_WINDOW_S:
            refusals[(obj.get("namespace", ""), obj.get("name", ""))] = ev
    staying = [p for p in pods if not being_evicted(p)]
    out = []
    for b in budgets:
        meta, status = b.get("metadata") or {}, b.get("status") or {}
        guarded = [p for p in staying if selects(b, p)]
        if not guarded:
            continue
        key = (meta.get("namespace", ""), meta.get("name", ""))
        refusal = refusals.get(key)
        allowed = status.get("disruptionsAllowed")
        if refusal is None and allowed != 0:
            continue
        spec = b.get("spec") or {}
        out.append(
            {
                "namespace": key[0],
                "name": key[1],
                "rule": (
                    f"minAvailable {spec['minAvailable']}"
                    if "minAvailable" in spec
                    else f"maxUnavailable {spec.get('maxUnavailable')}"
                ),
                "allowed": "" if allowed is None else allowed,
                "pods": [(p.get("metadata") or {}).get("name", "") for p in guarded],
                "message": (refusal or {}).get("message", ""),
                "when": (refusal or {}).get("lastTimestamp", ""),
            }
        )
    return out


@get("/ui/nodes/{name:str}", include_in_schema=False)
@ui_page
async def node(view: View) -> Any:
    name = view.request.path_params["name"]
    token = view.request.query_params.get("continue") or None
    pods_forbidden = ""
    shown: list[Any] = []
    more = rv = ""
    try:  # the pods first: their list's version is where the live stream starts
        shown, more, rv = await node_pods(view, name, token)
    except errors.Forbidden as exc:
        pods_forbidden = str(exc)
    obj = await view.api.get(NODE, None, name)
    if not rv:
        rv = (obj.get("metadata") or {}).get("resourceVersion", "")
    every: list[Any] = []
    if not pods_forbidden:
        every = (
            await all_node_pods(view, name)
            if token
            else (await all_node_pods(view, name, shown, more))
        )
    namespaces = sorted({(p.get("metadata") or {}).get("namespace", "") for p in every})
    budgets, events, hidden = (
        await budgets_and_refusals(view, namespaces) if every else ([], [], False)
    )
    spec = obj.get("spec") or {}
    may = {
        "cordon": await view.access.can("patch", NODE.plural, "", name),
        "drain": await view.access.can("create", NODE.plural, "", name, "drain"),
    }
    return view.render(
        "nodes/detail.html",
        node=obj,
        name=name,
        row=node_row(obj),
        conditions=(obj.get("status") or {}).get("conditions") or [],
        taints=spec.get("taints") or [],
        labels=(obj.get("metadata") or {}).get("labels") or {},
        lease=await lease(view, name),
        usage=await observed(view, name),
        allocation=allocation(obj, every) if not pods_forbidden else [],
        pods=[pod_row(p) for p in shown],
        next_token=more,
        pods_forbidden=pods_forbidden,
        total_pods=len(every),
        evicting=sum(1 for p in every if being_evicted(p)),
        blockers=blockers(every, budgets, events, time.time()),
        blockers_hidden=hidden,
        may=may,
        base=f"/ui/nodes/{quote(name, safe='')}",
        live={"kinds": ["Node", "Pod"], "ns": "", "rv": rv},
    )


# -- actions -------------------------------------------------------------------------------
async def _set_unschedulable(view: View, reason: str, value: bool) -> str:
    name = view.request.path_params["name"]
    word = "cordoned" if value else "uncordoned"
    current = await view.api.get(NODE, None, name)
    if bool((current.get("spec") or {}).get("unschedulable")) == value:
        return f"node/{name} already {word}"
    await view.client(reason).patch(NODE, None, name, {"spec": {"unschedulable": value}})
    return f"node/{name} {word}"


@post("/ui/nodes/{name:str}/cordon", include_in_schema=False)
@ui_action
async def cordon(view: View, form: Any, reason: str) -> str:
    return await _set_unschedulable(view, reason, True)


@post("/ui/nodes/{name:str}/uncordon", include_in_schema=False)
@ui_action
async def uncordon(view: View, form: Any, reason: str) -> str:
    return await _set_unschedulable(view, reason, False)


def drain_message(name: str, status: dict[str, Any]) -> str:
    """One drain pass, as the flash message says it."""
    if status.get("done"):
        return f"node/{name} drained: no pods left"
    evicted = [f"{e.get('namespace')}/{e.get('name')}" for e in status.get("evicted") or []]
    parts = [
        f"node/{name} cordoned; this pass evicted {len(evicted)}"
        + (f" ({', '.join(evicted[:10])})" if evicted else "")
    ]
    terminating = len(status.get("terminating") or [])
    parts.append(f"{status.get('remaining', '?')} pods remain ({terminating} terminating)")
    for b in (status.get("blocked") or [])[:10]:
        who = f"pod {b.get('namespace')}/{b.get('name')}"
        if b.get("budget"):
            parts.append(
                f"{who} blocked by PodDisruptionBudget {b.get('namespace')}/"
                f"{b['budget']}: {b.get('reason')}"
            )
        else:
            parts.append(f"{who} blocked: {b.get('reason')}")
    return "; ".join(parts) + ". Drain again for another pass."


@post("/ui/nodes/{name:str}/drain", include_in_schema=False)
@ui_action
async def drain(view: View, form: Any, reason: str) -> str:
    name = view.request.path_params["name"]
    if not reason:
        raise errors.BadRequest("a drain needs a reason: say why in the form")
    status: dict[str, Any] = await view.client(reason).send(build.drain(name))
    return drain_message(name, status)


HANDLERS = [nodes, node, cordon, uncordon, drain]
