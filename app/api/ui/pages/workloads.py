"""Workloads: the Deployments, Jobs and CronJobs lists, each one's page, and their actions.

The list is one tab at a time (one REST list page of 50, filtered by namespace and label
selector on the server). A workload's page lists its pods (its selector as the
``labelSelector``, a page at a time) with each pending pod's reason, its Events (the Event
kind's ``involvedObject.kind`` and ``involvedObject.name`` field selectors), and for a
Deployment its revisions (its ReplicaSets, by :mod:`app.core.rollout`, the rules
``qm rollout`` follows) with a diff of any two; a stalled rollout's reason is shown first.
Actions (scale through the ``scale`` subresource, pause, resume, restart, roll back, suspend,
delete) are offered only when :class:`Access` says the principal may, and are REST writes as
that principal carrying the reason typed, so they land in the history.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

from litestar import get, post

from app.api.ui.core import View, list_page, ui_action, ui_page
from app.api.ui.diff import diff
from app.api.ui.pages.events import event_row
from app.api.ui.pages.pods import pod_row
from app.client import build
from app.client.aio import AsyncRestClient
from app.core import errors
from app.core import rollout as core
from app.core.controllers.job import CONTROLLER_UID_LABEL
from app.core.kinds import BY_KIND, Kind
from app.core.scale import SCALE_API_VERSION, selector_string

PAGE = 50
DETAIL_PAGE = 20
RS_PAGE = 100
TABS = {"deployments": BY_KIND["Deployment"], "jobs": BY_KIND["Job"],
        "cronjobs": BY_KIND["CronJob"]}  # fmt: skip
DEPLOYMENT, REPLICASET, POD = BY_KIND["Deployment"], BY_KIND["ReplicaSet"], BY_KIND["Pod"]
JOB, CRONJOB, EVENT = BY_KIND["Job"], BY_KIND["CronJob"], BY_KIND["Event"]
Obj = dict[str, Any]


def _cond(obj: Obj, kind: str) -> Obj:
    c = core.condition(obj, kind)
    if not c:
        return {}
    return {"type": kind, "status": c.get("status", ""), "reason": c.get("reason", ""),
            "message": c.get("message", ""), "since": c.get("lastTransitionTime", "")}  # fmt: skip


def new_and_available(updated: int, available: int, total: int) -> int:
    """How many pods of the new template are surely available: the status counts available
    pods of every template, and up to ``total - updated`` of them may be old ones."""
    return max(0, min(updated, available - max(0, total - updated)))


def deployment_row(d: Obj) -> Obj:
    """What the list and the page show of a Deployment's rollout."""
    meta, spec, status = d.get("metadata") or {}, d.get("spec") or {}, d.get("status") or {}
    desired = int(spec.get("replicas", 1) or 0)
    updated = int(status.get("updatedReplicas") or 0)
    available = int(status.get("availableReplicas") or 0)
    state, line = core.rollout_state(d) if meta.get("name") else ("waiting", "")
    return {
        "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
        "desired": desired, "updated": updated,
        "ready": int(status.get("readyReplicas") or 0), "available": available,
        "total": int(status.get("replicas") or 0),
        "progress": new_and_available(updated, available, int(status.get("replicas") or 0)),
        "paused": bool(spec.get("paused")),
        "conditions": [c for c in (_cond(d, "Progressing"), _cond(d, "Available")) if c],
        "stalled": core.stalled(d), "state": state, "state_line": line,
        "created": meta.get("creationTimestamp", ""),
    }  # fmt: skip


def job_row(j: Obj) -> Obj:
    meta, spec, status = j.get("metadata") or {}, j.get("spec") or {}, j.get("status") or {}
    conds = [c for c in (status.get("conditions") or []) if isinstance(c, dict)]
    return {
        "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
        "completions": spec.get("completions"), "parallelism": spec.get("parallelism", 1),
        "succeeded": int(status.get("succeeded") or 0), "failed": int(status.get("failed") or 0),
        "active": int(status.get("active") or 0), "suspended": bool(spec.get("suspend")),
        "backoff_limit": spec.get("backoffLimit"),
        "conditions": [{"type": c.get("type", ""), "status": c.get("status", ""),
                        "reason": c.get("reason", ""), "message": c.get("message", "")}
                       for c in conds if c.get("status") == "True"],
        "created": meta.get("creationTimestamp", ""),
        "start": status.get("startTime", ""), "completion": status.get("completionTime", ""),
    }  # fmt: skip


def cronjob_row(c: Obj) -> Obj:
    meta, spec, status = c.get("metadata") or {}, c.get("spec") or {}, c.get("status") or {}
    return {
        "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
        "schedule": spec.get("schedule", ""), "timezone": spec.get("timeZone", ""),
        "suspend": bool(spec.get("suspend")),
        "last_schedule": status.get("lastScheduleTime", ""),
        "last_success": status.get("lastSuccessfulTime", ""),
        "active": len(status.get("active") or []),
        "created": meta.get("creationTimestamp", ""),
    }  # fmt: skip


ROWS = {"deployments": deployment_row, "jobs": job_row, "cronjobs": cronjob_row}


def detail_url(plural: str, ns: str, name: str) -> str:
    return f"/ui/workloads/{plural}/{quote(ns, safe='')}/{quote(name, safe='')}"


@get("/ui/workloads", include_in_schema=False)
@ui_page
async def workloads(view: View) -> Any:
    q = view.request.query_params
    tab = q.get("tab", "") if q.get("tab", "") in TABS else "deployments"
    ns, selector = q.get("ns", "").strip(), q.get("selector", "").strip()
    form: dict[str, Any] = {"tab": tab, "tabs": list(TABS), "ns": ns, "selector": selector}
    kind = TABS[tab]
    listed = await list_page(view, build.list_page(
        kind, ns or None, q.get("continue") or None, limit=PAGE,
        label_selector=selector or None,
    ))  # fmt: skip
    return view.render(
        "workloads/list.html", rows=[ROWS[tab](o) for o in listed.items], **listed.context(),
        live={"kinds": [kind.kind], "ns": ns, "rv": listed.version}, **form,
    )  # fmt: skip


async def _listed(view: View, kind: Kind, ns: str, token: str | None, limit: int,
                  **options: str | None) -> Obj:  # fmt: skip
    """One page of ``kind`` in ``ns``; a forbidden or bad list is ``{"error": ...}``."""
    try:
        page: Obj = await view.api.send(build.list_page(kind, ns, token, limit=limit,
                                                        **options))  # fmt: skip
    except errors.StatusError as exc:
        if exc.code not in (400, 403, 410, 422):
            raise
        return {"items": [], "error": str(exc), "forbidden": exc.code == 403, "next": ""}
    meta = page.get("metadata") or {}
    return {"items": page.get("items") or [], "error": "", "forbidden": False,
            "next": meta.get("continue") or "", "rv": meta.get("resourceVersion", "")}  # fmt: skip


async def _pods(view: View, ns: str, selector: str) -> Obj:
    q = view.request.query_params
    if not selector:  # an empty selector would select every pod of the namespace
        return {"items": [], "rows": [], "error": "no selector", "forbidden": False, "next": ""}
    page = await _listed(view, POD, ns, q.get("pods_continue") or None, DETAIL_PAGE,
                         label_selector=selector)  # fmt: skip
    page["rows"] = [pod_row(p) for p in page["items"]]
    page["pending"] = [r for r in page["rows"] if r["reason"]]
    return page


async def _events(view: View, ns: str, kind: str, name: str) -> Obj:
    fields = f"involvedObject.kind={kind},involvedObject.name={name}"
    page = await _listed(view, EVENT, ns, None, DETAIL_PAGE, field_selector=fields)
    page["rows"] = [event_row(e) for e in page["items"]]
    page["link"] = "/ui/events?" + urlencode({"ns": ns, "kind": kind, "name": name})
    return page


def _live(kinds: list[str], ns: str, *versions: Any) -> Obj:
    known = [int(v) for v in versions if str(v or "").isdigit()]
    return {"kinds": kinds, "ns": ns, "rv": str(max(known)) if known else ""}


async def _replicasets(api: AsyncRestClient, dep: Obj) -> list[Obj]:
    """The ReplicaSets the Deployment's selector matches, a few pages at most (a Deployment
    keeps ``revisionHistoryLimit`` of them, 10 by default)."""
    ns = dep["metadata"]["namespace"]
    selector = selector_string((dep.get("spec") or {}).get("selector")) or None
    out: list[Obj] = []
    token: str | None = None
    for _ in range(5):
        page = await api.send(build.list_page(REPLICASET, ns, token, limit=RS_PAGE,
                                              label_selector=selector))  # fmt: skip
        out += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue") or None
        if not token:
            break
    return out


def _revision_rows(dep: Obj, kept: list[core.Revision]) -> list[Obj]:
    current = core.current_template(dep)
    return [{"number": r.number, "name": r.name, "change_cause": r.change_cause,
             "images": r.images, "created": r.created, "replicas": r.replicas,
             "current": r.template == current} for r in reversed(kept)]  # fmt: skip


def _revision_diff(view: View, kept: list[core.Revision]) -> Obj:
    q = view.request.query_params
    by_number = {r.number: r for r in kept}
    try:
        a, b = int(q.get("from", "0")), int(q.get("to", "0"))
    except ValueError:
        return {"from": 0, "to": 0, "lines": [], "error": "revisions are numbers"}
    if not a or not b:
        return {"from": a, "to": b, "lines": [], "error": ""}
    if a not in by_number or b not in by_number:
        return {"from": a, "to": b, "lines": [], "error": "that revision is not kept"}
    return {"from": a, "to": b, "error": "",
            "lines": diff(by_number[a].template, by_number[b].template) or None}  # fmt: skip


@get("/ui/workloads/deployments/{ns:str}/{name:str}", include_in_schema=False)
@ui_page
async def deployment(view: View) -> Any:
    ns, name = view.request.path_params["ns"], view.request.path_params["name"]
    dep = await view.api.get(DEPLOYMENT, ns, name)
    try:
        kept = core.revisions(dep, await _replicasets(view.api, dep))
        rs_error = ""
    except errors.Forbidden as exc:
        kept, rs_error = [], str(exc)
    pods = await _pods(view, ns, selector_string((dep.get("spec") or {}).get("selector")))
    events = await _events(view, ns, "Deployment", name)
    can = {
        "scale": await view.access.can_kind("update", DEPLOYMENT, ns, name, "scale"),
        "edit": await view.access.can_kind("update", DEPLOYMENT, ns, name),
        "delete": await view.access.can_kind("delete", DEPLOYMENT, ns, name),
    }
    return view.render(
        "workloads/deployment.html", d=deployment_row(dep), obj=dep, pods=pods, events=events,
        revisions=_revision_rows(dep, kept), rs_error=rs_error,
        compare=_revision_diff(view, kept), can=can,
        url=detail_url("deployments", ns, name), list_url=f"/ui/workloads?ns={quote(ns)}",
        live=_live(["Deployment", "ReplicaSet", "Pod", "Event"], ns,
                   dep["metadata"].get("resourceVersion"), pods.get("rv"), events.get("rv")),
    )  # fmt: skip


def _job_selector(job: Obj) -> str:
    selector = selector_string((job.get("spec") or {}).get("selector"))
    uid = (job.get("metadata") or {}).get("uid")
    return selector or (f"{CONTROLLER_UID_LABEL}={uid}" if uid else "")


@get("/ui/workloads/jobs/{ns:str}/{name:str}", include_in_schema=False)
@ui_page
async def job(view: View) -> Any:
    ns, name = view.request.path_params["ns"], view.request.path_params["name"]
    obj = await view.api.get(JOB, ns, name)
    pods = await _pods(view, ns, _job_selector(obj))
    events = await _events(view, ns, "Job", name)
    owner = next((r for r in (obj["metadata"].get("ownerReferences") or [])
                  if r.get("kind") == "CronJob"), None)  # fmt: skip
    can = {"delete": await view.access.can_kind("delete", JOB, ns, name)}
    return view.render(
        "workloads/job.html", j=job_row(obj), obj=obj, pods=pods, events=events, can=can,
        owner=detail_url("cronjobs", ns, owner["name"]) if owner else "",
        url=detail_url("jobs", ns, name), list_url=f"/ui/workloads?tab=jobs&ns={quote(ns)}",
        live=_live(["Job", "Pod", "Event"], ns, obj["metadata"].get("resourceVersion"),
                   pods.get("rv"), events.get("rv")),
    )  # fmt: skip


async def _runs(view: View, cj: Obj) -> Obj:
    """The Jobs ``cj`` owns, from one page of the Jobs its job template's labels select."""
    labels = ((((cj.get("spec") or {}).get("jobTemplate") or {}).get("metadata") or {})
              .get("labels")) or {}  # fmt: skip
    selector = selector_string({"matchLabels": labels}) or None
    ns, uid = cj["metadata"]["namespace"], str(cj["metadata"].get("uid", ""))
    token = view.request.query_params.get("runs_continue") or None
    page = await _listed(view, JOB, ns, token, 500, label_selector=selector)
    page["rows"] = [job_row(j) for j in page["items"] if core.controlled_by(j, uid)]
    return page


@get("/ui/workloads/cronjobs/{ns:str}/{name:str}", include_in_schema=False)
@ui_page
async def cronjob(view: View) -> Any:
    ns, name = view.request.path_params["ns"], view.request.path_params["name"]
    obj = await view.api.get(CRONJOB, ns, name)
    runs = await _runs(view, obj)
    events = await _events(view, ns, "CronJob", name)
    can = {"patch": await view.access.can_kind("patch", CRONJOB, ns, name),
           "delete": await view.access.can_kind("delete", CRONJOB, ns, name)}  # fmt: skip
    return view.render(
        "workloads/cronjob.html", c=cronjob_row(obj), obj=obj, runs=runs, events=events,
        can=can, url=detail_url("cronjobs", ns, name),
        list_url=f"/ui/workloads?tab=cronjobs&ns={quote(ns)}",
        live=_live(["CronJob", "Job", "Event"], ns, obj["metadata"].get("resourceVersion"),
                   runs.get("rv"), events.get("rv")),
    )  # fmt: skip


# -- actions ------------------------------------------------------------------------------------

RETRIES = 5


async def _update_deployment(api: AsyncRestClient, ns: str, name: str,
                             change: Any) -> Obj | None:  # fmt: skip
    """Read, change (``change(dep) -> dep | None``) and replace, conditional on the version
    read and retried on a conflict; ``None`` when there was nothing to do."""
    for attempt in range(RETRIES):
        dep = await api.get(DEPLOYMENT, ns, name)
        changed = await change(dep)
        if changed is None:
            return None
        try:
            out: Obj = await api.replace(DEPLOYMENT, ns, changed)
            return out
        except errors.Conflict:
            if attempt == RETRIES - 1:
                raise
    return None


def _target(view: View) -> tuple[str, str]:
    return view.request.path_params["ns"], view.request.path_params["name"]


def _replicas(form: Any) -> int:
    try:
        value = int(str(form.get("replicas", "")).strip())
    except ValueError:
        raise errors.BadRequest("replicas must be a whole number") from None
    if value < 0:
        raise errors.BadRequest("replicas must not be negative")
    return value


async def _scale(view: View, form: Any, reason: str) -> str:
    ns, name = _target(view)
    replicas = _replicas(form)
    scale = {"apiVersion": SCALE_API_VERSION, "kind": "Scale",
             "metadata": {"name": name, "namespace": ns},
             "spec": {"replicas": replicas}}  # fmt: skip
    await view.client(reason).replace(DEPLOYMENT, ns, scale, sub="scale")
    return f"deployment/{name} scaled to {replicas}"


async def _pause(view: View, paused: bool, reason: str) -> str:
    ns, name = _target(view)

    async def change(dep: Obj) -> Obj | None:
        return core.with_paused(dep, paused)

    done = await _update_deployment(view.client(reason), ns, name, change)
    word = "paused" if paused else "resumed"
    return f"deployment/{name} {word}" if done else f"deployment/{name} was already {word}"


async def _restart(view: View, form: Any, reason: str) -> str:
    ns, name = _target(view)

    async def change(dep: Obj) -> Obj | None:
        return core.restarted(dep, datetime.now(UTC))

    await _update_deployment(view.client(reason), ns, name, change)
    return f"deployment/{name} restarted"


async def _rollback(view: View, form: Any, reason: str) -> str:
    ns, name = _target(view)
    try:
        to = int(str(form.get("revision", "0")))
    except ValueError:
        raise errors.BadRequest("choose a revision") from None
    api = view.client(reason)

    async def change(dep: Obj) -> Obj | None:
        try:
            return core.rolled_back(dep, core.revisions(dep, await _replicasets(api, dep)), to)
        except core.NoSuchRevision as exc:
            raise errors.BadRequest(f"deployment/{name}: {exc}") from None

    done = await _update_deployment(api, ns, name, change)
    if done is None:
        return f"deployment/{name} already runs revision {to}'s template; nothing to roll back"
    return f"deployment/{name} rolled back to revision {to}"


async def _delete(view: View, kind: Kind, reason: str) -> str:
    ns, name = _target(view)
    await view.client(reason).delete(kind, ns, name, propagation_policy="Background")
    return f"{kind.kind.lower()}/{name} deleted"


async def _suspend(view: View, suspend: bool, reason: str) -> str:
    ns, name = _target(view)
    await view.client(reason).patch(CRONJOB, ns, name, {"spec": {"suspend": suspend}})
    return f"cronjob/{name} {'suspended' if suspend else 'resumed'}"


DEPLOYMENT_ACTIONS = ("scale", "pause", "resume", "restart", "rollback", "delete")


@post("/ui/workloads/deployments/{ns:str}/{name:str}/{verb:str}", include_in_schema=False)
@ui_action
async def deployment_action(view: View, form: Any, reason: str) -> str:
    verb = view.request.path_params["verb"]
    if verb == "scale":
        return await _scale(view, form, reason)
    if verb in ("pause", "resume"):
        return await _pause(view, verb == "pause", reason)
    if verb == "restart":
        return await _restart(view, form, reason)
    if verb == "rollback":
        return await _rollback(view, form, reason)
    if verb == "delete":
        return await _delete(view, DEPLOYMENT, reason)
    raise errors.NotFound(f"no action {verb!r} for a Deployment")


@post("/ui/workloads/jobs/{ns:str}/{name:str}/delete", include_in_schema=False)
@ui_action
async def job_delete(view: View, form: Any, reason: str) -> str:
    return await _delete(view, JOB, reason)


@post("/ui/workloads/cronjobs/{ns:str}/{name:str}/{verb:str}", include_in_schema=False)
@ui_action
async def cronjob_action(view: View, form: Any, reason: str) -> str:
    verb = view.request.path_params["verb"]
    if verb in ("suspend", "resume"):
        return await _suspend(view, verb == "suspend", reason)
    if verb == "delete":
        return await _delete(view, CRONJOB, reason)
    raise errors.NotFound(f"no action {verb!r} for a CronJob")


HANDLERS = [workloads, deployment, job, cronjob, deployment_action, job_delete, cronjob_action]
