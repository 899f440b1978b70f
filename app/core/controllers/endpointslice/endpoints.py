"""What a Service's endpoints should be, from its pods: one endpoint per pod that has an IPv4
address and has not finished, with its conditions, node, zone and resolved ports.

Pure: the EndpointSlice controller's core (``app.core.controllers.endpointslice``) calls it
with the pods and node zones its shell read; the dispatcher's ``ServiceSelectors`` uses the
same selector rule to know which Services a pod change concerns.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.core.controllers.plan import is_deleting

Obj = dict[str, Any]
# (name, port, protocol) for each port of a slice, in the service's order: the slices of a
# service are grouped by it, since a named targetPort may resolve differently per pod.
Ports = tuple[tuple[str, int, str], ...]

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGER = "endpointslice-controller.quaymaster.io"
ZONE_LABEL = "topology.kubernetes.io/zone"
_FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class Desired:
    """One endpoint as it should be written, and the ports of the slices it may live in."""

    key: str
    endpoint: Obj
    ports: Ports


def selector_of(service: Obj) -> dict[str, str] | None:
    """The label map whose pods back the service, or ``None`` when the controller manages no
    slices for it: no selector (its slices are someone else's), or type ExternalName."""
    spec = service.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return None
    selector = spec.get("selector")
    if not isinstance(selector, dict) or not selector:
        return None
    return {str(k): str(v) for k, v in selector.items()}


def selects(selector: Mapping[str, str], labels: Mapping[str, Any] | None) -> bool:
    """Whether a service's plain label selector picks a pod with ``labels``."""
    labels = labels or {}
    return all(labels.get(k) == v for k, v in selector.items())


def endpoint_key(endpoint: Obj) -> str:
    """An endpoint's identity across writes: its pod's uid (a pod recreated under the same
    name is a new endpoint), else its first address."""
    ref = endpoint.get("targetRef") or {}
    if ref.get("uid"):
        return f"uid:{ref['uid']}"
    addresses = endpoint.get("addresses") or [""]
    return f"ip:{addresses[0]}"


def endpoint_order(endpoint: Obj) -> tuple[str, str]:
    """The order endpoints are written in within a slice (by pod name), so that a slice's
    content compares equal whatever order its endpoints were gathered in."""
    ref = endpoint.get("targetRef") or {}
    addresses = endpoint.get("addresses") or [""]
    return str(ref.get("name") or ""), str(addresses[0])


def ports_of(slice_obj: Obj) -> Ports:
    """A stored slice's ports in the canonical form."""
    out = []
    for p in slice_obj.get("ports") or []:
        if isinstance(p, dict) and p.get("port") is not None:
            out.append((str(p.get("name") or ""), int(p["port"]), str(p.get("protocol") or "TCP")))
    return tuple(out)


def render_ports(ports: Ports) -> list[Obj]:
    return [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports]


def resolve_ports(service: Obj, pod: Obj) -> Ports:
    """The service's ports as this pod serves them: a numeric ``targetPort`` as is, a named
    one looked up in the pod's containers' ports (same name and protocol); a name the pod
    does not declare leaves that port out for this pod, as Kubernetes does."""
    out = []
    for sp in (service.get("spec") or {}).get("ports") or []:
        if not isinstance(sp, dict):
            continue
        protocol = str(sp.get("protocol") or "TCP")
        target = sp.get("targetPort", sp.get("port"))
        number = _container_port(pod, target, protocol) if isinstance(target, str) else target
        if isinstance(number, int) and not isinstance(number, bool) and 0 < number < 65536:
            out.append((str(sp.get("name") or ""), number, protocol))
    return tuple(out)


def _container_port(pod: Obj, name: str, protocol: str) -> int | None:
    if name.isdigit():
        return int(name)
    for c in (pod.get("spec") or {}).get("containers") or []:
        for p in (c or {}).get("ports") or []:
            if p.get("name") == name and str(p.get("protocol") or "TCP") == protocol:
                number = p.get("containerPort")
                return number if isinstance(number, int) else None
    return None


def _ipv4(address: Any) -> bool:
    try:
        return isinstance(address, str) and ipaddress.ip_address(address).version == 4
    except ValueError:
        return False


def _ready(pod: Obj) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def endpoint_of(service: Obj, pod: Obj, zones: Mapping[str, str]) -> Desired | None:
    """The endpoint a pod contributes, or ``None`` (no IPv4 address yet, or finished).

    ready: Ready and not terminating (or the service publishes not-ready addresses);
    serving: Ready, terminating or not; terminating: the pod has a deletionTimestamp."""
    status = pod.get("status") or {}
    address = status.get("podIP")
    if not _ipv4(address) or status.get("phase") in _FINISHED:
        return None
    meta = pod["metadata"]
    serving = _ready(pod)
    terminating = is_deleting(pod)
    publish = (service.get("spec") or {}).get("publishNotReadyAddresses") is True
    endpoint: Obj = {
        "addresses": [address],
        "conditions": {
            "ready": publish or (serving and not terminating),
            "serving": publish or serving,
            "terminating": terminating,
        },
    }
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        endpoint["nodeName"] = node
        if zones.get(node):
            endpoint["zone"] = zones[node]
    endpoint["targetRef"] = {
        "kind": "Pod",
        "namespace": meta.get("namespace", ""),
        "name": meta["name"],
        "uid": str(meta.get("uid", "")),
    }
    return Desired(endpoint_key(endpoint), endpoint, resolve_ports(service, pod))


def desired_endpoints(
    service: Obj, pods: list[Obj], zones: Mapping[str, str]
) -> dict[str, Desired]:
    """Every endpoint the service should have, by key. ``pods`` may be any superset of the
    service's own (the whole namespace): the selector is applied here."""
    selector = selector_of(service)
    if selector is None:
        return {}
    namespace = service["metadata"].get("namespace", "")
    out: dict[str, Desired] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        if meta.get("namespace", "") != namespace or not selects(selector, meta.get("labels")):
            continue
        found = endpoint_of(service, pod, zones)
        if found is not None:
            out.setdefault(found.key, found)
    return out


class ServiceSelectors:
    """Which Services of a namespace select a pod, kept from the revision stream (the
    dispatcher's index). A pod's change wakes the Services that select it now and those that
    selected it last time it was seen (its labels changed, or it is gone), so neither keeps a
    stale endpoint."""

    def __init__(self) -> None:
        self._selectors: dict[str, dict[str, dict[str, str]]] = {}
        self._matched: dict[tuple[str, str], tuple[str, ...]] = {}

    def observe_service(self, namespace: str, name: str, obj: Obj | None) -> None:
        """A Service's change (``obj`` None: deleted)."""
        selector = None if obj is None else selector_of(obj)
        services = self._selectors.setdefault(namespace, {})
        if selector is None:
            services.pop(name, None)
        else:
            services[name] = selector

    def observe_pod(self, namespace: str, name: str, labels: Mapping[str, Any] | None,
                    deleted: bool) -> list[str]:  # fmt: skip
        """The names of the Services this pod change concerns."""
        before = self._matched.pop((namespace, name), ())
        now: tuple[str, ...] = ()
        if not deleted:
            services = self._selectors.get(namespace, {})
            now = tuple(s for s, sel in services.items() if selects(sel, labels))
            if now:
                self._matched[(namespace, name)] = now
        return list(dict.fromkeys((*now, *before)))
