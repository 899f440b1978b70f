"""The PodDisruptionBudget status controller as a pure function: the numbers it publishes, the
DisruptionAllowed condition, disruptedPods expiry on a fake clock, and the fixpoint (reconciling
the state a plan produced asks for nothing more)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.core.controllers.disruption import reconcile
from app.core.controllers.plan import Plan, format_time

T0 = 1_800_000_000.0
Obj = dict[str, Any]


def make_pdb(spec: Obj, status: Obj | None = None, generation: int = 3) -> Obj:
    return {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web-pdb", "namespace": "shop", "generation": generation},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
        "status": status or {},
    }


def make_pod(name: str, ready: bool = True, deleting: bool = False, app: str = "web") -> Obj:
    meta: Obj = {"name": name, "namespace": "shop", "labels": {"app": app}}
    meta["ownerReferences"] = [{"kind": "ReplicaSet", "uid": "rs", "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = format_time(T0)
    return {
        "kind": "Pod",
        "metadata": meta,
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


RS = {"rs": {"kind": "ReplicaSet", "metadata": {"uid": "rs"}, "spec": {"replicas": 4}}}


def settle(pdb: Obj, pods: list[Obj], now: float) -> tuple[Obj, Plan]:
    """Apply one reconcile's status, then reconcile again at the same time."""
    first = reconcile(pdb, pods, RS, now)
    after = copy.deepcopy(pdb)
    if first.status is not None:
        after["status"] = first.status
    return after, reconcile(after, pods, RS, now)


@pytest.mark.parametrize(
    ("spec", "pods", "numbers", "allowed"),
    [
        ({"minAvailable": 2}, [make_pod("a"), make_pod("b"), make_pod("c")], (3, 2, 3, 1), True),
        ({"minAvailable": 3}, [make_pod("a"), make_pod("b"), make_pod("c")], (3, 3, 3, 0), False),
        ({"maxUnavailable": 1}, [make_pod("a"), make_pod("b"), make_pod("c")], (4, 3, 3, 0), False),
        ({"maxUnavailable": "50%"}, [make_pod("a"), make_pod("b", ready=False)], (4, 2, 1, 0),
         False),
        ({"minAvailable": "50%"}, [make_pod(n) for n in "abcd"], (4, 2, 4, 2), True),
        ({"minAvailable": 1}, [make_pod("a", app="db")], (0, 1, 0, 0), False),
    ],
)  # fmt: skip
def test_status_numbers_condition_and_fixpoint(
    spec: Obj, pods: list[Obj], numbers: tuple[int, int, int, int], allowed: bool
) -> None:
    after, again = settle(make_pdb(spec), pods, T0)
    st = after["status"]
    got = (st["expectedPods"], st["desiredHealthy"], st["currentHealthy"], st["disruptionsAllowed"])
    assert got == numbers
    assert st["observedGeneration"] == 3
    [cond] = st["conditions"]
    assert cond["type"] == "DisruptionAllowed"
    assert cond["status"] == ("True" if allowed else "False")
    assert cond["reason"] == ("SufficientPods" if allowed else "InsufficientPods")
    assert cond["lastTransitionTime"] == format_time(T0)
    assert again.empty


def test_condition_time_moves_only_when_it_flips() -> None:
    pods = [make_pod("a"), make_pod("b"), make_pod("c")]
    pdb, _ = settle(make_pdb({"minAvailable": 2}), pods, T0)
    # Later, same answer: nothing to write, the transition time stays.
    assert reconcile(pdb, pods, RS, T0 + 50).empty
    # A pod turns unready: the condition flips and gets the new time.
    pods[0] = make_pod("a", ready=False)
    plan = reconcile(pdb, pods, RS, T0 + 60)
    assert plan.status is not None
    assert plan.status["conditions"][0]["status"] == "False"
    assert plan.status["conditions"][0]["lastTransitionTime"] == format_time(T0 + 60)


def test_generation_change_is_observed() -> None:
    pods = [make_pod("a")]
    pdb, _ = settle(make_pdb({"minAvailable": 1}), pods, T0)
    pdb["metadata"]["generation"] = 4
    plan = reconcile(pdb, pods, RS, T0)
    assert plan.status is not None and plan.status["observedGeneration"] == 4


def test_disrupted_pods_are_kept_while_the_pod_exists_then_expire() -> None:
    pods = [make_pod("a", deleting=True), make_pod("b"), make_pod("c")]
    status = {"disruptedPods": {"a": format_time(T0), "gone": format_time(T0)}}
    pdb = make_pdb({"minAvailable": 2}, status)
    plan = reconcile(pdb, pods, RS, T0 + 10)
    assert plan.status is not None
    assert plan.status["disruptedPods"] == {"a": format_time(T0)}  # "gone" no longer exists
    assert plan.status["currentHealthy"] == 2
    assert plan.requeue_after == pytest.approx(110.0)
    pdb["status"] = plan.status
    assert reconcile(pdb, pods, RS, T0 + 10).empty
    # Two minutes after the eviction the entry is dropped even though the pod still exists.
    late = reconcile(pdb, pods, RS, T0 + 121)
    assert late.status is not None and late.status["disruptedPods"] == {}
    assert late.requeue_after is None
    pdb["status"] = late.status
    assert reconcile(pdb, pods, RS, T0 + 121).empty


def test_a_disrupted_pod_still_running_is_not_counted_healthy() -> None:
    pods = [make_pod("a"), make_pod("b"), make_pod("c")]
    pdb = make_pdb({"minAvailable": 2}, {"disruptedPods": {"a": format_time(T0)}})
    plan = reconcile(pdb, pods, RS, T0 + 1)
    assert plan.status is not None
    assert (plan.status["currentHealthy"], plan.status["disruptionsAllowed"]) == (2, 0)


def test_garbage_status_is_replaced() -> None:
    pdb = make_pdb({"minAvailable": 1}, {"disruptedPods": "junk", "conditions": "junk"})
    plan = reconcile(pdb, [make_pod("a")], RS, T0)
    assert plan.status is not None
    assert plan.status["disruptedPods"] == {}
    assert plan.status["conditions"][0]["status"] == "False"
