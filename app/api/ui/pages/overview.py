"""The overview (``/ui/``): capacity by zone, what needs attention, and the last hour.

The cluster-wide figures (nodes and pods by zone, requested against allocatable, pending pods,
the scheduling-latency ring) come from the API server's :class:`~app.stream.summary.
ClusterSummary`, kept from the watch cache: a page view copies a dozen zone totals instead of
listing 300,000 pods. Because the server holds those figures, not the principal's own reads,
they are shown only to a principal who may ``list`` both nodes and pods across the cluster
(what they could sum themselves). Anyone else gets a plain "forbidden" section in their place,
with links to the pages that list what they may read; the figures are not cut down by
namespace, since the summary keeps none per namespace.

Observed usage per zone adds each node's latest sample from the usage store (one ``MGET`` of
the nodes' keys), for a principal who may also ``list`` nodes in the metrics group.

Warnings come from REST lists as the principal, each bounded: Deployments whose rollout
stalled (``Progressing=False``, ``ProgressDeadlineExceeded``) from at most ``DEPLOY_SCAN``
Deployments (the caption says when more were not looked at), and disruption budgets that
refused an eviction in the last hour (``EvictionBlocked`` Events, a selectable reason).
Not-ready and cordoned nodes and pending pods come from the summary, under the rule above.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from litestar import get

from app.api.ui.core import View, ui_page
from app.api.ui.pages.nodes import cores, percent, seconds, size
from app.client import build
from app.core import errors
from app.core.authz.builtin import METRICS_GROUP
from app.core.capacity import timestamp
from app.core.kinds import BY_KIND
from app.stream.summary import ClusterSnapshot, Sample

DEPLOYMENT = BY_KIND["Deployment"]
EVENT = BY_KIND["Event"]
DEPLOY_PAGE = 500
DEPLOY_SCAN = 2000
STALLED = "ProgressDeadlineExceeded"
REFUSED_WINDOW_S = 3600.0
SHOW = 10  # names listed per warning
CHART_W, CHART_H = 600, 140
BUCKET_S = 300.0  # the last hour's table, per five minutes


# -- the zones chart -----------------------------------------------------------------------
@dataclass(frozen=True)
class Bar:
    label: str
    requested: int
    allocatable: int
    observed: int | None
    fmt: str  # "cpu" or "memory"

    @property
    def requested_pct(self) -> int:
        return percent(self.requested, self.allocatable)

    @property
    def observed_pct(self) -> int | None:
        return None if self.observed is None else percent(self.observed, self.allocatable)

    def text(self, amount: int) -> str:
        return cores(amount) if self.fmt == "cpu" else size(amount)


def zone_rows(
    snap: ClusterSnapshot, seen: dict[str, tuple[int, int]] | None
) -> list[dict[str, Any]]:
    """Each zone's totals, bars for CPU and memory, and its headroom. ``seen``: observed
    usage by zone (a zone none of whose nodes sent a fresh sample has none)."""
    rows = []
    for z in snap.zones:
        t = z.totals
        obs = (seen or {}).get(z.zone)
        cpu = Bar(
            "CPU",
            t.cpu_requested_milli,
            t.cpu_allocatable_milli,
            obs[0] if obs else None,
            "cpu",
        )
        mem = Bar(
            "Memory",
            t.memory_requested_bytes,
            t.memory_allocatable_bytes,
            obs[1] if obs else None,
            "memory",
        )
        rows.append(
            {
                "zone": z.zone or "(no zone)",
                "totals": t,
                "bars": [cpu, mem],
                "cpu_free": cores(max(0, t.cpu_allocatable_milli - t.cpu_requested_milli)),
                "memory_free": size(max(0, t.memory_allocatable_bytes - t.memory_requested_bytes)),
                "pods_free": max(0, t.pods_allocatable - t.pods),
            }
        )
    return rows


async def observed_by_zone(view: View, snap: ClusterSnapshot) -> dict[str, tuple[int, int]] | None:
    """CPU (millicores) and memory (bytes) observed per zone; None when not available."""
    summary = view.request.app.state.summary
    usage = getattr(view.request.app.state, "usage", None)
    if usage is None or not snap.totals.nodes:
        return None
    if not await view.access.can("list", "nodes", group=METRICS_GROUP):
        return None
    try:  # one read of the usage store per interval, shared by every page view
        observed: dict[str, tuple[int, int]] = await summary.observed_by_zone(usage)
    except Exception:  # the usage store is best effort: the page renders without it
        return None
    return observed


# -- the last hour -------------------------------------------------------------------------
def _points(values: list[tuple[float, float]], t0: float, top: float) -> str:
    """SVG polyline points for (time, value) pairs, the hour across, ``top`` at the top."""
    out = []
    for at, v in values:
        x = (at - t0) / 3600.0 * CHART_W
        y = CHART_H - (v / top * CHART_H if top else 0)
        out.append(f"{x:.1f},{y:.1f}")
    return " ".join(out)


def _nice(value: float) -> float:
    """A round ceiling for an axis: 1, 2, 5, 10, 20, 50, ... (and 0.1, 0.2, 0.5 below 1)."""
    if value <= 0:
        return 1.0
    magnitude = 10.0 ** math.floor(math.log10(value))
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= value)


def hour(samples: tuple[Sample, ...], now: float) -> dict[str, Any]:
    """Pending pods and scheduling latency over the last hour, as SVG polylines, and a table of
    five-minute buckets (what the chart shows, for those who do not see it)."""
    t0 = now - 3600.0
    recent = [s for s in samples if s.at >= t0]
    pending_top = _nice(max([s.pending for s in recent], default=0))
    lat = [s for s in recent if s.bound]
    latency_top = _nice(max([s.latency_p99_s for s in lat], default=0.0))
    buckets: list[dict[str, Any]] = []
    for i in range(int(3600 / BUCKET_S)):
        start = t0 + i * BUCKET_S
        inside = [s for s in recent if start <= s.at < start + BUCKET_S]
        if not inside:
            continue
        bound = [s for s in inside if s.bound]
        buckets.append(
            {
                "ago": seconds(now - start),
                "pending": max(s.pending for s in inside),
                "bound": sum(s.bound for s in inside),
                "p50": f"{max(s.latency_p50_s for s in bound):.2f}s" if bound else "",
                "p99": f"{max(s.latency_p99_s for s in bound):.2f}s" if bound else "",
            }
        )
    last = recent[-1] if recent else None
    return {
        "w": CHART_W,
        "h": CHART_H,
        "count": len(recent),
        "pending": _points([(s.at, s.pending) for s in recent], t0, pending_top),
        "pending_top": int(pending_top),
        "p50": _points([(s.at, s.latency_p50_s) for s in lat], t0, latency_top),
        "p99": _points([(s.at, s.latency_p99_s) for s in lat], t0, latency_top),
        "latency_top": f"{latency_top:g}s",
        "buckets": buckets,
        "last": last,
    }


# -- warnings ------------------------------------------------------------------------------
async def stalled_rollouts(view: View) -> dict[str, Any]:
    """Deployments whose rollout passed its progress deadline, from a bounded scan."""
    found: list[dict[str, str]] = []
    token: str | None = None
    scanned = 0
    try:
        while scanned < DEPLOY_SCAN:
            listed = await view.api.send(
                build.list_page(DEPLOYMENT, None, token, limit=DEPLOY_PAGE)
            )
            items = listed.get("items") or []
            scanned += len(items)
            for d in items:
                for c in (d.get("status") or {}).get("conditions") or []:
                    if (
                        isinstance(c, dict)
                        and c.get("type") == "Progressing"
                        and c.get("status") == "False"
                        and c.get("reason") == STALLED
                    ):
                        meta = d.get("metadata") or {}
                        found.append(
                            {
                                "namespace": meta.get("namespace", ""),
                                "name": meta.get("name", ""),
                                "message": c.get("message", ""),
                                "since": c.get("lastTransitionTime", ""),
                            }
                        )
            token = (listed.get("metadata") or {}).get("continue") or None
            if not token:
                break
    except errors.Forbidden as exc:
        return {"forbidden": str(exc), "items": [], "scanned": 0, "more": False}
    return {"forbidden": "", "items": found, "scanned": scanned, "more": bool(token)}


async def refusing_budgets(view: View, now: float) -> dict[str, Any]:
    """Budgets that refused an eviction (a drain's, or anyone's) in the last hour."""
    try:
        listed = await view.api.send(
            build.list_page(
                EVENT,
                None,
                None,
                limit=500,
                field_selector="involvedObject.kind=PodDisruptionBudget,reason=EvictionBlocked",
            )
        )
    except errors.Forbidden as exc:
        return {"forbidden": str(exc), "items": []}
    items = []
    for ev in listed.get("items") or []:
        seen = timestamp(ev.get("lastTimestamp") or ev.get("firstTimestamp"))
        if not seen or now - seen > REFUSED_WINDOW_S:
            continue
        obj = ev.get("involvedObject") or {}
        items.append(
            {
                "namespace": obj.get("namespace", ""),
                "name": obj.get("name", ""),
                "message": ev.get("message", ""),
                "count": ev.get("count", 1),
                "when": ev.get("lastTimestamp") or ev.get("firstTimestamp") or "",
            }
        )
    items.sort(key=lambda i: str(i["when"]), reverse=True)
    return {"forbidden": "", "items": items}


async def cluster_view(view: View, now: float) -> dict[str, Any]:
    """What the summary says, for a principal allowed to see it."""
    summary = view.request.app.state.summary
    snap: ClusterSnapshot = summary.snapshot()
    t = snap.totals
    oldest = snap.oldest_pending_created
    return {
        "complete": snap.complete,
        "totals": t,
        "cpu": Bar("CPU", t.cpu_requested_milli, t.cpu_allocatable_milli, None, "cpu"),
        "memory": Bar(
            "Memory", t.memory_requested_bytes, t.memory_allocatable_bytes, None, "memory"
        ),
        "pods_pct": percent(t.pods, t.pods_allocatable),
        "zones": zone_rows(snap, await observed_by_zone(view, snap)),
        "phases": snap.phases,
        "pending": snap.pending,
        "oldest_pending": seconds(now - oldest) if oldest else "",
        "reasons": snap.pending_reasons,
        "missing_node_pods": snap.missing_node_pods,
        "not_ready": [r.name for r in summary.nodes(ready=False, limit=SHOW).items]
        if t.not_ready
        else [],
        "cordoned": [r.name for r in summary.nodes(unschedulable=True, limit=SHOW).items]
        if t.cordoned
        else [],
        "hour": hour(snap.samples, snap.at),
    }


@get("/ui/", include_in_schema=False)
@ui_page
async def overview(view: View) -> Any:
    now = time.time()
    allowed = (
        getattr(view.request.app.state, "summary", None) is not None
        and await view.access.can("list", "nodes")
        and await view.access.can("list", "pods")
    )
    cluster = await cluster_view(view, now) if allowed else None
    return view.render(
        "overview.html",
        cluster=cluster,
        stalled=await stalled_rollouts(view),
        budgets=await refusing_budgets(view, now),
        show=SHOW,
        scan_limit=DEPLOY_SCAN,
        live={"kinds": ["Node", "Pod", "Deployment"], "ns": "", "rv": ""},
    )


HANDLERS = [overview]
