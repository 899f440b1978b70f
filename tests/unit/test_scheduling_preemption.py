"""Preemption: which node and which victims, who may never be a victim, and the engine flow
from a nomination to the preemptor's placement."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.core.scheduling.engine import Engine
from app.core.scheduling.filters import FilterCache
from app.core.scheduling.podinfo import HOSTNAME_KEY, pod_info
from app.core.scheduling.preemption import eligible_victim, preempt, victims_on
from app.core.scheduling.snapshot import node_info

Obj = dict[str, Any]
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def stamp(seconds: float) -> str:
    return (EPOCH + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def node(
    name: str,
    cpu: str = "4",
    memory: str = "16Gi",
    *,
    gpu: int = 0,
    batch: dict[str, str] | None = None,
    ready: bool = True,
) -> Obj:
    allocatable = {"cpu": cpu, "memory": memory}
    if gpu:
        allocatable["nvidia.com/gpu"] = str(gpu)
    status: Obj = {
        "allocatable": allocatable,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if batch is not None:
        status["batchAllocatable"] = batch
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": {HOSTNAME_KEY: name}},
        "spec": {},
        "status": status,
    }


def pod(
    name: str,
    cpu: str = "1",
    priority: int = 0,
    *,
    node_name: str | None = None,
    started: float = 0.0,
    nominated: str | None = None,
    deleting: bool = False,
    never: bool = False,
    memory: str = "1Gi",
    **spec: Any,
) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": "ns",
        "uid": name,
        "labels": {"name": name},
        "creationTimestamp": stamp(0),
    }
    if deleting:
        meta["deletionTimestamp"] = stamp(1000)
    full: Obj = {
        "priority": priority,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        **spec,
    }
    if never:
        full["preemptionPolicy"] = "Never"
    status: Obj = {}
    if node_name is not None:
        full["nodeName"] = node_name
        status.update(phase="Running", startTime=stamp(started))
    if nominated is not None:
        status["nominatedNodeName"] = nominated
    return {"metadata": meta, "spec": full, "status": status}


def engine(nodes: Sequence[Obj], placed: Sequence[Obj] = ()) -> Engine:
    e = Engine(rng=random.Random(3))
    for n in nodes:
        e.node_changed(node_info(n, 1), 0.0)
    for p in placed:
        e.pod_changed(pod_info(p, 1), 0.0)
    return e


def plan_for(nodes: Sequence[Obj], placed: Sequence[Obj], preemptor: Obj) -> tuple[str, set[str]]:
    e = engine(nodes, placed)
    info = pod_info(preemptor, 1)
    e.snapshot.upsert_pod(info)
    plan = preempt(e.snapshot, info, FilterCache(), random.Random(0))
    if plan is None:
        return "", set()
    return plan.node_name, {v.uid for v in plan.victims}


# -- which node, which victims --------------------------------------------------------------
@pytest.mark.parametrize(
    ("nodes", "placed", "preemptor", "expected"),
    [
        pytest.param(
            [node("a"), node("b")],
            [pod("big", cpu="4", priority=100, node_name="a"),
             pod("s1", cpu="2", priority=10, node_name="b"),
             pod("s2", cpu="2", priority=10, node_name="b")],
            pod("p", cpu="4", priority=2000), ("a", {"big"}), id="fewest-victims",
        ),
        pytest.param(
            [node("a"), node("b")],
            [pod("va", cpu="4", priority=100, node_name="a"),
             pod("vb", cpu="4", priority=50, node_name="b")],
            pod("p", cpu="4", priority=2000), ("b", {"vb"}), id="lowest-priority",
        ),
        pytest.param(
            [node("a"), node("b")],
            [pod("va", cpu="4", priority=100, node_name="a", started=3600),
             pod("vb", cpu="4", priority=100, node_name="b", started=60)],
            pod("p", cpu="4", priority=2000), ("a", {"va"}), id="most-recently-started",
        ),
        pytest.param(
            [node("a")],
            [pod("v10", priority=10, node_name="a"), pod("v20", priority=20, node_name="a"),
             pod("v30", priority=30, node_name="a"), pod("v5b", priority=5, node_name="a")],
            pod("p", cpu="2", priority=2000), ("a", {"v5b", "v10"}),
            id="lowest-priority-victims-on-a-node",
        ),
        pytest.param(
            [node("a")],
            [pod("old", priority=10, node_name="a", started=0),
             pod("new", priority=10, node_name="a", started=500),
             pod("mid", priority=10, node_name="a", started=100),
             pod("prod", priority=1000, node_name="a")],
            pod("p", cpu="1", priority=2000), ("a", {"new"}),
            id="most-recently-started-victims-on-a-node",
        ),
        pytest.param(
            [node("a")],
            [pod("small", cpu="1", priority=10, node_name="a"),
             pod("large", cpu="3", priority=20, node_name="a")],
            pod("p", cpu="3", priority=2000), ("a", {"large"}), id="reprieve",
        ),
        pytest.param(
            [node("a")],
            [pod("x1", cpu="1", priority=1, node_name="a"),
             pod("x2", cpu="1", priority=2, node_name="a"),
             pod("big", cpu="2", priority=3, node_name="a")],
            pod("p", cpu="2", priority=2000), ("a", {"x1", "x2"}),
            id="reprieve-keeps-what-is-needed",
        ),
        pytest.param(
            [node("a"), node("b")],
            [pod("prod-a", cpu="4", priority=1000, node_name="a"),
             pod("batch-b", cpu="4", priority=999, node_name="b")],
            pod("p", cpu="4", priority=2_000_000), ("b", {"batch-b"}),
            id="production-band-never-a-victim",
        ),
        pytest.param(
            [node("a")],
            [pod("prod", cpu="3", priority=1000, node_name="a"),
             pod("batch", cpu="1", priority=1, node_name="a")],
            pod("p", cpu="2", priority=2_000_000), ("", set()),
            id="production-band-even-for-a-higher-production-pod",
        ),
        pytest.param(
            [node("a")], [pod("same", cpu="4", priority=500, node_name="a")],
            pod("p", cpu="1", priority=500), ("", set()), id="equal-priority-never",
        ),
        pytest.param(
            [node("a")], [pod("higher", cpu="4", priority=600, node_name="a")],
            pod("p", cpu="1", priority=500), ("", set()), id="higher-priority-never",
        ),
        pytest.param(
            [node("a")], [pod("lower", cpu="4", priority=499, node_name="a")],
            pod("p", cpu="1", priority=500), ("a", {"lower"}), id="batch-preempts-lower-batch",
        ),
        pytest.param(
            [node("a")], [pod("be", cpu="4", priority=-10, node_name="a")],
            pod("p", cpu="1", priority=0), ("a", {"be"}), id="batch-preempts-best-effort",
        ),
        pytest.param(
            [node("a")], [pod("gone", cpu="4", priority=1, node_name="a", deleting=True)],
            pod("p", cpu="1", priority=2000), ("", set()), id="deleting-pods-are-not-victims",
        ),
        pytest.param(
            [node("a")], [pod("v", cpu="4", priority=1, node_name="a")],
            pod("p", cpu="5", priority=2000), ("", set()), id="too-big-even-when-empty",
        ),
        pytest.param(
            [node("a"), node("b", cpu="8")], [pod("v", cpu="4", priority=1, node_name="a")],
            pod("p", cpu="5", priority=2000, nodeSelector={HOSTNAME_KEY: "a"}), ("", set()),
            id="node-selector-respected",
        ),
        pytest.param(
            [node("a", batch={"cpu": "6"})],
            [pod("v", cpu="5", priority=1, node_name="a")],
            pod("p", cpu="2", priority=500), ("a", {"v"}), id="batch-preemptor-batch-room",
        ),
        pytest.param(
            [node("a", gpu=2),
             node("b")],
            [pod("g", cpu="1", priority=1, node_name="a",
                 containers=[{"name": "c", "resources": {"requests": {
                     "cpu": "1", "nvidia.com/gpu": "2"}}}]),
             pod("cpu-only", cpu="4", priority=0, node_name="b")],
            pod("p", cpu="1", priority=2000, containers=[{"name": "c", "resources": {
                "requests": {"cpu": "1", "nvidia.com/gpu": "1"}}}]),
            ("a", {"g"}), id="gpu",
        ),
    ],
)  # fmt: skip
def test_preempt(
    nodes: list[Obj], placed: list[Obj], preemptor: Obj, expected: tuple[str, set[str]]
) -> None:
    assert plan_for(nodes, placed, preemptor) == expected


def test_preemption_policy_never() -> None:
    nodes, placed = [node("a")], [pod("v", cpu="4", priority=1, node_name="a")]
    assert plan_for(nodes, placed, pod("p", priority=2000, never=True)) == ("", set())
    e = engine(nodes, [*placed, pod("p", priority=2000, never=True)])
    placements, failures = e.cycle(1.0, 10)
    assert placements == []
    assert len(failures) == 1
    assert failures[0].preemption is None
    assert failures[0].message == "0/1 nodes available: 1 insufficient cpu"


def test_victims_on_a_node_that_needs_none() -> None:
    e = engine([node("a")], [pod("v", cpu="1", priority=1, node_name="a")])
    info = pod_info(pod("p", cpu="1", priority=2000), 1)
    assert victims_on(e.snapshot, info, e.snapshot.slot_of["a"]) == []


def test_assumed_pods_are_not_victims() -> None:
    e = engine([node("a")], [pod("v", cpu="4", priority=1)])
    placements, _ = e.cycle(0.0, 10)  # v is assumed onto a, not yet bound
    assert [p.pod.uid for p in placements] == ["v"]
    info = pod_info(pod("p", cpu="1", priority=2000), 1)
    assert preempt(e.snapshot, info, FilterCache(), random.Random(0)) is None


@pytest.mark.parametrize(
    ("preemptor", "victim", "eligible"),
    [
        pytest.param(2000, 999, True, id="production-over-batch"),
        pytest.param(2000, 1000, False, id="production-band"),
        pytest.param(999, 998, True, id="batch-over-lower-batch"),
        pytest.param(999, 999, False, id="equal"),
        pytest.param(10, 20, False, id="higher"),
        pytest.param(0, -1, True, id="best-effort"),
    ],
)
def test_eligible_victim(preemptor: int, victim: int, eligible: bool) -> None:
    p = pod_info(pod("p", priority=preemptor), 1)
    v = pod_info(pod("v", priority=victim, node_name="a"), 1)
    assert eligible_victim(p, v) is eligible


# -- the engine flow ------------------------------------------------------------------------
def test_nominated_node_used_once_victims_are_gone() -> None:
    e = engine(
        [node("a"), node("b")],
        [
            pod("va", cpu="4", priority=10, node_name="a"),
            pod("vb", cpu="4", priority=20, node_name="b"),
            pod("p", cpu="3", priority=2000),
        ],
    )
    placements, failures = e.cycle(1.0, 10)
    assert placements == []
    [failure] = failures
    assert failure.message == "0/2 nodes available: 2 insufficient cpu"
    assert failure.preemption is not None
    assert failure.preemption.node_name == "a"
    assert [v.uid for v in failure.preemption.victims] == ["va"]
    a = e.snapshot.slot_of["a"]
    assert e.snapshot.nominated_slot("p") == a
    assert e.snapshot.held_cpu[a] == 3000

    # Room on the nominated node is held: a smaller pod arriving now cannot take it.
    e.pod_changed(pod_info(pod("small", cpu="1", priority=2000, never=True), 1), 1.5)
    placements, failures = e.cycle(1.5, 10)
    assert placements == []
    assert [f.pod.uid for f in failures] == ["small"]
    e.pod_deleted("small", 1.6)

    # The shell records the nomination and the victim's deletion.
    e.pod_changed(pod_info(pod("p", cpu="3", priority=2000, nominated="a"), 2), 2.0)
    e.pod_changed(pod_info(pod("va", cpu="4", priority=10, node_name="a", deleting=True), 2), 2.0)
    placements, failures = e.cycle(2.0, 10)
    assert placements == []
    for f in failures:  # no second round of evictions while the first victims terminate
        assert f.pod.uid == "p"
        assert f.preemption is None

    e.pod_deleted("va", 3.0)
    placements, failures = e.cycle(100.0, 10)
    assert failures == []
    assert [(p.pod.uid, p.node_name) for p in placements] == [("p", "a")]
    assert e.snapshot.held_cpu[a] == 0
    assert e.snapshot.used_cpu[a] == 3000


def test_nominee_does_not_preempt_again_while_its_victims_terminate() -> None:
    e = engine(
        [node("a", cpu="2"), node("b", cpu="2")],
        [
            pod("va", cpu="2", priority=10, node_name="a"),
            pod("vb", cpu="2", priority=10, node_name="b"),
            pod("p", cpu="2", priority=2000),
        ],
    )
    _, [failure] = e.cycle(0.0, 10)
    assert failure.preemption is not None
    first = failure.preemption
    [victim] = first.victims
    e.pod_changed(pod_info(pod("p", cpu="2", priority=2000, nominated=first.node_name), 2), 1.0)
    leaving = pod(victim.uid, cpu="2", priority=10, node_name=first.node_name, deleting=True)
    e.pod_changed(pod_info(leaving, 2), 1.0)
    for now in (1.0, 5.0, 30.0, 100.0):
        placements, failures = e.cycle(now, 10)
        assert placements == []
        assert all(f.preemption is None for f in failures)
        assert e.snapshot.nominated_slot("p") == e.snapshot.slot_of[first.node_name]
    other = "b" if first.node_name == "a" else "a"
    assert not e.snapshot.pods[f"v{other}"].deleting


def test_batch_pods_do_not_take_the_room_held_for_a_production_preemptor() -> None:
    """Batch pods may use batch-allocatable beyond allocatable; a production preemptor's
    held room must still be there, in allocatable terms, when its victims are gone."""
    overcommit = node("a", cpu="1", memory="1Gi", batch={"cpu": "3", "memory": "6Gi"})
    e = engine(
        [overcommit],
        [
            pod("victim", cpu="0", memory="4Gi", priority=995, node_name="a"),
            pod("prod", cpu="1", memory="0", priority=1000),
            *(pod(f"task{i}", cpu="1", memory="0", priority=10) for i in range(3)),
        ],
    )
    placements, failures = e.cycle(1.0, 10)
    assert placements == []  # the tasks would fit in batch-allocatable, not beside the hold
    plans = {f.pod.uid: f.preemption for f in failures}
    assert plans["prod"] is not None
    assert [v.uid for v in plans["prod"].victims] == ["victim"]
    e.pod_changed(pod_info(pod("prod", cpu="1", memory="0", priority=1000, nominated="a"), 2), 1)
    e.pod_deleted("victim", 2.0)
    placements, _ = e.cycle(100.0, 10)
    # the preemptor first; then batch tasks in what batch-allocatable has left
    assert [(p.pod.uid, p.node_name) for p in placements] == [
        ("prod", "a"), ("task0", "a"), ("task1", "a"),
    ]  # fmt: skip


def test_second_preemptor_in_one_cycle_picks_other_victims() -> None:
    e = engine(
        [node("a"), node("b")],
        [
            pod("va", cpu="4", priority=10, node_name="a"),
            pod("vb", cpu="4", priority=20, node_name="b"),
            pod("p1", cpu="4", priority=3000),
            pod("p2", cpu="4", priority=2000),
        ],
    )
    _, failures = e.cycle(1.0, 10)
    plans = {f.pod.uid: f.preemption for f in failures}
    assert plans["p1"] is not None and plans["p2"] is not None
    assert (plans["p1"].node_name, [v.uid for v in plans["p1"].victims]) == ("a", ["va"])
    assert (plans["p2"].node_name, [v.uid for v in plans["p2"].victims]) == ("b", ["vb"])


def test_failure_message_for_a_pod_that_fits_nowhere() -> None:
    e = engine(
        [node("a", cpu="2"), node("b", cpu="2"), node("c", cpu="64", ready=False)],
        [pod("prod", cpu="2", priority=1000, node_name="a"), pod("p", cpu="3", priority=2000)],
    )
    placements, failures = e.cycle(1.0, 10)
    assert placements == []
    assert len(failures) == 1
    assert failures[0].message == "0/3 nodes available: 2 insufficient cpu, 1 node(s) not ready"
    assert failures[0].preemption is None
    assert e.snapshot.nominated == {}
    # parked: later cycles do not retry it until the cluster changes
    assert e.cycle(2.0, 10) == ([], [])
    e.node_changed(node_info(node("c", cpu="64"), 2), 1.5)
    assert e.cycle(1.9, 10) == ([], [])  # backing off: one second after the last attempt
    placements, failures = e.cycle(2.0, 10)
    assert [(p.pod.uid, p.node_name) for p in placements] == [("p", "c")]
