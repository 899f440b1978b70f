"""Masks: the vectorised checks behind the filters, one boolean per snapshot slot.

Each function answers one question over every node at once (does the node match the selector,
does the pod fit its free cpu, ...). The named filters in :mod:`filters` combine them and give
each a reason; the scores (``scores.py``) and preemption (``preemption.py``) reuse the ones
they need.
"""

from __future__ import annotations

import numpy as np

from app.core.scheduling.podinfo import NodeTerm, PodInfo, PodTerm, Requirements
from app.core.scheduling.snapshot import BOOL, I64, Snapshot, Taint

HARD_EFFECTS = ("NoSchedule", "NoExecute")


# -- node labels ---------------------------------------------------------------------------
def _requirement_mask(snap: Snapshot, key: str, op: str, values: tuple[str, ...]) -> BOOL:
    if op == "In":
        mask = np.zeros(snap.cap, dtype=np.bool_)
        for v in values:
            mask |= snap.label_mask(key, v)
        return mask
    if op == "NotIn":
        mask = np.ones(snap.cap, dtype=np.bool_)
        for v in values:
            mask &= ~snap.label_mask(key, v)
        return mask
    if op == "Exists":
        return snap.key_mask(key).copy()
    if op == "DoesNotExist":
        return ~snap.key_mask(key)
    if op in ("Gt", "Lt") and len(values) == 1:
        try:
            bound = int(values[0])
        except ValueError:
            return np.zeros(snap.cap, dtype=np.bool_)
        mask = np.zeros(snap.cap, dtype=np.bool_)
        for slot, n in snap.iter_nodes():
            text = n.labels.get(key)
            if text is None:
                continue
            try:
                number = int(text)
            except ValueError:
                continue
            mask[slot] = number > bound if op == "Gt" else number < bound
        return mask
    return np.zeros(snap.cap, dtype=np.bool_)


def node_term_mask(snap: Snapshot, term: NodeTerm) -> BOOL:
    """Nodes matching every requirement of one node selector term (an empty term: none)."""
    if not term.requirements:
        return np.zeros(snap.cap, dtype=np.bool_)
    mask = np.ones(snap.cap, dtype=np.bool_)
    for r in term.requirements:
        mask &= _requirement_mask(snap, r.key, r.operator, r.values)
    return mask


def node_selector_mask(snap: Snapshot, req: Requirements) -> BOOL:
    """``nodeSelector`` (which includes the machine class label) and required node affinity."""
    mask = np.ones(snap.cap, dtype=np.bool_)
    for key, value in req.node_selector:
        mask &= snap.label_mask(key, value)
    if req.required_node_terms:
        any_term = np.zeros(snap.cap, dtype=np.bool_)
        for term in req.required_node_terms:
            any_term |= node_term_mask(snap, term)
        mask &= any_term
    return mask


# -- taints --------------------------------------------------------------------------------
def untolerated(req: Requirements, taints: tuple[Taint, ...]) -> Taint | None:
    """The first NoSchedule/NoExecute taint the pod does not tolerate."""
    for t in taints:
        if t.effect in HARD_EFFECTS and not any(
            tol.tolerates(t.key, t.value, t.effect) for tol in req.tolerations
        ):
            return t
    return None


def taint_mask(snap: Snapshot, req: Requirements) -> BOOL:
    mask = np.ones(snap.cap, dtype=np.bool_)
    verdicts: dict[tuple[Taint, ...], bool] = {}
    for slot in snap.tainted():
        n = snap.node(slot)
        ok = verdicts.get(n.taints)
        if ok is None:
            ok = verdicts[n.taints] = untolerated(req, n.taints) is None
        mask[slot] = ok
    return mask


# -- resources -----------------------------------------------------------------------------
def limits(snap: Snapshot, req: Requirements) -> tuple[I64, I64]:
    """Production pods are held to allocatable; batch pods to batch-allocatable."""
    if req.batch:
        return snap.batch_cpu, snap.batch_mem
    return snap.alloc_cpu, snap.alloc_mem


def pod_limits(snap: Snapshot, pod: PodInfo) -> tuple[I64, I64]:
    """The cpu and memory limits ``pod`` is held to on each node: those of its band
    (:func:`limits`) and, on a node holding room for a nominated pod of the other band, that
    pod's as well, so the room stays free in the nominee's terms too (a batch pod may use
    batch-allocatable beyond allocatable, but not the room held for a production preemptor)."""
    lim_cpu, lim_mem = limits(snap, pod.req)
    slots = [
        held[0]
        for uid, held in snap.nominated.items()
        if uid != pod.uid
        and (nominee := snap.pods.get(uid)) is not None
        and nominee.req.batch != pod.req.batch
    ]
    if not slots:
        return lim_cpu, lim_mem
    if pod.req.batch:
        other_cpu, other_mem = snap.alloc_cpu, snap.alloc_mem
    else:
        other_cpu, other_mem = snap.batch_cpu, snap.batch_mem
    idx = np.asarray(slots, dtype=np.int64)
    lim_cpu, lim_mem = lim_cpu.copy(), lim_mem.copy()
    lim_cpu[idx] = np.minimum(lim_cpu[idx], other_cpu[idx])
    lim_mem[idx] = np.minimum(lim_mem[idx], other_mem[idx])
    return lim_cpu, lim_mem


def _own_hold(snap: Snapshot, pod: PodInfo) -> tuple[int, int, int, int, int]:
    """(slot, cpu, memory, gpu, pods) of the room held for this pod itself, if nominated."""
    held = snap.nominated.get(pod.uid)
    if held is None:
        return -1, 0, 0, 0, 0
    slot, cpu, mem, gpu = held
    return slot, cpu, mem, gpu, 1


def resource_masks(snap: Snapshot, pod: PodInfo) -> tuple[BOOL, BOOL, BOOL, BOOL]:
    """Per-resource fit masks: cpu, memory, gpu, pod count."""
    r = pod.req
    lim_cpu, lim_mem = pod_limits(snap, pod)
    slot, own_cpu, own_mem, own_gpu, own_pods = _own_hold(snap, pod)
    cpu = lim_cpu - snap.used_cpu - snap.held_cpu
    mem = lim_mem - snap.used_mem - snap.held_mem
    gpu = snap.alloc_gpu - snap.used_gpu - snap.held_gpu
    pods = snap.alloc_pods - snap.used_pods - snap.held_pods
    if slot >= 0:
        cpu[slot] += own_cpu
        mem[slot] += own_mem
        gpu[slot] += own_gpu
        pods[slot] += own_pods
    return cpu >= r.cpu_milli, mem >= r.memory_bytes, gpu >= r.gpu, pods >= 1


def fits_slot(snap: Snapshot, pod: PodInfo, slot: int) -> bool:
    """Scalar resource check of one node (after a placement changed only that node)."""
    r = pod.req
    lim_cpu, lim_mem = pod_limits(snap, pod)
    own, own_cpu, own_mem, own_gpu, own_pods = _own_hold(snap, pod)
    if own != slot:
        own_cpu = own_mem = own_gpu = own_pods = 0
    return bool(
        lim_cpu[slot] - snap.used_cpu[slot] - snap.held_cpu[slot] + own_cpu >= r.cpu_milli
        and lim_mem[slot] - snap.used_mem[slot] - snap.held_mem[slot] + own_mem >= r.memory_bytes
        and snap.alloc_gpu[slot] - snap.used_gpu[slot] - snap.held_gpu[slot] + own_gpu >= r.gpu
        and snap.alloc_pods[slot] - snap.used_pods[slot] - snap.held_pods[slot] + own_pods >= 1
    )


# -- host ports ----------------------------------------------------------------------------
def port_mask(snap: Snapshot, req: Requirements) -> BOOL:
    mask = np.ones(snap.cap, dtype=np.bool_)
    for proto_port in req.host_ports:
        for slot in snap.port_users.get(proto_port, {}):
            mask[slot] = False
    return mask


# -- pod affinity, anti-affinity, topology spread -------------------------------------------
def _domain_mask(snap: Snapshot, key: str, uids: set[str]) -> BOOL:
    """Nodes in a topology domain (of ``key``) that holds any of ``uids``."""
    ids, names = snap.domains(key)
    slots = [snap.placed[u] for u in uids if u in snap.placed]
    if not slots:
        return np.zeros(snap.cap, dtype=np.bool_)
    present = np.zeros(len(names) + 1, dtype=np.bool_)  # index 0: nodes without the key
    present[ids[np.asarray(slots, dtype=np.int64)] + 1] = True
    present[0] = False
    mask: BOOL = present[ids + 1]
    return mask


def affinity_mask(snap: Snapshot, pod: PodInfo) -> BOOL:
    mask = np.ones(snap.cap, dtype=np.bool_)
    for term in pod.req.affinity:
        matched = snap.matching_pods(term.selector, term.namespaces)
        if not matched:
            # The first pod of a group that selects itself may go anywhere with the key.
            if term.selects(pod.namespace, pod.labels):
                ids, _ = snap.domains(term.topology_key)
                mask &= ids >= 0
                continue
            return np.zeros(snap.cap, dtype=np.bool_)
        mask &= _domain_mask(snap, term.topology_key, matched)
    return mask


def anti_affinity_mask(snap: Snapshot, pod: PodInfo) -> BOOL:
    """The pod's own required anti-affinity, and existing pods' anti-affinity against it."""
    mask = np.ones(snap.cap, dtype=np.bool_)
    for term in pod.req.anti_affinity:
        matched = snap.matching_pods(term.selector, term.namespaces)
        matched.discard(pod.uid)
        if matched:
            mask &= ~_domain_mask(snap, term.topology_key, matched)
    by_key: dict[str, set[str]] = {}
    for q, term in symmetric_terms(snap, pod):
        by_key.setdefault(term.topology_key, set()).add(q)
    for key, holders in by_key.items():
        mask &= ~_domain_mask(snap, key, holders)
    return mask


def symmetric_terms(snap: Snapshot, pod: PodInfo) -> list[tuple[str, PodTerm]]:
    """Placed pods whose required anti-affinity selects ``pod``, with the term."""
    candidates: set[str] = set(snap.anti_unindexed)
    for kv in pod.labels.items():
        candidates |= snap.anti_by_label.get(kv, set())
    out = []
    for uid in candidates:
        if uid == pod.uid:
            continue
        q = snap.pods.get(uid)
        if q is None:
            continue
        for term in q.req.anti_affinity:
            if term.selects(pod.namespace, pod.labels):
                out.append((uid, term))
    return out


def spread_counts(
    snap: Snapshot, pod: PodInfo, eligible: BOOL, key: str, selector: object
) -> tuple[np.ndarray, np.ndarray, int]:
    """(domain id per slot, matching pods per domain, number of domains) for one constraint,
    counting only pods on eligible nodes, as Kubernetes does."""
    ids, names = snap.domains(key)
    matched = snap.matching_pods(selector, frozenset((pod.namespace,)))
    counts = np.zeros(max(len(names), 1), dtype=np.int64)
    for uid in matched:
        slot = snap.placed[uid]
        d = ids[slot]
        if d >= 0 and eligible[slot]:
            counts[d] += 1
    return ids, counts, len(names)


def spread_mask(snap: Snapshot, pod: PodInfo, eligible: BOOL) -> BOOL:
    mask = np.ones(snap.cap, dtype=np.bool_)
    for c in pod.req.spread:
        if not c.hard:
            continue
        ids, counts, n = spread_counts(snap, pod, eligible, c.topology_key, c.selector)
        has = ids >= 0
        # Domains with at least one eligible node (slot 0 of ``present``: no domain).
        present = np.zeros(n + 1, dtype=np.bool_)
        present[ids[eligible] + 1] = True
        present[0] = False
        if n == 0 or not present.any():
            mask &= has
            continue
        floor = counts[:n][present[1:]].min()
        self_match = 1 if c.selector.matches(pod.labels) else 0
        # counts per domain, looked up per slot; a node without the key never passes
        allowed = np.zeros(n + 1, dtype=np.bool_)
        allowed[1:] = counts[:n] + self_match - floor <= c.max_skew
        mask &= allowed[ids + 1]
    return mask
