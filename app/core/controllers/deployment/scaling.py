"""Scaling a Deployment: following a change of ``spec.replicas`` without moving its rollout.

A change of size during a rollout (or while paused) is shared out over the active ReplicaSets
in proportion to their size, as Kubernetes does, so a half-done rollout stays half done.
Called by :func:`app.core.controllers.deployment.reconcile` whenever
:func:`is_scaling_event` says the size changed since the ReplicaSets were last sized.
"""

from __future__ import annotations

import math

from app.core.controllers.deployment.replicasets import (
    _RS,
    DESIRED_REPLICAS,
    MAX_REPLICAS,
    _active,
    _Spec,
    scale_to,
)


def is_scaling_event(d: _Spec, new: _RS | None, olds: list[_RS]) -> bool:
    """``spec.replicas`` changed since the active ReplicaSets were last sized."""
    for rs in _active([*([new] if new else []), *olds]):
        recorded = rs.annotations.get(DESIRED_REPLICAS)
        if recorded is not None and recorded != str(d.replicas):
            return True
    return False


def scale(d: _Spec, new: _RS | None, olds: list[_RS]) -> None:
    """Follow a change of ``spec.replicas`` without moving the rollout: a lone active
    ReplicaSet takes the new size; otherwise the difference is shared out in proportion to
    each active ReplicaSet's size, so a half-done rollout stays half done."""
    everyone = [*([new] if new else []), *olds]
    active = _active(everyone)
    lone: _RS | None = None
    if len(active) == 1:
        lone = active[0]
    elif not active:
        newest_old = max(olds, key=lambda rs: (rs.created, rs.name), default=None)
        lone = new if new is not None else newest_old
    if lone is not None:
        scale_to(d, lone, d.replicas)
        return
    if is_saturated(d, new):
        for rs in olds:
            scale_to(d, rs, 0)
        return
    if d.recreate:
        return
    allowed = d.replicas + d.max_surge if d.replicas > 0 else 0
    to_add = allowed - sum(rs.replicas for rs in active)
    # Largest first; on a tie the newer grows first and the older shrinks first.
    sign = 1 if to_add > 0 else -1
    active.sort(key=lambda rs: (-rs.replicas, -sign * rs.created, rs.name))
    sizes: dict[int, int] = {}
    added = 0
    for rs in active:
        share = proportion(d, rs, to_add, added)
        sizes[id(rs)] = rs.replicas + share
        added += share
    if active and to_add != 0:
        sizes[id(active[0])] += to_add - added
    for rs in active:
        scale_to(d, rs, max(sizes[id(rs)], 0), force=True)


def proportion(d: _Spec, rs: _RS, to_add: int, added: int) -> int:
    """This ReplicaSet's share of ``to_add``: its size scaled by how much the Deployment's
    maximum size changed since the ReplicaSet was last sized, capped by what is left."""
    if rs.replicas == 0 or to_add == 0 or to_add == added:
        return 0
    if d.replicas == 0:
        fraction = -rs.replicas
    else:
        try:
            annotated = int(rs.annotations.get(MAX_REPLICAS, d.status_replicas))
        except ValueError:
            annotated = d.status_replicas
        if annotated <= 0:
            return 0
        exact = rs.replicas * (d.replicas + d.max_surge) / annotated
        fraction = math.floor(exact + 0.5) - rs.replicas
    left = to_add - added
    return min(fraction, left) if to_add > 0 else max(fraction, left)


def is_saturated(d: _Spec, new: _RS | None) -> bool:
    """The new ReplicaSet alone serves the whole Deployment."""
    return (
        new is not None
        and new.replicas == d.replicas
        and new.annotations.get(DESIRED_REPLICAS) == str(d.replicas)
        and new.observed("availableReplicas") == d.replicas
    )
