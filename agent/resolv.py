"""The ``/etc/resolv.conf`` a ``runc`` pod sees: the cluster's nameserver and search path.

A pod asks for ``web`` or ``web.shop`` and expects the node proxy's DNS responder (which
answers ``<svc>.<ns>.svc.<domain>``) to find it, as in Kubernetes: ``nameserver`` the agent's
``--cluster-dns``, ``search <ns>.svc.<domain> svc.<domain> <domain>``, ``options ndots:5``.
:class:`agent.pods.PodWorker` calls :func:`resolv_conf` when it resolves a ``runc`` pod, puts
the text among the pod's files (:data:`agent.runtime.oci.RESOLV_CONF_FILE`, in the pod's
directory) and the OCI config binds that file read-only at ``/etc/resolv.conf``. The
``process`` runtime has no mount namespace: its pods keep the host's file.

``spec.dnsPolicy`` (Kubernetes' values):

- ``ClusterFirst`` (the default) and ``ClusterFirstWithHostNet``: the cluster's file, with
  ``spec.dnsConfig`` merged in as Kubernetes does (extra nameservers and search domains
  appended, options by name, the pod's winning); none without ``--cluster-dns``.
- ``Default``: the node's (the image's) file, untouched.
- ``None``: exactly ``spec.dnsConfig``'s nameservers, searches and options.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_NAMESERVERS = 3  # glibc's MAXNS: later ones are ignored by the resolver anyway
MAX_SEARCHES = 32  # Kubernetes' MaxDNSSearchPaths


@dataclass(frozen=True)
class ClusterDns:
    """The agent's ``--cluster-dns`` and ``--cluster-domain``."""

    nameserver: str
    domain: str = "cluster.local"

    def searches(self, namespace: str) -> list[str]:
        return [f"{namespace}.svc.{self.domain}", f"svc.{self.domain}", self.domain]


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(i for i in items if i))


def _options(base: list[tuple[str, str | None]], extra: Any) -> list[tuple[str, str | None]]:
    merged = dict(base)
    for option in extra or []:
        if isinstance(option, Mapping) and option.get("name"):
            value = option.get("value")
            merged[str(option["name"])] = None if value is None else str(value)
    return list(merged.items())


def render(
    nameservers: list[str], searches: list[str], options: list[tuple[str, str | None]]
) -> str:
    """resolv.conf text; empty parts are left out."""
    lines = [f"nameserver {n}" for n in _unique(nameservers)[:MAX_NAMESERVERS]]
    if search := _unique(searches)[:MAX_SEARCHES]:
        lines.append("search " + " ".join(search))
    if options:
        lines.append("options " + " ".join(n if v is None else f"{n}:{v}" for n, v in options))
    return "".join(line + "\n" for line in lines)


def resolv_conf(pod: Mapping[str, Any], cluster: ClusterDns | None) -> str | None:
    """The pod's resolv.conf, or None to leave the image's (host's) file alone."""
    spec = pod.get("spec") or {}
    policy = str(spec.get("dnsPolicy") or "ClusterFirst")
    config = spec.get("dnsConfig") or {}
    extra_ns = [str(n) for n in config.get("nameservers") or []]
    extra_search = [str(s) for s in config.get("searches") or []]
    if policy == "None":
        return render(extra_ns, extra_search, _options([], config.get("options")))
    if policy == "Default" or cluster is None or not cluster.nameserver:
        return None
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    return render(
        [cluster.nameserver, *extra_ns],
        [*cluster.searches(namespace), *extra_search],
        _options([("ndots", "5")], config.get("options")),
    )
