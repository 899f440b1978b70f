"""Disruption budget arithmetic: which pods a PodDisruptionBudget guards, how many of them must
stay healthy, and whether one voluntary eviction may go ahead.

Two callers share these rules so they can never disagree: the PDB status controller
(``app.core.controllers.disruption``), which publishes the numbers, and the eviction
subresource (``app.store.eviction``), which recomputes them from committed rows inside its own
transaction and never trusts a published status.

``expectedPods`` follows Kubernetes. With an integer ``minAvailable`` it is the number of pods
the budget selects. With a percentage, or with ``maxUnavailable``, it is the scale the pods'
controllers ask for: the ``spec.replicas`` of a ReplicaSet (of its Deployment when a Deployment
controls it), the ``spec.parallelism`` of a Job, counted once per controller. A selected pod
with no controller, or whose controller cannot be found, counts as one, so a budget over bare
pods still works (Kubernetes refuses to compute such a budget; we prefer a usable answer).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.core.controllers.plan import parse_time
from app.core.errors import BadRequest
from app.core.labels import from_label_selector

Obj = dict[str, Any]

IF_HEALTHY_BUDGET = "IfHealthyBudget"
ALWAYS_ALLOW = "AlwaysAllow"
# A disrupted pod the controller has not seen go away stops counting after this long.
DISRUPTED_TTL_SECONDS = 120.0
# Phases in which a pod takes no part in the budget: evicting it costs nothing.
NOT_RUNNING = ("Pending", "Succeeded", "Failed")
REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


@dataclass(frozen=True)
class Budget:
    """The four numbers a PDB's status publishes."""

    expected_pods: int
    desired_healthy: int
    current_healthy: int
    disruptions_allowed: int


@dataclass(frozen=True)
class Verdict:
    """Whether one eviction may proceed. ``decrement`` says it spends one allowed disruption
    (a healthy pod); ``message`` explains a refusal."""

    allowed: bool
    decrement: bool = False
    message: str = ""


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _spec(obj: Obj) -> Obj:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def is_terminating(pod: Obj) -> bool:
    return bool(_meta(pod).get("deletionTimestamp"))


def is_ready(pod: Obj) -> bool:
    status = pod.get("status") if isinstance(pod.get("status"), dict) else {}
    for cond in (status or {}).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def phase(pod: Obj) -> str:
    status = pod.get("status")
    return str((status or {}).get("phase") or "") if isinstance(status, dict) else ""


def is_healthy(pod: Obj) -> bool:
    """Running, Ready and not terminating: the pods a budget counts."""
    return phase(pod) == "Running" and is_ready(pod) and not is_terminating(pod)


def selects(pdb: Obj, pod: Obj) -> bool:
    """Whether the budget guards the pod: same namespace and its selector matches. A malformed
    selector (admission refuses those) selects nothing."""
    if _meta(pdb).get("namespace") != _meta(pod).get("namespace"):
        return False
    try:
        selector = from_label_selector(_spec(pdb).get("selector"))
    except BadRequest:
        return False
    labels = _meta(pod).get("labels")
    return selector.matches(labels if isinstance(labels, dict) else {})


def selected(pdb: Obj, pods: Sequence[Obj]) -> list[Obj]:
    return [p for p in pods if selects(pdb, p)]


def scaled(value: int | str, total: int) -> int:
    """An ``IntOrString`` against ``total``: percentages round up, as Kubernetes does for both
    ``minAvailable`` and ``maxUnavailable``."""
    if isinstance(value, str):
        text = value.strip()
        if not text.endswith("%") or not text[:-1].isdigit():
            raise ValueError(f"not a count or percentage: {value!r}")
        return math.ceil(int(text[:-1]) * total / 100)
    return int(value)


def _controller_ref(obj: Obj) -> Obj | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None


def _scale_owner(pod: Obj, controllers: Mapping[str, Obj]) -> tuple[str, int] | None:
    """The uid and desired scale of the controller that sizes the pod's workload."""
    ref = _controller_ref(pod)
    owner = controllers.get(str(ref.get("uid"))) if ref else None
    if owner is None:
        return None
    if owner.get("kind") == "ReplicaSet":
        parent_ref = _controller_ref(owner)
        parent = controllers.get(str(parent_ref.get("uid"))) if parent_ref else None
        if parent is not None and parent.get("kind") == "Deployment":
            owner = parent
    uid = str(_meta(owner).get("uid"))
    if owner.get("kind") in ("ReplicaSet", "Deployment"):
        return uid, _int(_spec(owner).get("replicas"), 1)
    if owner.get("kind") == "Job":
        return uid, _int(_spec(owner).get("parallelism"), 1)
    return None


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def expected_pods(pdb: Obj, pods: Sequence[Obj], controllers: Mapping[str, Obj]) -> int:
    """How many pods the budget expects (see the module docstring); ``pods`` are the selected
    ones, ``controllers`` every ReplicaSet, Deployment and Job of the namespace by uid."""
    spec = _spec(pdb)
    if isinstance(spec.get("minAvailable"), int) and spec.get("maxUnavailable") is None:
        return len(pods)
    scales: dict[str, int] = {}
    bare = 0
    for pod in pods:
        owner = _scale_owner(pod, controllers)
        if owner is None:
            bare += 1
        else:
            scales[owner[0]] = owner[1]
    return sum(scales.values()) + bare


def compute(
    pdb: Obj,
    pods: Sequence[Obj],
    controllers: Mapping[str, Obj],
    disrupted: Collection[str] = (),
) -> Budget:
    """The budget's numbers over the namespace's ``pods`` (selection happens here). Pods named
    in ``disrupted`` (evicted, not yet gone) never count as healthy."""
    mine = selected(pdb, pods)
    expected = expected_pods(pdb, mine, controllers)
    healthy = sum(1 for p in mine if is_healthy(p) and _meta(p).get("name") not in disrupted)
    spec = _spec(pdb)
    if spec.get("maxUnavailable") is not None:
        desired = expected - scaled(spec["maxUnavailable"], expected)
    elif spec.get("minAvailable") is not None:
        desired = scaled(spec["minAvailable"], expected)
    else:
        desired = 0
    desired = max(0, desired)
    return Budget(expected, desired, healthy, max(0, healthy - desired))


def unhealthy_policy(pdb: Obj) -> str:
    policy = _spec(pdb).get("unhealthyPodEvictionPolicy")
    return ALWAYS_ALLOW if policy == ALWAYS_ALLOW else IF_HEALTHY_BUDGET


def budget_cause(pdb_name: str, budget: Budget) -> str:
    return (
        f"The disruption budget {pdb_name} needs {budget.desired_healthy} healthy pods and has "
        f"{budget.current_healthy} currently"
    )


def verdict(pdb: Obj, pod: Obj, budget: Budget) -> Verdict:
    """May ``pod`` be evicted under ``pdb`` whose current numbers are ``budget``?

    A pod that is not running (pending, finished) costs the budget nothing. A healthy pod
    spends one allowed disruption. A running pod that is not healthy may go when the policy is
    ``AlwaysAllow``, or under ``IfHealthyBudget`` when the budget is met without it."""
    if phase(pod) in NOT_RUNNING:
        return Verdict(True)
    name = str(_meta(pdb).get("name", ""))
    if is_healthy(pod):
        if budget.disruptions_allowed > 0:
            return Verdict(True, decrement=True)
        return Verdict(False, message=budget_cause(name, budget))
    if unhealthy_policy(pdb) == ALWAYS_ALLOW:
        return Verdict(True)
    if budget.current_healthy >= budget.desired_healthy:
        return Verdict(True)
    return Verdict(False, message=budget_cause(name, budget))


def live_disrupted(
    disrupted: Mapping[str, Any], existing: Collection[str], now: float
) -> dict[str, str]:
    """The ``disruptedPods`` entries still worth keeping at ``now``: the pod still exists and
    was evicted less than ``DISRUPTED_TTL_SECONDS`` ago."""
    kept: dict[str, str] = {}
    for name, stamp in disrupted.items():
        when = parse_time(stamp) if isinstance(stamp, str) else None
        if name in existing and when is not None and now - when < DISRUPTED_TTL_SECONDS:
            kept[name] = stamp
    return kept
