"""The ReplicaSet controller as a pure function: counts, deletion order, status and the
fixpoint (applying a plan and reconciling again asks for nothing more)."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.controllers.plan import Plan, format_time
from app.core.controllers.replicaset import reconcile

T0 = 1_800_000_000.0
_ids = itertools.count()


def make_rs(replicas: int = 3, min_ready: int = 0, **meta: Any) -> dict[str, Any]:
    m = {
        "name": "web",
        "namespace": "default",
        "uid": "rs-uid",
        "generation": 2,
        "labels": {"app": "web", "pod-template-hash": "abc"},
    }
    m.update(meta)
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "ReplicaSet",
        "metadata": m,
        "spec": {
            "replicas": replicas,
            "minReadySeconds": min_ready,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx"}]},
            },
        },
        "status": {},
    }


def make_pod(
    name: str,
    *,
    owner: str = "rs-uid",
    created: float = T0,
    node: str | None = "n1",
    phase: str = "Running",
    ready_since: float | None = T0,
    deleting: bool = False,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "uid": f"uid-{name}",
        "creationTimestamp": format_time(created),
        "labels": {"app": "web"} if labels is None else labels,
        "ownerReferences": [{"kind": "ReplicaSet", "uid": owner, "controller": True}],
    }
    if deleting:
        meta["deletionTimestamp"] = format_time(created + 1)
    conditions = []
    if ready_since is not None:
        conditions.append(
            {"type": "Ready", "status": "True", "lastTransitionTime": format_time(ready_since)}
        )
    else:
        conditions.append({"type": "Ready", "status": "False"})
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "nginx"}]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase, "conditions": conditions},
    }


def apply(plan: Plan, pods: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
    """What the store would hold after the plan: creates named, deletes gone."""
    gone = {d.uid for d in plan.deletes}
    out = [p for p in pods if p["metadata"]["uid"] not in gone]
    for obj in plan.creates:
        pod = copy.deepcopy(obj)
        n = next(_ids)
        pod["metadata"]["name"] = pod["metadata"]["generateName"] + f"x{n}"
        pod["metadata"]["uid"] = f"created-{n}"
        pod["metadata"]["creationTimestamp"] = format_time(now)
        pod["status"] = {"phase": "Pending"}
        out.append(pod)
    return out


@pytest.mark.parametrize(
    ("replicas", "existing", "creates", "deletes"),
    [
        (3, 0, 3, 0),
        (3, 1, 2, 0),
        (3, 3, 0, 0),
        (3, 5, 0, 2),
        (0, 4, 0, 4),
    ],
)
def test_counts(replicas: int, existing: int, creates: int, deletes: int) -> None:
    pods = [make_pod(f"p{i}") for i in range(existing)]
    plan = reconcile(make_rs(replicas), pods, T0)
    assert len(plan.creates) == creates
    assert len(plan.deletes) == deletes


def test_created_pod_shape() -> None:
    plan = reconcile(make_rs(1), [], T0)
    (pod,) = plan.creates
    meta = pod["metadata"]
    assert pod["kind"] == "Pod" and pod["apiVersion"] == "quaymaster.io/v1"
    assert meta["generateName"] == "web-"
    assert meta["namespace"] == "default"
    assert meta["labels"] == {"app": "web", "pod-template-hash": "abc"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "quaymaster.io/v1",
            "kind": "ReplicaSet",
            "name": "web",
            "uid": "rs-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert pod["spec"]["containers"][0]["image"] == "nginx"


@pytest.mark.parametrize(
    ("pod", "counted"),
    [
        (make_pod("a"), True),
        (make_pod("a", owner="other"), False),
        (make_pod("a", deleting=True), False),
        (make_pod("a", phase="Succeeded"), False),
        (make_pod("a", phase="Failed"), False),
        (make_pod("a", phase="Pending", ready_since=None, node=None), True),
    ],
)
def test_which_pods_count(pod: dict[str, Any], counted: bool) -> None:
    plan = reconcile(make_rs(1), [pod], T0)
    assert len(plan.creates) == (0 if counted else 1)


def test_max_burst_bounds_one_plan() -> None:
    assert len(reconcile(make_rs(50), [], T0, max_burst=20).creates) == 20
    pods = [make_pod(f"p{i}") for i in range(50)]
    assert len(reconcile(make_rs(0), pods, T0, max_burst=20).deletes) == 20


def test_surplus_deletion_order() -> None:
    pods = [
        make_pod("old-ready", created=T0 - 100, ready_since=T0 - 90),
        make_pod("new-ready", created=T0 - 10, ready_since=T0 - 5),
        make_pod("not-ready", created=T0 - 200, ready_since=None),
        make_pod("pending", phase="Pending", ready_since=None, created=T0 - 300),
        make_pod("unscheduled", node=None, phase="Pending", ready_since=None, created=T0 - 400),
    ]
    order = []
    for keep in range(len(pods) - 1, -1, -1):
        plan = reconcile(make_rs(keep), pods, T0)
        order.append(plan.deletes[-1].name)
    assert order == ["unscheduled", "pending", "not-ready", "new-ready", "old-ready"]


def test_status_and_min_ready_requeue() -> None:
    pods = [
        make_pod("a", ready_since=T0 - 100),
        make_pod("b", ready_since=T0 - 5),
        make_pod("c", ready_since=None, labels={"other": "x"}),
    ]
    plan = reconcile(make_rs(3, min_ready=30), pods, T0)
    assert plan.status == {
        "replicas": 3,
        "fullyLabeledReplicas": 2,
        "readyReplicas": 2,
        "availableReplicas": 1,
        "observedGeneration": 2,
    }
    assert plan.requeue_after == pytest.approx(25)
    later = reconcile(make_rs(3, min_ready=30), pods, T0 + 25)
    assert later.status is not None and later.status["availableReplicas"] == 2
    assert later.requeue_after is None


def test_unchanged_status_is_not_written() -> None:
    rs = make_rs(1)
    pods = [make_pod("a")]
    plan = reconcile(rs, pods, T0)
    rs["status"] = plan.status
    assert reconcile(rs, pods, T0).empty


def test_deleting_replicaset_does_nothing() -> None:
    rs = make_rs(3, deletionTimestamp=format_time(T0))
    assert reconcile(rs, [], T0) == Plan()


@settings(max_examples=200, deadline=None)
@given(
    replicas=st.integers(0, 12),
    shapes=st.lists(
        st.tuples(
            st.sampled_from(["Running", "Pending", "Succeeded", "Failed"]),
            st.booleans(),  # ready
            st.booleans(),  # scheduled
            st.booleans(),  # terminating
            st.booleans(),  # ours
        ),
        max_size=15,
    ),
)
def test_fixpoint(replicas: int, shapes: list[tuple[str, bool, bool, bool, bool]]) -> None:
    pods = [
        make_pod(
            f"p{i}",
            phase=phase,
            ready_since=T0 - i if ready else None,
            node="n1" if scheduled else None,
            deleting=deleting,
            owner="rs-uid" if ours else "someone-else",
            created=T0 - 10 * i,
        )
        for i, (phase, ready, scheduled, deleting, ours) in enumerate(shapes)
    ]
    rs = make_rs(replicas)
    plan = reconcile(rs, pods, T0)
    pods = apply(plan, pods, T0)
    again = reconcile(rs, pods, T0)
    assert not again.creates and not again.deletes and not again.updates
    rs["status"] = again.status or rs["status"]
    assert reconcile(rs, pods, T0).empty
