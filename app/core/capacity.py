"""What the cluster summary needs of a Node or a Pod, read straight from its JSON.

The API server's cluster summary (:mod:`app.stream.summary`) reads every Node and every Pod
once at start and each changed one after, so at 300,000 pods the cost of reading one matters.
The objects are decoded into small typed structs that name only the fields used (msgspec skips
the rest without building dicts for them), and reduced to :class:`NodeFacts` and
:class:`PodFacts`: plain values the summary adds and subtracts.

The rules are the scheduler's (:mod:`app.core.scheduling.podinfo` and ``snapshot``), so the
summary shows what the scheduler counts: a pod's requests are the sum of its containers'
``resources.requests``; a pod holds room on its node while bound and not Succeeded/Failed; a
pod is pending while unbound, not terminal and not being deleted; a node is ready when its
``Ready`` condition is ``True``. Amounts are parsed by :mod:`app.core.quantity`, the one
grammar the API, the scheduler and the database share.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from datetime import datetime
from typing import NamedTuple

import msgspec

from app.core.quantity import cpu_millis, to_bytes, to_int

ZONE_KEY = "topology.kubernetes.io/zone"
TERMINAL_PHASES = ("Succeeded", "Failed")

Amount = str | int | float


class _Meta(msgspec.Struct):
    name: str = ""
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None
    labels: dict[str, str] | None = None


class _Condition(msgspec.Struct):
    type: str = ""
    status: str = ""
    reason: str | None = None
    lastTransitionTime: str | None = None


class _Resources(msgspec.Struct):
    requests: dict[str, Amount] | None = None


class _Container(msgspec.Struct):
    resources: _Resources | None = None


class _PodSpec(msgspec.Struct):
    nodeName: str | None = None
    containers: list[_Container] | None = None


class _PodStatus(msgspec.Struct):
    phase: str | None = None
    conditions: list[_Condition] | None = None


class _Pod(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _PodSpec = msgspec.field(default_factory=_PodSpec)
    status: _PodStatus = msgspec.field(default_factory=_PodStatus)


class _NodeSpec(msgspec.Struct):
    unschedulable: bool | None = None


class _NodeStatus(msgspec.Struct):
    allocatable: dict[str, Amount] | None = None
    conditions: list[_Condition] | None = None


class _Node(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _NodeSpec = msgspec.field(default_factory=_NodeSpec)
    status: _NodeStatus = msgspec.field(default_factory=_NodeStatus)


_pod_dec = msgspec.json.Decoder(_Pod)
_node_dec = msgspec.json.Decoder(_Node)


class PodFacts(NamedTuple):
    """One pod, as the summary counts it. ``node`` is ``""`` while unbound."""

    node: str
    cpu_milli: int
    memory_bytes: int
    phase: str
    holds_room: bool  # bound and not terminal: counted against its node
    pending: bool  # unbound, not terminal, not being deleted
    created: float  # seconds since the epoch; 0.0 when unknown
    scheduled: float  # lastTransitionTime of PodScheduled=True; 0.0 when not (yet) scheduled
    reason: str  # PodScheduled=False reason of a pending pod ("" when none)


class NodeFacts(NamedTuple):
    """One node, as the summary counts it. Allocatable amounts missing or unreadable are 0."""

    name: str
    zone: str
    ready: bool
    unschedulable: bool
    cpu_milli: int
    memory_bytes: int
    pods: int


def timestamp(value: str | None) -> float:
    """RFC 3339 text as seconds since the epoch; 0.0 for missing or unreadable text."""
    if not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


# Amounts repeat ("250m", "512Mi", a node's "32"): their exact parse is done once per text.
@functools.lru_cache(maxsize=4096)
def _parsed(parse: Callable[[Amount], int], value: Amount) -> int:
    try:
        return int(parse(value))
    except (ValueError, TypeError):
        return 0


def _amount(table: dict[str, Amount] | None, key: str, parse: Callable[[Amount], int]) -> int:
    if not table or key not in table:
        return 0
    return _parsed(parse, table[key])


def pod_facts(raw: bytes) -> PodFacts:
    """Read a pod's JSON. An object the typed decoder refuses (admission keeps those out)
    counts as an unbound, pending pod with no requests rather than stopping the summary."""
    try:
        pod = _pod_dec.decode(raw)
    except msgspec.ValidationError:
        pod = _Pod()
    spec, status, meta = pod.spec, pod.status, pod.metadata
    cpu = mem = 0
    for c in spec.containers or ():
        req = c.resources.requests if c.resources else None
        cpu += _amount(req, "cpu", cpu_millis)
        mem += _amount(req, "memory", to_bytes)
    phase = status.phase or "Pending"
    node = spec.nodeName or ""
    terminal = phase in TERMINAL_PHASES
    scheduled = 0.0
    reason = ""
    for cond in status.conditions or ():
        if cond.type == "PodScheduled":
            if cond.status == "True":
                scheduled = timestamp(cond.lastTransitionTime)
            elif cond.status == "False":
                reason = cond.reason or "Unschedulable"
    pending = not node and not terminal and not meta.deletionTimestamp
    return PodFacts(
        node=sys.intern(node),  # 300,000 pods name 10,000 nodes and a few phases: share them
        cpu_milli=cpu,
        memory_bytes=mem,
        phase=sys.intern(phase),
        holds_room=bool(node) and not terminal,
        pending=pending,
        created=timestamp(meta.creationTimestamp),
        scheduled=scheduled,
        reason=sys.intern(reason) if pending else "",
    )


def node_facts(raw: bytes) -> NodeFacts:
    """Read a node's JSON (an unreadable one counts as not ready, with nothing allocatable)."""
    try:
        node = _node_dec.decode(raw)
    except msgspec.ValidationError:
        node = _Node()
    alloc = node.status.allocatable
    ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or ())
    return NodeFacts(
        name=node.metadata.name,
        zone=(node.metadata.labels or {}).get(ZONE_KEY, ""),
        ready=ready,
        unschedulable=bool(node.spec.unschedulable),
        cpu_milli=_amount(alloc, "cpu", cpu_millis),
        memory_bytes=_amount(alloc, "memory", to_bytes),
        pods=_amount(alloc, "pods", to_int),
    )


def percentile(sorted_values: list[float], p: float) -> float:
    """The nearest-rank ``p``-th percentile of already sorted values (0.0 for none)."""
    if not sorted_values:
        return 0.0
    rank = max(1, -(-len(sorted_values) * p // 100))
    return sorted_values[int(rank) - 1]
