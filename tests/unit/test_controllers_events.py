"""The Events controllers ask for: what a human looks for, once per transition."""

from __future__ import annotations

from test_controllers_deployment import Cluster, make_dep
from test_controllers_replicaset import T0, make_pod, make_rs

from app.core.controllers import deployment
from app.core.controllers.replicaset import reconcile


def test_a_replicaset_tells_its_creates_and_deletes() -> None:
    plan = reconcile(make_rs(3), [make_pod("a")], T0)
    assert [(n.reason, n.message) for n in plan.events] == [
        ("SuccessfulCreate", "Created 2 pod(s)")
    ]
    plan = reconcile(make_rs(1), [make_pod("a"), make_pod("b", node=None)], T0)
    assert [(n.reason, n.message) for n in plan.events] == [
        ("SuccessfulDelete", "Deleted 1 pod(s): b")
    ]
    assert reconcile(make_rs(1), [make_pod("a")], T0).events == ()


def test_a_rollout_tells_each_scaling_and_its_deadline_once() -> None:
    cluster = Cluster(make_dep(2, surge=1, unavailable=0, deadline=5),
                      ready_after=lambda image: None if image == "v2" else 1)  # fmt: skip
    seen = []
    for _ in range(10):
        cluster.tick()
        seen += [(n.reason, n.message, n.type) for n in cluster.last_plan.events]
    assert seen and all(r == "ScalingReplicaSet" and "Scaled up" in m for r, m, _ in seen)
    cluster.set_image("v2")
    seen = []
    for _ in range(30):
        cluster.tick()
        seen += [(n.reason, n.type) for n in cluster.last_plan.events]
    assert ("ScalingReplicaSet", "Normal") in seen
    assert seen.count((deployment.TIMED_OUT, "Warning")) == 1
    scaling = [n for n in cluster.last_plan.events if n.reason == "ScalingReplicaSet"]
    assert all(n.distinct for n in scaling)
