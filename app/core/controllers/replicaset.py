"""The ReplicaSet controller: keep ``spec.replicas`` live pods made from the template.

The pods a ReplicaSet counts are those it controls (its uid in their controller
ownerReference) that are still running or about to: a terminating pod or one that finished
(Succeeded/Failed) no longer serves, so it is replaced rather than counted.

An **at-most-one** template (``spec.atMostOne: true``: a shard leader, a singleton consumer)
changes one rule: a terminating pod still counts until its row is gone, because it may still be
running on a node that cannot be reached. Its replacement is created only then (the node
lifecycle controller removes a silent node's at-most-one pods only once the node's agent has
surely killed them), and carries a higher ``spec.fencingEpoch`` than any copy before it (the
shell stamps it at creation).
"""

from __future__ import annotations

import copy
import math
from typing import Any

from app.core.controllers.plan import (
    Delete,
    Note,
    Obj,
    Plan,
    available_at,
    controller_uid,
    delete_of,
    is_at_most_one,
    is_deleting,
    owner_reference,
    parse_time,
    pod_ready_since,
)
from app.core.kinds import API_VERSION

TEMPLATE_HASH_LABEL = "pod-template-hash"
_FINISHED = ("Succeeded", "Failed")
# Deleting a pod in an earlier phase costs less: it has served nobody yet.
_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def reconcile(rs: Obj, pods: list[Obj], now: float, max_burst: int = 500) -> Plan:
    """The writes that bring ``rs``'s pods to ``spec.replicas`` and its status up to date.

    ``pods`` are the pods of the ReplicaSet's namespace (or any superset of its own);
    ``max_burst`` bounds the creates or deletes of one plan so that a large scale-up reaches
    the store in steps that the scheduler and the watchers can follow.
    """
    if is_deleting(rs):
        return Plan()
    spec = rs.get("spec") or {}
    wanted = int(spec.get("replicas", 1))
    owned = owned_pods(rs, pods)
    present = len(unfinished_pods(rs, pods)) if is_at_most_one(template_of(rs)) else len(owned)
    creates: tuple[Obj, ...] = ()
    deletes: tuple[Delete, ...] = ()
    if present < wanted:
        count = min(wanted - present, max_burst)
        creates = tuple(new_pod(rs) for _ in range(count))
    elif len(owned) > wanted:
        count = min(len(owned) - wanted, max_burst)
        deletes = tuple(delete_of(p) for p in pods_to_delete(owned, count))
    status, requeue = compute_status(rs, owned, now)
    old_status = rs.get("status") or {}
    return Plan(
        creates=creates,
        deletes=deletes,
        status=status if status != old_status else None,
        requeue_after=requeue,
        events=_events(creates, deletes),
    )


def _events(creates: tuple[Obj, ...], deletes: tuple[Delete, ...]) -> tuple[Note, ...]:
    notes = []
    if creates:
        notes.append(Note("SuccessfulCreate", f"Created {len(creates)} pod(s)"))
    if deletes:
        names = ", ".join(d.name for d in deletes[:5]) + (", ..." if len(deletes) > 5 else "")
        notes.append(Note("SuccessfulDelete", f"Deleted {len(deletes)} pod(s): {names}"))
    return tuple(notes)


def is_active(pod: Obj) -> bool:
    """Still serving or about to: not terminating and not finished."""
    return not is_deleting(pod) and (pod.get("status") or {}).get("phase") not in _FINISHED


def _controlled(rs: Obj, pods: list[Obj]) -> list[Obj]:
    uid = str(rs["metadata"]["uid"])
    namespace = rs["metadata"].get("namespace", "")
    return [
        p
        for p in pods
        if controller_uid(p) == uid and p["metadata"].get("namespace", "") == namespace
    ]


def owned_pods(rs: Obj, pods: list[Obj]) -> list[Obj]:
    return [p for p in _controlled(rs, pods) if is_active(p)]


def unfinished_pods(rs: Obj, pods: list[Obj]) -> list[Obj]:
    """The ReplicaSet's pods that may still run somewhere: active or terminating."""
    return [
        p for p in _controlled(rs, pods) if (p.get("status") or {}).get("phase") not in _FINISHED
    ]


def template_of(rs: Obj) -> Obj:
    return (rs.get("spec") or {}).get("template") or {}


def template_labels(rs: Obj) -> dict[str, str]:
    """The labels a new pod gets: the template's, plus the ReplicaSet's pod-template-hash
    label, so a Deployment still tells its ReplicaSets' pods apart if a template lacks it."""
    template = (rs.get("spec") or {}).get("template") or {}
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    rs_hash = (rs["metadata"].get("labels") or {}).get(TEMPLATE_HASH_LABEL)
    if rs_hash is not None:
        labels.setdefault(TEMPLATE_HASH_LABEL, rs_hash)
    return labels


def new_pod(rs: Obj) -> Obj:
    meta = rs["metadata"]
    template = (rs.get("spec") or {}).get("template") or {}
    tmeta = template.get("metadata") or {}
    pod_meta: dict[str, Any] = {
        "generateName": f"{meta['name']}-",
        "namespace": meta.get("namespace", ""),
        "labels": template_labels(rs),
        "ownerReferences": [owner_reference(rs)],
    }
    if tmeta.get("annotations"):
        pod_meta["annotations"] = dict(tmeta["annotations"])
    return {
        "apiVersion": API_VERSION,
        "kind": "Pod",
        "metadata": pod_meta,
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def _deletion_rank(pod: Obj) -> tuple[Any, ...]:
    """Sort key: the pod to delete first sorts first (Kubernetes' ActivePods order).

    Unscheduled before scheduled, Pending before Unknown before Running, not Ready before
    Ready, Ready for a shorter time first, more restarts first, newer first; the name breaks
    ties so the choice is deterministic.
    """
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    ready_since = pod_ready_since(pod)
    restarts = sum(
        int(c.get("restartCount") or 0)
        for c in status.get("containerStatuses") or []
        if isinstance(c, dict)
    )
    created = parse_time(pod["metadata"].get("creationTimestamp")) or math.inf
    return (
        bool(spec.get("nodeName")),
        _PHASE_RANK.get(status.get("phase") or "Pending", 0),
        ready_since is not None,
        -(ready_since or 0.0),
        -restarts,
        -created,
        pod["metadata"].get("name", ""),
    )


def pods_to_delete(owned: list[Obj], count: int) -> list[Obj]:
    return sorted(owned, key=_deletion_rank)[:count]


def compute_status(rs: Obj, owned: list[Obj], now: float) -> tuple[Obj, float | None]:
    """The status the ReplicaSet should report, and when it will next change by itself (a
    Ready pod becoming available after ``minReadySeconds``)."""
    spec = rs.get("spec") or {}
    min_ready = int(spec.get("minReadySeconds") or 0)
    tlabels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    ready = available = fully_labeled = 0
    next_available: float | None = None
    for pod in owned:
        labels = pod["metadata"].get("labels") or {}
        if all(labels.get(k) == v for k, v in tlabels.items()):
            fully_labeled += 1
        at = available_at(pod, min_ready)
        if at is None:
            continue
        ready += 1
        if at <= now:
            available += 1
        elif next_available is None or at < next_available:
            next_available = at
    status = dict(rs.get("status") or {})
    status.update(
        replicas=len(owned),
        fullyLabeledReplicas=fully_labeled,
        readyReplicas=ready,
        availableReplicas=available,
        observedGeneration=int(rs["metadata"].get("generation") or 0),
    )
    requeue = None if next_available is None else max(next_available - now, 0.0)
    return status, requeue
