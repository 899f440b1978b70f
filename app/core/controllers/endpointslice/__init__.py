"""The EndpointSlice controller as a pure function: a Service's pods, as slices of at most 100
endpoints that the discovery service streams to the node proxies.

``reconcile(service, pods, slices, zones, now)`` takes the Service (key: its namespace/name),
the pods of its namespace (or only those its selector picks), the slices labelled with its
name, and the zone of each node the pods run on; it returns the ``Plan`` of slice creates,
updates (with the ``resourceVersion`` read) and deletes. The shell
(``workers.controllers.endpointslice``) reads those and applies the plan with
``workers.controllers.apply.apply_plan``.

Only slices labelled ``endpointslice.kubernetes.io/managed-by:
endpointslice-controller.quaymaster.io`` are the controller's; others (a service without a
selector fed by hand) are never touched. A service without a selector, or of type
ExternalName, loses its managed slices. Placement and the write rate limit are in
``packing``; what one endpoint is, in ``endpoints``. See ADR 0037.
"""

from __future__ import annotations

from typing import Any

from app.core.controllers.endpointslice.endpoints import (
    MANAGED_BY_LABEL,
    MANAGER,
    SERVICE_NAME_LABEL,
    ZONE_LABEL,
    Desired,
    ServiceSelectors,
    desired_endpoints,
    endpoint_order,
    render_ports,
    selector_of,
    selects,
)
from app.core.controllers.endpointslice.packing import LAST_WRITE, Slot, last_write, place
from app.core.controllers.plan import (
    Plan,
    controller_uid,
    delete_of,
    is_deleting,
    owner_reference,
)
from app.core.kinds import API_VERSION

__all__ = [
    "LAST_WRITE",
    "MANAGED_BY_LABEL",
    "MANAGER",
    "MAX_ENDPOINTS",
    "MIN_WRITE_INTERVAL",
    "SERVICE_NAME_LABEL",
    "ZONE_LABEL",
    "Desired",
    "ServiceSelectors",
    "desired_endpoints",
    "last_write",
    "managed",
    "reconcile",
    "selector_of",
    "selects",
]

Obj = dict[str, Any]
MAX_ENDPOINTS = 100
# A slice is written at most once per this many seconds; changes meanwhile are batched.
MIN_WRITE_INTERVAL = 1.0


def managed(slice_obj: Obj, service_name: str) -> bool:
    """Whether a slice is this controller's, for the service named ``service_name``."""
    labels = (slice_obj.get("metadata") or {}).get("labels") or {}
    return (
        labels.get(MANAGED_BY_LABEL) == MANAGER and labels.get(SERVICE_NAME_LABEL) == service_name
    )


def reconcile(
    service: Obj,
    pods: list[Obj],
    slices: list[Obj],
    zones: dict[str, str],
    now: float,
    *,
    max_endpoints: int = MAX_ENDPOINTS,
    interval: float = MIN_WRITE_INTERVAL,
) -> Plan:
    """The slice writes that make the service's managed slices show its pods (see module)."""
    if is_deleting(service):
        return Plan()  # the garbage collector takes the slices with it
    name = service["metadata"]["name"]
    ours = [s for s in slices if managed(s, name)]
    if selector_of(service) is None:
        return Plan(deletes=tuple(delete_of(s) for s in ours))
    uid = str(service["metadata"].get("uid", ""))
    # A slice of an earlier service of the same name (or not IPv4) is replaced, not reused.
    stale = [s for s in ours if controller_uid(s) != uid or s.get("addressType") != "IPv4"]
    current = [s for s in ours if s not in stale]
    want = desired_endpoints(service, pods, zones)
    placed = place(want, current, now, cap=max_endpoints, interval=interval)
    stamp = f"{now:.3f}"
    return Plan(
        creates=tuple(_new_slice(service, slot, stamp) for slot in placed.creates),
        updates=tuple(_updated(service, slot, stamp) for slot in placed.writes),
        deletes=tuple(delete_of(s) for s in [*stale, *placed.deletes]),
        requeue_after=placed.wait,
    )


def _labels(service: Obj, existing: dict[str, str] | None = None) -> dict[str, str]:
    return {
        **(existing or {}),
        SERVICE_NAME_LABEL: service["metadata"]["name"],
        MANAGED_BY_LABEL: MANAGER,
    }


def _body(slot: Slot) -> Obj:
    return {
        "addressType": "IPv4",
        "endpoints": sorted(slot.endpoints.values(), key=endpoint_order),
        "ports": render_ports(slot.ports),
    }


def _new_slice(service: Obj, slot: Slot, stamp: str) -> Obj:
    meta = service["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": "EndpointSlice",
        "metadata": {
            "generateName": f"{meta['name']}-",
            "namespace": meta.get("namespace", ""),
            "labels": _labels(service),
            "annotations": {LAST_WRITE: stamp},
            "ownerReferences": [owner_reference(service)],
        },
        **_body(slot),
    }


def _updated(service: Obj, slot: Slot, stamp: str) -> Obj:
    assert slot.obj is not None
    old = slot.obj
    meta = dict(old["metadata"])
    meta["labels"] = _labels(service, meta.get("labels"))
    meta["annotations"] = {**(meta.get("annotations") or {}), LAST_WRITE: stamp}
    return {**old, "metadata": meta, **_body(slot)}
