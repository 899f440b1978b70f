"""The Events list: what components said about objects, filtered on the server.

Filters become the REST list's ``fieldSelector`` over the Event kind's selectable fields
(``type``, ``reason``, ``involvedObject.kind``, ``involvedObject.name``, see
:mod:`app.core.kinds`), a page is 50 Events and ``continue`` pages on. Each row links its
object to that object's page (:func:`page_of`, which the history pages use too). The caption
says how long Events are kept: the controller manager's retention loop
(``workers.loops.events``) deletes them a time to live after they were last seen and holds the
table under a cap; its settings are read here from the same variables with the same defaults
(the tests check that the defaults agree), since the API cannot ask the manager.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

from litestar import get

from app.api.ui.core import View, list_page, ui_page
from app.client import build
from app.core.kinds import BY_KIND, KINDS

EVENT = BY_KIND["Event"]
PAGE = 50
TYPES = ("Normal", "Warning")
# The retention loop's settings (workers.loops.events.EventRetention.from_env).
TTL_ENV, TTL_DEFAULT = "QM_EVENT_TTL_SECONDS", "604800"
MAX_ENV, MAX_DEFAULT = "QM_EVENT_MAX", "200000"

# Kinds with a page of their own: kind -> its URL, from namespace and name.
PAGES = {
    "Pod": "/ui/pods/{ns}/{name}",
    "Node": "/ui/nodes/{name}",
    "Deployment": "/ui/workloads/deployments/{ns}/{name}",
    "Service": "/ui/services/{ns}/{name}",
}


def page_of(kind: str, namespace: str | None, name: str) -> str:
    """The UI page of an object ('' for a kind without one)."""
    pattern = PAGES.get(kind)
    if not pattern or not name or ("{ns}" in pattern and not namespace):
        return ""
    return pattern.format(ns=quote(namespace or "", safe=""), name=quote(name, safe=""))


def duration(seconds: float) -> str:
    """``1 hour``, ``90 minutes``, ``2 days``: a retention setting as a person reads it."""
    s = int(seconds)
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if s >= size and s % size == 0:
            n = s // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{s} seconds"


def retention() -> str:
    """How long Events are kept, as the caption says it."""
    try:
        ttl = duration(float(os.environ.get(TTL_ENV, TTL_DEFAULT)))
        cap = f"{int(os.environ.get(MAX_ENV, MAX_DEFAULT)):,}"
    except ValueError:
        return "Events are deleted by the controller manager's retention loop"
    return (
        f"Events are kept {ttl} after they were last seen, and at most {cap} of them "
        f"(the oldest go first), by the controller manager's retention loop "
        f"({TTL_ENV}, {MAX_ENV}); they are not in the change history"
    )


def last_seen(e: dict[str, Any]) -> str:
    meta = e.get("metadata") or {}
    return str(
        e.get("lastTimestamp") or e.get("firstTimestamp") or meta.get("creationTimestamp") or ""
    )


def event_row(e: dict[str, Any]) -> dict[str, Any]:
    """What the list shows of one Event."""
    meta = e.get("metadata") or {}
    obj = e.get("involvedObject") or {}
    source = e.get("source") or {}
    ns = obj.get("namespace") or meta.get("namespace", "")
    kind, name = str(obj.get("kind") or ""), str(obj.get("name") or "")
    where = [str(source.get("component") or e.get("reportingComponent") or "")]
    if source.get("host"):
        where.append(str(source["host"]))
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "last_seen": last_seen(e),
        "type": e.get("type") or "Normal",
        "reason": e.get("reason") or "",
        "kind": kind,
        "object": name,
        "object_url": page_of(kind, ns, name),
        "message": e.get("message") or "",
        "count": e.get("count") or 1,
        "source": " on ".join(w for w in where if w),
    }


def hidden(ns: str) -> str:
    if ns:
        return f"you may not list Events in namespace {ns}"
    return (
        "you may not list Events in every namespace, and the namespaces you may list them in "
        "have none"
    )


def field_selector(warnings: bool, kind: str, name: str, reason: str) -> str | None:
    parts = []
    if warnings:
        parts.append("type=Warning")
    for key, value in (("involvedObject.kind", kind), ("involvedObject.name", name),
                       ("reason", reason)):  # fmt: skip
        if value:
            parts.append(f"{key}={value}")
    return ",".join(parts) or None


@get("/ui/events", include_in_schema=False)
@ui_page
async def events(view: View) -> Any:
    q = view.request.query_params
    ns = q.get("ns", "").strip()
    warnings = q.get("warnings", "") in ("1", "on", "true")
    kind, name = q.get("kind", "").strip(), q.get("name", "").strip()
    reason = q.get("reason", "").strip()
    form: dict[str, Any] = {
        "ns": ns, "warnings": warnings, "kind": kind, "name": name, "reason": reason,
        "retention": retention(), "kinds": sorted(k.kind for k in KINDS),
    }  # fmt: skip
    listed = await list_page(view, build.list_page(
        EVENT, ns or None, q.get("continue") or None, limit=PAGE,
        field_selector=field_selector(warnings, kind, name, reason),
    ))  # fmt: skip
    if not listed.items and not listed.forbidden and not listed.invalid \
            and not await view.access.can_kind("list", EVENT, ns):  # fmt: skip
        # A list answers only the namespaces its principal may list in: empty is not "none".
        listed.forbidden = hidden(ns)
    return view.render(
        "events/list.html", rows=[event_row(e) for e in listed.items], **listed.context(),
        live={"kinds": ["Event"], "ns": ns, "rv": listed.version}, **form,
    )  # fmt: skip


HANDLERS = [events]
