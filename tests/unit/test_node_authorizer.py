"""The node authorizer, table-driven over a fixed graph: what node ``n1``'s credential may do
to its own objects and to node ``n2``'s, and what a pod references."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from agent.sources import references as agent_references
from app.core.authz import Attributes
from app.core.authz import node as node_authz
from app.core.authz.node import authorize, references, selector_refusal
from app.store.tokens import User

N1 = User("system:node:n1", ("system:nodes",))
ALICE = User("alice", ("team-a",))
IMPOSTOR = User("system:node:n1", ("team-a",))  # the name without the group
METRICS, AUTHN = node_authz.METRICS_GROUP, node_authz.AUTHN_GROUP
LEASES = node_authz.LEASE_NAMESPACE


@dataclass
class Graph:
    pods: dict[tuple[str, str], str] = field(default_factory=dict)  # (ns, name) -> node
    refs: dict[tuple[str, str], set[tuple[str, str]]] = field(default_factory=dict)

    def pod_node(self, namespace: str, name: str) -> str | None:
        return self.pods.get((namespace, name))

    def has_pods(self, node: str, namespace: str) -> bool:
        return any(n == node and ns == namespace for (ns, _), n in self.pods.items())

    def references(self, node: str, namespace: str) -> set[tuple[str, str]]:
        return self.refs.get((node, namespace), set())


GRAPH = Graph(
    pods={("a", "mine"): "n1", ("b", "theirs"): "n2"},
    refs={
        ("n1", "a"): {("Secret", "db"), ("ConfigMap", "conf")},
        ("n2", "b"): {("Secret", "other")},
    },
)

ALLOWED = [
    Attributes("get", "nodes", name="n1"),
    Attributes("create", "nodes", name="n1"),
    Attributes("update", "nodes", name="n1"),
    Attributes("update", "nodes", name="n1", subresource="status"),
    Attributes("patch", "nodes", name="n1", subresource="status"),
    Attributes("get", "leases", LEASES, "n1"),
    Attributes("create", "leases", LEASES, "n1"),
    Attributes("update", "leases", LEASES, "n1"),
    Attributes("get", "namespaces", name=LEASES),
    Attributes("create", "namespaces", name=LEASES),
    Attributes("get", "pods", "a", "mine"),
    Attributes("delete", "pods", "a", "mine"),
    Attributes("update", "pods", "a", "mine", "status"),
    Attributes("patch", "pods", "a", "mine", "status"),
    Attributes("list", "pods"),  # the selector is checked by selector_refusal
    Attributes("watch", "pods"),
    Attributes("get", "secrets", "a", "db"),
    Attributes("get", "configmaps", "a", "conf"),
    Attributes("list", "services", "a"),
    Attributes("watch", "services", "a"),
    Attributes("create", "events", "a"),
    Attributes("create", "nodes", name="n1", subresource="samples", group=METRICS),
    Attributes("create", "tokenreviews", group=AUTHN),
]

DENIED = [
    Attributes("get", "nodes", name="n2"),
    Attributes("update", "nodes", name="n2"),
    Attributes("update", "nodes", name="n2", subresource="status"),
    Attributes("create", "nodes", name="n2"),
    Attributes("delete", "nodes", name="n1"),
    Attributes("list", "nodes"),
    Attributes("get", "leases", LEASES, "n2"),
    Attributes("update", "leases", LEASES, "n2"),
    Attributes("get", "leases", "a", "n1"),
    Attributes("delete", "leases", LEASES, "n1"),
    Attributes("create", "namespaces", name="a"),
    Attributes("delete", "namespaces", name=LEASES),
    Attributes("get", "pods", "b", "theirs"),
    Attributes("delete", "pods", "b", "theirs"),
    Attributes("update", "pods", "b", "theirs", "status"),
    Attributes("update", "pods", "a", "mine"),  # the spec is not the node's to write
    Attributes("create", "pods", "a"),
    Attributes("get", "pods", "a", "missing"),
    Attributes("get", "pods", "a", "mine", "log"),
    Attributes("create", "pods", "a", "mine", "eviction"),
    Attributes("get", "secrets", "b", "other"),
    Attributes("get", "secrets", "a", "unreferenced"),
    Attributes("get", "secrets", "b", "db"),  # the same name, another namespace
    Attributes("list", "secrets", "a"),
    Attributes("watch", "secrets", "a"),
    Attributes("update", "secrets", "a", "db"),
    Attributes("get", "configmaps", "b", "conf"),
    Attributes("list", "configmaps", "a"),
    Attributes("list", "services", "b"),
    Attributes("create", "services", "a"),
    Attributes("create", "events", "b"),
    Attributes("get", "deployments", "a", "x"),
    Attributes("create", "nodes", name="n2", subresource="samples", group=METRICS),
    Attributes("get", "nodes", group=METRICS),
    Attributes("create", "bootstraptokens", group=AUTHN),
    Attributes("get", "roles", "a", "x"),
]


@pytest.mark.parametrize("attrs", ALLOWED, ids=str)
def test_a_node_may(attrs: Attributes) -> None:
    assert authorize(N1, attrs, GRAPH).allowed


@pytest.mark.parametrize("attrs", DENIED, ids=str)
def test_a_node_may_not(attrs: Attributes) -> None:
    decision = authorize(N1, attrs, GRAPH)
    assert not decision.allowed and "no relationship found to node 'n1'" in decision.reason


@pytest.mark.parametrize("user", [ALICE, IMPOSTOR, User("system:node:", ("system:nodes",))])
def test_anyone_else_gets_no_opinion(user: User) -> None:
    for attrs in ALLOWED:
        decision = authorize(user, attrs, GRAPH)
        assert not decision.allowed and decision.reason == ""


@pytest.mark.parametrize(
    ("selector", "refused"),
    [
        ("spec.nodeName=n1", False),
        ("spec.nodeName==n1", False),
        ("status.phase=Running,spec.nodeName=n1", False),
        (None, True),
        ("", True),
        ("spec.nodeName=n2", True),
        ("spec.nodeName!=n2", True),
        ("spec.nodeName=n1x", True),
    ],
)
def test_a_node_lists_and_watches_only_its_pods(selector: str | None, refused: bool) -> None:
    why = selector_refusal(N1, "pods", selector)
    assert (why is not None) is refused
    if why:
        assert "fieldSelector=spec.nodeName=n1" in why
    assert selector_refusal(ALICE, "pods", None) is None
    assert selector_refusal(N1, "services", None) is None


def test_references_cover_env_env_from_volumes_projections_and_pull_secrets() -> None:
    pod = {
        "spec": {
            "initContainers": [{"envFrom": [{"secretRef": {"name": "init-s"}}]}],
            "containers": [
                {
                    "env": [
                        {"name": "A", "valueFrom": {"configMapKeyRef": {"name": "c1", "key": "k"}}},
                        {"name": "B", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}},
                        {"name": "C", "value": "plain"},
                    ],
                    "envFrom": [{"configMapRef": {"name": "c2"}}],
                }
            ],
            "volumes": [
                {"name": "v1", "configMap": {"name": "c3"}},
                {"name": "v2", "secret": {"secretName": "s2"}},
                {"name": "v3", "projected": {"sources": [{"secret": {"name": "s3"}},
                                                         {"configMap": {"name": "c4"}}]}},
                {"name": "v4", "emptyDir": {}},
            ],
            "imagePullSecrets": [{"name": "pull"}],
        }
    }  # fmt: skip
    assert references(pod) == {
        ("ConfigMap", "c1"), ("ConfigMap", "c2"), ("ConfigMap", "c3"), ("ConfigMap", "c4"),
        ("Secret", "init-s"), ("Secret", "s1"), ("Secret", "s2"), ("Secret", "s3"),
        ("Secret", "pull"),
    }  # fmt: skip
    assert references({"spec": {"containers": "junk", "volumes": [None, 3]}}) == set()


def test_a_create_names_its_object_in_the_body_and_admission_checks_it() -> None:
    for attrs in (
        Attributes("create", "nodes"),
        Attributes("create", "leases", LEASES),
        Attributes("create", "namespaces"),
    ):
        assert authorize(N1, attrs, GRAPH).allowed
    assert not authorize(N1, Attributes("create", "leases", "a"), GRAPH).allowed
    own = [("Node", "n1", ""), ("Lease", "n1", LEASES), ("Namespace", LEASES, ""), ("Pod", "x", "")]
    for kind, name, ns in own:
        assert node_authz.admission_refusal(N1, kind, meta(name, ns)) is None
    for kind, name, ns in [("Node", "n2", ""), ("Lease", "n2", LEASES), ("Lease", "n1", "a"),
                           ("Namespace", "team-b", "")]:  # fmt: skip
        why = node_authz.admission_refusal(N1, kind, meta(name, ns))
        assert why is not None and "its own node" in why
    assert node_authz.admission_refusal(ALICE, "Node", meta("n2", "")) is None


def meta(name: str, namespace: str) -> dict[str, dict[str, str]]:
    return {"metadata": {"name": name, "namespace": namespace}}


def test_the_authorizer_allows_everything_the_agent_fetches_for_a_pod() -> None:
    """The agent resolves a pod's ConfigMaps and Secrets with ``agent.sources.references``; the
    node authorizer must allow at least those, or pods would fail to start."""
    pod = {
        "spec": {
            "initContainers": [{"name": "i", "env": [
                {"name": "A", "valueFrom": {"secretKeyRef": {"name": "s0", "key": "k"}}}]}],
            "containers": [{"name": "c",
                            "env": [{"name": "B", "valueFrom": {
                                "configMapKeyRef": {"name": "c0", "key": "k"}}}],
                            "envFrom": [{"configMapRef": {"name": "c1"}},
                                        {"secretRef": {"name": "s1"}}]}],
            "volumes": [{"name": "v", "configMap": {"name": "c2"}},
                        {"name": "w", "secret": {"secretName": "s2"}}],
        }
    }  # fmt: skip
    assert agent_references(pod) and agent_references(pod) <= references(pod)


NODE = {"metadata": {"name": "n1", "uid": "u1", "labels": {
            "kubernetes.io/hostname": "n1", "node-restriction.quaymaster.io/pool": "gpu",
            "node-role.kubernetes.io/worker": ""}},
        "spec": {"unschedulable": True, "taints": [
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": "quaymaster.io/repair", "effect": "NoSchedule"}]},
        "status": {"phase": "Ready"}}  # fmt: skip


def changed(labels: dict[str, str | None] | None = None, **spec: object) -> dict[str, object]:
    """``NODE`` with labels set (None: removed) and spec fields replaced (None: removed)."""
    meta = dict(NODE["metadata"])
    have = {**meta["labels"], **(labels or {})}
    meta["labels"] = {k: v for k, v in have.items() if v is not None}
    new_spec = {**NODE["spec"], **spec}
    return {**NODE, "metadata": meta, "spec": {k: v for k, v in new_spec.items() if v is not None}}


def refusal(obj: dict[str, object], old: dict[str, object] | None = NODE) -> str | None:
    return node_authz.admission_refusal(N1, "Node", obj, old)


PRESSURE = {"key": "node.quaymaster.io/memory-pressure", "effect": "NoSchedule"}


def test_a_node_changes_its_hostname_and_own_labels_and_its_pressure_taint() -> None:
    assert refusal(NODE) is None
    assert refusal(changed({"kubernetes.io/hostname": "box-1", "zone": "a"})) is None
    assert refusal(changed({"topology.kubernetes.io/zone": "z"})) is None
    with_pressure = changed(taints=[*NODE["spec"]["taints"], PRESSURE])
    assert refusal(with_pressure) is None
    assert refusal(NODE, with_pressure) is None  # and removes it again
    reordered = changed(taints=[PRESSURE, *reversed(NODE["spec"]["taints"])])
    assert refusal(reordered) is None
    assert refusal({**NODE, "status": {"phase": "Gone"}}) is None  # status: its own subresource
    annotated = {**NODE, "metadata": {**NODE["metadata"], "annotations": {"a": "b"}}}
    assert refusal(annotated) is None


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (changed({"node-restriction.quaymaster.io/pool": "cpu"}),
         "metadata.labels[node-restriction.quaymaster.io/pool]"),
        (changed({"node-restriction.quaymaster.io/pool": None}),
         "metadata.labels[node-restriction.quaymaster.io/pool]"),
        (changed({"rack.node-restriction.quaymaster.io/r": "7"}),
         "metadata.labels[rack.node-restriction.quaymaster.io/r]"),
        (changed({"node-role.kubernetes.io/worker": None}),
         "metadata.labels[node-role.kubernetes.io/worker]"),
        (changed({"node-role.kubernetes.io/control-plane": ""}),
         "metadata.labels[node-role.kubernetes.io/control-plane]"),
        (changed({"node-role.quaymaster.io/batch": ""}),
         "metadata.labels[node-role.quaymaster.io/batch]"),
        (changed(unschedulable=False), "spec.unschedulable"),
        (changed(unschedulable=None), "spec.unschedulable"),
        (changed(taints=[NODE["spec"]["taints"][0]]), "spec.taints[quaymaster.io/repair]"),
        (changed(taints=[]), "spec.taints[dedicated, quaymaster.io/repair]"),
        (changed(taints=[*NODE["spec"]["taints"], {"key": "x", "effect": "NoExecute"}]),
         "spec.taints[x]"),
        (changed(taints=[{**NODE["spec"]["taints"][0], "value": "cpu"},
                         NODE["spec"]["taints"][1]]), "spec.taints[dedicated]"),
        (changed(podCIDR="10.1.0.0/24"), "spec.podCIDR"),
        (changed(providerID="aws://i-1"), "spec.providerID"),
    ],
)  # fmt: skip
def test_a_node_may_not_change_what_administrators_steer_workloads_with(
    obj: dict[str, object], field: str
) -> None:
    why = refusal(obj)
    assert why is not None and why.startswith('Node "n1" is forbidden')
    assert f"may not change {field}:" in why
    assert node_authz.admission_refusal(ALICE, "Node", obj, NODE) is None  # administrators may


def test_a_cordon_absent_or_false_is_the_same_and_spec_is_free_at_creation() -> None:
    uncordoned = changed(unschedulable=None)
    assert refusal(changed(unschedulable=False), uncordoned) is None
    created = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
               "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}  # fmt: skip
    assert refusal(created, None) is None  # registering with taints, as kubelet may
    restricted = {"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/x": ""}}}
    why = refusal(restricted, None)
    assert why is not None and "metadata.labels[node-role.kubernetes.io/x]" in why


def test_the_agent_writes_nothing_the_restriction_refuses() -> None:
    """The agent's own taint and labels (``agent.pressure``, ``agent.node``) must stay allowed,
    or a node could not report memory pressure or register."""
    from agent.node import NodeConfig, labels_for
    from agent.pressure import TAINT_KEY

    assert TAINT_KEY in node_authz.OWN_TAINTS
    labels = labels_for(NodeConfig("n1", zone="z", machine_class="m", hostname="h"))
    assert not any(node_authz.restricted_label(k) for k in labels)
