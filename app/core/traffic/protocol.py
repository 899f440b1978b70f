"""The discovery wire protocol: resources, messages and the subscriber's copy (ADR 0038).

One TCP connection per subscriber carries newline-delimited JSON both ways. The subscriber
says who it is and which version it holds; the server answers with a snapshot, or with only
what changed since that version, and then streams a delta per change. Every message that
carries state has a version (a revision of the cluster's revision stream, so every discovery
replica numbers the same state alike) and a nonce; the subscriber acknowledges each by both,
or refuses one it cannot apply (a NACK), after which the server sends a snapshot.

Resources are small and many: a service is ``s/<ns>/<name>``, each of its endpoints
``e/<ns>/<service>/<id>``, so an endpoint that turns unready costs one ~150-byte delta rather
than its service's whole list. ``Replica`` is the subscriber's side: the node proxy and the
benchmark's simulated subscribers hold one each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

Value = dict[str, Any]
Resources = dict[str, Value]

SERVICE = "s"
ENDPOINT = "e"
SCOPES = ("all", "exposed")
EXPOSED_TYPES = ("LoadBalancer",)
MAX_LINE = 64 * 1024 * 1024  # a snapshot of 200,000 endpoints is ~30 MB

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()


class ProtocolError(ValueError):
    """A message that is not valid JSON, or not a message of this protocol."""


def service_key(namespace: str, name: str) -> str:
    return f"{SERVICE}/{namespace}/{name}"


def endpoint_key(namespace: str, service: str, ident: str) -> str:
    return f"{ENDPOINT}/{namespace}/{service}/{ident}"


def service_of(key: str) -> str:
    """The service resource a resource belongs to (a service is its own)."""
    if key.startswith(SERVICE + "/"):
        return key
    _, namespace, service, _ = key.split("/", 3)
    return service_key(namespace, service)


def is_exposed(service: Value | None) -> bool:
    """Whether a service is sent to subscribers of scope ``exposed`` (edge load balancers)."""
    return service is not None and service.get("type") in EXPOSED_TYPES


# -- resources from stored objects -----------------------------------------------------------


def service_resource(obj: dict[str, Any]) -> Value:
    """A Service object as the resource subscribers get: its address, type and ports."""
    spec = obj.get("spec") or {}
    ip = spec.get("clusterIP")
    value: Value = {
        "ip": ip if ip and ip != "None" else None,
        "type": spec.get("type") or "ClusterIP",
        "ports": [
            {
                "name": p.get("name") or "",
                "port": p.get("port"),
                "protocol": p.get("protocol") or "TCP",
            }
            for p in spec.get("ports") or []
        ],
    }
    if spec.get("externalName"):
        value["ext"] = spec["externalName"]
    return value


def slice_resources(obj: dict[str, Any]) -> Resources:
    """An EndpointSlice's endpoints as resources, keyed by pod name (or address without one).
    A slice not labelled with its service contributes nothing."""
    meta = obj.get("metadata") or {}
    service = (meta.get("labels") or {}).get("kubernetes.io/service-name")
    if not service:
        return {}
    namespace = meta.get("namespace") or ""
    ports = {p.get("name") or "": p.get("port") for p in obj.get("ports") or []}
    out: Resources = {}
    for ep in obj.get("endpoints") or []:
        addresses = ep.get("addresses") or []
        if not addresses:
            continue
        cond = ep.get("conditions") or {}
        ready = cond.get("ready")
        ready = True if ready is None else bool(ready)  # unset means ready, as in Kubernetes
        serving = cond.get("serving")
        ident = (ep.get("targetRef") or {}).get("name") or addresses[0]
        out[endpoint_key(namespace, service, ident)] = {
            "a": addresses[0],
            "z": ep.get("zone") or "",
            "n": ep.get("nodeName") or "",
            "r": ready,
            "s": ready if serving is None else bool(serving),
            "t": bool(cond.get("terminating")),
            "p": ports,
        }
    return out


# -- messages ---------------------------------------------------------------------------------


def encode(message: dict[str, Any]) -> bytes:
    """One message as a line of JSON."""
    return _enc.encode(message) + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    """One line as a message with a type, or ``ProtocolError``."""
    try:
        message = _dec.decode(line)
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    if not isinstance(message, dict) or not isinstance(message.get("t"), str):
        raise ProtocolError('a message is a JSON object with a string "t"')
    return message


def subscribe(
    ident: str, node: str = "", zone: str = "", scope: str = "all", version: int = 0
) -> bytes:
    return encode(
        {"t": "subscribe", "id": ident, "node": node, "zone": zone, "scope": scope, "v": version}
    )


def snapshot(version: int, nonce: int, resources: Resources) -> bytes:
    return encode({"t": "snapshot", "v": version, "nonce": nonce, "resources": resources})


def delta(
    version: int,
    since: int,
    nonce: int,
    changed: Resources,
    removed: list[str],
    reset: list[str] | None = None,
) -> bytes:
    """A delta; ``reset`` names services whose endpoints the subscriber drops before it
    applies ``set`` (a catch-up that knows which services changed, not which endpoints)."""
    message: dict[str, Any] = {
        "t": "delta", "v": version, "from": since, "nonce": nonce, "set": changed, "del": removed
    }  # fmt: skip
    if reset:
        message["reset"] = reset
    return encode(message)


def ping(version: int) -> bytes:
    return encode({"t": "ping", "v": version})


def ack(version: int, nonce: int) -> bytes:
    return encode({"t": "ack", "v": version, "nonce": nonce})


def nack(version: int, nonce: int, error: str) -> bytes:
    return encode({"t": "nack", "v": version, "nonce": nonce, "error": error})


@dataclass(frozen=True)
class Subscription:
    """What a subscriber asked for in its first message."""

    ident: str
    node: str
    zone: str
    scope: str
    version: int


def parse_subscribe(message: dict[str, Any]) -> Subscription:
    """The first message of a connection, checked field by field."""
    if message.get("t") != "subscribe":
        raise ProtocolError('the first message must be {"t": "subscribe", ...}')
    ident, scope, version = message.get("id"), message.get("scope", "all"), message.get("v", 0)
    if not isinstance(ident, str) or not ident or len(ident) > 253:
        raise ProtocolError("id: a non-empty string of at most 253 characters is required")
    if scope not in SCOPES:
        raise ProtocolError(f"scope: must be one of {', '.join(SCOPES)}")
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise ProtocolError("v: must be a non-negative integer")
    node, zone = message.get("node", ""), message.get("zone", "")
    if not isinstance(node, str) or not isinstance(zone, str):
        raise ProtocolError("node, zone: must be strings")
    return Subscription(ident, node, zone, scope, version)


# -- the subscriber's copy --------------------------------------------------------------------


@dataclass
class Applied:
    """What one message did to a replica: the reply to send (an ACK, a NACK or nothing), the
    resources it changed, and whether it replaced the whole copy."""

    reply: bytes | None = None
    changed: set[str] = field(default_factory=set)
    reset: bool = False


@dataclass
class Replica:
    """A subscriber's copy of the resources it receives, at ``version``."""

    version: int = 0
    resources: Resources = field(default_factory=dict)

    def apply(self, message: dict[str, Any]) -> Applied:
        kind = message.get("t")
        version, nonce = message.get("v"), message.get("nonce", 0)
        if kind == "ping" or kind is None:
            return Applied()
        if not isinstance(version, int) or not isinstance(nonce, int):
            return Applied(nack(self.version, 0, "v and nonce must be integers"))
        if kind == "snapshot":
            resources = message.get("resources")
            if not isinstance(resources, dict):
                return Applied(nack(version, nonce, "snapshot without resources"))
            changed = set(self.resources) | set(resources)
            self.resources, self.version = resources, version
            return Applied(ack(version, nonce), changed, reset=True)
        if kind == "delta":
            if message.get("from") != self.version:
                gap = f"delta from {message.get('from')} but this copy is at {self.version}"
                return Applied(nack(self.version, nonce, gap))
            changed_values = message.get("set") or {}
            removed = message.get("del") or []
            reset = message.get("reset") or []
            if not all(isinstance(x, list) for x in (removed, reset)) or not isinstance(
                changed_values, dict
            ):
                return Applied(nack(self.version, nonce, "set must be an object, del a list"))
            dropped = self._endpoints_of(reset)
            for key in dropped:
                self.resources.pop(key, None)
            self.resources.update(changed_values)
            for key in removed:
                self.resources.pop(key, None)
            self.version = version
            return Applied(ack(version, nonce), {*changed_values, *removed, *dropped})
        return Applied(nack(self.version, nonce, f"unknown message type {kind!r}"))

    def _endpoints_of(self, services: list[str]) -> list[str]:
        prefixes = tuple(
            f"{ENDPOINT}/{s.split('/', 1)[1]}/" for s in services if isinstance(s, str) and "/" in s
        )
        return [k for k in self.resources if prefixes and k.startswith(prefixes)]
