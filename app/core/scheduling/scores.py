"""Scores: how good each feasible node is for a pod, over a sample of candidate slots.

Every score is normalised to 0..100 over the candidates before weighting, so no score
dominates merely because its raw numbers are bigger. Production pods are spread (least
allocated, zone and node spread of their owner's pods); batch pods are packed (most allocated)
so whole machines stay free for large pods.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from app.core.scheduling.masks import limits, node_term_mask, spread_counts
from app.core.scheduling.podinfo import ZONE_KEY, PodInfo
from app.core.scheduling.snapshot import I64, Snapshot

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Weights:
    resources: float = 1.0  # least allocated (production) / most allocated (batch)
    spread: float = 2.0  # zone and node spread of pods with the same owner
    node_affinity: float = 1.0  # preferred node affinity
    pod_affinity: float = 1.0  # preferred pod affinity and anti-affinity
    topology_spread: float = 2.0  # ScheduleAnyway topology spread constraints
    taints: float = 1.0  # PreferNoSchedule taints the pod does not tolerate


def _minmax(raw: F64) -> F64:
    lo, hi = float(raw.min()), float(raw.max())
    if hi - lo <= 1e-12:
        return np.full(len(raw), 100.0)
    out: F64 = (raw - lo) * (100.0 / (hi - lo))
    return out


def resources_score(snap: Snapshot, pod: PodInfo, cand: I64) -> F64:
    """Fraction of cpu and memory left (production) or used (batch) after placing the pod."""
    r = pod.req
    lim_cpu, lim_mem = limits(snap, r)
    cap_cpu = np.maximum(lim_cpu[cand], 1).astype(np.float64)
    cap_mem = np.maximum(lim_mem[cand], 1).astype(np.float64)
    used_cpu = (snap.used_cpu[cand] + snap.held_cpu[cand] + r.cpu_milli) / cap_cpu
    used_mem = (snap.used_mem[cand] + snap.held_mem[cand] + r.memory_bytes) / cap_mem
    used = np.clip((used_cpu + used_mem) / 2.0, 0.0, 1.0)
    out: F64 = (used if r.batch else 1.0 - used) * 100.0
    return out


def owner_spread_score(snap: Snapshot, pod: PodInfo, cand: I64) -> F64 | None:
    """Fewer pods of the same owner on the node (1/3) and in its zone (2/3) scores higher."""
    if not pod.owner_uid:
        return None
    siblings = snap.by_owner.get(pod.owner_uid)
    if not siblings:
        return None
    per_slot = snap.slot_counts(siblings)
    node = per_slot[cand].astype(np.float64)
    ids, names = snap.domains(ZONE_KEY)
    if names:
        keep = (per_slot > 0) & (ids >= 0)  # siblings on nodes without a zone: no zone
        per_zone = np.bincount(ids[keep], weights=per_slot[keep], minlength=len(names))
        zid = ids[cand]
        zone = np.where(zid >= 0, per_zone[np.maximum(zid, 0)], 0.0)
    else:
        zone = np.zeros(len(cand))
    node_part = 1.0 - node / max(float(node.max()), 1.0)
    zone_part = 1.0 - zone / max(float(zone.max()), 1.0)
    out: F64 = (node_part / 3.0 + zone_part * 2.0 / 3.0) * 100.0
    return out


def node_affinity_score(snap: Snapshot, pod: PodInfo, cand: I64) -> F64 | None:
    terms = pod.req.preferred_node_terms
    if not terms:
        return None
    raw = np.zeros(len(cand))
    for term in terms:
        raw += node_term_mask(snap, term)[cand] * term.weight
    return _minmax(raw)


def pod_affinity_score(snap: Snapshot, pod: PodInfo, cand: I64) -> F64 | None:
    r = pod.req
    if not (r.preferred_affinity or r.preferred_anti_affinity):
        return None
    raw = np.zeros(len(cand))
    for sign, terms in ((1.0, r.preferred_affinity), (-1.0, r.preferred_anti_affinity)):
        for term in terms:
            matched = snap.matching_pods(term.selector, term.namespaces)
            matched.discard(pod.uid)
            if not matched:
                continue
            ids, names = snap.domains(term.topology_key)
            per_slot = snap.slot_counts(matched)
            keep = (per_slot > 0) & (ids >= 0)
            per_domain = np.bincount(ids[keep], weights=per_slot[keep], minlength=len(names))
            cid = ids[cand]
            raw += sign * term.weight * np.where(cid >= 0, per_domain[np.maximum(cid, 0)], 0.0)
    return _minmax(raw)


def topology_spread_score(snap: Snapshot, pod: PodInfo, cand: I64) -> F64 | None:
    soft = [c for c in pod.req.spread if not c.hard]
    if not soft:
        return None
    raw = np.zeros(len(cand))
    eligible = snap.live
    for c in soft:
        ids, counts, _n = spread_counts(snap, pod, eligible, c.topology_key, c.selector)
        cid = ids[cand]
        raw += np.where(cid >= 0, counts[np.maximum(cid, 0)], counts.max(initial=0) + 1)
    return 100.0 - _minmax(raw)


def taint_score(snap: Snapshot, pod: PodInfo, cand: I64) -> F64 | None:
    soft = snap.soft_taint_mask()
    if len(soft) != snap.cap or not soft[cand].any():
        return None
    raw = np.zeros(len(cand))
    seen = False
    for i in np.flatnonzero(soft[cand]).tolist():
        n = snap.nodes[int(cand[i])]
        if n is None:
            continue
        for t in n.taints:
            if t.effect == "PreferNoSchedule" and not any(
                tol.tolerates(t.key, t.value, t.effect) for tol in pod.req.tolerations
            ):
                raw[i] += 1
                seen = True
    if not seen:
        return None
    return 100.0 - _minmax(raw)


def score(snap: Snapshot, pod: PodInfo, cand: I64, weights: Weights) -> F64:
    """Weighted sum of the normalised scores of ``cand`` (slots) for ``pod``."""
    total = resources_score(snap, pod, cand) * weights.resources
    extra = (
        (weights.spread, owner_spread_score(snap, pod, cand) if not pod.req.batch else None),
        (weights.node_affinity, node_affinity_score(snap, pod, cand)),
        (weights.pod_affinity, pod_affinity_score(snap, pod, cand)),
        (weights.topology_spread, topology_spread_score(snap, pod, cand)),
        (weights.taints, taint_score(snap, pod, cand)),
    )
    for w, s in extra:
        if s is not None and w:
            total = total + s * w
    return total
