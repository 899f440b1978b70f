"""The pods list: filtered by namespace, label selector, phase and node, on the server.

Filters become the REST list's ``labelSelector`` and ``fieldSelector`` (``status.phase``,
``spec.nodeName``), a page is 50 pods, and ``continue`` pages on: no page holds more than a
page, whatever the cluster's size. A pending pod shows its scheduler's reason verbatim (the
``PodScheduled`` condition's message, with its node counts).
"""

from __future__ import annotations

from typing import Any

from litestar import get

from app.api.ui.core import View, list_page, ui_page
from app.client import build
from app.core.kinds import BY_KIND
from app.core.objects import condition

POD = BY_KIND["Pod"]
PAGE = 50
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def pod_row(p: dict[str, Any]) -> dict[str, Any]:
    """What the list shows of one pod."""
    meta, spec, status = p.get("metadata") or {}, p.get("spec") or {}, p.get("status") or {}
    statuses = status.get("containerStatuses") or []
    containers = spec.get("containers") or []
    scheduled = condition(p, "PodScheduled")
    reason = ""
    if status.get("phase", "Pending") == "Pending" and scheduled.get("status") == "False":
        reason = f"{scheduled.get('reason', '')}: {scheduled.get('message', '')}".strip(": ")
    elif meta.get("deletionTimestamp"):
        reason = "Terminating"
    else:
        for cs in statuses:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason"):
                reason = waiting["reason"]
                break
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "phase": status.get("phase", "Pending"),
        "ready": sum(1 for cs in statuses if cs.get("ready")),
        "containers": len(containers),
        "restarts": sum(int(cs.get("restartCount") or 0) for cs in statuses),
        "node": spec.get("nodeName", ""),
        "created": meta.get("creationTimestamp", ""),
        "reason": reason,
    }


def field_selector(phase: str, node: str) -> str | None:
    parts = []
    if phase:
        parts.append(f"status.phase={phase}")
    if node:
        parts.append(f"spec.nodeName={node}")
    return ",".join(parts) or None


@get("/ui/pods", include_in_schema=False)
@ui_page
async def pods(view: View) -> Any:
    q = view.request.query_params
    ns = q.get("ns", "").strip()
    selector = q.get("selector", "").strip()
    phase = q.get("phase", "") if q.get("phase", "") in PHASES else ""
    node = q.get("node", "").strip()
    listed = await list_page(view, build.list_page(
        POD, ns or None, q.get("continue") or None, limit=PAGE,
        label_selector=selector or None, field_selector=field_selector(phase, node),
    ))  # fmt: skip
    return view.render(
        "pods/list.html", rows=[pod_row(p) for p in listed.items], **listed.context(),
        ns=ns, selector=selector, phase=phase, node=node, phases=PHASES,
        live={"kinds": ["Pod"], "ns": ns, "rv": listed.version},
    )  # fmt: skip


HANDLERS = [pods]
