"""The ``NodeUsageSample`` an agent posts, validated field by field into a store sample.

Kept apart from the routes so the rules are pure and unit-tested: every bad field becomes a
cause of one 422 ``Invalid`` (at most ``MAX_CAUSES`` of them, so a hostile body cannot make a
huge answer), numbers are integers within bounds, names are what the API accepts for pods,
namespaces and containers, and a body is at most ``MAX_PODS`` pods of ``MAX_CONTAINERS``
containers. The sample's time is the agent's clock; it must be no more than ``MAX_SKEW_S``
ahead of this server's (a far-future time would order the node's history wrongly) and no older
than the store's retention (it would be trimmed at once).

Body::

    {"apiVersion": "metrics.quaymaster.io/v1", "kind": "NodeUsageSample",
     "metadata": {"name": "<node>"}, "timestamp": "2024-05-01T12:00:00.000Z", "window": "10s",
     "pods": [{"namespace": "default", "name": "web-1", "uid": "...", "priority": 0,
               "cpuMillis": 250, "memoryBytes": 104857600,
               "containers": [{"name": "web", "cpuMillis": 250, "memoryBytes": 104857600}]}]}
"""

from __future__ import annotations

import datetime as dt
from typing import Any, Final

from app.api.service import decode_body
from app.core import errors
from app.core.errors import Cause
from app.core.names import validate_dns1123_label, validate_dns1123_subdomain
from app.store.usage import ContainerUsage, NodeSample, PodUsage

GROUP_VERSION: Final = "metrics.quaymaster.io/v1"
KIND: Final = "NodeUsageSample"
MAX_PODS: Final = 1000
MAX_CONTAINERS: Final = 64
MAX_CAUSES: Final = 50
MAX_CPU_MILLIS: Final = 10_000_000  # 10,000 cores
MAX_MEMORY_BYTES: Final = 2**50  # 1 PiB
MAX_PRIORITY: Final = 2**31 - 1
MAX_UID: Final = 128
MAX_SKEW_S: Final = 300.0
MAX_WINDOW_S: Final = 3600.0
TOP_LEVEL: Final = ("apiVersion", "kind", "metadata", "timestamp", "window", "pods")
POD_KEYS: Final = ("namespace", "name", "uid", "priority", "cpuMillis", "memoryBytes",
                   "containers")  # fmt: skip
CONTAINER_KEYS: Final = ("name", "cpuMillis", "memoryBytes")


class _Causes:
    def __init__(self) -> None:
        self.items: list[Cause] = []

    def add(self, field: str, reason: str, message: str) -> None:
        if len(self.items) < MAX_CAUSES:
            self.items.append(Cause(field, reason, message))


def _int(c: _Causes, value: Any, field: str, low: int, high: int) -> int:
    if value is None:
        c.add(field, "FieldValueRequired", "required")
    elif not isinstance(value, int) or isinstance(value, bool):
        c.add(field, "FieldValueInvalid", "must be an integer")
    elif not low <= value <= high:
        c.add(field, "FieldValueInvalid", f"must be between {low} and {high}")
    else:
        return value
    return 0


def _name(c: _Causes, value: Any, field: str, label: bool) -> str:
    if value in (None, ""):
        c.add(field, "FieldValueRequired", "required")
        return ""
    if not isinstance(value, str):
        c.add(field, "FieldValueInvalid", "must be a string")
        return ""
    problems = validate_dns1123_label(value) if label else validate_dns1123_subdomain(value)
    for problem in problems:
        c.add(field, "FieldValueInvalid", problem)
    return value


def _unknown(c: _Causes, obj: dict[str, Any], allowed: tuple[str, ...], at: str) -> None:
    for key in obj:
        if key not in allowed:
            c.add(f"{at}{str(key)[:64]}", "FieldValueNotSupported", "unknown field")


def _container(c: _Causes, raw: Any, at: str) -> ContainerUsage:
    if not isinstance(raw, dict):
        c.add(at, "FieldValueInvalid", "must be an object")
        return ContainerUsage("", 0, 0)
    _unknown(c, raw, CONTAINER_KEYS, at + ".")
    return ContainerUsage(
        _name(c, raw.get("name"), at + ".name", label=True),
        _int(c, raw.get("cpuMillis"), at + ".cpuMillis", 0, MAX_CPU_MILLIS),
        _int(c, raw.get("memoryBytes"), at + ".memoryBytes", 0, MAX_MEMORY_BYTES),
    )


def _containers(c: _Causes, raw: Any, at: str) -> tuple[ContainerUsage, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        c.add(at, "FieldValueInvalid", "must be a list")
        return ()
    if len(raw) > MAX_CONTAINERS:
        c.add(at, "TooMany", f"at most {MAX_CONTAINERS} containers")
        return ()
    out = tuple(_container(c, item, f"{at}[{i}]") for i, item in enumerate(raw))
    names = [x.name for x in out]
    for i, n in enumerate(names):
        if n and n in names[:i]:
            c.add(f"{at}[{i}].name", "FieldValueDuplicate", f"container {n!r} appears twice")
    return out


def _pod(c: _Causes, raw: Any, at: str) -> PodUsage | None:
    if not isinstance(raw, dict):
        c.add(at, "FieldValueInvalid", "must be an object")
        return None
    _unknown(c, raw, POD_KEYS, at + ".")
    uid = raw.get("uid")
    if not isinstance(uid, str) or not 0 < len(uid) <= MAX_UID:
        c.add(at + ".uid", "FieldValueInvalid", f"must be a string of 1 to {MAX_UID} characters")
    return PodUsage(
        namespace=_name(c, raw.get("namespace"), at + ".namespace", label=True),
        name=_name(c, raw.get("name"), at + ".name", label=False),
        uid=uid if isinstance(uid, str) else "",
        priority=_int(c, raw.get("priority", 0), at + ".priority", -MAX_PRIORITY, MAX_PRIORITY),
        cpu_millis=_int(c, raw.get("cpuMillis"), at + ".cpuMillis", 0, MAX_CPU_MILLIS),
        memory_bytes=_int(c, raw.get("memoryBytes"), at + ".memoryBytes", 0, MAX_MEMORY_BYTES),
        containers=_containers(c, raw.get("containers"), at + ".containers"),
    )


def _pods(c: _Causes, raw: Any) -> tuple[PodUsage, ...]:
    if raw is None:
        c.add("pods", "FieldValueRequired", "required (an empty list when no pod runs)")
        return ()
    if not isinstance(raw, list):
        c.add("pods", "FieldValueInvalid", "must be a list")
        return ()
    if len(raw) > MAX_PODS:
        c.add("pods", "TooMany", f"at most {MAX_PODS} pods")
        return ()
    pods = [_pod(c, item, f"pods[{i}]") for i, item in enumerate(raw)]
    seen: set[tuple[str, str]] = set()
    for i, p in enumerate(pods):
        if p is not None and p.name:
            if (p.namespace, p.name) in seen:
                c.add(f"pods[{i}]", "FieldValueDuplicate", f"pod {p.namespace}/{p.name} twice")
            seen.add((p.namespace, p.name))
    return tuple(p for p in pods if p is not None)


def _timestamp(c: _Causes, raw: Any, now: float, retention_s: float) -> float:
    if raw is None:
        c.add("timestamp", "FieldValueRequired", "required")
        return now
    try:
        moment = dt.datetime.fromisoformat(raw) if isinstance(raw, str) and len(raw) < 64 else None
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        c.add("timestamp", "FieldValueInvalid", "must be an RFC 3339 time with a zone")
        return now
    at = moment.timestamp()
    if at > now + MAX_SKEW_S:
        ahead = f"is {at - now:.0f} s ahead of the server's clock (at most {MAX_SKEW_S:g} s)"
        c.add("timestamp", "FieldValueInvalid", ahead)
    elif at < now - retention_s:
        c.add("timestamp", "FieldValueInvalid", f"is older than the retention ({retention_s:g} s)")
    return at


def _window(c: _Causes, raw: Any) -> float:
    if raw is None:
        return 10.0
    text = raw[:-1] if isinstance(raw, str) and raw.endswith("s") else None
    try:
        seconds = float(text) if text is not None and len(text) < 16 else -1.0
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_WINDOW_S:  # also false for NaN
        c.add(
            "window",
            "FieldValueInvalid",
            f'must be a duration such as "10s", at most {MAX_WINDOW_S:g} s',
        )
        return 10.0
    return seconds


def parse_sample(body: bytes, node: str, now: float, retention_s: float) -> NodeSample:
    """The sample in `body` for `node` (the name in the URL), or ``Invalid`` naming every bad
    field; `now` is this server's clock (unix seconds)."""
    doc = decode_body(body)
    if not isinstance(doc, dict):
        raise errors.BadRequest("the request body must be a JSON object")
    c = _Causes()
    _unknown(c, doc, TOP_LEVEL, "")
    if doc.get("apiVersion") not in (None, GROUP_VERSION):
        c.add("apiVersion", "FieldValueNotSupported", f"must be {GROUP_VERSION!r}")
    if doc.get("kind") not in (None, KIND):
        c.add("kind", "FieldValueNotSupported", f"must be {KIND!r}")
    for problem in validate_dns1123_subdomain(node):
        c.add("metadata.name", "FieldValueInvalid", problem)
    meta = doc.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        c.add("metadata", "FieldValueInvalid", "must be an object")
    elif meta and meta.get("name") not in (None, node):
        c.add("metadata.name", "FieldValueInvalid", f"must match the node in the URL ({node!r})")
    at = _timestamp(c, doc.get("timestamp"), now, retention_s)
    window_s = _window(c, doc.get("window"))
    pods = _pods(c, doc.get("pods"))
    if c.items:
        raise errors.invalid(KIND, node[:253], c.items)
    return NodeSample(
        node=node,
        at=at,
        cpu_millis=sum(p.cpu_millis for p in pods),
        memory_bytes=sum(p.memory_bytes for p in pods),
        pods=pods,
        window_s=window_s,
    )
