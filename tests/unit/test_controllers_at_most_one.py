"""At-most-one pods in the ReplicaSet and Deployment controllers: a terminating copy still
counts until its row is gone, so a replacement never overlaps a copy that may still run, and an
at-most-one Deployment never surges, whatever its strategy says."""

from __future__ import annotations

import copy
from typing import Any

from test_controllers_deployment import Cluster, image_of, make_dep
from test_controllers_replicaset import T0, make_pod, make_rs

from app.core.controllers.replicaset import reconcile


def at_most_one_rs(replicas: int = 1) -> dict[str, Any]:
    rs = make_rs(replicas)
    rs["spec"]["template"]["spec"]["atMostOne"] = True
    return rs


def test_a_terminating_copy_blocks_its_replacement() -> None:
    rs = at_most_one_rs()
    old = make_pod("old", deleting=True)
    plan = reconcile(rs, [old], T0)
    assert plan.creates == ()
    # An ordinary ReplicaSet replaces a terminating pod at once.
    assert len(reconcile(make_rs(1), [old], T0).creates) == 1


def test_the_replacement_comes_once_the_copy_is_gone_or_finished() -> None:
    rs = at_most_one_rs()
    assert len(reconcile(rs, [], T0).creates) == 1
    finished = make_pod("old", deleting=True, phase="Failed")
    plan = reconcile(rs, [finished], T0)
    assert len(plan.creates) == 1
    assert plan.creates[0]["spec"]["atMostOne"] is True


def test_no_more_copies_than_replicas_while_some_terminate() -> None:
    rs = at_most_one_rs(3)
    pods = [make_pod("a"), make_pod("b", deleting=True), make_pod("c", deleting=True)]
    assert reconcile(rs, pods, T0).creates == ()
    assert len(reconcile(rs, pods[:2], T0).creates) == 1


def test_the_fixpoint_holds() -> None:
    rs = at_most_one_rs()
    pod = make_pod("only")
    plan = reconcile(rs, [pod], T0)
    assert plan.creates == () and plan.deletes == ()
    if plan.status is not None:
        rs = copy.deepcopy(rs)
        rs["status"] = plan.status
    assert reconcile(rs, [pod], T0).empty


def test_an_at_most_one_deployment_never_surges_even_when_asked_to() -> None:
    dep = make_dep(1, surge=1, unavailable=0)
    dep["spec"]["template"]["spec"]["atMostOne"] = True
    cluster = Cluster(dep)
    cluster.run(20)
    assert cluster.available_pods("v1") == 1
    cluster.set_image("v2")

    def one_copy_at_most(c: Cluster) -> None:
        assert len(c.pods) <= 1, [image_of(p) for p in c.pods]

    cluster.run(40, one_copy_at_most)
    assert cluster.available_pods("v2") == 1
