"""Rolling a Deployment out: the RollingUpdate and Recreate steps, and the history clean-up.

Each step resizes the new and old ReplicaSets within the bounds the strategy sets (at most
``replicas + maxSurge`` asked for, never fewer than ``replicas - maxUnavailable`` available;
or, for Recreate, nothing new until no old pod runs). :func:`app.core.controllers.deployment.
reconcile` repeats the steps until they change nothing.
"""

from __future__ import annotations

from app.core.controllers.deployment.replicasets import _RS, _Spec, new_replicaset, scale_to
from app.core.controllers.plan import Obj, controller_uid


def rolling_step(
    d: _Spec, dep: Obj, new: _RS | None, olds: list[_RS], template_h: str, revision: int
) -> _RS:
    """One rolling step: grow the new ReplicaSet into the surge allowance, then shrink the old
    ones as far as availability allows."""
    if new is None:
        new = new_replicaset(dep, d, template_h, revision, new_rs_size(d, 0, olds, 0))
    elif new.replicas > d.replicas:
        scale_to(d, new, d.replicas)
    else:
        scale_to(d, new, new_rs_size(d, new.replicas, olds, new.replicas))
    scale_down_old(d, new, olds)
    return new


def new_rs_size(d: _Spec, current_new: int, olds: list[_RS], new_size: int) -> int:
    """How big the new ReplicaSet may be: what fits under ``replicas + maxSurge`` counting
    every ReplicaSet's asked-for size, and never more than ``replicas``."""
    total = current_new + sum(rs.replicas for rs in olds)
    room = d.replicas + d.max_surge - total
    if room <= 0:
        return new_size
    return new_size + max(min(room, d.replicas - new_size), 0)


def scale_down_old(d: _Spec, new: _RS, olds: list[_RS]) -> None:
    """Shrink old ReplicaSets without letting availability fall below ``replicas -
    maxUnavailable``: first the pods that are not available anyway (they cost nothing), then
    available ones, oldest ReplicaSet first, only as far as available pods exceed the
    minimum. Pods of the new ReplicaSet that are not yet available count as unavailable."""
    if sum(rs.replicas for rs in olds) == 0:
        return
    min_available = d.replicas - d.max_unavailable
    everyone = [new, *olds]
    new_unavailable = new.replicas - new.available
    budget = sum(rs.replicas for rs in everyone) - min_available - new_unavailable
    if budget <= 0:
        return
    for rs in sorted(olds, key=lambda r: (r.created, r.name)):
        unhealthy = rs.replicas - rs.available
        if unhealthy <= 0 or budget <= 0:
            continue
        cut = min(unhealthy, budget)
        scale_to(d, rs, rs.replicas - cut)
        budget -= cut
    excess = sum(rs.available for rs in everyone) - min_available
    excess = min(excess, budget)
    for rs in sorted(olds, key=lambda r: (r.created, r.name)):
        if excess <= 0:
            break
        if rs.replicas == 0:
            continue
        cut = min(rs.replicas, excess)
        scale_to(d, rs, rs.replicas - cut)
        excess -= cut


# ---------------------------------------------------------------------------------- recreate


def recreate_step(
    d: _Spec,
    dep: Obj,
    new: _RS | None,
    olds: list[_RS],
    pods: list[Obj],
    template_h: str,
    revision: int,
) -> _RS | None:
    """Recreate: every old ReplicaSet to zero, then wait until none of their pods runs (two
    versions must never run side by side), then the new ReplicaSet at full size."""
    for rs in olds:
        scale_to(d, rs, 0)
    if old_pods_running(olds, pods):
        return new
    if new is None:
        return new_replicaset(dep, d, template_h, revision, d.replicas)
    scale_to(d, new, d.replicas)
    return new


def old_pods_running(olds: list[_RS], pods: list[Obj]) -> bool:
    """Any pod of an old ReplicaSet that may still run, terminating ones included."""
    if any(rs.observed("replicas") > 0 for rs in olds):
        return True
    uids = {str(rs.obj["metadata"]["uid"]) for rs in olds if rs.obj is not None}
    return any(
        controller_uid(p) in uids
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        for p in pods
    )


# ------------------------------------------------------------------------- history clean-up


def history_to_delete(d: _Spec, olds: list[_RS]) -> list[_RS]:
    """Old ReplicaSets beyond ``revisionHistoryLimit``, lowest revision first. Only those that
    are empty both as asked and as observed qualify: they are what a rollback would reuse."""
    idle = [
        rs
        for rs in olds
        if rs.replicas == 0
        and rs.obj is not None
        and (rs.obj.get("spec") or {}).get("replicas", 1) == 0
        and rs.observed("replicas") == 0
    ]
    surplus = len(idle) - d.history_limit
    if surplus <= 0:
        return []
    return sorted(idle, key=lambda rs: (rs.revision, rs.created, rs.name))[:surplus]
