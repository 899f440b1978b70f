"""Scheduler filters: which nodes may take a pod, and the message for a pod no node can take."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from scheduling_objects import node, pod

from app.core.scheduling.explain import explain, verdicts
from app.core.scheduling.filters import FILTERS, Filter, FilterCache, feasible
from app.core.scheduling.podinfo import HOSTNAME_KEY, ZONE_KEY, pod_info
from app.core.scheduling.snapshot import Snapshot, node_info

MACHINE_CLASS = "quaymaster.io/machine-class"
Obj = dict[str, Any]


def snapshot(nodes: Sequence[Obj], placed: Sequence[Obj] = ()) -> Snapshot:
    snap = Snapshot(capacity=4)
    for n in nodes:
        snap.upsert_node(node_info(n, 1))
    for p in placed:
        snap.upsert_pod(pod_info(p, 1))
    return snap


def feasible_names(nodes: Sequence[Obj], candidate: Obj, placed: Sequence[Obj] = ()) -> set[str]:
    snap = snapshot(nodes, placed)
    info = pod_info(candidate, 1)
    snap.upsert_pod(info)
    mask = feasible(snap, info, FilterCache())
    return {snap.node(int(s)).name for s in np.flatnonzero(mask)}


def message(nodes: Sequence[Obj], candidate: Obj, placed: Sequence[Obj] = ()) -> str:
    snap = snapshot(nodes, placed)
    info = pod_info(candidate, 1)
    snap.upsert_pod(info)
    return explain(snap, info, FilterCache()).message


def taint(key: str, effect: str, value: str | None = None) -> Obj:
    t: Obj = {"key": key, "effect": effect}
    if value is not None:
        t["value"] = value
    return t


def tol(key: str = "", operator: str = "Equal", value: str = "", effect: str = "") -> Obj:
    t: Obj = {"operator": operator}
    if key:
        t["key"] = key
    if value:
        t["value"] = value
    if effect:
        t["effect"] = effect
    return t


def expr(key: str, operator: str, *values: str) -> Obj:
    e: Obj = {"key": key, "operator": operator}
    if values:
        e["values"] = list(values)
    return e


def required_nodes(*terms: Obj) -> Obj:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def pod_term(
    labels: dict[str, str] | None = None,
    key: str = HOSTNAME_KEY,
    *,
    expressions: Sequence[Obj] = (),
    namespaces: Sequence[str] | None = None,
) -> Obj:
    selector: Obj = {}
    if labels:
        selector["matchLabels"] = labels
    if expressions:
        selector["matchExpressions"] = list(expressions)
    term: Obj = {"labelSelector": selector, "topologyKey": key}
    if namespaces is not None:
        term["namespaces"] = list(namespaces)
    return term


def affinity(*terms: Obj) -> Obj:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def anti(*terms: Obj) -> Obj:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def spread(max_skew: int, labels: dict[str, str], hard: bool = True, key: str = ZONE_KEY) -> Obj:
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        "labelSelector": {"matchLabels": labels},
    }


# -- resources ------------------------------------------------------------------------------
TWO_SIZES = [node("small", cpu="1", memory="2Gi"), node("big", cpu="4", memory="8Gi")]


@pytest.mark.parametrize(
    ("nodes", "placed", "candidate", "expected"),
    [
        pytest.param(TWO_SIZES, [], pod("p", cpu="1500m"), {"big"}, id="cpu"),
        pytest.param(TWO_SIZES, [], pod("p", cpu="1"), {"small", "big"}, id="cpu-exact-fit"),
        pytest.param(TWO_SIZES, [], pod("p", cpu="4001m"), set(), id="cpu-none"),
        pytest.param(TWO_SIZES, [], pod("p", memory="3Gi"), {"big"}, id="memory"),
        pytest.param(TWO_SIZES, [], pod("p", memory="2Gi"), {"small", "big"}, id="memory-exact"),
        pytest.param(
            TWO_SIZES, [pod("q", cpu="3", node_name="big")], pod("p", cpu="1500m"), set(),
            id="cpu-used-by-placed-pod",
        ),
        pytest.param(
            TWO_SIZES, [pod("q", cpu="3", node_name="big")], pod("p", cpu="1"), {"small", "big"},
            id="cpu-used-leaves-exact-room",
        ),
        pytest.param(
            TWO_SIZES, [pod("q", memory="7Gi", node_name="big")], pod("p", memory="1500Mi"),
            {"small"}, id="memory-used-by-placed-pod",
        ),
        pytest.param(
            [node("plain"), node("gpu", gpu=2)], [], pod("p", gpu=1), {"gpu"}, id="gpu",
        ),
        pytest.param(
            [node("plain"), node("gpu", gpu=2)], [], pod("p", gpu=3), set(), id="gpu-too-many",
        ),
        pytest.param(
            [node("plain"), node("gpu", gpu=2)], [pod("q", gpu=2, node_name="gpu")],
            pod("p", gpu=1), set(), id="gpu-used",
        ),
        pytest.param(
            [node("plain"), node("gpu", gpu=2)], [], pod("p"), {"plain", "gpu"},
            id="no-gpu-request-goes-anywhere",
        ),
        pytest.param(
            [node("one", pods=1), node("two", pods=2)],
            [pod("q1", node_name="one"), pod("q2", node_name="two")],
            pod("p"), {"two"}, id="pod-count",
        ),
        pytest.param(
            [node("zero", pods=0), node("unlimited")], [], pod("p"), {"unlimited"},
            id="pod-count-zero",
        ),
        pytest.param(
            [node("n", cpu="2")],
            [pod("done", cpu="2", node_name="n") | {"status": {"phase": "Succeeded"}}],
            pod("p", cpu="2"), {"n"}, id="finished-pods-hold-no-room",
        ),
        pytest.param(
            [node("n", cpu="2")], [pod("q", cpu="0", memory=None, node_name="n")],
            pod("p", cpu="2"), {"n"}, id="zero-request-pod",
        ),
    ],
)  # fmt: skip
def test_resource_filters(
    nodes: list[Obj], placed: list[Obj], candidate: Obj, expected: set[str]
) -> None:
    assert feasible_names(nodes, candidate, placed) == expected


# Production pods are held to allocatable, batch pods (priority < 1000) to batchAllocatable.
OVERCOMMIT = node("over", cpu="4", memory="8Gi", batch={"cpu": "8", "memory": "16Gi"})
RESERVED = node("reserved", cpu="4", memory="8Gi", batch={"cpu": "1", "memory": "1Gi"})


@pytest.mark.parametrize(
    ("nodes", "placed", "candidate", "expected"),
    [
        pytest.param([OVERCOMMIT], [], pod("p", cpu="6", priority=0), {"over"},
                     id="batch-uses-larger-batch-cpu"),
        pytest.param([OVERCOMMIT], [], pod("p", cpu="6", priority=1000), set(),
                     id="production-held-to-allocatable-cpu"),
        pytest.param([OVERCOMMIT], [], pod("p", memory="12Gi", priority=999), {"over"},
                     id="batch-uses-larger-batch-memory"),
        pytest.param([OVERCOMMIT], [], pod("p", memory="12Gi", priority=5000), set(),
                     id="production-held-to-allocatable-memory"),
        pytest.param([OVERCOMMIT], [pod("q", cpu="4", node_name="over")],
                     pod("p", cpu="2", priority=0), {"over"}, id="batch-beyond-allocatable"),
        pytest.param([OVERCOMMIT], [pod("q", cpu="4", node_name="over")],
                     pod("p", cpu="1", priority=1000), set(), id="production-after-full"),
        pytest.param([RESERVED], [], pod("p", cpu="2", priority=0), set(),
                     id="batch-held-to-smaller-batch-cpu"),
        pytest.param([RESERVED], [], pod("p", memory="2Gi", priority=0), set(),
                     id="batch-held-to-smaller-batch-memory"),
        pytest.param([RESERVED], [], pod("p", cpu="2", priority=1000), {"reserved"},
                     id="production-uses-allocatable"),
        pytest.param([RESERVED], [pod("q", cpu="1", priority=2000, node_name="reserved")],
                     pod("p", cpu="100m", priority=0), set(),
                     id="batch-counts-production-usage"),
        pytest.param([node("plain", cpu="4")], [], pod("p", cpu="4", priority=0), {"plain"},
                     id="batch-without-batch-allocatable-uses-allocatable"),
        pytest.param([node("half", cpu="4", batch={"cpu": "2"})], [],
                     pod("p", cpu="1", memory="8Gi", priority=0), {"half"},
                     id="batch-memory-defaults-to-allocatable"),
        pytest.param([node("gpu", gpu=1, batch={"cpu": "8"})], [],
                     pod("p", gpu=1, priority=0), {"gpu"}, id="batch-gpu-uses-allocatable"),
    ],
)  # fmt: skip
def test_batch_and_production_limits(
    nodes: list[Obj], placed: list[Obj], candidate: Obj, expected: set[str]
) -> None:
    assert feasible_names(nodes, candidate, placed) == expected


# -- node state -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("other", "schedulable"),
    [
        pytest.param(node("x"), True, id="ready"),
        pytest.param(node("x", unschedulable=True), False, id="cordoned"),
        pytest.param(node("x", ready=False), False, id="not-ready"),
        pytest.param(node("x", ready=None), False, id="no-ready-condition"),
        pytest.param(node("x", ready=False, unschedulable=True), False, id="cordoned-not-ready"),
        pytest.param(node("x", cpu=None), False, id="no-allocatable-cpu"),
        pytest.param(node("x", memory=None), False, id="no-allocatable-memory"),
    ],
)
def test_node_state(other: Obj, schedulable: bool) -> None:
    expected = {"ok", "x"} if schedulable else {"ok"}
    assert feasible_names([node("ok"), other], pod("p")) == expected


def test_node_state_change_is_seen() -> None:
    snap = snapshot([node("a"), node("b")])
    info = pod_info(pod("p"), 1)
    cache = FilterCache()
    assert feasible(snap, info, cache)[[snap.slot_of["a"], snap.slot_of["b"]]].all()
    snap.upsert_node(node_info(node("a", unschedulable=True), 2))
    snap.upsert_node(node_info(node("b", ready=False), 2))
    assert not feasible(snap, info, cache).any()
    snap.upsert_node(node_info(node("a"), 3))
    assert {snap.node(int(s)).name for s in np.flatnonzero(feasible(snap, info, cache))} == {"a"}


# -- node selector and required node affinity ----------------------------------------------
LABELLED = [
    node("n1", labels={"disk": "ssd", MACHINE_CLASS: "m5", "cores": "16"}),
    node("n2", labels={"disk": "hdd", MACHINE_CLASS: "c7", "cores": "64"}),
    node("n3", labels={"cores": "many"}),
]
ALL = {"n1", "n2", "n3"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({}, ALL, id="none"),
        pytest.param({"nodeSelector": {"disk": "ssd"}}, {"n1"}, id="selector"),
        pytest.param({"nodeSelector": {MACHINE_CLASS: "c7"}}, {"n2"}, id="machine-class"),
        pytest.param({"nodeSelector": {MACHINE_CLASS: "m5", "disk": "ssd"}}, {"n1"},
                     id="selector-and"),
        pytest.param({"nodeSelector": {MACHINE_CLASS: "m5", "disk": "hdd"}}, set(),
                     id="selector-and-unsatisfiable"),
        pytest.param({"nodeSelector": {MACHINE_CLASS: "x9"}}, set(), id="unknown-class"),
        pytest.param({"nodeSelector": {HOSTNAME_KEY: "n3"}}, {"n3"}, id="hostname"),
        pytest.param({"affinity": required_nodes({"matchExpressions": [
            expr("disk", "In", "ssd", "hdd")]})}, {"n1", "n2"}, id="in"),
        pytest.param({"affinity": required_nodes({"matchExpressions": [
            expr("disk", "NotIn", "ssd")]})}, {"n2", "n3"}, id="notin-includes-missing-key"),
        pytest.param({"affinity": required_nodes({"matchExpressions": [
            expr("disk", "Exists")]})}, {"n1", "n2"}, id="exists"),
        pytest.param({"affinity": required_nodes({"matchExpressions": [
            expr("disk", "DoesNotExist")]})}, {"n3"}, id="does-not-exist"),
        pytest.param({"affinity": required_nodes({"matchExpressions": [
            expr("cores", "Gt", "16")]})}, {"n2"}, id="gt-strict-skips-non-integer"),
        pytest.param({"affinity": required_nodes({"matchExpressions": [
            expr("cores", "Gt", "15")]})}, {"n1", "n2"}, id="gt"),
        pytest.param({"affinity": required_nodes({"matchExpressions": [
            expr("cores", "Lt", "64")]})}, {"n1"}, id="lt-strict"),
        pytest.param({"affinity": required_nodes({"matchExpressions": [
            expr("cores", "Lt", "abc")]})}, set(), id="lt-bad-bound"),
        pytest.param({"affinity": required_nodes({"matchExpressions": [
            expr("gone", "Gt", "1")]})}, set(), id="gt-missing-label"),
        pytest.param({"affinity": required_nodes({"matchFields": [
            expr("metadata.name", "In", "n2", "n3")]})}, {"n2", "n3"}, id="match-fields-in"),
        pytest.param({"affinity": required_nodes({"matchFields": [
            expr("metadata.name", "NotIn", "n2")]})}, {"n1", "n3"}, id="match-fields-notin"),
        pytest.param({"affinity": required_nodes({
            "matchExpressions": [expr("disk", "Exists")],
            "matchFields": [expr("metadata.name", "NotIn", "n1")]})}, {"n2"},
            id="fields-and-expressions-and"),
        pytest.param({"affinity": required_nodes(
            {"matchExpressions": [expr("disk", "In", "ssd")]},
            {"matchExpressions": [expr("cores", "In", "many")]})}, {"n1", "n3"},
            id="terms-or"),
        pytest.param({"affinity": required_nodes({"matchExpressions": [
            expr("disk", "Exists"), expr(MACHINE_CLASS, "NotIn", "m5")]})}, {"n2"},
            id="expressions-and"),
        pytest.param({"affinity": required_nodes({})}, set(), id="empty-term-matches-nothing"),
        pytest.param({"affinity": required_nodes({}, {"matchExpressions": [
            expr("disk", "In", "hdd")]})}, {"n2"}, id="empty-term-or-real-term"),
        pytest.param({"affinity": required_nodes({"matchExpressions": [
            expr("disk", "Bogus", "ssd")]})}, set(), id="unknown-operator"),
        pytest.param({"nodeSelector": {"disk": "ssd"}, "affinity": required_nodes(
            {"matchExpressions": [expr("disk", "In", "hdd")]})}, set(),
            id="selector-and-affinity-both-apply"),
    ],
)  # fmt: skip
def test_node_selector_and_affinity(spec: Obj, expected: set[str]) -> None:
    assert feasible_names(LABELLED, pod("p", **spec)) == expected


def test_relabelled_node_is_seen() -> None:
    snap = snapshot([node("a"), node("b")])
    info = pod_info(pod("p", nodeSelector={MACHINE_CLASS: "m5"}), 1)
    cache = FilterCache()
    assert not feasible(snap, info, cache).any()
    snap.upsert_node(node_info(node("b", labels={MACHINE_CLASS: "m5"}), 2))
    assert np.flatnonzero(feasible(snap, info, cache)).tolist() == [snap.slot_of["b"]]


# -- taints and tolerations -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("taints", "tolerations", "allowed"),
    [
        pytest.param([], [], True, id="untainted"),
        pytest.param([taint("gpu", "NoSchedule", "true")], [], False, id="noschedule"),
        pytest.param([taint("gpu", "NoExecute", "true")], [], False, id="noexecute"),
        pytest.param([taint("gpu", "PreferNoSchedule", "true")], [], True,
                     id="prefernoschedule-is-no-filter"),
        pytest.param([taint("gpu", "NoSchedule", "true")], [tol("gpu", "Equal", "true")], True,
                     id="equal"),
        pytest.param([taint("gpu", "NoSchedule", "true")], [tol("gpu", "Equal", "false")], False,
                     id="equal-wrong-value"),
        pytest.param([taint("gpu", "NoSchedule", "true")], [tol("gpu")], False,
                     id="equal-missing-value"),
        pytest.param([taint("gpu", "NoSchedule")], [tol("gpu")], True,
                     id="equal-empty-value"),
        pytest.param([taint("gpu", "NoSchedule", "true")], [tol("gpu", "Exists")], True,
                     id="exists"),
        pytest.param([taint("gpu", "NoSchedule", "true")], [tol("other", "Exists")], False,
                     id="exists-other-key"),
        pytest.param([taint("gpu", "NoSchedule", "true"), taint("x", "NoExecute", "1")],
                     [tol("", "Exists")], True, id="empty-key-exists-tolerates-all"),
        pytest.param([taint("gpu", "NoSchedule", "true")], [tol("", "Equal", "true")], False,
                     id="empty-key-equal-tolerates-nothing"),
        pytest.param([taint("gpu", "NoSchedule", "true")], [tol("", "Exists", effect="NoExecute")],
                     False, id="empty-key-exists-other-effect"),
        pytest.param([taint("gpu", "NoSchedule", "true")],
                     [tol("gpu", "Equal", "true", "NoSchedule")], True, id="effect-matches"),
        pytest.param([taint("gpu", "NoExecute", "true")],
                     [tol("gpu", "Equal", "true", "NoSchedule")], False, id="effect-mismatch"),
        pytest.param([taint("gpu", "NoExecute", "true")],
                     [tol("gpu", "Exists", effect="NoExecute")], True, id="exists-with-effect"),
        pytest.param([taint("gpu", "NoExecute", "true")], [tol("gpu", "Equal", "true")], True,
                     id="empty-effect-matches-any"),
        pytest.param([taint("gpu", "NoSchedule", "true"), taint("ssd", "NoSchedule", "y")],
                     [tol("gpu", "Exists")], False, id="every-hard-taint-must-be-tolerated"),
        pytest.param([taint("gpu", "NoSchedule", "true"), taint("ssd", "NoSchedule", "y")],
                     [tol("gpu", "Exists"), tol("ssd", "Equal", "y")], True,
                     id="two-tolerations"),
        pytest.param([taint("gpu", "NoSchedule", "true"), taint("slow", "PreferNoSchedule")],
                     [tol("gpu", "Exists")], True, id="soft-taint-ignored"),
    ],
)  # fmt: skip
def test_taints(taints: list[Obj], tolerations: list[Obj], allowed: bool) -> None:
    nodes = [node("plain"), node("tainted", taints=taints)]
    expected = {"plain", "tainted"} if allowed else {"plain"}
    assert feasible_names(nodes, pod("p", tolerations=tolerations)) == expected


# -- host ports -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("placed_ports", "ports", "expected"),
    [
        pytest.param([8080], [8080], {"b"}, id="conflict"),
        pytest.param([8080], [9090], {"a", "b"}, id="other-port"),
        pytest.param([8080], [(8080, "UDP")], {"a", "b"}, id="other-protocol"),
        pytest.param([(53, "UDP")], [(53, "UDP")], {"b"}, id="udp-conflict"),
        pytest.param([8080, 9090], [9090, 7070], {"b"}, id="any-port-conflicts"),
        pytest.param([], [8080], {"a", "b"}, id="free"),
        pytest.param([8080], [], {"a", "b"}, id="no-host-ports"),
    ],
)
def test_host_ports(
    placed_ports: list[int | tuple[int, str]],
    ports: list[int | tuple[int, str]],
    expected: set[str],
) -> None:
    placed = [pod("q", node_name="a", host_ports=placed_ports)]
    assert feasible_names([node("a"), node("b")], pod("p", host_ports=ports), placed) == expected


def test_host_port_freed_when_pod_goes() -> None:
    snap = snapshot([node("a")], [pod("q", node_name="a", host_ports=[80])])
    info = pod_info(pod("p", host_ports=[80]), 1)
    assert not feasible(snap, info, FilterCache()).any()
    snap.remove_pod("uid-ns-q")
    assert feasible(snap, info, FilterCache())[snap.slot_of["a"]]


# -- pod affinity and anti-affinity ---------------------------------------------------------
TOPOLOGY = [
    node("n1", zone="z1"),
    node("n2", zone="z1"),
    node("n3", zone="z2"),
    node("n4"),  # no zone label
]
DB_ON_N1 = [pod("db", labels={"app": "db"}, node_name="n1")]
EVERY = {"n1", "n2", "n3", "n4"}


@pytest.mark.parametrize(
    ("placed", "candidate", "expected"),
    [
        pytest.param(DB_ON_N1, pod("p", affinity=affinity(pod_term({"app": "db"}))), {"n1"},
                     id="affinity-hostname"),
        pytest.param(DB_ON_N1, pod("p", affinity=affinity(pod_term({"app": "db"}, ZONE_KEY))),
                     {"n1", "n2"}, id="affinity-zone"),
        pytest.param(DB_ON_N1, pod("p", affinity=affinity(
            pod_term({"app": "db"}, ZONE_KEY), pod_term({"app": "db"}))), {"n1"},
            id="affinity-terms-and"),
        pytest.param(DB_ON_N1, pod("p", affinity=affinity(pod_term({"app": "cache"}))), set(),
                     id="affinity-nothing-matches"),
        pytest.param(DB_ON_N1, pod("p", namespace="other",
                                   affinity=affinity(pod_term({"app": "db"}))), set(),
                     id="affinity-own-namespace-by-default"),
        pytest.param(DB_ON_N1, pod("p", namespace="other", affinity=affinity(
            pod_term({"app": "db"}, namespaces=["ns"]))), {"n1"},
            id="affinity-named-namespace"),
        pytest.param(DB_ON_N1, pod("p", affinity=affinity(pod_term(
            expressions=[expr("app", "In", "db", "web")], key=ZONE_KEY))), {"n1", "n2"},
            id="affinity-match-expressions"),
        pytest.param([], pod("p", labels={"app": "web"},
                             affinity=affinity(pod_term({"app": "web"}, ZONE_KEY))),
                     {"n1", "n2", "n3"}, id="first-of-group-zone"),
        pytest.param([], pod("p", labels={"app": "web"},
                             affinity=affinity(pod_term({"app": "web"}))),
                     EVERY, id="first-of-group-hostname"),
        pytest.param([], pod("p", labels={"app": "other"},
                             affinity=affinity(pod_term({"app": "web"}))),
                     set(), id="not-first-of-own-group"),
        pytest.param([pod("w", labels={"app": "web"}, node_name="n3")],
                     pod("p", labels={"app": "web"},
                         affinity=affinity(pod_term({"app": "web"}, ZONE_KEY))),
                     {"n3"}, id="second-of-group-follows-first"),
        pytest.param(DB_ON_N1, pod("p", affinity=anti(pod_term({"app": "db"}))),
                     {"n2", "n3", "n4"}, id="anti-hostname"),
        pytest.param(DB_ON_N1, pod("p", affinity=anti(pod_term({"app": "db"}, ZONE_KEY))),
                     {"n3", "n4"}, id="anti-zone"),
        pytest.param(DB_ON_N1, pod("p", affinity=anti(pod_term({"app": "cache"}))), EVERY,
                     id="anti-nothing-matches"),
        pytest.param(DB_ON_N1, pod("p", namespace="other",
                                   affinity=anti(pod_term({"app": "db"}, ZONE_KEY))),
                     EVERY, id="anti-own-namespace-by-default"),
        pytest.param(DB_ON_N1, pod("p", namespace="other", affinity=anti(
            pod_term({"app": "db"}, ZONE_KEY, namespaces=["ns", "other"]))),
            {"n3", "n4"}, id="anti-named-namespaces"),
        pytest.param([], pod("p", labels={"app": "web"},
                             affinity=anti(pod_term({"app": "web"}))), EVERY,
                     id="anti-self-match-alone"),
        pytest.param([pod("w", labels={"app": "web"}, node_name="n2")],
                     pod("p", labels={"app": "web"},
                         affinity=anti(pod_term({"app": "web"}, ZONE_KEY))),
                     {"n3", "n4"}, id="anti-one-per-zone"),
        # the symmetric rule: an existing pod's anti-affinity repels the new pod
        pytest.param([pod("guard", node_name="n1",
                          affinity=anti(pod_term({"app": "web"}, ZONE_KEY)))],
                     pod("p", labels={"app": "web"}), {"n3", "n4"}, id="symmetric-zone"),
        pytest.param([pod("guard", node_name="n1",
                          affinity=anti(pod_term({"app": "web"})))],
                     pod("p", labels={"app": "web"}), {"n2", "n3", "n4"},
                     id="symmetric-hostname"),
        pytest.param([pod("guard", node_name="n1",
                          affinity=anti(pod_term({"app": "web"}, ZONE_KEY)))],
                     pod("p", labels={"app": "api"}), EVERY, id="symmetric-not-selected"),
        pytest.param([pod("guard", node_name="n1",
                          affinity=anti(pod_term({"app": "web"}, ZONE_KEY)))],
                     pod("p", namespace="other", labels={"app": "web"}), EVERY,
                     id="symmetric-other-namespace"),
        pytest.param([pod("guard", node_name="n3", affinity=anti(pod_term(
            expressions=[expr("app", "In", "web", "api")], key=ZONE_KEY)))],
                     pod("p", labels={"app": "api"}), {"n1", "n2", "n4"},
                     id="symmetric-match-expressions"),
        pytest.param([pod("guard", node_name="n3", affinity=anti(pod_term(
            expressions=[expr("tier", "Exists")], key=ZONE_KEY)))],
                     pod("p", labels={"tier": "x"}), {"n1", "n2", "n4"},
                     id="symmetric-exists"),
        pytest.param([pod("guard", node_name="n1", affinity=anti(pod_term({"app": "web"})))
                      | {"status": {"phase": "Succeeded"}}],
                     pod("p", labels={"app": "web"}), EVERY, id="symmetric-finished-pod"),
    ],
)  # fmt: skip
def test_pod_affinity(placed: list[Obj], candidate: Obj, expected: set[str]) -> None:
    assert feasible_names(TOPOLOGY, candidate, placed) == expected


def test_symmetric_anti_affinity_ends_with_its_pod() -> None:
    guard = pod("guard", node_name="n1", affinity=anti(pod_term({"app": "web"}, ZONE_KEY)))
    snap = snapshot(TOPOLOGY, [guard])
    info = pod_info(pod("p", labels={"app": "web"}), 1)
    assert not feasible(snap, info, FilterCache())[snap.slot_of["n2"]]
    snap.remove_pod("uid-ns-guard")
    assert feasible(snap, info, FilterCache())[snap.slot_of["n2"]]


# -- topology spread ------------------------------------------------------------------------
SPREAD_NODES = [
    node("a1", zone="a"),
    node("a2", zone="a"),
    node("b1", zone="b"),
    node("c1", zone="c", labels={"pool": "spare"}),
    node("none"),  # no zone
]


def web(name: str, where: str, **kw: Any) -> Obj:
    return pod(name, labels={"app": "web"}, node_name=where, **kw)


TWO_A_ONE_B = [web("w1", "a1"), web("w2", "a2"), web("w3", "b1")]


@pytest.mark.parametrize(
    ("placed", "candidate", "expected"),
    [
        pytest.param(TWO_A_ONE_B, pod("p", labels={"app": "web"},
                                      topologySpreadConstraints=[spread(1, {"app": "web"})]),
                     {"c1"}, id="skew-1-only-empty-zone"),
        pytest.param(TWO_A_ONE_B, pod("p", labels={"app": "web"},
                                      topologySpreadConstraints=[spread(2, {"app": "web"})]),
                     {"b1", "c1"}, id="skew-2"),
        pytest.param(TWO_A_ONE_B, pod("p", labels={"app": "web"},
                                      topologySpreadConstraints=[spread(3, {"app": "web"})]),
                     {"a1", "a2", "b1", "c1"}, id="skew-3-excludes-node-without-key"),
        pytest.param([], pod("p", labels={"app": "web"},
                             topologySpreadConstraints=[spread(1, {"app": "web"})]),
                     {"a1", "a2", "b1", "c1"}, id="empty"),
        pytest.param(TWO_A_ONE_B, pod("p", labels={"app": "other"},
                                      topologySpreadConstraints=[spread(1, {"app": "web"})]),
                     {"b1", "c1"}, id="pod-not-matching-own-selector"),
        pytest.param(TWO_A_ONE_B, pod("p", labels={"app": "web"},
                                      topologySpreadConstraints=[spread(1, {"app": "web"},
                                                                        hard=False)]),
                     {"a1", "a2", "b1", "c1", "none"}, id="schedule-anyway-is-no-filter"),
        pytest.param(TWO_A_ONE_B, pod("p", labels={"app": "web"}, nodeSelector={"pool": "spare"},
                                      topologySpreadConstraints=[spread(1, {"app": "web"})]),
                     {"c1"}, id="with-node-selector"),
        # only eligible nodes (node selector/affinity) count: zone c is out of reach, so the
        # minimum is taken over a and b
        pytest.param(TWO_A_ONE_B, pod("p", labels={"app": "web"},
                                      affinity=required_nodes({"matchExpressions": [
                                          expr("pool", "DoesNotExist")]}),
                                      topologySpreadConstraints=[spread(1, {"app": "web"})]),
                     {"b1"}, id="minimum-over-eligible-domains"),
        pytest.param([web("w1", "a1"), web("w2", "a1", namespace="other")],
                     pod("p", labels={"app": "web"},
                         topologySpreadConstraints=[spread(1, {"app": "web"})]),
                     {"b1", "c1"}, id="counts-own-namespace-only"),
        pytest.param(TWO_A_ONE_B, pod("p", labels={"app": "web"}, topologySpreadConstraints=[
            spread(1, {"app": "web"}), spread(1, {"app": "web"}, key=HOSTNAME_KEY)]),
                     {"c1"}, id="two-constraints"),
        pytest.param([web("w1", "a1")], pod("p", labels={"app": "web"}, topologySpreadConstraints=[
            spread(1, {"app": "web"}, key=HOSTNAME_KEY)]),
                     {"a2", "b1", "c1", "none"}, id="hostname-key"),
    ],
)  # fmt: skip
def test_topology_spread(placed: list[Obj], candidate: Obj, expected: set[str]) -> None:
    assert feasible_names(SPREAD_NODES, candidate, placed) == expected


# -- nominations ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        pytest.param(pod("nominee", cpu="3", nominated="a"), {"a"}, id="nominee-uses-its-room"),
        pytest.param(pod("other", cpu="2"), set(), id="held-against-others"),
        pytest.param(pod("other", cpu="1"), {"a"}, id="rest-of-the-node-is-free"),
        pytest.param(pod("other", cpu="1", priority=10), {"a"}, id="batch-also-held"),
        pytest.param(pod("other", cpu="2", priority=10), set(), id="batch-held-against"),
    ],
)
def test_nominated_room(candidate: Obj, expected: set[str]) -> None:
    placed = [pod("nominee", cpu="3", nominated="a")]
    assert feasible_names([node("a", cpu="4")], candidate, placed) == expected


# Room held for a nominee is held in its band's terms too: batch pods may use batch-allocatable
# beyond allocatable, but not the part of allocatable a production nominee waits for; and
# production pods may not take the batch-allocatable a batch nominee waits for.
@pytest.mark.parametrize(
    ("node_obj", "nominee", "candidate", "expected"),
    [
        pytest.param(node("a", cpu="1", batch={"cpu": "3"}), pod("n", cpu="1", nominated="a"),
                     pod("b", cpu="1", priority=10), set(), id="batch-beyond-production-hold"),
        pytest.param(node("a", cpu="2", batch={"cpu": "3"}), pod("n", cpu="1", nominated="a"),
                     pod("b", cpu="1", priority=10), {"a"}, id="batch-beside-production-hold"),
        pytest.param(node("a", cpu="1", memory="1Gi", batch={"memory": "6Gi"}),
                     pod("n", cpu="0", memory="1Gi", nominated="a"),
                     pod("b", cpu="0", memory="1Gi", priority=10), set(),
                     id="batch-memory-beyond-production-hold"),
        pytest.param(node("a", cpu="4", batch={"cpu": "1"}),
                     pod("n", cpu="1", priority=10, nominated="a"),
                     pod("p", cpu="3", priority=2000), set(), id="production-over-batch-hold"),
        pytest.param(node("a", cpu="4", batch={"cpu": "2"}),
                     pod("n", cpu="1", priority=10, nominated="a"),
                     pod("p", cpu="1", priority=2000), {"a"}, id="production-beside-batch-hold"),
        pytest.param(node("a", cpu="1", batch={"cpu": "3"}),
                     pod("n", cpu="1", priority=10, nominated="a"),
                     pod("b", cpu="2", priority=10), {"a"}, id="same-band-unchanged"),
        pytest.param(node("a", cpu="1", batch={"cpu": "3"}), pod("n", cpu="1", nominated="a"),
                     pod("n", cpu="1", nominated="a"), {"a"}, id="nominee-itself"),
    ],
)  # fmt: skip
def test_nominated_room_held_across_bands(
    node_obj: Obj, nominee: Obj, candidate: Obj, expected: set[str]
) -> None:
    assert feasible_names([node_obj], candidate, [nominee]) == expected


def test_nominated_room_held_with_pods_and_gpus() -> None:
    nodes = [node("a", gpu=2, pods=3)]
    placed = [pod("q", node_name="a"), pod("nominee", gpu=2, nominated="a")]
    assert feasible_names(nodes, pod("g", gpu=1), placed) == set()
    assert feasible_names(nodes, pod("one"), placed) == {"a"}
    placed.append(pod("r", node_name="a"))
    assert feasible_names(nodes, pod("one"), placed) == set()  # 2 pods + 1 held = 3


def test_nomination_released() -> None:
    snap = snapshot([node("a", cpu="4")], [pod("nominee", cpu="3", nominated="a")])
    other = pod_info(pod("other", cpu="2"), 1)
    assert not feasible(snap, other, FilterCache()).any()
    snap.remove_pod("uid-ns-nominee")
    assert feasible(snap, other, FilterCache()).any()
    snap.upsert_pod(pod_info(pod("nominee", cpu="3", nominated="a"), 2))
    assert not feasible(snap, other, FilterCache()).any()
    bound = pod("nominee", cpu="3", nominated="a", node_name="a")
    snap.upsert_pod(pod_info(bound, 3))  # bound: its room is now used rather than held
    assert snap.held_cpu[snap.slot_of["a"]] == 0
    assert snap.used_cpu[snap.slot_of["a"]] == 3000
    assert not feasible(snap, other, FilterCache()).any()


# -- explain --------------------------------------------------------------------------------
GPU_TAINT = taint("gpu", "NoSchedule", "true")


@pytest.mark.parametrize(
    ("nodes", "placed", "candidate", "text"),
    [
        pytest.param(
            [*(node(f"n{i}", cpu="1") for i in range(9)), node("g", cpu="8", taints=[GPU_TAINT])],
            [], pod("p", cpu="2"),
            "0/10 nodes available: 9 insufficient cpu, 1 untolerated taint gpu=true:NoSchedule",
            id="brief-example",
        ),
        pytest.param(
            [node("a", unschedulable=True), node("b", ready=False), node("c", memory="1Gi")],
            [], pod("p", memory="2Gi"),
            "0/3 nodes available: 1 insufficient memory, 1 node(s) cordoned, "
            "1 node(s) not ready",
            id="ties-alphabetical",
        ),
        pytest.param(
            [node("a", ready=False, unschedulable=True)], [], pod("p"),
            "0/1 nodes available: 1 node(s) cordoned", id="cordoned-not-also-not-ready",
        ),
        pytest.param(
            [node("a", cpu="1", memory="1Gi"), node("b", cpu="1")], [],
            pod("p", cpu="2", memory="2Gi"),
            "0/2 nodes available: 2 insufficient cpu, 1 insufficient memory",
            id="node-counted-under-each-reason",
        ),
        pytest.param(
            [node("a"), node("b", gpu=1)], [], pod("p", gpu=2),
            "0/2 nodes available: 2 insufficient nvidia.com/gpu", id="gpu",
        ),
        pytest.param(
            [node("a", pods=1)], [pod("q", node_name="a")], pod("p"),
            "0/1 nodes available: 1 too many pods", id="pods",
        ),
        pytest.param(
            [node("a"), node("b", labels={MACHINE_CLASS: "m5"})], [],
            pod("p", cpu="8", nodeSelector={MACHINE_CLASS: "c7"}),
            "0/2 nodes available: 2 didn't match node selector/affinity, 2 insufficient cpu",
            id="selector",
        ),
        pytest.param(
            [node("a", taints=[taint("dedicated", "NoExecute")]),
             node("b", taints=[taint("dedicated", "NoExecute")]),
             node("c", taints=[taint("slow", "PreferNoSchedule")], cpu="1")],
            [], pod("p", cpu="2"),
            "0/3 nodes available: 2 untolerated taint dedicated:NoExecute, 1 insufficient cpu",
            id="taint-without-value-and-soft-taint",
        ),
        pytest.param(
            [node("a"), node("b")], [pod("q", node_name="a", host_ports=[80])],
            pod("p", host_ports=[80], cpu="5"),
            "0/2 nodes available: 2 insufficient cpu, 1 host port conflict", id="ports",
        ),
        pytest.param(
            [node("a"), node("b")], [pod("db", labels={"app": "db"}, node_name="a")],
            pod("p", cpu="5", affinity=affinity(pod_term({"app": "db"}))),
            "0/2 nodes available: 2 insufficient cpu, 1 didn't match pod affinity rules",
            id="affinity",
        ),
        pytest.param(
            [node("a"), node("b", cpu="1")], [pod("db", labels={"app": "db"}, node_name="a")],
            pod("p", cpu="2", affinity=anti(pod_term({"app": "db"}))),
            "0/2 nodes available: 1 didn't match pod anti-affinity rules, 1 insufficient cpu",
            id="anti-affinity",
        ),
        pytest.param(
            [node("a"), node("b", cpu="1")],
            [pod("guard", node_name="a", affinity=anti(pod_term({"app": "web"})))],
            pod("p", cpu="2", labels={"app": "web"}),
            "0/2 nodes available: 1 didn't match pod anti-affinity rules, 1 insufficient cpu",
            id="symmetric-anti-affinity",
        ),
        pytest.param(
            [node("a", zone="a"), node("b", zone="b", cpu="1")],
            [web("w1", "a"), web("w2", "a")],
            pod("p", cpu="2", labels={"app": "web"},
                topologySpreadConstraints=[spread(1, {"app": "web"})]),
            "0/2 nodes available: 1 didn't match topology spread constraints, "
            "1 insufficient cpu",
            id="spread",
        ),
        pytest.param(
            [node("a", cpu="4"), node("b", cpu="1")], [],
            pod("p", cpu="2"), "1/2 nodes available: 1 insufficient cpu", id="some-available",
        ),
        pytest.param([], [], pod("p"), "0/0 nodes available", id="no-nodes"),
    ],
)  # fmt: skip
def test_explain(nodes: list[Obj], placed: list[Obj], candidate: Obj, text: str) -> None:
    assert message(nodes, candidate, placed) == text


def test_explain_counts_many_taints_and_sorts_by_count() -> None:
    nodes = [
        *(node(f"g{i}", taints=[GPU_TAINT]) for i in range(3)),
        *(node(f"s{i}", taints=[taint("spot", "NoSchedule", "yes")]) for i in range(5)),
        *(node(f"c{i}", unschedulable=True) for i in range(2)),
    ]
    assert message(nodes, pod("p")) == (
        "0/10 nodes available: 5 untolerated taint spot=yes:NoSchedule, "
        "3 untolerated taint gpu=true:NoSchedule, 2 node(s) cordoned"
    )


def test_explain_ignores_removed_nodes() -> None:
    snap = snapshot([node("a", cpu="1"), node("b", cpu="1"), node("c", unschedulable=True)])
    snap.remove_node("c")
    info = pod_info(pod("p", cpu="2"), 1)
    assert explain(snap, info, FilterCache()).message == "0/2 nodes available: 2 insufficient cpu"


def test_explain_batch_reports_batch_allocatable() -> None:
    nodes = [node("a", cpu="4", batch={"cpu": "1"})]
    assert message(nodes, pod("b", cpu="2", priority=0)) == (
        "0/1 nodes available: 1 insufficient cpu"
    )
    assert message(nodes, pod("p", cpu="2", priority=1000)) == "1/1 nodes available"


# -- the named list: each filter turns away exactly what its reasons say ---------------------
# filter name -> (nodes, placed pods, candidate, {reason code: nodes it turns away})
REJECTS: dict[str, tuple[list[Obj], list[Obj], Obj, dict[str, set[str]]]] = {
    "node_state": (
        [node("ok"), node("c", unschedulable=True), node("nr", ready=False),
         node("both", unschedulable=True, ready=False)],
        [], pod("p"), {"cordoned": {"c", "both"}, "not_ready": {"nr"}},
    ),
    "node_selector": (
        [node("ok", labels={MACHINE_CLASS: "c7"}), node("m5", labels={MACHINE_CLASS: "m5"}),
         node("unlabelled")],
        [], pod("p", nodeSelector={MACHINE_CLASS: "c7"}), {"node_selector": {"m5", "unlabelled"}},
    ),
    "taints": (
        [node("ok"), node("g", taints=[GPU_TAINT]),
         node("soft", taints=[taint("slow", "PreferNoSchedule")]),
         node("tolerated", taints=[taint("spot", "NoExecute")])],
        [], pod("p", tolerations=[tol("spot", "Exists")]), {"untolerated_taint": {"g"}},
    ),
    "resources": (
        [node("ok", gpu=1), node("cpu", cpu="1", gpu=1), node("mem", memory="1Gi", gpu=1),
         node("no-gpu"), node("full", pods=1, gpu=1)],
        [pod("q", node_name="full")], pod("p", cpu="2", memory="2Gi", gpu=1),
        {"insufficient_cpu": {"cpu"}, "insufficient_memory": {"mem"},
         "insufficient_gpu": {"no-gpu"}, "too_many_pods": {"full"}},
    ),
    "host_ports": (
        [node("a"), node("b")], [pod("q", node_name="a", host_ports=[80])],
        pod("p", host_ports=[80]), {"host_port": {"a"}},
    ),
    "pod_affinity": (
        [node("a"), node("b")], [pod("db", labels={"app": "db"}, node_name="a")],
        pod("p", affinity=affinity(pod_term({"app": "db"}))), {"pod_affinity": {"b"}},
    ),
    "pod_anti_affinity": (
        [node("a"), node("b")], [pod("db", labels={"app": "db"}, node_name="a")],
        pod("p", affinity=anti(pod_term({"app": "db"}))), {"pod_anti_affinity": {"a"}},
    ),
    "topology_spread": (
        [node("a", zone="a"), node("b", zone="b"), node("keyless")],
        [web("w1", "a"), web("w2", "a")],
        pod("p", labels={"app": "web"}, topologySpreadConstraints=[spread(1, {"app": "web"})]),
        {"topology_spread": {"a", "keyless"}},
    ),
}  # fmt: skip


def test_every_filter_has_a_case_and_reason_codes_are_unique() -> None:
    assert set(REJECTS) == {f.name for f in FILTERS}
    codes = [r.code for f in FILTERS for r in f.reasons]
    texts = [r.text for f in FILTERS for r in f.reasons]
    assert len(set(codes)) == len(codes)
    assert len(set(texts)) == len(texts)


@pytest.mark.parametrize("f", FILTERS, ids=lambda f: f.name)
def test_each_filter_turns_away_exactly_what_its_reasons_say(f: Filter) -> None:
    nodes, placed, candidate, expected = REJECTS[f.name]
    assert set(expected) <= {r.code for r in f.reasons}
    snap = snapshot(nodes, placed)
    info = pod_info(candidate, 1)
    snap.upsert_pod(info)
    cache = FilterCache()
    turned: dict[str, set[str]] = {}
    for g, reason, passed in verdicts(snap, info, cache):
        names = {snap.node(int(s)).name for s in np.flatnonzero(snap.live & ~passed)}
        if g is f:
            assert reason in f.reasons
            if names:
                turned[reason.code] = names
        else:
            assert not names, f"{g.name} also turned away {names}"
    assert turned == expected
    rejected = set().union(*expected.values())
    assert (
        feasible_names(nodes, candidate, placed)
        == {n["metadata"]["name"] for n in nodes} - rejected
    )
    why = explain(snap, info, cache)
    assert why.codes == tuple(r.code for r in f.reasons if r.code in expected)
    assert why.available == len(nodes) - len(rejected)
