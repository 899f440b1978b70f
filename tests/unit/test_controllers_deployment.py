"""The Deployment controller as a pure function, driven through a small simulated cluster:
a fake clock, the ReplicaSet controller, and pods that become Ready after a delay."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.controllers import deployment, replicaset
from app.core.controllers.deployment import (
    REVISION,
    reconcile,
    resolve_fenceposts,
    template_hash,
)
from app.core.controllers.plan import Plan, available_at, format_time

T0 = 1_800_000_000.0
_ids = itertools.count()


def make_dep(
    replicas: int = 10,
    image: str = "v1",
    *,
    surge: int | str = "25%",
    unavailable: int | str = "25%",
    recreate: bool = False,
    history: int = 10,
    deadline: int = 600,
    min_ready: int = 0,
    paused: bool = False,
) -> dict[str, Any]:
    strategy: dict[str, Any] = (
        {"type": "Recreate"}
        if recreate
        else {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable},
        }
    )
    return {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "uid": "dep-uid", "generation": 1},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": image}]},
            },
            "strategy": strategy,
            "minReadySeconds": min_ready,
            "revisionHistoryLimit": history,
            "progressDeadlineSeconds": deadline,
            "paused": paused,
        },
        "status": {},
    }


def image_of(obj: dict[str, Any]) -> str:
    spec = obj["spec"]
    spec = spec["template"]["spec"] if "template" in spec else spec
    return str(spec["containers"][0]["image"])


def _store(obj: dict[str, Any], now: float) -> dict[str, Any]:
    """What the store does to a created object: a name, a uid, a creation time."""
    out = copy.deepcopy(obj)
    n = next(_ids)
    meta = out["metadata"]
    if "name" not in meta:
        meta["name"] = f"{meta['generateName']}{n}"
    meta["uid"] = f"uid-{n}"
    meta["creationTimestamp"] = format_time(now)
    meta["resourceVersion"] = str(n)
    out["status"] = {}
    return out


class Cluster:
    """Deployment controller, ReplicaSet controllers and a kubelet, one pass per tick.

    ``ready_after(image)`` is how many seconds a pod of that image takes to become Ready
    (``None``: never)."""

    def __init__(
        self, dep: dict[str, Any], ready_after: Callable[[str], float | None] = lambda _: 3
    ) -> None:
        self.dep = dep
        self.now = T0
        self.rss: list[dict[str, Any]] = []
        self.pods: list[dict[str, Any]] = []
        self.ready_after = ready_after
        self.last_plan = Plan()

    def edit(self, **spec: Any) -> None:
        self.dep["spec"].update(spec)
        self.dep["metadata"]["generation"] += 1

    def set_image(self, image: str) -> None:
        template = copy.deepcopy(self.dep["spec"]["template"])
        template["spec"]["containers"][0]["image"] = image
        self.edit(template=template)

    def apply_dep(self, plan: Plan) -> None:
        gone = {d.uid for d in plan.deletes}
        by_uid = {u["metadata"]["uid"]: u for u in plan.updates}
        rss = []
        for rs in self.rss:
            if rs["metadata"]["uid"] in gone:
                continue
            if rs["metadata"]["uid"] in by_uid:
                updated = copy.deepcopy(by_uid[rs["metadata"]["uid"]])
                assert updated["metadata"]["resourceVersion"] == rs["metadata"]["resourceVersion"]
                updated["status"] = rs["status"]
                rs = updated
            rss.append(rs)
        self.rss = rss + [_store(c, self.now) for c in plan.creates]
        if plan.status is not None:
            self.dep["status"] = plan.status

    def sync_replicasets(self) -> None:
        # Shrinking ReplicaSets first, as deletions are quicker than the creations they allow.
        for rs in sorted(self.rss, key=lambda r: r["metadata"]["creationTimestamp"]):
            plan = replicaset.reconcile(rs, self.pods, self.now)
            gone = {d.uid for d in plan.deletes}
            self.pods = [p for p in self.pods if p["metadata"]["uid"] not in gone]
            for c in plan.creates:
                pod = _store(c, self.now)
                pod["status"] = {"phase": "Pending"}
                self.pods.append(pod)
            if plan.status is not None:
                rs["status"] = plan.status

    def kubelet(self) -> None:
        for pod in self.pods:
            if pod["status"].get("conditions"):
                continue
            delay = self.ready_after(image_of(pod))
            created = pod["metadata"]["creationTimestamp"]
            if delay is not None and created <= format_time(self.now - delay):
                pod["status"] = {
                    "phase": "Running",
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "lastTransitionTime": format_time(self.now),
                        }
                    ],
                }

    def tick(self) -> None:
        self.kubelet()
        self.sync_replicasets()
        self.last_plan = reconcile(self.dep, self.rss, self.pods, self.now)
        self.apply_dep(self.last_plan)
        self.sync_replicasets()
        self.now += 1

    def run(self, ticks: int, check: Callable[[Cluster], None] | None = None) -> None:
        for _ in range(ticks):
            self.tick()
            if check is not None:
                check(self)

    def available_pods(self, image: str | None = None) -> int:
        min_ready = self.dep["spec"]["minReadySeconds"]
        return sum(
            1
            for p in self.pods
            if (image is None or image_of(p) == image)
            and (at := available_at(p, min_ready)) is not None
            and at <= self.now
        )

    def rs_by_image(self) -> dict[str, dict[str, Any]]:
        return {image_of(rs): rs for rs in self.rss}

    def condition(self, kind: str) -> dict[str, Any]:
        conds = self.dep["status"]["conditions"]
        return next(c for c in conds if c["type"] == kind)


def settled(dep: dict[str, Any], ticks: int = 30) -> Cluster:
    cluster = Cluster(dep)
    cluster.run(ticks)
    return cluster


# --------------------------------------------------------------------------- building blocks


@pytest.mark.parametrize(
    ("surge", "unavailable", "replicas", "expected"),
    [
        ("25%", "25%", 10, (3, 2)),
        ("25%", "25%", 1, (1, 0)),
        (0, 0, 5, (0, 1)),
        ("0%", "0%", 5, (0, 1)),
        (2, "50%", 5, (2, 2)),
        ("100%", 0, 3, (3, 0)),
        ("10%", "10%", 0, (0, 1)),
    ],
)
def test_fenceposts(
    surge: int | str, unavailable: int | str, replicas: int, expected: tuple[int, int]
) -> None:
    assert resolve_fenceposts(surge, unavailable, replicas) == expected


def test_template_hash_is_stable_and_ignores_its_own_label() -> None:
    t = make_dep()["spec"]["template"]
    h = template_hash(t)
    assert len(h) == 10 and int(h, 16) >= 0
    labelled = copy.deepcopy(t)
    labelled["metadata"]["labels"]["pod-template-hash"] = h
    assert template_hash(labelled) == h
    changed = copy.deepcopy(t)
    changed["metadata"]["annotations"] = {"restartedAt": "now"}
    assert template_hash(changed) != h


def test_first_reconcile_creates_the_new_replicaset() -> None:
    dep = make_dep(replicas=4)
    plan = reconcile(dep, [], [], T0)
    (rs,) = plan.creates
    h = template_hash(dep["spec"]["template"])
    assert rs["kind"] == "ReplicaSet"
    assert rs["metadata"]["name"] == f"web-{h}"
    assert rs["metadata"]["labels"] == {"app": "web", "pod-template-hash": h}
    assert rs["metadata"]["annotations"][REVISION] == "1"
    assert rs["metadata"]["ownerReferences"][0]["uid"] == "dep-uid"
    assert rs["metadata"]["ownerReferences"][0]["controller"] is True
    assert rs["spec"]["replicas"] == 4
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": h}
    assert rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] == h
    assert plan.status is not None
    assert plan.requeue_after == pytest.approx(600)


def test_deleting_deployment_does_nothing() -> None:
    dep = make_dep()
    dep["metadata"]["deletionTimestamp"] = format_time(T0)
    assert reconcile(dep, [], [], T0) == Plan()


def test_settles_complete_and_available() -> None:
    cluster = settled(make_dep(replicas=5))
    status = cluster.dep["status"]
    assert status["replicas"] == status["updatedReplicas"] == 5
    assert status["availableReplicas"] == status["readyReplicas"] == 5
    assert status["unavailableReplicas"] == 0
    assert status["observedGeneration"] == 1
    assert cluster.condition("Available")["status"] == "True"
    assert cluster.condition("Progressing")["reason"] == "NewReplicaSetAvailable"
    assert cluster.last_plan.empty and cluster.last_plan.requeue_after is None


# ------------------------------------------------------------------------------ rolling update


def check_bounds(cluster: Cluster) -> None:
    d = deployment._Spec.of(cluster.dep)
    live = len(cluster.pods)
    assert live <= d.replicas + d.max_surge, "surge exceeded"
    assert sum(rs["spec"]["replicas"] for rs in cluster.rss) <= d.replicas + d.max_surge
    assert cluster.available_pods() >= d.replicas - d.max_unavailable, "too few available"


@pytest.mark.parametrize(
    ("surge", "unavailable"),
    [("25%", "25%"), (1, 0), (0, 1), ("50%", "10%"), (3, 3), ("100%", "0%")],
)
def test_rolling_update_stays_within_bounds(surge: int | str, unavailable: int | str) -> None:
    cluster = settled(make_dep(10, surge=surge, unavailable=unavailable, min_ready=2))
    assert cluster.available_pods("v1") == 10
    cluster.set_image("v2")
    cluster.run(200, check_bounds)
    assert cluster.available_pods("v2") == 10
    assert len(cluster.pods) == 10
    by_image = cluster.rs_by_image()
    assert by_image["v1"]["spec"]["replicas"] == 0
    assert by_image["v2"]["metadata"]["annotations"][REVISION] == "2"
    assert cluster.condition("Progressing")["reason"] == "NewReplicaSetAvailable"
    assert cluster.dep["status"]["updatedReplicas"] == 10


def test_rolling_update_takes_steps() -> None:
    cluster = settled(make_dep(10))
    cluster.set_image("v2")
    cluster.tick()
    sizes = {image: rs["spec"]["replicas"] for image, rs in cluster.rs_by_image().items()}
    # 25% surge rounds up to 3 and 25% unavailable rounds down to 2.
    assert sizes == {"v1": 8, "v2": 5}
    assert cluster.condition("Progressing")["reason"] == "NewReplicaSetCreated"


@settings(max_examples=40, deadline=None)
@given(
    replicas=st.integers(1, 12),
    surge=st.one_of(st.integers(0, 4), st.sampled_from(["0%", "10%", "25%", "50%", "100%"])),
    unavailable=st.one_of(st.integers(0, 4), st.sampled_from(["0%", "25%", "50%", "100%"])),
    delays=st.tuples(st.integers(0, 6), st.integers(0, 6)),
    min_ready=st.integers(0, 3),
)
def test_rolling_update_bounds_property(
    replicas: int,
    surge: int | str,
    unavailable: int | str,
    delays: tuple[int, int],
    min_ready: int,
) -> None:
    dep = make_dep(replicas, surge=surge, unavailable=unavailable, min_ready=min_ready)
    cluster = Cluster(dep, ready_after=lambda image: delays[image == "v2"])
    cluster.run(40)
    cluster.set_image("v2")
    cluster.run(150, check_bounds)
    assert cluster.available_pods("v2") == replicas
    assert len(cluster.pods) == replicas


def test_stalled_rollout_keeps_old_pods_and_reports_deadline() -> None:
    dep = make_dep(10, deadline=60)
    cluster = Cluster(dep, ready_after=lambda image: 2 if image == "v1" else None)
    cluster.run(20)
    cluster.set_image("v2")
    cluster.tick()
    started = cluster.now - 1
    progressing = cluster.condition("Progressing")
    assert progressing["status"] == "True"
    assert cluster.last_plan.requeue_after == pytest.approx(60)
    cluster.run(30, check_bounds)
    assert cluster.available_pods("v1") == 8
    assert cluster.condition("Progressing")["status"] == "True"
    cluster.run(40, check_bounds)
    progressing = cluster.condition("Progressing")
    assert progressing["status"] == "False"
    assert progressing["reason"] == "ProgressDeadlineExceeded"
    # The last progress was the new pods being created, a tick after the new ReplicaSet.
    assert progressing["lastUpdateTime"] == format_time(started + 1 + 60)
    assert cluster.available_pods("v1") == 8
    assert cluster.condition("Available")["status"] == "True"
    assert cluster.last_plan.requeue_after is None


def test_progress_moves_the_deadline() -> None:
    dep = make_dep(4, surge=1, unavailable=0, deadline=20)
    cluster = Cluster(dep, ready_after=lambda image: 2 if image == "v1" else 15)
    cluster.run(10)
    cluster.set_image("v2")
    cluster.run(80)
    # Each new pod takes 15 s, less than the deadline, so the rollout never times out.
    assert cluster.condition("Progressing")["reason"] == "NewReplicaSetAvailable"
    assert cluster.available_pods("v2") == 4


# ---------------------------------------------------------------------- strategies and edits


def test_recreate_waits_for_old_pods_before_creating_new_ones() -> None:
    cluster = settled(make_dep(3, recreate=True))
    cluster.set_image("v2")
    plan = reconcile(cluster.dep, cluster.rss, cluster.pods, cluster.now)
    assert plan.creates == ()
    assert [u["spec"]["replicas"] for u in plan.updates] == [0]
    cluster.apply_dep(plan)
    assert reconcile(cluster.dep, cluster.rss, cluster.pods, cluster.now).creates == ()

    def never_mixed(c: Cluster) -> None:
        assert len({image_of(p) for p in c.pods}) <= 1

    cluster.run(30, never_mixed)
    assert cluster.available_pods("v2") == 3


def test_pause_stops_rollout_but_not_scaling() -> None:
    cluster = settled(make_dep(4))
    cluster.edit(paused=True)
    cluster.set_image("v2")
    cluster.run(10)
    assert set(cluster.rs_by_image()) == {"v1"}
    progressing = cluster.condition("Progressing")
    assert (progressing["status"], progressing["reason"]) == ("Unknown", "DeploymentPaused")
    assert cluster.last_plan.requeue_after is None
    cluster.edit(replicas=6)
    cluster.run(10)
    assert cluster.available_pods("v1") == 6
    cluster.edit(paused=False)
    cluster.tick()
    assert cluster.condition("Progressing")["reason"] == "NewReplicaSetCreated"
    cluster.run(60, check_bounds)
    assert cluster.available_pods("v2") == 6
    assert cluster.condition("Progressing")["reason"] == "NewReplicaSetAvailable"


def test_scaling_mid_rollout_is_proportional() -> None:
    dep = make_dep(10, surge=3, unavailable=2)
    cluster = Cluster(dep, ready_after=lambda image: 1 if image == "v1" else None)
    cluster.run(10)
    cluster.set_image("v2")
    cluster.run(5)
    before = {i: rs["spec"]["replicas"] for i, rs in cluster.rs_by_image().items()}
    assert before == {"v1": 8, "v2": 5}
    cluster.edit(replicas=20)
    cluster.tick()
    after = {i: rs["spec"]["replicas"] for i, rs in cluster.rs_by_image().items()}
    # 13 pods asked for under a 13-pod ceiling become 23 under the new 23-pod ceiling, shared
    # out in proportion (8 -> 14, 5 -> 9).
    assert after == {"v1": 14, "v2": 9}


def test_revision_history_limit_deletes_oldest_empty_replicasets() -> None:
    cluster = settled(make_dep(2, history=2))
    for image in ("v2", "v3", "v4", "v5"):
        cluster.set_image(image)
        cluster.run(30)
    names = sorted(cluster.rs_by_image())
    assert names == ["v3", "v4", "v5"]
    revisions = {
        i: rs["metadata"]["annotations"][REVISION] for i, rs in cluster.rs_by_image().items()
    }
    assert revisions == {"v3": "3", "v4": "4", "v5": "5"}


def test_zero_history_limit_keeps_only_the_current_replicaset() -> None:
    cluster = settled(make_dep(2, history=0))
    cluster.set_image("v2")
    cluster.run(30)
    assert list(cluster.rs_by_image()) == ["v2"]


def test_rollback_by_template_reuses_the_old_replicaset() -> None:
    cluster = settled(make_dep(3))
    v1 = cluster.rs_by_image()["v1"]["metadata"]["uid"]
    cluster.set_image("v2")
    cluster.run(30)
    cluster.set_image("v1")
    plan = reconcile(cluster.dep, cluster.rss, cluster.pods, cluster.now)
    assert plan.creates == ()
    cluster.run(30, check_bounds)
    by_image = cluster.rs_by_image()
    assert by_image["v1"]["metadata"]["uid"] == v1
    assert by_image["v1"]["metadata"]["annotations"][REVISION] == "3"
    assert by_image["v1"]["spec"]["replicas"] == 3
    assert by_image["v2"]["spec"]["replicas"] == 0
    assert cluster.available_pods("v1") == 3


def test_restart_annotation_makes_a_new_replicaset() -> None:
    cluster = settled(make_dep(2))
    template = copy.deepcopy(cluster.dep["spec"]["template"])
    template["metadata"]["annotations"] = {"quaymaster.io/restartedAt": "2027-01-15T10:00:00Z"}
    cluster.edit(template=template)
    cluster.run(30)
    assert len(cluster.rss) == 2
    assert sum(rs["spec"]["replicas"] for rs in cluster.rss) == 2
    assert cluster.available_pods() == 2


# ---------------------------------------------------------------------------------- fixpoint


@settings(max_examples=60, deadline=None)
@given(
    replicas=st.integers(0, 8),
    edits=st.lists(
        st.tuples(
            st.integers(1, 15),  # ticks before the edit
            st.sampled_from(["image", "scale", "pause", "resume"]),
            st.integers(0, 8),
        ),
        max_size=4,
    ),
    recreate=st.booleans(),
    never_ready=st.booleans(),
)
def test_fixpoint(
    replicas: int, edits: list[tuple[int, str, int]], recreate: bool, never_ready: bool
) -> None:
    dep = make_dep(replicas, recreate=recreate, history=1)
    cluster = Cluster(dep, ready_after=lambda image: None if never_ready and image != "v1" else 2)
    for ticks, what, n in edits:
        cluster.run(ticks)
        if what == "image":
            cluster.set_image(f"v{n}")
        elif what == "scale":
            cluster.edit(replicas=n)
        else:
            cluster.edit(paused=what == "pause")
    cluster.kubelet()
    cluster.sync_replicasets()
    plan = reconcile(cluster.dep, cluster.rss, cluster.pods, cluster.now)
    cluster.apply_dep(plan)
    again = reconcile(cluster.dep, cluster.rss, cluster.pods, cluster.now)
    assert not again.creates and not again.deletes and not again.updates
    cluster.apply_dep(again)
    assert reconcile(cluster.dep, cluster.rss, cluster.pods, cluster.now).empty
