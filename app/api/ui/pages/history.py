"""The change history pages: who changed what, when, from where and why, with a diff.

Read from the history API (:mod:`app.api.history`, ADR 0061) as the signed-in principal, a page
of 50 rows at a time with its ``continue`` token: cluster-wide or one namespace's at
``/ui/history`` (filters: namespace, kind, name, principal, since), one object's at
``/ui/history/{kind}/{ns}/{name}`` (``_`` for a cluster-scoped object's namespace). Each row
opens to the diff of its before and after images (:func:`app.api.ui.diff.diff`): an update's
hold only the table columns it changed, an insert's only ``after``, a delete's only ``before``.

A Deployment's update that changed its pod template offers "Roll back to this": a form whose
action re-reads that history row through the API (the form names the row, not a template, so
what is written is what the history holds) and puts ``spec.template`` back to the row's
``before`` with a JSON patch through the REST API, carrying the reason typed, so the roll back
lands in the history like any other change. It is offered only when the principal may patch
that Deployment.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

from litestar import get, post

from app.api.ui.core import View, ui_action, ui_page
from app.api.ui.diff import diff
from app.api.ui.pages.events import page_of
from app.client import build
from app.core import errors
from app.core.authz.builtin import AUDIT_GROUP
from app.core.kinds import BY_KIND, KINDS, Kind, resolve

PAGE = 50
DEPLOYMENT = BY_KIND["Deployment"]
RELATIVE = re.compile(r"^(\d{1,6})([smhd])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def since_param(text: str, now: datetime) -> str:
    """``since`` as the API takes it: RFC 3339 as typed, or ``15m``/``2h``/``7d`` ago."""
    m = RELATIVE.match(text.strip())
    if not m:
        return text.strip()
    at = now - timedelta(**{UNITS[m.group(2)]: int(m.group(1))})
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def history_url(kind: str, namespace: str | None, name: str) -> str:
    """The per-object history page of an object ('' for a row of an internal table)."""
    k = BY_KIND.get(kind)
    if k is None or not name:
        return ""
    ns = namespace if k.namespaced and namespace else "_"
    return f"/ui/history/{k.plural}/{quote(ns, safe='')}/{quote(name, safe='')}"


def template_of(image: Any) -> Any:
    """A Deployment's pod template in a history image (the ``spec`` column), or None."""
    spec = image.get("spec") if isinstance(image, dict) else None
    return spec.get("template") if isinstance(spec, dict) else None


def rolls_back(before: Any, after: Any) -> bool:
    """Whether an update's images hold a pod template that the update replaced."""
    old = template_of(before)
    return old is not None and old != template_of(after)


def _field(item: dict[str, Any], camel: str, snake: str) -> Any:
    return item.get(camel, item.get(snake))


def history_row(item: dict[str, Any]) -> dict[str, Any]:
    """What a page shows of one history entry."""
    kind, ns, name = item.get("kind") or "", item.get("namespace") or "", item.get("name") or ""
    op, before, after = item.get("op", ""), item.get("before"), item.get("after")
    return {
        "id": item.get("id"),
        "at": item.get("at", ""),
        "principal": item.get("principal") or "",
        "db_role": _field(item, "dbRole", "db_role") or "",
        "groups": ", ".join(item.get("groups") or []),
        "verb": item.get("verb") or "",
        "subresource": item.get("subresource") or "",
        "op": op,
        "kind": kind,
        "table": item.get("table") or "",
        "namespace": ns,
        "name": name,
        "object_url": page_of(kind, ns, name),
        "history_url": history_url(kind, ns, name),
        "reason": item.get("reason") or "",
        "client": _field(item, "clientAddr", "client_addr") or "",
        "agent": _field(item, "userAgent", "user_agent") or "",
        "request_id": _field(item, "requestId", "request_id") or "",
        "changed": item.get("changed") or [],
        "sealed": bool(item.get("sealed")),
        "lines": diff(before, after),
        "rollback": kind == "Deployment" and op == "update" and rolls_back(before, after),
    }


async def _read(view: View, namespace: str | None, **query: str) -> tuple[list[Any], str]:
    listed = await view.api.send(build.history(namespace, limit=str(PAGE), **query))
    rows = [history_row(i) for i in listed.get("items") or []]
    return rows, (listed.get("metadata") or {}).get("continue") or ""


@get("/ui/history", include_in_schema=False)
@ui_page
async def history(view: View) -> Any:
    q = view.request.query_params
    ns, kind, name = (q.get(k, "").strip() for k in ("ns", "kind", "name"))
    principal, since = q.get("principal", "").strip(), q.get("since", "").strip()
    form: dict[str, Any] = {
        "ns": ns, "kind": kind, "name": name, "principal": principal, "since": since,
        "kinds": sorted(k.kind for k in KINDS),
    }  # fmt: skip
    query = {"kind": kind, "name": name, "principal": principal,
             "since": since_param(since, datetime.now(UTC)) if since else "",
             "continue": q.get("continue", "")}  # fmt: skip
    try:
        rows, token = await _read(view, ns or None, **query)
    except errors.Forbidden as exc:
        return view.render("history/list.html", rows=[], forbidden=str(exc), **form)
    except errors.StatusError as exc:
        if exc.code not in (400, 410, 422):
            raise
        return view.render("history/list.html", rows=[], invalid=str(exc), **form)
    if not rows and ns and not await _may_read(view, ns, kind, name):
        # The API answers a namespace its principal holds nothing in as an empty list.
        forbidden = f"you may not read the history of namespace {ns} (or it does not exist)"
        return view.render("history/list.html", rows=[], forbidden=forbidden, **form)
    return view.render("history/list.html", rows=rows, next_token=token, **form)


async def _may_read(view: View, ns: str, kind: str, name: str) -> bool:
    if await view.access.can("list", "history", ns, group=AUDIT_GROUP):
        return True
    k = resolve(kind) if kind else None
    return k is not None and await view.access.can_kind("get" if name else "list", k, ns, name)


def _kind(text: str) -> Kind:
    k = resolve(text)
    if k is None:
        raise errors.NotFound(f"no kind {text!r} in this API")
    return k


@get("/ui/history/{kind:str}/{ns:str}/{name:str}", include_in_schema=False)
@ui_page
async def object_history(view: View) -> Any:
    p = view.request.path_params
    k, name = _kind(p["kind"]), p["name"]
    ns = p["ns"] if k.namespaced else ""
    cont = view.request.query_params.get("continue", "")
    rows, token = await _read(view, ns or None, kind=k.kind, name=name, **{"continue": cont})
    may_roll_back = (
        k is DEPLOYMENT
        and any(r["rollback"] for r in rows)
        and (await view.access.can_kind("patch", DEPLOYMENT, ns, name))
    )
    return view.render(
        "history/object.html", rows=rows, next_token=token, kind=k.kind, ns=ns, name=name,
        object_url=page_of(k.kind, ns, name), may_roll_back=may_roll_back, one_object=True,
        rollback_url=f"{history_url(k.kind, ns, name)}/rollback",
        live={"kinds": [k.kind], "ns": ns, "rv": ""},
    )  # fmt: skip


async def _entry(view: View, ns: str, name: str, row_id: str, at: str) -> dict[str, Any]:
    """The history row ``row_id`` written at ``at`` of Deployment ``ns/name``, re-read."""
    try:
        when = datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        raise errors.BadRequest(f"not a time: {at!r}") from None
    until = (when + timedelta(microseconds=1)).astimezone(UTC).isoformat()
    listed = await view.api.send(
        build.history(ns, kind=DEPLOYMENT.kind, name=name, since=at, until=until, limit="500")
    )
    for item in listed.get("items") or []:
        if str(item.get("id")) == row_id:
            return dict(item)
    raise errors.NotFound(f"no change {row_id} at {at} in the history of Deployment {ns}/{name}")


@post("/ui/history/{kind:str}/{ns:str}/{name:str}/rollback", include_in_schema=False)
@ui_action
async def roll_back(view: View, form: Any, reason: str) -> str:
    """Put the Deployment's pod template back to the one before a change in its history."""
    p = view.request.path_params
    if _kind(p["kind"]) is not DEPLOYMENT:
        raise errors.NotFound("only a Deployment's pod template can be rolled back here")
    ns, name = p["ns"], p["name"]
    at = str(form.get("at") or "")
    item = await _entry(view, ns, name, str(form.get("id") or ""), at)
    template = template_of(item.get("before"))
    if item.get("op") != "update" or template is None:
        raise errors.BadRequest("that change did not replace the pod template")
    current = await view.api.get(DEPLOYMENT, ns, name)
    uid = (current.get("metadata") or {}).get("uid")
    if item.get("uid") and uid != item.get("uid"):
        raise errors.Conflict(
            f"Deployment {ns}/{name} was deleted and created again since that change"
        )
    patch = [{"op": "replace", "path": "/spec/template", "value": template}]
    why = reason or f"roll back to the pod template before the change at {at}"
    await view.client(why).patch(DEPLOYMENT, ns, name, patch, build.JSON_PATCH)
    return f"Deployment {ns}/{name}: pod template put back to the one before the change at {at}"


HANDLERS = [history, object_history, roll_back]
