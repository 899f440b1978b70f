"""ResourceQuota arithmetic: which quotas a pod falls under, what it charges, and the refusal.

Admission (``app.store.quota``, inside the create's transaction) and the ResourceQuota
controller (``app.core.controllers.quota``) both decide with these functions, so the limit a
create is held to and the usage a quota reports can never disagree.

* **Scopes.** ``spec.scopes`` and ``spec.scopeSelector.matchExpressions`` are ANDed. A plain
  scope is the expression ``Exists``. ``PriorityClass`` values are class names,
  ``PriorityBand`` values are bands of ``app.core.priority`` (from ``spec.priority``; a pod
  without one is priority 0, batch).
* **Charge.** Per resource, ``max(sum over containers, max over init containers)``, as
  Kubernetes computes a pod's effective requests and limits: init containers run one at a
  time before the others. A container without a request for a resource charges nothing for it
  (admission has already copied limits into missing requests).
* **What counts.** Pods not yet finished (phase neither Succeeded nor Failed) and not
  terminating. Kubernetes keeps charging a terminating pod until its grace period ends; here
  it is released as soon as its deletion starts, so a rolling update can create the
  replacement at once. The node still holds it for the grace period (the scheduler counts it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any

from app.core.errors import Cause, Forbidden
from app.core.priority import band
from app.core.quantity import cpu_millis, format_bytes, format_millis, parse_quantity, to_bytes

Obj = dict[str, Any]
GPU = "nvidia.com/gpu"
FINISHED = ("Succeeded", "Failed")

# Quota resource name -> the Usage field that measures it.
TRACKED: dict[str, str] = {
    "pods": "pods",
    "count/pods": "pods",
    "requests.cpu": "cpu_milli",
    "cpu": "cpu_milli",
    "requests.memory": "memory_bytes",
    "memory": "memory_bytes",
    "limits.cpu": "limit_cpu_milli",
    "limits.memory": "limit_memory_bytes",
    f"requests.{GPU}": "gpu",
    GPU: "gpu",
}
_MILLI = ("cpu_milli", "limit_cpu_milli")


@dataclass(frozen=True, slots=True)
class Usage:
    """What some pods charge, in integer units (millicores for cpu, bytes for memory)."""

    pods: int = 0
    cpu_milli: int = 0
    memory_bytes: int = 0
    gpu: int = 0
    limit_cpu_milli: int = 0
    limit_memory_bytes: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(Usage)))

    def amount(self, resource: str) -> int:
        return int(getattr(self, TRACKED[resource]))


@dataclass(frozen=True, slots=True)
class PodFacts:
    """The attributes of a pod that scopes test; ``app.store.quota`` groups usage by them."""

    priority: int | None = None
    priority_class: str = ""
    terminating: bool = False  # spec.activeDeadlineSeconds is set: Kubernetes' "Terminating"
    best_effort: bool = False
    cross_namespace: bool = False


# ------------------------------------------------------------------------------ pods


def _containers(spec: Obj, key: str) -> list[Obj]:
    return [c for c in spec.get(key) or [] if isinstance(c, dict)]


def _amount(container: Obj, part: str, resource: str) -> int:
    value = ((container.get("resources") or {}).get(part) or {}).get(resource)
    if value is None:
        return 0
    try:
        return cpu_millis(value) if resource == "cpu" else to_bytes(value)
    except (ValueError, TypeError):
        return 0


def _effective(spec: Obj, part: str, resource: str) -> int:
    """max(sum over containers, max over init containers): Kubernetes' effective amount."""
    main = sum(_amount(c, part, resource) for c in _containers(spec, "containers"))
    init = max((_amount(c, part, resource) for c in _containers(spec, "initContainers")), default=0)
    return max(main, init)


def pod_charge(pod: Obj) -> Usage:
    """What one pod charges every quota that applies to it."""
    spec = pod.get("spec") or {}
    return Usage(
        pods=1,
        cpu_milli=_effective(spec, "requests", "cpu"),
        memory_bytes=_effective(spec, "requests", "memory"),
        gpu=_effective(spec, "requests", GPU),
        limit_cpu_milli=_effective(spec, "limits", "cpu"),
        limit_memory_bytes=_effective(spec, "limits", "memory"),
    )


def counts(pod: Obj) -> bool:
    """Whether the pod is charged at all: not finished and not terminating."""
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return (pod.get("status") or {}).get("phase") not in FINISHED


def _best_effort(spec: Obj) -> bool:
    for c in _containers(spec, "containers") + _containers(spec, "initContainers"):
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            amounts = res.get(part) or {}
            if "cpu" in amounts or "memory" in amounts:
                return False
    return True


def _cross_namespace(spec: Obj) -> bool:
    affinity = spec.get("affinity") or {}
    for key in ("podAffinity", "podAntiAffinity"):
        block = affinity.get(key) or {}
        terms = list(block.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        terms += [
            w.get("podAffinityTerm") or {}
            for w in block.get("preferredDuringSchedulingIgnoredDuringExecution") or []
            if isinstance(w, dict)
        ]
        for t in terms:
            if isinstance(t, dict) and (
                t.get("namespaces") or t.get("namespaceSelector") is not None
            ):
                return True
    return False


def pod_facts(pod: Obj) -> PodFacts:
    spec = pod.get("spec") or {}
    priority = spec.get("priority")
    return PodFacts(
        priority=priority if isinstance(priority, int) else None,
        priority_class=str(spec.get("priorityClassName") or ""),
        terminating=spec.get("activeDeadlineSeconds") is not None,
        best_effort=_best_effort(spec),
        cross_namespace=_cross_namespace(spec),
    )


# ------------------------------------------------------------------------------ scopes


def _scope_value(scope: str, facts: PodFacts) -> tuple[bool, str | None]:
    """(whether the scope "exists" for the pod, the value In/NotIn compare)."""
    if scope == "Terminating":
        return facts.terminating, None
    if scope == "NotTerminating":
        return not facts.terminating, None
    if scope == "BestEffort":
        return facts.best_effort, None
    if scope == "NotBestEffort":
        return not facts.best_effort, None
    if scope == "CrossNamespacePodAffinity":
        return facts.cross_namespace, None
    if scope == "PriorityClass":
        return bool(facts.priority_class), facts.priority_class
    if scope == "PriorityBand":
        return True, band(facts.priority)
    return False, None  # admission refuses unknown scopes; an old row matches nothing


def _expression_matches(expr: Mapping[str, Any], facts: PodFacts) -> bool:
    exists, value = _scope_value(str(expr.get("scopeName", "")), facts)
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "Exists":
        return exists
    if op == "DoesNotExist":
        return not exists
    if op == "In":
        return exists and value in values
    if op == "NotIn":
        return value not in values
    return False


def selectors(quota: Obj) -> list[dict[str, Any]]:
    """Every condition of a quota as a selector expression (plain scopes are ``Exists``)."""
    spec = quota.get("spec") or {}
    exprs: list[dict[str, Any]] = [
        {"scopeName": s, "operator": "Exists"} for s in spec.get("scopes") or []
    ]
    exprs += [
        e
        for e in (spec.get("scopeSelector") or {}).get("matchExpressions") or []
        if isinstance(e, dict)
    ]
    return exprs


def applies(quota: Obj, facts: PodFacts) -> bool:
    return all(_expression_matches(e, facts) for e in selectors(quota))


# ------------------------------------------------------------------------------ limits


def tracked_hard(quota: Obj) -> dict[str, Fraction]:
    """The limits of ``spec.hard`` that pods are charged against (others are left alone)."""
    hard: dict[str, Fraction] = {}
    for name, value in ((quota.get("spec") or {}).get("hard") or {}).items():
        if name in TRACKED:
            try:
                hard[name] = parse_quantity(value)
            except (ValueError, TypeError):
                continue
    return hard


def to_quantity(resource: str, amount: int) -> str:
    """An integer usage as the quantity text a status shows."""
    field = TRACKED[resource]
    if field in _MILLI:
        return format_millis(amount)
    if "memory" in field:
        return format_bytes(amount)
    return str(amount)


def _units(resource: str, amount: int) -> Fraction:
    return Fraction(amount, 1000) if TRACKED[resource] in _MILLI else Fraction(amount)


def exceeded(quota: Obj, used: Usage, requested: Usage) -> list[str]:
    """The resources whose hard limit ``used + requested`` would pass, in name order.

    Only resources the request charges are checked: a pod asking for no GPUs is not refused
    because the quota's GPU limit was lowered below what is in use."""
    over = []
    for name, limit in sorted(tracked_hard(quota).items()):
        asked = requested.amount(name)
        if asked and _units(name, used.amount(name) + asked) > limit:
            over.append(name)
    return over


def _pairs(names: Iterable[str], amount: Mapping[str, str]) -> str:
    return ",".join(f"{n}={amount[n]}" for n in names)


def refusal(quota: Obj, used: Usage, requested: Usage, over: list[str]) -> Forbidden:
    """Kubernetes' words: ``exceeded quota: NAME, requested: r=v, used: r=v, limited: r=v``."""
    name = str((quota.get("metadata") or {}).get("name", ""))
    hard = (quota.get("spec") or {}).get("hard") or {}
    asked = {n: to_quantity(n, requested.amount(n)) for n in over}
    now = {n: to_quantity(n, used.amount(n)) for n in over}
    limited = {n: str(hard[n]) for n in over}
    message = (
        f"exceeded quota: {name}, requested: {_pairs(over, asked)}, "
        f"used: {_pairs(over, now)}, limited: {_pairs(over, limited)}"
    )
    causes = [
        Cause(
            f"spec.hard[{n}]",
            "ExceededQuota",
            f"requested {asked[n]}, used {now[n]}, limited {limited[n]} by {name}",
        )
        for n in over
    ]
    return Forbidden(message, kind="pods", causes=causes)


def status_of(quota: Obj, used: Usage) -> Obj:
    """``status.hard`` (a copy of ``spec.hard``) and ``status.used`` for every limit in it.

    A resource this code does not count (``services``, ``count/configmaps``, ...) is reported
    with its hard limit but no usage: a zero would claim a measurement that was not made."""
    hard = dict((quota.get("spec") or {}).get("hard") or {})
    return {
        "hard": hard,
        "used": {n: to_quantity(n, used.amount(n)) for n in sorted(hard) if n in TRACKED},
    }
