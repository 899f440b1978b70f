"""Disruption budget arithmetic: selection, health, expectedPods from controllers, rounding of
percentages, maxUnavailable, and the eviction verdict under each unhealthy-pod policy."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.disruption import (
    Budget,
    compute,
    is_healthy,
    live_disrupted,
    scaled,
    selects,
    verdict,
)

NS = "shop"
Obj = dict[str, Any]


def pdb(
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    selector: Obj | None = None,
    policy: str | None = None,
) -> Obj:
    spec: Obj = {"selector": selector if selector is not None else {"matchLabels": {"app": "web"}}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if policy:
        spec["unhealthyPodEvictionPolicy"] = policy
    return {"kind": "PodDisruptionBudget", "metadata": {"name": "web-pdb", "namespace": NS},
            "spec": spec}  # fmt: skip


def pod(
    name: str,
    *,
    phase: str = "Running",
    ready: bool = True,
    deleting: bool = False,
    owner: str | None = None,
    labels: Obj | None = None,
    namespace: str = NS,
) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace, "labels": labels or {"app": "web"}}
    if owner:
        meta["ownerReferences"] = [{"kind": "ReplicaSet", "uid": owner, "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"kind": "Pod", "metadata": meta, "status": {"phase": phase, "conditions": conds}}


def controller(kind: str, uid: str, scale: int, parent: str | None = None) -> Obj:
    meta: Obj = {"name": uid, "namespace": NS, "uid": uid}
    if parent:
        meta["ownerReferences"] = [{"kind": "Deployment", "uid": parent, "controller": True}]
    key = "parallelism" if kind == "Job" else "replicas"
    return {"kind": kind, "metadata": meta, "spec": {key: scale}}


def healthy(n: int, owner: str | None = None) -> list[Obj]:
    return [pod(f"p{i}", owner=owner) for i in range(n)]


@pytest.mark.parametrize(
    ("value", "total", "want"),
    [(2, 10, 2), ("50%", 3, 2), ("50%", 4, 2), ("10%", 1, 1), ("0%", 5, 0), ("100%", 7, 7),
     ("34%", 3, 2), ("1%", 0, 0)],
)  # fmt: skip
def test_scaled_rounds_percentages_up(value: int | str, total: int, want: int) -> None:
    assert scaled(value, total) == want


def test_scaled_refuses_garbage() -> None:
    with pytest.raises(ValueError):
        scaled("fifty%", 10)


@pytest.mark.parametrize(
    ("p", "want"),
    [
        (pod("a"), True),
        (pod("a", ready=False), False),
        (pod("a", phase="Pending"), False),
        (pod("a", phase="Succeeded"), False),
        (pod("a", deleting=True), False),
        ({"kind": "Pod", "metadata": {"name": "x"}}, False),
        ({"kind": "Pod", "metadata": {"name": "x"}, "status": "garbage"}, False),
    ],
)
def test_health(p: Obj, want: bool) -> None:
    assert is_healthy(p) is want


def test_selection_is_by_label_in_the_budgets_namespace() -> None:
    budget = pdb(1)
    assert selects(budget, pod("a"))
    assert not selects(budget, pod("a", labels={"app": "db"}))
    assert not selects(budget, pod("a", namespace="other"))
    everything = pdb(1, selector={})
    assert selects(everything, pod("a", labels={"x": "y"}))
    exprs = pdb(1, selector={"matchExpressions": [{"key": "tier", "operator": "NotIn",
                                                   "values": ["db"]}]})  # fmt: skip
    assert selects(exprs, pod("a", labels={"tier": "web"}))
    assert selects(exprs, pod("a", labels={}))
    assert not selects(exprs, pod("a", labels={"tier": "db"}))
    assert not selects(pdb(1, selector={"matchLabels": "nonsense"}), pod("a"))  # type: ignore[dict-item]


RS = {"rs": controller("ReplicaSet", "rs", 5)}
DEP = {
    "rs": controller("ReplicaSet", "rs", 5, parent="dep"),
    "dep": controller("Deployment", "dep", 4),
}
JOB = {"rs": controller("Job", "rs", 3)}


@pytest.mark.parametrize(
    ("budget", "pods", "controllers", "want"),
    [
        # integer minAvailable: expected is the number of selected pods
        (pdb(2), healthy(3), {}, Budget(3, 2, 3, 1)),
        (pdb(3), healthy(3), {}, Budget(3, 3, 3, 0)),
        (pdb(5), healthy(3), {}, Budget(3, 5, 3, 0)),
        (pdb(2), healthy(3, "rs"), RS, Budget(3, 2, 3, 1)),
        # percentages round up against expected
        (pdb("50%"), healthy(3), {}, Budget(3, 2, 3, 1)),
        (pdb("50%"), healthy(3, "rs"), RS, Budget(5, 3, 3, 0)),
        (pdb("100%"), healthy(2), {}, Budget(2, 2, 2, 0)),
        (pdb("0%"), healthy(2), {}, Budget(2, 0, 2, 2)),
        # maxUnavailable, absolute and percentage, sized by controllers
        (pdb(max_unavailable=1), healthy(3), {}, Budget(3, 2, 3, 1)),
        (pdb(max_unavailable=1), healthy(3, "rs"), RS, Budget(5, 4, 3, 0)),
        (pdb(max_unavailable="25%"), healthy(4, "rs"), DEP, Budget(4, 3, 4, 1)),
        (pdb(max_unavailable="50%"), healthy(3, "rs"), JOB, Budget(3, 1, 3, 2)),
        (pdb(max_unavailable=9), healthy(3), {}, Budget(3, 0, 3, 3)),
        # unhealthy, pending and terminating pods do not count as healthy
        (pdb(2), [pod("a"), pod("b", ready=False), pod("c", deleting=True)], {},
         Budget(3, 2, 1, 0)),
        # pods outside the selector are not counted at all
        (pdb(1), [pod("a"), pod("b", labels={"app": "db"})], {}, Budget(1, 1, 1, 0)),
        # a pod whose controller is unknown counts as one
        (pdb(max_unavailable=0), healthy(2, "ghost"), RS, Budget(2, 2, 2, 0)),
    ],
)  # fmt: skip
def test_budget_arithmetic(
    budget: Obj, pods: list[Obj], controllers: dict[str, Obj], want: Budget
) -> None:
    assert compute(budget, pods, controllers) == want


def test_disrupted_pods_never_count_as_healthy() -> None:
    assert compute(pdb(2), healthy(3), {}, {"p0"}) == Budget(3, 2, 2, 0)


def test_live_disrupted_drops_gone_and_old_entries() -> None:
    now = 1_800_000_120.0  # 2027-01-15T08:02:00Z
    entries = {
        "fresh": "2027-01-15T08:01:50Z",  # 10 s before now
        "old": "2027-01-15T07:50:00Z",
        "gone": "2027-01-15T08:01:50Z",
        "garbage": "yesterday",
    }
    kept = live_disrupted(entries, {"fresh", "old", "garbage"}, now)
    assert kept == {"fresh": "2027-01-15T08:01:50Z"}


FULL = Budget(3, 2, 3, 1)
SHORT = Budget(3, 3, 2, 0)
AT_FLOOR = Budget(3, 2, 2, 0)


@pytest.mark.parametrize(
    ("budget", "p", "numbers", "allowed", "decrement"),
    [
        (pdb(2), pod("a"), FULL, True, True),
        (pdb(2), pod("a"), AT_FLOOR, False, False),
        # not running: costs nothing
        (pdb(2), pod("a", phase="Pending", ready=False), SHORT, True, False),
        (pdb(2), pod("a", phase="Succeeded", ready=False), SHORT, True, False),
        # running but unhealthy: IfHealthyBudget allows only when the budget is met
        (pdb(2), pod("a", ready=False), AT_FLOOR, True, False),
        (pdb(2), pod("a", ready=False), SHORT, False, False),
        (pdb(2, policy="IfHealthyBudget"), pod("a", ready=False), SHORT, False, False),
        (pdb(2, policy="AlwaysAllow"), pod("a", ready=False), SHORT, True, False),
        # AlwaysAllow never lets a healthy pod through a budget at its floor
        (pdb(2, policy="AlwaysAllow"), pod("a"), AT_FLOOR, False, False),
    ],
)
def test_verdict(budget: Obj, p: Obj, numbers: Budget, allowed: bool, decrement: bool) -> None:
    v = verdict(budget, p, numbers)
    assert (v.allowed, v.decrement) == (allowed, decrement)
    if not allowed:
        assert v.message == (
            f"The disruption budget web-pdb needs {numbers.desired_healthy} healthy pods and "
            f"has {numbers.current_healthy} currently"
        )
