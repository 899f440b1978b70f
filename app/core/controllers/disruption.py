"""The PodDisruptionBudget status controller as a pure function.

It publishes what a budget currently allows (``currentHealthy``, ``desiredHealthy``,
``disruptionsAllowed``, ``expectedPods``, the ``DisruptionAllowed`` condition) so people and
tools can see it, and it forgets ``disruptedPods`` entries once their pod is gone or two minutes
have passed. The eviction subresource does not depend on this status being current: it
recomputes the same numbers (``app.core.disruption.compute``) under row locks.

Called by ``workers.controllers.disruption`` with the PDB, every pod of its namespace and
every ReplicaSet, Deployment and Job of the namespace (by uid).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.core.controllers.plan import Plan, format_time, parse_time
from app.core.disruption import DISRUPTED_TTL_SECONDS, Budget, compute, live_disrupted

Obj = dict[str, Any]

CONDITION = "DisruptionAllowed"
SUFFICIENT = "SufficientPods"
INSUFFICIENT = "InsufficientPods"


def _condition(budget: Budget, old: Sequence[Any], now: float) -> Obj:
    """The ``DisruptionAllowed`` condition; its transition time moves only when it flips."""
    allowed = budget.disruptions_allowed > 0
    status = "True" if allowed else "False"
    previous = next(
        (c for c in old if isinstance(c, dict) and c.get("type") == CONDITION),
        None,
    )
    since = format_time(now)
    if previous is not None and previous.get("status") == status:
        since = str(previous.get("lastTransitionTime") or since)
    return {
        "type": CONDITION,
        "status": status,
        "reason": SUFFICIENT if allowed else INSUFFICIENT,
        "message": "",
        "lastTransitionTime": since,
    }


def desired_status(
    pdb: Obj, pods: Sequence[Obj], controllers: Mapping[str, Obj], now: float
) -> Obj:
    """The status the budget should show at ``now``."""
    old = pdb.get("status") if isinstance(pdb.get("status"), dict) else {}
    old = old or {}
    previous = old.get("disruptedPods")
    existing = {str((p.get("metadata") or {}).get("name")) for p in pods if isinstance(p, dict)}
    disrupted = live_disrupted(previous if isinstance(previous, dict) else {}, existing, now)
    budget = compute(pdb, pods, controllers, disrupted)
    old_conditions = old.get("conditions") if isinstance(old.get("conditions"), list) else []
    return {
        "observedGeneration": int((pdb.get("metadata") or {}).get("generation") or 0),
        "expectedPods": budget.expected_pods,
        "desiredHealthy": budget.desired_healthy,
        "currentHealthy": budget.current_healthy,
        "disruptionsAllowed": budget.disruptions_allowed,
        "disruptedPods": disrupted,
        "conditions": [_condition(budget, old_conditions or [], now)],
    }


def _next_expiry(disrupted: Mapping[str, str], now: float) -> float | None:
    """Seconds until the first ``disruptedPods`` entry expires, so the budget is looked at
    again then even if nothing else changes."""
    times = [t for t in (parse_time(s) for s in disrupted.values()) if t is not None]
    if not times:
        return None
    return max(0.5, min(times) + DISRUPTED_TTL_SECONDS - now)


def reconcile(pdb: Obj, pods: Sequence[Obj], controllers: Mapping[str, Obj], now: float) -> Plan:
    """The status write (if any) that makes ``pdb``'s status true at ``now``."""
    status = desired_status(pdb, pods, controllers, now)
    requeue = _next_expiry(status["disruptedPods"], now)
    if status == pdb.get("status"):
        return Plan(requeue_after=requeue)
    return Plan(status=status, requeue_after=requeue)
