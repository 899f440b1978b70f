"""The EndpointSlice controller's shell: read a Service, the pods its selector picks, its
slices and the zones of the pods' nodes; plan with ``app.core.controllers.endpointslice``;
apply with the one applier.

Its key is the Service's. The dispatcher wakes it when the Service changes, when one of its
slices changes (the slices' controller reference), and when a pod its selector picks (or
picked) changes (``ServiceSelectors``); the resync looks at every Service. A plan held back by
the write rate limit comes back through the outcome's ``requeue_after``.
"""

from __future__ import annotations

from typing import Any

from app.core.controllers import endpointslice
from app.core.controllers.plan import Outcome
from app.core.errors import NotFound
from app.core.kinds import BY_KIND
from app.store import sql
from app.store.store import Store, Stored
from workers.controllers.apply import apply_plan, with_version
from workers.runtime import Runtime, key_text

SERVICE = BY_KIND["Service"]
SLICE = BY_KIND["EndpointSlice"]
POD = BY_KIND["Pod"]
COMPONENT = "endpointslice-controller"


async def reconcile_key(rt: Runtime, namespace: str, name: str, now: float) -> Outcome:
    async with rt.locked(key_text("Service", namespace, name)):
        store = await rt.store()
        try:
            service = await store.get(SERVICE, namespace, name)
        except NotFound:
            return Outcome(gone=True)  # its slices go with it (owner references)
        slices = [with_version(s) for s in await _rows(store, SLICE, _SLICES, namespace, name)]
        selector = endpointslice.selector_of(service.obj)
        pods: list[dict[str, Any]] = []
        if selector is not None and not service.deleting:
            pods = [p.obj for p in await _rows(store, POD, _PODS, namespace, selector)]
        zones = await _zones(store, pods)
        plan = endpointslice.reconcile(with_version(service), pods, slices, zones, now)
        return await apply_plan(store, service, plan, now=now, component=COMPONENT)


# The service's slices by the promoted, indexed ``service_name`` column; its pods by the GIN
# index on labels (a Service selector is a plain label map, which ``@>`` reads exactly).
_SLICES = f"SELECT {sql.COLS} FROM endpointslices WHERE namespace = $1 AND service_name = $2"
_PODS = f"SELECT {sql.COLS} FROM pods WHERE namespace = $1 AND labels @> $2::jsonb"


async def _rows(store: Store, kind: Any, query: str, namespace: str, arg: Any) -> list[Stored]:
    recs = await store.pool.fetch(query, namespace, arg)
    return [Stored(kind, str(r["uid"]), int(r["row_version"]), dict(r)) for r in recs]


async def _zones(store: Store, pods: list[dict[str, Any]]) -> dict[str, str]:
    """The zone of each node the pods run on (the nodes' promoted zone label)."""
    nodes = sorted({n for p in pods if (n := (p.get("spec") or {}).get("nodeName"))})
    if not nodes:
        return {}
    recs = await store.pool.fetch(
        "SELECT name, zone FROM nodes WHERE name = ANY($1::text[]) AND zone IS NOT NULL", nodes
    )
    return {str(r["name"]): str(r["zone"]) for r in recs}
