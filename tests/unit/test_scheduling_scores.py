"""Scheduler scores: which feasible node a pod prefers, and how the scores are weighed."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from app.core.scheduling import scores
from app.core.scheduling.engine import Config, Engine
from app.core.scheduling.podinfo import HOSTNAME_KEY, ZONE_KEY, pod_info
from app.core.scheduling.scores import Weights
from app.core.scheduling.snapshot import node_info

Obj = dict[str, Any]


def node(
    name: str,
    cpu: str = "4",
    memory: str = "8Gi",
    *,
    zone: str | None = None,
    labels: dict[str, str] | None = None,
    taints: Sequence[Obj] = (),
    batch: dict[str, str] | None = None,
) -> Obj:
    meta_labels = {HOSTNAME_KEY: name}
    if zone is not None:
        meta_labels[ZONE_KEY] = zone
    meta_labels.update(labels or {})
    status: Obj = {
        "allocatable": {"cpu": cpu, "memory": memory},
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    if batch is not None:
        status["batchAllocatable"] = batch
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "labels": meta_labels},
        "spec": {"taints": list(taints)} if taints else {},
        "status": status,
    }


def pod(
    name: str,
    cpu: str = "100m",
    memory: str = "128Mi",
    *,
    priority: int = 2000,
    namespace: str = "ns",
    labels: dict[str, str] | None = None,
    owner: str | None = None,
    node_name: str | None = None,
    **spec: Any,
) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": namespace,
        "uid": f"uid-{namespace}-{name}",
        "labels": labels or {},
        "creationTimestamp": "2026-01-01T00:00:00Z",
    }
    if owner is not None:
        meta["ownerReferences"] = [{"uid": owner, "controller": True, "kind": "ReplicaSet"}]
    full: Obj = {
        "priority": priority,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        **spec,
    }
    status: Obj = {}
    if node_name is not None:
        full["nodeName"] = node_name
        status["phase"] = "Running"
    return {"metadata": meta, "spec": full, "status": status}


def engine(
    nodes: Sequence[Obj], placed: Sequence[Obj] = (), weights: Weights | None = None
) -> Engine:
    e = Engine(Config(weights=weights or Weights()), rng=random.Random(7))
    for n in nodes:
        e.node_changed(node_info(n, 1), 0.0)
    for p in placed:
        e.pod_changed(pod_info(p, 1), 0.0)
    return e


def choice(
    nodes: Sequence[Obj], candidate: Obj, placed: Sequence[Obj] = (), weights: Weights | None = None
) -> str:
    e = engine(nodes, placed, weights)
    info = pod_info(candidate, 1)
    slot = e.place(info)
    assert slot is not None
    return e.snapshot.node(slot).name


def pref_nodes(*terms: tuple[int, Obj]) -> Obj:
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "preference": {"matchExpressions": [t]}} for w, t in terms
            ]
        }
    }


def pref_pods(kind: str, *terms: tuple[int, dict[str, str], str]) -> Obj:
    return {
        kind: {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": w,
                    "podAffinityTerm": {"labelSelector": {"matchLabels": sel}, "topologyKey": key},
                }
                for w, sel, key in terms
            ]
        }
    }


def soft_spread(labels: dict[str, str], key: str = ZONE_KEY) -> Obj:
    return {
        "maxSkew": 1,
        "topologyKey": key,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": labels},
    }


def soft_taint(key: str) -> Obj:
    return {"key": key, "value": "x", "effect": "PreferNoSchedule"}


EMPTY_AND_BUSY = [node("empty"), node("busy")]
BUSY = [pod("filler", cpu="3", memory="6Gi", node_name="busy", priority=2000)]
ZONES = [node("a1", zone="a"), node("a2", zone="a"), node("b1", zone="b")]
ONLY_RESOURCES = Weights(spread=0, node_affinity=0, pod_affinity=0, topology_spread=0, taints=0)


# -- which node wins ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("nodes", "placed", "candidate", "expected"),
    [
        # least allocated for production, most allocated for batch
        pytest.param(EMPTY_AND_BUSY, BUSY, pod("p", priority=1000), "empty",
                     id="production-least-allocated"),
        pytest.param(EMPTY_AND_BUSY, BUSY, pod("p", priority=999), "busy",
                     id="batch-most-allocated"),
        pytest.param(EMPTY_AND_BUSY, [pod("f", cpu="3", memory="6Gi", priority=5,
                                          node_name="busy")],
                     pod("p", priority=5), "busy", id="batch-packs-onto-batch-pods"),
        pytest.param([node("small", cpu="2", memory="4Gi"), node("large", cpu="16",
                                                               memory="32Gi")],
                     [], pod("p", cpu="1", memory="1Gi"), "large",
                     id="production-prefers-larger-share-free"),
        pytest.param([node("small", cpu="2", memory="4Gi"), node("large", cpu="16",
                                                               memory="32Gi")],
                     [], pod("p", cpu="1", memory="1Gi", priority=0), "small",
                     id="batch-prefers-tighter-fit"),
        # batch scores against batchAllocatable: "roomy" has plenty of reclaimable room left
        pytest.param([node("roomy", batch={"cpu": "64", "memory": "128Gi"}), node("tight")],
                     [], pod("p", priority=0), "tight", id="batch-uses-batch-allocatable"),
        # owner spread: a zone without siblings, then a node without siblings
        pytest.param(ZONES, [pod("s1", owner="rs", node_name="a1")],
                     pod("p", owner="rs"), "b1", id="owner-spread-zone"),
        pytest.param(ZONES, [pod("s1", owner="rs", node_name="a1"),
                             pod("s2", owner="rs", node_name="b1")],
                     pod("p", owner="rs"), "a2", id="owner-spread-node"),
        pytest.param(ZONES, [pod("s1", owner="other", node_name="b1")],
                     pod("p", owner="rs"), "a1", id="owner-spread-other-owner-ignored"),
        # preferred node affinity: the heavier term wins, terms add up
        pytest.param([node("ssd", labels={"disk": "ssd"}), node("gpu", labels={"gpu": "y"})],
                     [], pod("p", affinity=pref_nodes(
                         (10, {"key": "disk", "operator": "In", "values": ["ssd"]}),
                         (50, {"key": "gpu", "operator": "Exists"}))),
                     "gpu", id="node-affinity-heavier-wins"),
        pytest.param([node("ssd", labels={"disk": "ssd"}), node("gpu", labels={"gpu": "y"})],
                     [], pod("p", affinity=pref_nodes(
                         (60, {"key": "disk", "operator": "In", "values": ["ssd"]}),
                         (50, {"key": "gpu", "operator": "Exists"}))),
                     "ssd", id="node-affinity-heavier-wins-other-way"),
        pytest.param([node("one", labels={"a": "1"}), node("both", labels={"a": "1", "b": "1"}),
                      node("none")],
                     [], pod("p", affinity=pref_nodes(
                         (10, {"key": "a", "operator": "Exists"}),
                         (10, {"key": "b", "operator": "Exists"}))),
                     "both", id="node-affinity-terms-add"),
        # preferred pod affinity and anti-affinity
        pytest.param(ZONES, [pod("db", labels={"app": "db"}, node_name="b1")],
                     pod("p", affinity=pref_pods("podAffinity", (50, {"app": "db"}, ZONE_KEY))),
                     "b1", id="pod-affinity"),
        pytest.param(ZONES, [pod("db", labels={"app": "db"}, node_name="a1")],
                     pod("p", affinity=pref_pods("podAffinity", (50, {"app": "db"}, ZONE_KEY))),
                     "a2", id="pod-affinity-zone-emptier-node"),
        pytest.param(ZONES, [pod("db", labels={"app": "db"}, node_name="b1")],
                     pod("p", affinity=pref_pods("podAntiAffinity",
                                                 (50, {"app": "db"}, ZONE_KEY))),
                     "a1", id="pod-anti-affinity"),
        pytest.param(ZONES, [pod("db", labels={"app": "db"}, node_name="a1"),
                             pod("web", labels={"app": "web"}, node_name="b1")],
                     pod("p", affinity={
                         **pref_pods("podAffinity", (10, {"app": "db"}, ZONE_KEY)),
                         **pref_pods("podAntiAffinity", (90, {"app": "web"}, ZONE_KEY))}),
                     "a2", id="pod-anti-affinity-outweighs"),
        # ScheduleAnyway topology spread prefers the emptier zone
        pytest.param(ZONES, [pod("w1", labels={"app": "w"}, node_name="b1", cpu="10m")],
                     pod("p", labels={"app": "w"},
                         topologySpreadConstraints=[soft_spread({"app": "w"})]),
                     "a1", id="soft-spread"),
        pytest.param(ZONES, [pod("w1", labels={"app": "w"}, node_name="a1", cpu="10m"),
                             pod("w2", labels={"app": "w"}, node_name="a2", cpu="10m")],
                     pod("p", cpu="2", labels={"app": "w"},
                         topologySpreadConstraints=[soft_spread({"app": "w"})]),
                     "b1", id="soft-spread-zone"),
        pytest.param([node("a1", zone="a"), node("nozone")], [],
                     pod("p", labels={"app": "w"},
                         topologySpreadConstraints=[soft_spread({"app": "w"})]),
                     "a1", id="soft-spread-avoids-node-without-key"),
        # PreferNoSchedule
        pytest.param([node("soft", taints=[soft_taint("slow")]), node("clean")],
                     [pod("f", cpu="2", node_name="clean")], pod("p"), "clean",
                     id="prefer-no-schedule"),
        pytest.param([node("soft", taints=[soft_taint("slow")]),
                      node("softer", taints=[soft_taint("slow"), soft_taint("old")])],
                     [], pod("p"), "soft", id="prefer-no-schedule-fewer-taints"),
    ],
)  # fmt: skip
def test_preferred_node(nodes: list[Obj], placed: list[Obj], candidate: Obj, expected: str) -> None:
    assert choice(nodes, candidate, placed) == expected


def test_owner_spread_is_not_used_for_batch() -> None:
    placed = [pod("s1", owner="rs", node_name="a1", cpu="1", priority=10)]
    assert choice(ZONES, pod("p", owner="rs", priority=10), placed) == "a1"  # packed
    assert choice(ZONES, pod("p", owner="rs", priority=1000), placed) == "b1"


def test_owner_spread_with_nodes_outside_any_zone() -> None:
    nodes = [node("z", zone="a"), node("plain1"), node("plain2")]
    placed = [pod("s1", owner="rs", node_name="plain1"), pod("s2", owner="rs", node_name="z")]
    assert choice(nodes, pod("p", owner="rs"), placed) == "plain2"


def test_prefer_no_schedule_tolerated() -> None:
    nodes = [node("soft", taints=[soft_taint("slow")]), node("clean")]
    placed = [pod("f", cpu="2", node_name="clean")]
    tolerant = pod("p", tolerations=[{"key": "slow", "operator": "Exists"}])
    assert choice(nodes, tolerant, placed) == "soft"  # only resources decide


# -- weights and normalisation --------------------------------------------------------------
def test_weights_decide_between_scores() -> None:
    # node affinity prefers "a"; the resource score prefers the emptier "b"
    nodes = [node("a", labels={"want": "y"}), node("b")]
    placed = [pod("f", cpu="2", memory="4Gi", node_name="a")]
    candidate = pod("p", affinity=pref_nodes((1, {"key": "want", "operator": "Exists"})))
    assert choice(nodes, candidate, placed, Weights(resources=1, node_affinity=1)) == "a"
    assert choice(nodes, candidate, placed, Weights(resources=3, node_affinity=1)) == "b"
    assert choice(nodes, candidate, placed, Weights(resources=1, node_affinity=0)) == "b"


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        pytest.param(Weights(node_affinity=2, pod_affinity=1), "a", id="node-affinity-weighs-more"),
        pytest.param(Weights(node_affinity=1, pod_affinity=2), "b", id="pod-affinity-weighs-more"),
    ],
)
def test_huge_raw_score_cannot_dominate(weights: Weights, expected: str) -> None:
    """Pod affinity counts 400 matching pods times weight 100 on "b"; node affinity gives "a"
    a raw 1. After normalisation both are worth at most 100, so the weights decide."""
    nodes = [node("a", labels={"want": "y"}), node("b")]
    placed = [
        pod(f"m{i}", cpu="0", memory="0", labels={"app": "m"}, node_name="b") for i in range(400)
    ]
    candidate = pod(
        "p",
        cpu="0",
        memory="0",
        affinity={
            **pref_nodes((1, {"key": "want", "operator": "Exists"})),
            **pref_pods("podAffinity", (100, {"app": "m"}, HOSTNAME_KEY)),
        },
    )
    assert choice(nodes, candidate, placed, weights) == expected


SCORE_NODES = [
    node("a1", zone="a", labels={"disk": "ssd"}, taints=[soft_taint("slow")]),
    node("a2", zone="a", cpu="16", memory="64Gi"),
    node("b1", zone="b", labels={"disk": "hdd"}),
    node("b2", zone="b", cpu="1", memory="2Gi", taints=[soft_taint("slow"), soft_taint("old")]),
    node("c1", zone="c", labels={"disk": "ssd", "gpu": "y"}),
    node("n1"),
]
SCORE_PLACED = [
    *(pod(f"s{i}", owner="rs", labels={"app": "w"}, node_name=n, cpu="200m")
      for i, n in enumerate(["a1", "a1", "a2", "b1", "n1"])),
    *(pod(f"d{i}", labels={"app": "db"}, node_name=n, cpu="50m")
      for i, n in enumerate(["a2", "c1", "c1", "c1"])),
]  # fmt: skip
SCORE_POD_SPEC: Obj = {
    "affinity": {
        **pref_nodes(
            (30, {"key": "disk", "operator": "In", "values": ["ssd"]}),
            (70, {"key": "gpu", "operator": "Exists"}),
        ),
        **pref_pods("podAffinity", (40, {"app": "db"}, ZONE_KEY)),
        **pref_pods("podAntiAffinity", (100, {"app": "w"}, HOSTNAME_KEY)),
    },
    "topologySpreadConstraints": [soft_spread({"app": "w"})],
}
SCORE_FUNCTIONS = [
    scores.resources_score,
    scores.owner_spread_score,
    scores.node_affinity_score,
    scores.pod_affinity_score,
    scores.topology_spread_score,
    scores.taint_score,
]


@pytest.mark.parametrize("priority", [0, 2000])
@pytest.mark.parametrize("function", SCORE_FUNCTIONS, ids=lambda f: f.__name__)
def test_each_score_within_0_and_100(function: Any, priority: int) -> None:
    e = engine(SCORE_NODES, SCORE_PLACED)
    info = pod_info(
        pod("p", owner="rs", labels={"app": "w"}, priority=priority, **SCORE_POD_SPEC), 1
    )
    cand = np.array(sorted(e.snapshot.slot_of.values()), dtype=np.int64)
    values = function(e.snapshot, info, cand)
    assert values is not None
    assert values.shape == (len(cand),)
    assert float(values.min()) >= 0.0
    assert float(values.max()) <= 100.0
    if function is not scores.resources_score and function is not scores.owner_spread_score:
        # min-max normalised: the best candidate is worth exactly 100, the worst 0
        assert float(values.max()) == pytest.approx(100.0)
        assert float(values.min()) == pytest.approx(0.0)


@pytest.mark.parametrize("function", SCORE_FUNCTIONS[1:], ids=lambda f: f.__name__)
def test_scores_without_their_inputs_are_skipped(function: Any) -> None:
    e = engine([node("a"), node("b")])
    info = pod_info(pod("p"), 1)
    cand = np.array(sorted(e.snapshot.slot_of.values()), dtype=np.int64)
    assert function(e.snapshot, info, cand) is None


def test_total_is_the_weighted_sum() -> None:
    e = engine(SCORE_NODES, SCORE_PLACED)
    info = pod_info(pod("p", owner="rs", labels={"app": "w"}, **SCORE_POD_SPEC), 1)
    cand = np.array(sorted(e.snapshot.slot_of.values()), dtype=np.int64)
    w = Weights(
        resources=1.5, spread=2.5, node_affinity=0.5, pod_affinity=3, topology_spread=1, taints=4
    )
    parts: list[Any] = [f(e.snapshot, info, cand) for f in SCORE_FUNCTIONS]
    assert all(p is not None for p in parts)
    expected: Any = sum(
        p * weight
        for p, weight in zip(
            parts,
            [w.resources, w.spread, w.node_affinity, w.pod_affinity, w.topology_spread, w.taints],
            strict=True,
        )
    )
    assert np.allclose(scores.score(e.snapshot, info, cand, w), expected)
    total = scores.score(e.snapshot, info, cand, w)
    assert float(total.max()) <= 100.0 * (1.5 + 2.5 + 0.5 + 3 + 1 + 4)


def test_minmax_of_equal_values() -> None:
    assert scores._minmax(np.array([5.0, 5.0, 5.0])).tolist() == [100.0, 100.0, 100.0]
    assert scores._minmax(np.array([0.0, 5.0, 10.0])).tolist() == [0.0, 50.0, 100.0]
    assert scores._minmax(np.array([-3.0, 1e9])).tolist() == [0.0, 100.0]


def test_only_resources() -> None:
    nodes = [node("a", labels={"want": "y"}), node("b")]
    placed = [pod("f", cpu="2", memory="4Gi", node_name="a")]
    candidate = pod("p", affinity=pref_nodes((100, {"key": "want", "operator": "Exists"})))
    assert choice(nodes, candidate, placed, ONLY_RESOURCES) == "b"
