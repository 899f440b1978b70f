"""Service and EndpointSlice specs.

Services pick pods by a plain label map and expose numbered (and, when there are several,
named) ports; EndpointSlices record the addresses behind a Service, so their addresses must
parse as the declared address type.
"""

from __future__ import annotations

import ipaddress

from app.core.admission._util import Errs, Obj, idx, sub
from app.core.admission.container import PROTOCOLS
from app.core.admission.values import check_port
from app.core.names import validate_dns1123_label, validate_dns1123_subdomain

SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
ADDRESS_TYPES = ("IPv4", "IPv6", "FQDN")
MAX_ENDPOINTS = 1000
MAX_ADDRESSES = 100
MAX_PORTS = 100


def _ip_error(address: str, version: int | None) -> str | None:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return "must be a valid IP address"
    if version is not None and ip.version != version:
        return f"must be an IPv{version} address"
    return None


def _carry_cluster_ip(e: Errs, spec: Obj, old: Obj | None, kind: str | None) -> str | None:
    """The address the service held before this write (None on a create). An update that
    omits ``clusterIP`` keeps it; a change to ExternalName drops it (the database then releases
    the address). ``clusterIPs`` (single stack: one entry) must agree with ``clusterIP``. The
    address itself is allocated, or the client's choice checked against the range, by the
    database (migration 0007)."""
    old_spec = old.get("spec") if old is not None else None
    old_spec = old_spec if isinstance(old_spec, dict) else {}
    old_ip = old_spec.get("clusterIP") if isinstance(old_spec.get("clusterIP"), str) else None
    if kind == "ExternalName":
        if spec.get("clusterIP") in (None, "", old_ip):
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
        return None
    if old_ip and "clusterIPs" in old_spec:
        # A patch that changes one of the pair leaves the other as it was: follow the change,
        # so the one error is the address's immutability.
        if spec.get("clusterIPs") == old_spec["clusterIPs"] and spec.get("clusterIP"):
            spec["clusterIPs"] = [spec["clusterIP"]]
        elif spec.get("clusterIP") == old_ip and isinstance(spec.get("clusterIPs"), list):
            spec["clusterIP"] = next(iter(spec["clusterIPs"]), old_ip)
    ips = e.get_str_list(spec, "clusterIPs", "spec")
    if ips is not None and len(ips) > 1:
        e.invalid("spec.clusterIPs", ips, "only one address is supported (single stack)")
    elif ips:
        if spec.get("clusterIP") in (None, ""):
            spec["clusterIP"] = ips[0]
        elif spec.get("clusterIP") != ips[0]:
            e.invalid("spec.clusterIPs", ips, "must match spec.clusterIP")
    if old_ip and spec.get("clusterIP") in (None, ""):
        spec["clusterIP"] = old_ip
        if spec.get("clusterIPs") in (None, []) and "clusterIPs" in old_spec:
            spec["clusterIPs"] = old_spec["clusterIPs"]
    return old_ip


def check_service(e: Errs, obj: Obj, old: Obj | None) -> None:
    spec = e.get_obj(obj, "spec", "", required=True)
    if spec is None:
        return
    path = "spec"
    kind = e.get_enum(spec, "type", path, SERVICE_TYPES, default="ClusterIP")
    old_ip = _carry_cluster_ip(e, spec, old, kind)
    e.get_label_map(spec, "selector", path)
    cluster_ip = e.get_str(spec, "clusterIP", path)
    if cluster_ip and cluster_ip != "None":
        problem = _ip_error(cluster_ip, None)
        if problem:
            e.invalid(
                sub(path, "clusterIP"), cluster_ip, f'{problem} or "None" for a headless service'
            )
    if old_ip and cluster_ip and cluster_ip != old_ip:
        e.immutable(sub(path, "clusterIP"))
    e.get_enum(spec, "sessionAffinity", path, ("None", "ClientIP"), default="None")
    external = e.get_str(spec, "externalName", path)
    if kind == "ExternalName":
        if not external:
            e.required(sub(path, "externalName"), "for services of type ExternalName")
        else:
            e.each_error(sub(path, "externalName"), external, validate_dns1123_subdomain(external))
    ports = e.get_list(spec, "ports", path)
    headless = cluster_ip == "None" or kind == "ExternalName"
    if not headless and not spec.get("ports"):
        e.required(sub(path, "ports"), "a service needs at least one port")
    names: set[str] = set()
    items = list(e.objects(ports or [], sub(path, "ports")))
    for pp, port in items:
        number = e.get_int(port, "port", pp, required=True, minimum=1, maximum=65535)
        e.get_enum(port, "protocol", pp, PROTOCOLS, default="TCP")
        if port.get("targetPort") is None and number is not None:
            port["targetPort"] = number
        check_port(e, port, "targetPort", pp)
        e.get_int(port, "nodePort", pp, minimum=0, maximum=65535)
        e.get_str(port, "appProtocol", pp)
        name = e.get_str(port, "name", pp, required=len(items) > 1)
        if name:
            e.each_error(sub(pp, "name"), name, validate_dns1123_label(name))
            if name in names:
                e.duplicate(sub(pp, "name"), name)
            names.add(name)


def check_endpointslice(e: Errs, obj: Obj, old: Obj | None) -> None:
    kind = e.get_enum(obj, "addressType", "", ADDRESS_TYPES, required=True)
    if old is not None and old.get("addressType") not in (None, obj.get("addressType")):
        e.immutable("addressType")
    version = {"IPv4": 4, "IPv6": 6}.get(kind or "")
    endpoints = e.get_list(obj, "endpoints", "")
    if endpoints is not None and len(endpoints) > MAX_ENDPOINTS:
        e.too_many("endpoints", MAX_ENDPOINTS)
        endpoints = None
    for ep, endpoint in e.objects(endpoints or [], "endpoints"):
        addresses = e.get_str_list(endpoint, "addresses", ep, required=True)
        ap = sub(ep, "addresses")
        if addresses == []:
            e.required(ap, "must contain at least one address")
        elif addresses is not None and len(addresses) > MAX_ADDRESSES:
            e.too_many(ap, MAX_ADDRESSES)
        for i, address in enumerate(addresses or []):
            if kind == "FQDN":
                e.each_error(idx(ap, i), address, validate_dns1123_subdomain(address))
            elif kind is not None:
                problem = _ip_error(address, version)
                if problem:
                    e.invalid(idx(ap, i), address, problem)
        conditions = e.get_obj(endpoint, "conditions", ep)
        if conditions is not None:
            for flag in ("ready", "serving", "terminating"):
                e.get_bool(conditions, flag, sub(ep, "conditions"))
        for field in ("nodeName", "zone", "hostname"):
            e.get_str(endpoint, field, ep)
        target = e.get_obj(endpoint, "targetRef", ep)
        if target is not None:
            for field in ("kind", "name", "namespace", "uid"):
                e.get_str(target, field, sub(ep, "targetRef"))
    ports = e.get_list(obj, "ports", "")
    if ports is not None and len(ports) > MAX_PORTS:
        e.too_many("ports", MAX_PORTS)
        ports = None
    names: set[str] = set()
    for pp, port in e.objects(ports or [], "ports"):
        e.get_int(port, "port", pp, minimum=1, maximum=65535)
        e.get_enum(port, "protocol", pp, PROTOCOLS, default="TCP")
        e.get_str(port, "appProtocol", pp)
        name = e.get_str(port, "name", pp, default="")
        if name:
            e.each_error(sub(pp, "name"), name, validate_dns1123_label(name))
        if name is not None:
            if name in names:
                e.duplicate(sub(pp, "name"), name)
            names.add(name)
