"""Services: the list with each one's endpoints counted, and one Service's page.

The list is a page of 50 Services (namespace filter, ``continue``) and the EndpointSlices of
exactly those Services, found with one set-based label selector
(``kubernetes.io/service-name in (...)``, the label the EndpointSlice controller writes), so a
page costs two list requests whatever the cluster's size. A Service's page shows its address,
ports, selector and every endpoint of its slices with the ``ready``, ``serving`` and
``terminating`` conditions the controller derived from its pod.

"Which subscribers have the latest version": discovery versions are revisions of the same
stream as ``resourceVersion`` (docs/architecture.md, Service traffic), so the newest of the
Service's and its slices' ``resourceVersion`` is the version a node proxy (or, for a
``LoadBalancer`` Service, an edge balancer) must have acknowledged to route by what the page
shows. The acknowledgements come from ``GET /apis/discovery.quaymaster.io/v1/subscribers``,
which asks every discovery replica; that list is cluster-wide, so the page shows counts and
the subscribers still behind, at most ``MAX_SUBSCRIBERS`` of them.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from litestar import get

from app.api.subscribers import GROUP_VERSION
from app.api.ui.core import View, list_page, ui_page
from app.api.ui.pages.pod_detail import read
from app.client import build
from app.core import errors
from app.core.controllers.endpointslice.endpoints import SERVICE_NAME_LABEL
from app.core.kinds import BY_KIND
from app.core.traffic.protocol import EXPOSED_TYPES

SERVICE = BY_KIND["Service"]
SLICE = BY_KIND["EndpointSlice"]
PAGE = 50
SLICE_PAGE = 500
MAX_SLICE_PAGES = 20  # 10,000 slices, a million endpoints: past that the page says so
MAX_SUBSCRIBERS = 100
SUBSCRIBERS = f"/apis/{GROUP_VERSION}/subscribers"
Obj = dict[str, Any]


def ports_text(service: Obj) -> str:
    """``http 80→8080/TCP, 443/TCP``: each port as a reader scans it."""
    out = []
    for p in (service.get("spec") or {}).get("ports") or []:
        if not isinstance(p, dict):
            continue
        target = p.get("targetPort")
        text = f"{p.get('port')}" + (f"→{target}" if target not in (None, p.get("port")) else "")
        out.append(f"{p['name'] + ' ' if p.get('name') else ''}{text}/{p.get('protocol', 'TCP')}")
    return ", ".join(out)


def endpoint_rows(slices: list[Obj]) -> list[Obj]:
    """Every endpoint of ``slices`` with its conditions, pod, node and slice."""
    rows = []
    for s in slices:
        for e in s.get("endpoints") or []:
            if not isinstance(e, dict):
                continue
            cond, ref = e.get("conditions") or {}, e.get("targetRef") or {}
            rows.append({
                "address": ", ".join(e.get("addresses") or []),
                "ready": cond.get("ready") is not False,  # absent means ready, as in Kubernetes
                "serving": cond.get("serving", cond.get("ready")) is not False,
                "terminating": cond.get("terminating") is True,
                "pod": ref.get("name", "") if ref.get("kind", "Pod") == "Pod" else "",
                "node": e.get("nodeName", ""), "zone": e.get("zone", ""),
                "slice": (s.get("metadata") or {}).get("name", ""),
            })  # fmt: skip
    return sorted(rows, key=lambda r: (r["pod"], r["address"]))


def counts(slices: list[Obj]) -> tuple[int, int]:
    """(ready, total) endpoints of ``slices``."""
    rows = endpoint_rows(slices)
    return sum(1 for r in rows if r["ready"]), len(rows)


def latest_version(service: Obj, slices: list[Obj]) -> int:
    versions = [(o.get("metadata") or {}).get("resourceVersion") for o in [service, *slices]]
    return max((int(str(v)) for v in versions if str(v or "").isdigit()), default=0)


def acks(listed: Obj, version: int, service_type: str) -> Obj:
    """Which of the discovery subscribers that receive this Service acknowledged ``version``:
    node proxies get every Service, edge balancers (scope ``exposed``) only LoadBalancers."""
    exposed = service_type in EXPOSED_TYPES
    relevant = [s for s in listed.get("items") or []
                if s.get("scope") != "exposed" or exposed]  # fmt: skip
    behind = [s for s in relevant if int(s.get("ackedVersion") or 0) < version]
    return {
        "version": version,
        "total": len(relevant),
        "acked": len(relevant) - len(behind),
        "behind": sorted(behind, key=lambda s: int(s.get("ackedVersion") or 0))[:MAX_SUBSCRIBERS],
        "more_behind": max(0, len(behind) - MAX_SUBSCRIBERS),
        "replicas": listed.get("replicas") or [],
    }


async def slices_of(view: View, ns: str | None, selector: str
                    ) -> tuple[list[Obj], bool, str]:  # fmt: skip
    """The EndpointSlices matching ``selector``, page by page; whether the cap cut them; the
    list's version."""
    out: list[Obj] = []
    token: str | None = None
    rv = ""
    for _ in range(MAX_SLICE_PAGES):
        listed = await view.api.send(
            build.list_page(SLICE, ns, token, limit=SLICE_PAGE, label_selector=selector)
        )
        out.extend(listed.get("items") or [])
        meta = listed.get("metadata") or {}
        rv = rv or str(meta.get("resourceVersion") or "")
        token = meta.get("continue") or None
        if not token:
            return out, False, rv
    return out, True, rv


def service_row(s: Obj, slices: list[Obj] | None) -> Obj:
    meta, spec = s.get("metadata") or {}, s.get("spec") or {}
    ready, total = counts(slices) if slices is not None else (None, None)
    return {
        "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
        "type": spec.get("type") or "ClusterIP", "vip": spec.get("clusterIP") or "",
        "ports": ports_text(s), "ready": ready, "total": total,
        "created": meta.get("creationTimestamp", ""),
    }  # fmt: skip


async def _rows(view: View, ns: str, items: list[Obj]) -> tuple[list[Obj], str]:
    """The list's rows, with endpoints counted ('' or why they could not be)."""
    names = sorted({str((s.get("metadata") or {}).get("name")) for s in items})
    if not names:
        return [], ""
    try:
        selector = f"{SERVICE_NAME_LABEL} in ({','.join(names)})"
        found, _, _ = await slices_of(view, ns or None, selector)
    except errors.Forbidden as exc:
        return [service_row(s, None) for s in items], str(exc)
    by_service: dict[tuple[str, str], list[Obj]] = defaultdict(list)
    for sl in found:
        by_service[_key(sl, (sl.get("metadata", {}).get("labels") or {}).get(SERVICE_NAME_LABEL))
                   ].append(sl)  # fmt: skip
    return [service_row(s, by_service.get(_key(s), [])) for s in items], ""


def _key(obj: Obj, name: Any = None) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(name if name is not None else meta.get("name"))


@get("/ui/services", include_in_schema=False)
@ui_page
async def services(view: View) -> Any:
    q = view.request.query_params
    ns = q.get("ns", "").strip()
    listed = await list_page(
        view, build.list_page(SERVICE, ns or None, q.get("continue") or None, limit=PAGE)
    )
    rows, slices_forbidden = await _rows(view, ns, listed.items)
    return view.render(
        "services/list.html", ns=ns, rows=rows, **listed.context(),
        slices_forbidden=slices_forbidden,
        live={"kinds": ["Service", "EndpointSlice"], "ns": ns, "rv": listed.version},
    )  # fmt: skip


async def subscriber_acks(view: View, version: int, service_type: str) -> tuple[Obj, str]:
    """The acknowledgement summary, or {} and why it is not available."""
    try:
        listed = await view.api.send(build.Request("GET", SUBSCRIBERS))
    except errors.Forbidden as exc:
        return {}, f"Forbidden: {exc}"
    except errors.StatusError as exc:
        return {}, str(exc)
    return acks(listed, version, service_type), ""


@get("/ui/services/{ns:str}/{name:str}", include_in_schema=False)
@ui_page
async def service_detail(view: View) -> Any:
    ns, name = view.request.path_params["ns"], view.request.path_params["name"]
    svc = await read(view, SERVICE, ns, name)
    meta, spec = svc.get("metadata") or {}, svc.get("spec") or {}
    try:
        found, cut, listed_rv = await slices_of(view, ns, f"{SERVICE_NAME_LABEL}={name}")
        slices_forbidden = ""
    except errors.Forbidden as exc:
        found, cut, listed_rv, slices_forbidden = [], False, "", str(exc)
    version = latest_version(svc, found)
    summary, acks_problem = await subscriber_acks(view, version, spec.get("type") or "ClusterIP")
    endpoints = endpoint_rows(found)
    return view.render(
        "services/detail.html", svc=svc, ns=ns, name=name, meta=meta, spec=spec,
        row=service_row(svc, found), endpoints=endpoints, slices=len(found), cut=cut,
        slices_forbidden=slices_forbidden, acks=summary, acks_problem=acks_problem,
        selector=spec.get("selector") or {},
        history_url=f"/ui/history/services/{ns}/{name}",
        live={"kinds": ["Service", "EndpointSlice"], "ns": ns,
              "rv": listed_rv or str(version or "")},
    )  # fmt: skip


HANDLERS = [services, service_detail]
