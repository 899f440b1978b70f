"""The Kubernetes-style environment variables that tell a pod where its namespace's Services are.

Programs written for Kubernetes find a Service by ``<NAME>_SERVICE_HOST`` and
``<NAME>_SERVICE_PORT`` (and, from the days of docker links, ``<NAME>_PORT=tcp://ip:port`` and
its parts), without a DNS lookup. :meth:`agent.pods.PodWorker._resolve` lists the Services of
the pod's namespace once, when it resolves the pod's containers, and :func:`variables` turns
that list into the variables, purely; :func:`agent.sources.environment` puts them under the
container's own ``envFrom`` and ``env``, which win, as the kubelet does. As with every other
variable, a Service created after the pod started reaches it only through a new pod.

Only Services with a cluster IP count (a headless one, ``clusterIP: None``, or an
ExternalName one has no address to give). ``enableServiceLinks: false`` in the pod spec drops
the docker-link variables and keeps ``_SERVICE_HOST`` and ``_SERVICE_PORT*``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

Obj = dict[str, Any]


def env_name(name: str) -> str:
    """A Service or port name as a variable name part: upper case, ``-`` and ``.`` as ``_``."""
    return name.upper().replace("-", "_").replace(".", "_")


def cluster_ip(service: Mapping[str, Any]) -> str | None:
    """The Service's cluster IP; None for a headless or ExternalName one, or none allocated."""
    ip = (service.get("spec") or {}).get("clusterIP")
    return str(ip) if ip and ip != "None" else None


def _ports(service: Mapping[str, Any]) -> list[Obj]:
    ports = (service.get("spec") or {}).get("ports") or []
    return [p for p in ports if isinstance(p, dict) and p.get("port") is not None]


def _host_part(ip: str) -> str:
    return f"[{ip}]" if ":" in ip else ip  # an IPv6 address in a URL


def one_service(service: Mapping[str, Any], *, links: bool = True) -> dict[str, str]:
    """The variables of one Service (empty when it has no cluster IP)."""
    ip = cluster_ip(service)
    name = str((service.get("metadata") or {}).get("name") or "")
    if ip is None or not name:
        return {}
    prefix = env_name(name)
    out = {f"{prefix}_SERVICE_HOST": ip}
    ports = _ports(service)
    if ports:
        out[f"{prefix}_SERVICE_PORT"] = str(ports[0]["port"])
    for port in ports:
        if port.get("name"):
            out[f"{prefix}_SERVICE_PORT_{env_name(str(port['name']))}"] = str(port["port"])
    if not links:
        return out
    for i, port in enumerate(ports):
        proto = str(port.get("protocol") or "TCP")
        url = f"{proto.lower()}://{_host_part(ip)}:{port['port']}"
        if i == 0:
            out[f"{prefix}_PORT"] = url
        part = f"{prefix}_PORT_{port['port']}_{proto.upper()}"
        out[part] = url
        out[f"{part}_PROTO"] = proto.lower()
        out[f"{part}_PORT"] = str(port["port"])
        out[f"{part}_ADDR"] = ip
    return out


def variables(services: Iterable[Mapping[str, Any]], *, links: bool = True) -> dict[str, str]:
    """Every Service's variables, in name order (a deterministic environment)."""
    out: dict[str, str] = {}
    by_name = sorted(services, key=lambda s: str((s.get("metadata") or {}).get("name") or ""))
    for service in by_name:
        out.update(one_service(service, links=links))
    return out


def links_enabled(pod: Mapping[str, Any]) -> bool:
    """``spec.enableServiceLinks`` (default true)."""
    return (pod.get("spec") or {}).get("enableServiceLinks") is not False
