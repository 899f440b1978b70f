"""Filters: the named list of checks that decide which nodes may take a pod.

``FILTERS`` is the one list. :func:`feasible` (the fast path, run once per pod or per run of
pods with equal requirements) and :func:`app.core.scheduling.explain.explain` (the message of
a pod no node can take) both iterate it, so a filter added here is both enforced and reported.
Each filter is vectorised over the snapshot's slots (its checks are in ``masks.py``), its
docstring states its contract, and its reason constants stand beside it. A filter's ``check``
returns one verdict per reason: the reason and the mask of the nodes that pass it; a node
passes the filter when it passes every verdict.

Filters whose answer depends only on node labels and taints and on the pod's node selector,
node affinity and tolerations are *static*: their verdicts are cached per key and static
epoch (the taint filter by tolerations alone, say), and their combined mask per requirement
set, so the 100,000 tasks of one job compute them once.

The list's order is the order docs/architecture.md gives; the message sorts its reasons by
count, so the order matters only for ties in ``codes`` and for the fast path's cost.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

import numpy as np

from app.core.scheduling.masks import (
    affinity_mask,
    anti_affinity_mask,
    node_selector_mask,
    port_mask,
    resource_masks,
    spread_mask,
    taint_mask,
    untolerated,
)
from app.core.scheduling.podinfo import PodInfo, Requirements
from app.core.scheduling.snapshot import BOOL, Snapshot

__all__ = ["BOOL", "FILTERS", "Context", "Filter", "FilterCache", "Reason", "feasible"]


@dataclass(frozen=True, slots=True)
class Reason:
    """Why a filter turned a node away. ``text`` is how ``0/N nodes available: ...`` messages
    say it; ``code`` is the ``reason`` label of ``scheduler_unschedulable_total``, a constant
    (a message may name the taint; the label never does, so its values stay few)."""

    code: str
    text: str


Verdicts = tuple[tuple[Reason, BOOL], ...]


@dataclass(slots=True)
class Context:
    """What a filter sees: the snapshot, the pod, and the cache of static verdicts."""

    snap: Snapshot
    pod: PodInfo
    cache: FilterCache
    _eligible: BOOL | None = None

    @property
    def req(self) -> Requirements:
        return self.pod.req

    def eligible(self) -> BOOL:
        """Live nodes that pass the static filters: topology spread counts pods only there,
        as Kubernetes does."""
        if self._eligible is None:
            self._eligible = self.cache.static_mask(self.snap, self.pod) & self.snap.live
        return self._eligible


def _always(ctx: Context) -> bool:
    return True


@dataclass(frozen=True)
class Filter:
    """One named filter.

    ``check`` gives a verdict per reason; ``applies`` says cheaply whether the filter can
    turn anything away for this pod (when it cannot, both paths skip it). A filter with a
    ``static_key`` is static: its verdicts depend only on that key of the requirements and
    on node labels and taints. ``detail``, where set, words the reason for one rejected node
    (the taint filter names the taint)."""

    name: str
    reasons: tuple[Reason, ...]
    check: Callable[[Context], Verdicts]
    applies: Callable[[Context], bool] = _always
    static_key: Callable[[Requirements], Hashable] | None = None
    detail: Callable[[Context, int], str] | None = None


# -- node state ----------------------------------------------------------------------------
R_CORDONED = Reason("cordoned", "node(s) cordoned")
R_NOT_READY = Reason("not_ready", "node(s) not ready")


def node_state(ctx: Context) -> Verdicts:
    """Rejects cordoned nodes (``spec.unschedulable``), and nodes not Ready or without cpu or
    memory allocatable. A node both cordoned and not ready is reported as cordoned only."""
    snap = ctx.snap
    return (R_CORDONED, ~snap.cordoned), (R_NOT_READY, snap.ready | snap.cordoned)


# -- node selector and required node affinity -----------------------------------------------
R_SELECTOR = Reason("node_selector", "didn't match node selector/affinity")


def node_selector(ctx: Context) -> Verdicts:
    """Rejects nodes whose labels miss a ``nodeSelector`` pair (the machine class is one) or
    match none of the required node affinity terms."""
    return ((R_SELECTOR, node_selector_mask(ctx.snap, ctx.req)),)


# -- taints --------------------------------------------------------------------------------
R_TAINT = Reason("untolerated_taint", "untolerated taint")


def taints(ctx: Context) -> Verdicts:
    """Rejects nodes with a NoSchedule or NoExecute taint the pod does not tolerate
    (PreferNoSchedule only lowers the score). Reported per taint, the first one of each node:
    ``untolerated taint gpu=true:NoSchedule``."""
    return ((R_TAINT, taint_mask(ctx.snap, ctx.req)),)


def _taint_detail(ctx: Context, slot: int) -> str:
    return f"{R_TAINT.text} {untolerated(ctx.req, ctx.snap.node(slot).taints)}"


# -- resources -----------------------------------------------------------------------------
R_CPU = Reason("insufficient_cpu", "insufficient cpu")
R_MEMORY = Reason("insufficient_memory", "insufficient memory")
R_GPU = Reason("insufficient_gpu", "insufficient nvidia.com/gpu")
R_PODS = Reason("too_many_pods", "too many pods")


def resources(ctx: Context) -> Verdicts:
    """Rejects nodes without room for the pod's cpu, memory or GPUs, or for one more pod:
    production pods against allocatable, batch pods against batch-allocatable, less the pods
    holding room and the room held for nominated pods other than this one (``masks.py``).
    A node already over its limit turns away even a pod that requests none of it, as the
    bind's capacity check would."""
    cpu, mem, gpu, pods = resource_masks(ctx.snap, ctx.pod)
    return (R_CPU, cpu), (R_MEMORY, mem), (R_GPU, gpu), (R_PODS, pods)


# -- host ports ----------------------------------------------------------------------------
R_PORTS = Reason("host_port", "host port conflict")


def host_ports(ctx: Context) -> Verdicts:
    """Rejects nodes where a pod holding room already uses one of the pod's host ports
    (protocol and port)."""
    return ((R_PORTS, port_mask(ctx.snap, ctx.req)),)


# -- pod affinity, anti-affinity, topology spread -------------------------------------------
R_AFFINITY = Reason("pod_affinity", "didn't match pod affinity rules")
R_ANTI = Reason("pod_anti_affinity", "didn't match pod anti-affinity rules")
R_SPREAD = Reason("topology_spread", "didn't match topology spread constraints")


def pod_affinity(ctx: Context) -> Verdicts:
    """Rejects nodes outside the topology domains holding pods that a required affinity term
    selects, for each term; the first pod of a group whose term selects itself may go to any
    node that has the term's topology key."""
    return ((R_AFFINITY, affinity_mask(ctx.snap, ctx.pod)),)


def pod_anti_affinity(ctx: Context) -> Verdicts:
    """Rejects nodes in a topology domain holding a pod that the pod's required anti-affinity
    selects, or a pod whose own required anti-affinity selects this pod."""
    return ((R_ANTI, anti_affinity_mask(ctx.snap, ctx.pod)),)


def topology_spread(ctx: Context) -> Verdicts:
    """Rejects nodes without a DoNotSchedule constraint's topology key, and nodes whose domain
    would then hold more than ``maxSkew`` matching pods above the emptiest eligible domain
    (matching pods counted on eligible nodes only)."""
    return ((R_SPREAD, spread_mask(ctx.snap, ctx.pod, ctx.eligible())),)


def _has_anti(ctx: Context) -> bool:
    snap = ctx.snap
    return bool(ctx.req.anti_affinity or snap.anti_by_label or snap.anti_unindexed)


FILTERS: tuple[Filter, ...] = (
    Filter("node_state", (R_CORDONED, R_NOT_READY), node_state),
    Filter(
        "node_selector",
        (R_SELECTOR,),
        node_selector,
        static_key=lambda r: (r.node_selector, r.required_node_terms),
    ),
    Filter("taints", (R_TAINT,), taints, static_key=lambda r: r.tolerations, detail=_taint_detail),
    Filter("resources", (R_CPU, R_MEMORY, R_GPU, R_PODS), resources),
    Filter("host_ports", (R_PORTS,), host_ports, applies=lambda ctx: bool(ctx.req.host_ports)),
    Filter("pod_affinity", (R_AFFINITY,), pod_affinity, applies=lambda ctx: bool(ctx.req.affinity)),
    Filter("pod_anti_affinity", (R_ANTI,), pod_anti_affinity, applies=_has_anti),
    Filter(
        "topology_spread",
        (R_SPREAD,),
        topology_spread,
        applies=lambda ctx: any(c.hard for c in ctx.req.spread),
    ),
)
_STATIC = tuple(f for f in FILTERS if f.static_key is not None)
_DYNAMIC = tuple(f for f in FILTERS if f.static_key is None)


@dataclass
class FilterCache:
    """The static filters' verdicts, cached per static epoch: per filter and key, and their
    combined mask per requirement set."""

    epoch: int = -1
    cap: int = 0
    static: dict[Requirements, BOOL] = field(default_factory=dict)
    verdicts: dict[tuple[str, Hashable], Verdicts] = field(default_factory=dict)

    def _current(self, snap: Snapshot) -> None:
        if self.epoch != snap.static_epoch or self.cap != snap.cap or len(self.static) > 4096:
            self.static.clear()
            self.verdicts.clear()
            self.epoch = snap.static_epoch
            self.cap = snap.cap

    def verdicts_of(self, f: Filter, ctx: Context) -> Verdicts:
        """``f``'s verdicts for the context's pod, from the cache when ``f`` is static."""
        if f.static_key is None:
            return f.check(ctx)
        self._current(ctx.snap)
        key = (f.name, f.static_key(ctx.req))
        found = self.verdicts.get(key)
        if found is None:
            found = self.verdicts[key] = f.check(ctx)
        return found

    def static_mask(self, snap: Snapshot, pod: PodInfo) -> BOOL:
        """The nodes passing every static filter (shared: callers must not change it)."""
        self._current(snap)
        mask = self.static.get(pod.req)
        if mask is None:
            ctx = Context(snap, pod, self)
            mask = np.ones(snap.cap, dtype=np.bool_)
            for f in _STATIC:
                for _reason, passed in self.verdicts_of(f, ctx):
                    mask &= passed
            self.static[pod.req] = mask
        return mask


def feasible(snap: Snapshot, pod: PodInfo, cache: FilterCache) -> BOOL:
    """The nodes that can take ``pod`` now: those that pass every filter of ``FILTERS`` (the
    fast path). The static filters' combined mask comes from the cache; the others run in
    list order, stopping once no node is left."""
    ctx = Context(snap, pod, cache)
    mask = cache.static_mask(snap, pod).copy()
    for f in _DYNAMIC:
        if not f.applies(ctx):
            continue
        if not mask.any():
            break
        for _reason, passed in f.check(ctx):
            mask &= passed
    return mask
