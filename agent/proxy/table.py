"""The node proxy's routing table and its choice of endpoint, as pure data (ADR 0040).

The subscriber (:mod:`agent.proxy.subscriber`) keeps a ``Replica`` of the discovery
resources; :class:`Table` turns the resources a message changed into services with their
ports and endpoints, rebuilding only the services touched. :class:`Picker` chooses the
endpoint for each new connection the forwarder (:mod:`agent.proxy.forward`) accepts, the DNS
responder (:mod:`agent.proxy.dns`) answers from the same table, and edge mode
(:mod:`agent.proxy.edge`) adds its own health checks to the choice.

The choice goes down a list of tiers and takes the first that has a candidate, so it never
refuses while any endpoint exists:

1. ready endpoints in the proxy's zone, then ready endpoints anywhere;
2. fail open: non-terminating endpoints (zone first), however unready discovery says they
   are (a readiness bug, or a control plane that cannot write, must not empty a service);
3. terminating endpoints, only when nothing else exists.

Within a tier, endpoints the proxy ejected itself (they refused or timed out a connection)
are skipped while any other candidate remains, and endpoints already tried for this
connection are skipped always. Nothing here reads a clock or draws a random number: the
caller passes ``now`` and, for random choice, a seeded ``random.Random``.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.traffic.protocol import ENDPOINT, SERVICE, Resources, service_of

EJECT_BASE = 2.0  # seconds an endpoint is ejected after its first refusal
EJECT_CAP = 30.0
EJECT_FORGET = 60.0  # a clean record this long after an ejection ends restarts the doubling

Target = tuple[str, int]  # (address, port) of an endpoint's port


@dataclass(frozen=True)
class Port:
    name: str
    port: int
    protocol: str = "TCP"


@dataclass(frozen=True)
class Endpoint:
    key: str
    address: str
    zone: str = ""
    node: str = ""
    ready: bool = True
    serving: bool = True
    terminating: bool = False
    ports: Mapping[str, int] = field(default_factory=dict)

    def target(self, port_name: str) -> Target | None:
        """Where a connection to the service port named ``port_name`` goes on this endpoint."""
        port = self.ports.get(port_name)
        return None if port is None else (self.address, int(port))


@dataclass(frozen=True)
class Service:
    key: str
    namespace: str
    name: str
    ip: str | None
    type: str = "ClusterIP"
    ports: tuple[Port, ...] = ()
    ext: str | None = None
    endpoints: tuple[Endpoint, ...] = ()

    def port(self, number: int) -> Port | None:
        return next((p for p in self.ports if p.port == number), None)


def endpoint_of(key: str, value: Mapping[str, Any]) -> Endpoint:
    ports = value.get("p") or {}
    return Endpoint(
        key=key,
        address=str(value.get("a") or ""),
        zone=str(value.get("z") or ""),
        node=str(value.get("n") or ""),
        ready=bool(value.get("r", True)),
        serving=bool(value.get("s", value.get("r", True))),
        terminating=bool(value.get("t", False)),
        ports={str(k): int(v) for k, v in ports.items() if isinstance(v, int)},
    )


def service_of_value(key: str, value: Mapping[str, Any], endpoints: Iterable[Endpoint]) -> Service:
    _, namespace, name = key.split("/", 2)
    ports = tuple(
        Port(str(p.get("name") or ""), int(p["port"]), str(p.get("protocol") or "TCP"))
        for p in value.get("ports") or []
        if isinstance(p.get("port"), int)
    )
    return Service(
        key=key,
        namespace=namespace,
        name=name,
        ip=value.get("ip") or None,
        type=str(value.get("type") or "ClusterIP"),
        ports=ports,
        ext=value.get("ext") or None,
        endpoints=tuple(sorted((e for e in endpoints if e.address), key=lambda e: e.key)),
    )


class Table:
    """Services by key and by name, rebuilt service by service as resources change."""

    def __init__(self) -> None:
        self.services: dict[str, Service] = {}
        self._members: dict[str, set[str]] = {}  # service key -> its endpoint keys seen
        self.invalid: set[str] = set()  # resources that could not be read (for the logs)

    def update(self, resources: Resources, changed: Iterable[str], reset: bool = False) -> None:
        """Bring the services that ``changed`` (resource keys) touch up to ``resources``; with
        ``reset`` (a snapshot), rebuild everything."""
        if reset:
            self.invalid.clear()
            self.services.clear()
            self._members.clear()
            changed = resources.keys()
        touched: set[str] = set()
        for key in changed:
            if not key.startswith((SERVICE + "/", ENDPOINT + "/")) or key.count("/") < 2:
                continue
            owner = service_of(key)
            touched.add(owner)
            if key.startswith(ENDPOINT + "/"):
                members = self._members.setdefault(owner, set())
                if key in resources:
                    members.add(key)
                else:
                    members.discard(key)
        for owner in touched:
            self._rebuild(resources, owner)

    def _rebuild(self, resources: Resources, owner: str) -> None:
        value = resources.get(owner)
        members = self._members.get(owner, set())
        if not members:
            self._members.pop(owner, None)
        if value is None:
            self.services.pop(owner, None)
            return
        endpoints = []
        for k in members:
            try:
                endpoints.append(endpoint_of(k, resources[k]))
            except (AttributeError, KeyError, TypeError, ValueError):
                self.invalid.add(k)  # one malformed endpoint must not stop the others
        try:
            self.services[owner] = service_of_value(owner, value, endpoints)
        except (AttributeError, KeyError, TypeError, ValueError):
            self.invalid.add(owner)
            self.services.pop(owner, None)

    def by_name(self, namespace: str, name: str) -> Service | None:
        return self.services.get(f"{SERVICE}/{namespace}/{name}")

    def vips(self) -> dict[Target, tuple[str, str]]:
        """Every (service ip, TCP port) to listen on -> (service key, port name)."""
        out: dict[Target, tuple[str, str]] = {}
        for key in sorted(self.services):
            svc = self.services[key]
            if svc.ip:
                for p in svc.ports:
                    if p.protocol.upper() == "TCP":
                        out.setdefault((svc.ip, p.port), (key, p.name))
        return out

    def load_balancer_ports(self, address: str) -> dict[Target, tuple[str, str]]:
        """Edge mode: every LoadBalancer service's TCP port on ``address``. Two services with
        the same port cannot share one address: the first by key keeps it."""
        out: dict[Target, tuple[str, str]] = {}
        for key in sorted(self.services):
            svc = self.services[key]
            if svc.type == "LoadBalancer":
                for p in svc.ports:
                    if p.protocol.upper() == "TCP":
                        out.setdefault((address, p.port), (key, p.name))
        return out


# -- which endpoints a new connection may go to ------------------------------------------------


def _zone_first(endpoints: list[Endpoint], zone: str) -> list[list[Endpoint]]:
    local = [e for e in endpoints if zone and e.zone == zone]
    return [local, endpoints] if local else [endpoints]


def node_tiers(endpoints: Iterable[Endpoint], zone: str) -> list[list[Endpoint]]:
    """The node proxy's tiers, best first: ready (zone first), any non-terminating (zone
    first: fail open), then terminating."""
    eps = list(endpoints)
    ready = [e for e in eps if e.ready and not e.terminating]
    live = [e for e in eps if not e.terminating]
    ending = [e for e in eps if e.terminating]
    return [*_zone_first(ready, zone), *_zone_first(live, zone), ending]


def edge_tiers(
    endpoints: Iterable[Endpoint], healthy: Callable[[Endpoint], bool], fail_open: float
) -> list[list[Endpoint]]:
    """The edge's tiers: endpoints healthy by its own checks and not terminating, those
    discovery also reports ready first; but when fewer than ``fail_open`` of the
    non-terminating endpoints pass its checks, all of those, so that neither a readiness bug
    nor a health-check bug empties the pool. Terminating endpoints come last."""
    eps = list(endpoints)
    live = [e for e in eps if not e.terminating]
    ending = [e for e in eps if e.terminating]
    ok = [e for e in live if healthy(e)]
    if len(ok) < fail_open * len(live):
        return [live, ending]
    return [[e for e in ok if e.ready], ok, live, ending]


@dataclass
class _Ejection:
    until: float
    seconds: float


class Ejections:
    """Endpoints (address, port) the proxy stopped sending new connections to on its own
    judgement: ``EJECT_BASE`` seconds after a refusal, doubling on each repeat up to
    ``EJECT_CAP``."""

    def __init__(self, base: float = EJECT_BASE, cap: float = EJECT_CAP) -> None:
        self.base, self.cap = base, cap
        self._by_target: dict[Target, _Ejection] = {}

    def eject(self, target: Target, now: float) -> float:
        """Eject ``target`` from ``now``; returns for how many seconds."""
        previous = self._by_target.get(target)
        if previous is None or now - previous.until > EJECT_FORGET:
            seconds = self.base
        elif now < previous.until:
            return previous.until - now  # already out (two connections failed at once)
        else:
            seconds = min(self.cap, previous.seconds * 2)
        self._by_target[target] = _Ejection(now + seconds, seconds)
        return seconds

    def ejected(self, target: Target, now: float) -> bool:
        entry = self._by_target.get(target)
        return entry is not None and now < entry.until

    def succeeded(self, target: Target, now: float) -> None:
        """A connection to ``target`` worked: its next ejection starts at the base again."""
        entry = self._by_target.get(target)
        if entry is not None and now >= entry.until:
            del self._by_target[target]

    def count(self, now: float) -> int:
        return sum(1 for e in self._by_target.values() if now < e.until)


# The tiers of a service's endpoints for connections to one of its ports (by port name).
Tiers = Callable[[Service, str], list[list[Endpoint]]]


class Picker:
    """Chooses the endpoint of each new connection: the first tier with a candidate, round
    robin within it (or at random with ``rng``)."""

    def __init__(self, tiers: Tiers, ejections: Ejections, rng: random.Random | None = None):
        self.tiers, self.ejections, self.rng = tiers, ejections, rng
        self._turn: dict[tuple[str, str], int] = {}

    def pick(
        self, service: Service, port_name: str, now: float, tried: Collection[Target] = ()
    ) -> tuple[Endpoint, Target] | None:
        """An endpoint and where to connect on it, or None when the service has none left
        (no endpoint serves that port, or all of them were ``tried``)."""
        tiers = self.tiers(service, port_name)
        for skip_ejected in (True, False):
            for tier in tiers:
                found = [
                    (e, t)
                    for e in tier
                    if (t := e.target(port_name)) is not None
                    and t not in tried
                    and not (skip_ejected and self.ejections.ejected(t, now))
                ]
                if found:
                    return self._one(service.key, port_name, found)
        return None

    def keep(self, services: Collection[str]) -> None:
        """Forget the round-robin turns of services no longer in ``services`` (keys)."""
        for gone in [k for k in self._turn if k[0] not in services]:
            del self._turn[gone]

    def _one(
        self, key: str, port_name: str, found: list[tuple[Endpoint, Target]]
    ) -> tuple[Endpoint, Target]:
        if self.rng is not None:
            return found[self.rng.randrange(len(found))]
        turn = self._turn.get((key, port_name), 0)
        self._turn[(key, port_name)] = turn + 1
        return found[turn % len(found)]
