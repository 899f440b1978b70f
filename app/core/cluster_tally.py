"""The cluster's running totals, kept by adding and subtracting one changed object at a time.

The overview page of the web UI shows, for 10,000 nodes and 300,000 pods, what is allocatable
and requested per zone, how many nodes are not ready or cordoned, how many pods wait and for
how long, and how fast pods get scheduled. Summing that from the objects on every page view
would walk every pod. A :class:`Tally` is fed each changed Node and Pod instead (by
:mod:`app.stream.summary`, from the watch cache) and does work proportional to the change:
it remembers each pod's :class:`~app.core.capacity.PodFacts`, so a modified pod first takes its
old contribution back. Zone totals are kept ready; a per-node page is sorted on demand.

Pure: no I/O, no clock. Times come in as arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Literal

from sortedcontainers import SortedList

from app.core.capacity import NodeFacts, PodFacts, percentile

NodeSort = Literal["name", "zone", "cpu", "memory", "pods", "ready"]


@dataclass(frozen=True, slots=True)
class Totals:
    """Nodes and what they hold, for a zone or the whole cluster. ``requested`` and ``pods``
    count pods holding room (bound, not Succeeded/Failed)."""

    nodes: int = 0
    ready: int = 0
    not_ready: int = 0
    cordoned: int = 0
    cpu_allocatable_milli: int = 0
    memory_allocatable_bytes: int = 0
    pods_allocatable: int = 0
    cpu_requested_milli: int = 0
    memory_requested_bytes: int = 0
    pods: int = 0


WIDTH = len(fields(Totals))
_NODES, _READY, _NOT_READY, _CORDONED, _CPU_A, _MEM_A, _PODS_A, _CPU_R, _MEM_R, _PODS = range(WIDTH)


@dataclass(frozen=True, slots=True)
class ZoneSummary:
    zone: str  # "" for nodes without a topology.kubernetes.io/zone label
    totals: Totals


@dataclass(frozen=True, slots=True)
class Sample:
    """One interval of the ring: the pending count at its end, and the scheduling latency
    (PodScheduled=True transition time minus creation time) of the pods bound within it."""

    at: float
    pending: int
    bound: int
    latency_p50_s: float
    latency_p99_s: float


@dataclass(frozen=True, slots=True)
class NodeRow:
    name: str
    zone: str
    ready: bool
    unschedulable: bool
    cpu_allocatable_milli: int
    memory_allocatable_bytes: int
    pods_allocatable: int
    cpu_requested_milli: int
    memory_requested_bytes: int
    pods: int
    lease_age_s: float | None = None  # filled in by the caller for the rows it shows


@dataclass(frozen=True, slots=True)
class NodePage:
    total: int  # rows matching the filter, before offset/limit
    items: tuple[NodeRow, ...]


@dataclass(slots=True)
class _Node:
    facts: NodeFacts | None  # None: pods name this node but no Node object exists (now)
    cpu: int = 0
    mem: int = 0
    pods: int = 0

    def vector(self) -> list[int]:
        f = self.facts
        if f is None:
            return [0] * _CPU_R + [self.cpu, self.mem, self.pods]
        return [1, int(f.ready), int(not f.ready), int(f.unschedulable), f.cpu_milli,
                f.memory_bytes, f.pods, self.cpu, self.mem, self.pods]  # fmt: skip

    def row(self) -> NodeRow:
        f = self.facts
        assert f is not None
        return NodeRow(f.name, f.zone, f.ready, f.unschedulable, f.cpu_milli, f.memory_bytes,
                       f.pods, self.cpu, self.mem, self.pods)  # fmt: skip


def _ratio(used: int, total: int) -> float:
    return used / total if total else (float("inf") if used else 0.0)


# Sort keys over the tally's own records (facts known), so a page builds only its own rows.
_SORT_KEYS: dict[str, Callable[[_Node], object]] = {
    "name": lambda n: n.facts.name,  # type: ignore[union-attr]
    "zone": lambda n: (n.facts.zone, n.facts.name),  # type: ignore[union-attr]
    "cpu": lambda n: (_ratio(n.cpu, n.facts.cpu_milli), n.facts.name),  # type: ignore[union-attr]
    "memory": lambda n: (_ratio(n.mem, n.facts.memory_bytes), n.facts.name),  # type: ignore[union-attr]
    "pods": lambda n: (n.pods, n.facts.name),  # type: ignore[union-attr]
    # problems first: not ready, then cordoned
    "ready": lambda n: (n.facts.ready, not n.facts.unschedulable, n.facts.name),  # type: ignore[union-attr]
}


class Tally:
    """Running totals over nodes (by name) and pods (by uid)."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {}
        self._pods: dict[str, PodFacts] = {}
        self._zones: dict[str | None, list[int]] = {}  # None: pods on nodes that do not exist
        self._pending: SortedList = SortedList()  # (created, uid) of pending pods
        self._reasons: dict[str, int] = {}
        self._phases: dict[str, int] = {}
        self.latencies: list[float] = []  # pods bound since the last sample

    # -- changes -------------------------------------------------------------------------
    def node_changed(self, name: str, facts: NodeFacts | None) -> None:
        """A node was added or modified (``facts``) or deleted (``None``)."""
        node = self._nodes.get(name)
        if node is None:
            if facts is None:
                return
            node = self._nodes[name] = _Node(None)
        else:
            self._add(node, -1)
        node.facts = facts
        self._add(node, +1)
        if facts is None and node.pods == 0:
            self._drop_empty(name, node)

    def pod_changed(self, uid: str, facts: PodFacts | None) -> None:
        """A pod was added or modified (``facts``) or deleted (``None``)."""
        old = self._pods.pop(uid, None) if facts is None else self._pods.get(uid)
        if old is not None:
            self._count_pod(uid, old, -1)
        if facts is None:
            return
        if old is not None and not old.node and facts.node and facts.scheduled and facts.created:
            self.latencies.append(max(0.0, facts.scheduled - facts.created))
        if not facts.pending:  # only a pending pod's creation time is read again: keep less
            facts = facts._replace(created=0.0, scheduled=0.0)
        self._pods[uid] = facts
        self._count_pod(uid, facts, +1)

    def _count_pod(self, uid: str, p: PodFacts, sign: int) -> None:
        self._phases[p.phase] = self._phases.get(p.phase, 0) + sign
        if p.pending:
            if sign > 0:
                self._pending.add((p.created, uid))
            else:
                self._pending.discard((p.created, uid))
            self._reasons[p.reason] = self._reasons.get(p.reason, 0) + sign
        if not p.holds_room:
            return
        node = self._nodes.get(p.node)
        if node is None:
            node = self._nodes[p.node] = _Node(None)
        self._add(node, -1)
        node.cpu += sign * p.cpu_milli
        node.mem += sign * p.memory_bytes
        node.pods += sign
        self._add(node, +1)
        if node.facts is None and node.pods == 0:
            self._drop_empty(p.node, node)

    def _add(self, node: _Node, sign: int) -> None:
        key = node.facts.zone if node.facts is not None else None
        total = self._zones.get(key)
        if total is None:
            total = self._zones[key] = [0] * WIDTH
        for i, v in enumerate(node.vector()):
            total[i] += sign * v

    def _drop_empty(self, name: str, node: _Node) -> None:
        del self._nodes[name]

    # -- reading -------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        return len(self._pending)

    def oldest_pending(self) -> float | None:
        """Creation time of the longest-waiting pending pod (None when none waits)."""
        return self._pending[0][0] if self._pending else None

    def zones(self) -> tuple[ZoneSummary, ...]:
        return tuple(
            ZoneSummary(zone, Totals(*total))
            for zone, total in sorted(
                ((z, t) for z, t in self._zones.items() if z is not None and t[_NODES]),
                key=lambda zt: zt[0] or "",
            )
        )

    def totals(self) -> Totals:
        out = [0] * WIDTH
        for zone, total in self._zones.items():
            if zone is not None:
                out = [a + b for a, b in zip(out, total, strict=True)]
        return Totals(*out)

    def missing_node_pods(self) -> int:
        """Pods bound to node names that have no Node object."""
        return self._zones.get(None, [0] * WIDTH)[_PODS]

    def phases(self) -> dict[str, int]:
        return {k: v for k, v in sorted(self._phases.items()) if v}

    def reasons(self) -> dict[str, int]:
        """Pending pods by their PodScheduled=False reason ("" : not tried yet)."""
        return {k: v for k, v in sorted(self._reasons.items()) if v}

    def sample(self, at: float) -> Sample:
        """Close the interval ending at ``at``: its sample, and a fresh latency list."""
        lat = sorted(self.latencies)
        self.latencies = []
        return Sample(at, self.pending, len(lat), percentile(lat, 50), percentile(lat, 99))

    def node_page(
        self,
        sort: NodeSort = "name",
        *,
        descending: bool = False,
        zone: str | None = None,
        ready: bool | None = None,
        unschedulable: bool | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> NodePage:
        """One page of nodes, filtered and sorted here (a sort of 10,000 rows per call)."""
        nodes = [
            n
            for n in self._nodes.values()
            if n.facts is not None
            and (zone is None or n.facts.zone == zone)
            and (ready is None or n.facts.ready == ready)
            and (unschedulable is None or n.facts.unschedulable == unschedulable)
        ]
        nodes.sort(key=_SORT_KEYS[sort], reverse=descending)  # type: ignore[arg-type]
        start = max(0, offset)
        return NodePage(len(nodes), tuple(n.row() for n in nodes[start : start + max(0, limit)]))

    def node_zones(self) -> dict[str, str]:
        """Every node's zone, by name (no rows built)."""
        return {name: n.facts.zone for name, n in self._nodes.items() if n.facts is not None}

    def node(self, name: str) -> NodeRow | None:
        n = self._nodes.get(name)
        return n.row() if n is not None and n.facts is not None else None
