"""One pod's page: where it runs, why it is not running, what its containers did, its Events.

Everything shown is what the REST API answers the signed-in principal: the pod, its owner
(a ReplicaSet resolved to its Deployment with one more read, so the link goes to the
workload's page), and the Events about it (a ``fieldSelector`` on the Event kind's
``involvedObject.kind``/``name``/``uid`` columns, one page of them). The scheduler's reason
for a pending pod, node counts included, is its ``PodScheduled`` condition's message, shown
verbatim. Delete and evict are offered only when the principal may do them; an eviction a
disruption budget refuses shows the budget's own message (the 429's cause).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from litestar import get, post

from app.api.ui.core import View, ui_action, ui_page
from app.api.ui.pages.events import event_row, last_seen
from app.api.ui.pages.pods import POD, pod_row
from app.client import build
from app.core import errors
from app.core.kinds import BY_KIND, Kind

EVENT = BY_KIND["Event"]
REPLICASET = BY_KIND["ReplicaSet"]
EVENTS_PAGE = 100
STATES = ("waiting", "running", "terminated")
# Owner kinds with a workload page: kind -> the plural in /ui/workloads/<plural>/<ns>/<name>.
WORKLOADS = {"Deployment": "deployments", "Job": "jobs", "CronJob": "cronjobs"}


def pod_url(ns: str, name: str) -> str:
    return f"/ui/pods/{quote(ns, safe='')}/{quote(name, safe='')}"


def workload_url(kind: str, ns: str, name: str) -> str:
    plural = WORKLOADS.get(kind)
    return f"/ui/workloads/{plural}/{quote(ns, safe='')}/{quote(name, safe='')}" if plural else ""


def controller_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The owner reference marked ``controller`` (else the first one), or ``{}``."""
    refs = [r for r in (obj.get("metadata") or {}).get("ownerReferences") or []
            if isinstance(r, dict)]  # fmt: skip
    return next((r for r in refs if r.get("controller")), refs[0] if refs else {})


async def owner_of(view: View, pod: dict[str, Any]) -> dict[str, str]:
    """The pod's owner as the page links it: a ReplicaSet's Deployment when it has one."""
    ref = controller_of(pod)
    if not ref:
        return {}
    ns = str((pod.get("metadata") or {}).get("namespace") or "")
    kind, name = str(ref.get("kind") or ""), str(ref.get("name") or "")
    owner = {"kind": kind, "name": name, "url": workload_url(kind, ns, name), "via": ""}
    if kind == "ReplicaSet":
        try:
            rs = await view.api.get(REPLICASET, ns, name)
        except (errors.Forbidden, errors.NotFound):
            return owner
        top = controller_of(rs)
        if top.get("kind") in WORKLOADS:
            top_kind, top_name = str(top["kind"]), str(top.get("name") or "")
            return {"kind": top_kind, "name": top_name, "via": f"ReplicaSet {name}",
                    "url": workload_url(top_kind, ns, top_name)}  # fmt: skip
    return owner


def state_of(raw: dict[str, Any] | None) -> dict[str, Any]:
    """``{"state": "terminated", "reason": ..., "exit_code": ..., ...}`` of a container state."""
    for name in STATES:
        detail = (raw or {}).get(name)
        if isinstance(detail, dict):
            return {
                "state": name,
                "reason": detail.get("reason") or "",
                "message": detail.get("message") or "",
                "exit_code": detail.get("exitCode"),
                "signal": detail.get("signal"),
                "started": detail.get("startedAt") or "",
                "finished": detail.get("finishedAt") or "",
            }
    return {}


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """Each container (init containers first) with its status, state and last termination."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    out = []
    for init, specs, key in ((True, "initContainers", "initContainerStatuses"),
                             (False, "containers", "containerStatuses")):  # fmt: skip
        by_name = {s.get("name"): s for s in status.get(key) or [] if isinstance(s, dict)}
        for c in spec.get(specs) or []:
            s = by_name.get(c.get("name"), {})
            last = state_of(s.get("lastState"))
            out.append({
                "name": c.get("name", ""), "image": c.get("image", ""), "init": init,
                "ready": bool(s.get("ready")), "restarts": int(s.get("restartCount") or 0),
                "state": state_of(s.get("state")) or {"state": "unknown", "reason": ""},
                "last": last if last.get("state") == "terminated" else {},
            })  # fmt: skip
    return out


def event_selector(pod: dict[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    parts = ["involvedObject.kind=Pod", f"involvedObject.name={meta.get('name', '')}"]
    if meta.get("uid"):
        parts.append(f"involvedObject.uid={meta['uid']}")
    return ",".join(parts)


async def pod_events(view: View, pod: dict[str, Any]) -> tuple[list[dict[str, Any]], str, str]:
    """The Events about this pod, newest first; the list's version; why they are missing."""
    ns = str((pod.get("metadata") or {}).get("namespace") or "")
    try:
        listed = await view.api.send(
            build.list_page(EVENT, ns, limit=EVENTS_PAGE, field_selector=event_selector(pod))
        )
    except errors.Forbidden as exc:
        return [], "", str(exc)
    items = sorted(listed.get("items") or [], key=last_seen, reverse=True)
    rv = str((listed.get("metadata") or {}).get("resourceVersion") or "")
    return [event_row(e) for e in items], rv, ""


async def read(view: View, kind: Kind, ns: str, name: str) -> dict[str, Any]:
    """``GET`` one object. The API answers a namespace the principal may not read as if it
    did not exist (so nothing leaks); the page asks the principal's own permissions and, when
    they do not reach, says forbidden rather than not found."""
    try:
        obj: dict[str, Any] = await view.api.get(kind, ns, name)
    except errors.NotFound:
        if not await view.access.can_kind("get", kind, ns, name):
            raise errors.Forbidden(
                f'{view.session.user.name} may not get {kind.plural} in namespace "{ns}"'
            ) from None
        raise
    return obj


@get("/ui/pods/{ns:str}/{name:str}", include_in_schema=False)
@ui_page
async def pod_detail(view: View) -> Any:
    ns, name = view.request.path_params["ns"], view.request.path_params["name"]
    try:
        pod = await read(view, POD, ns, name)
    except errors.NotFound as exc:
        if view.request.query_params.get("done"):  # just deleted or evicted from this page
            return view.render("pods/detail.html", pod=None, ns=ns, name=name, gone=str(exc))
        raise
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    events, events_rv, events_forbidden = await pod_events(view, pod)
    may_delete = await view.access.can_kind("delete", POD, ns, name)
    may_evict = await view.access.can_kind("create", POD, ns, name, "eviction")
    may_log = await view.access.can_kind("get", POD, ns, name, "log")
    rv = max((events_rv, str(meta.get("resourceVersion") or "")), key=lambda v: int(v or 0))
    return view.render(
        "pods/detail.html", pod=pod, ns=ns, name=name, gone="", row=pod_row(pod),
        meta=meta, spec=spec, pod_status=status, owner=await owner_of(view, pod),
        conditions=status.get("conditions") or [], containers=containers(pod),
        ips=[ip.get("ip") for ip in status.get("podIPs") or [] if isinstance(ip, dict)]
        or ([status["podIP"]] if status.get("podIP") else []),
        events=events, events_forbidden=events_forbidden, may_delete=may_delete,
        may_evict=may_evict, may_log=may_log, self_url=pod_url(ns, name),
        history_url=f"/ui/history/pods/{quote(ns, safe='')}/{quote(name, safe='')}",
        live={"kinds": ["Pod", "Event"], "ns": ns, "rv": rv},
    )  # fmt: skip


def _names(view: View) -> tuple[str, str]:
    return view.request.path_params["ns"], view.request.path_params["name"]


@post("/ui/pods/{ns:str}/{name:str}/delete", include_in_schema=False)
@ui_action
async def delete_pod(view: View, form: Any, reason: str) -> str:
    ns, name = _names(view)
    await view.client(reason).delete(POD, ns, name)
    return f"Pod {ns}/{name} deleted."


@post("/ui/pods/{ns:str}/{name:str}/evict", include_in_schema=False)
@ui_action
async def evict_pod(view: View, form: Any, reason: str) -> str:
    ns, name = _names(view)
    try:
        await view.client(reason).evict(ns, name)
    except errors.TooManyRequests as exc:
        # The budget's own words (which budget, how many may go) are in the 429's causes.
        said = [c.message for c in exc.causes if c.message]
        exc.message = " ".join([exc.message, *said])
        raise
    return f"Pod {ns}/{name} evicted."


HANDLERS = [pod_detail, delete_pod, evict_pod]
