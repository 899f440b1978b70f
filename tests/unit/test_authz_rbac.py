"""RBAC evaluation: every built-in role against every verb and kind, rule matching with
Kubernetes' semantics, subjects, and the escalation check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from app.core.authz import MASTERS, Attributes, forbidden_message
from app.core.authz.rbac import Policy
from app.core.authz.rules import Rule, allows, uncovered
from app.core.kinds import GROUP, KINDS

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
READ = {"get", "list", "watch"}
WRITE = {"create", "update", "patch", "delete", "deletecollection"}
TEAM, OTHER = "team", "other"

# What each role grants on each resource of our group, written out independently of the
# role definitions. A kind not named here is granted by no namespaced role (new kinds start
# closed until someone decides who may touch them).
VIEW_READS = {
    "pods", "deployments", "replicasets", "jobs", "cronjobs", "services", "endpointslices",
    "configmaps", "events", "resourcequotas", "poddisruptionbudgets", "namespaces",
    "serviceaccounts",
}  # fmt: skip
EDIT_WRITES = {
    "pods", "deployments", "replicasets", "jobs", "cronjobs", "services", "configmaps",
    "secrets", "poddisruptionbudgets", "serviceaccounts",
}  # fmt: skip
ADMIN_ALL = {"roles", "rolebindings"}


def expected(role: str, resource: str, verb: str) -> bool:
    if role == "cluster-admin":
        return True
    reads = VIEW_READS | ({"secrets"} | ADMIN_ALL if role == "admin" else set())
    if role == "edit":
        reads = reads | {"secrets"}
    writes = (EDIT_WRITES if role in ("edit", "admin") else set()) | (
        ADMIN_ALL if role == "admin" else set()
    )
    return (verb in READ and resource in reads) or (verb in WRITE and resource in writes)


@dataclass(frozen=True)
class Who:
    name: str
    groups: tuple[str, ...] = ("system:authenticated",)


def binding(
    ns: str, name: str, role: str, subjects: list[dict[str, Any]], kind: str = "ClusterRole"
) -> dict[str, Any]:
    meta = {"name": name, "namespace": ns} if ns else {"name": name}
    return {"metadata": meta, "roleRef": {"kind": kind, "name": role}, "subjects": subjects}


def user(name: str) -> list[dict[str, Any]]:
    return [{"kind": "User", "name": name}]


def bound_in_team(role: str) -> Policy:
    return Policy(role_bindings=[binding(TEAM, "b", role, user("u"))])


def attrs_for(kind: Any, verb: str, ns: str) -> Attributes:
    if kind.kind == "Namespace":  # a namespace is authorised within itself
        return Attributes(verb, kind.plural, ns, ns if verb not in ("list", "watch") else "")
    return Attributes(verb, kind.plural, ns if kind.namespaced else "", "x")


ROLES = ("view", "edit", "admin", "cluster-admin")


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_builtin_role_bound_in_a_namespace(role: str, kind: Any) -> None:
    policy = bound_in_team(role)
    for verb in VERBS:
        got = policy.authorize(Who("u"), attrs_for(kind, verb, TEAM)).allowed
        namespace_scoped = kind.namespaced or (kind.kind == "Namespace" and verb in READ)
        want = expected(role, kind.plural, verb) and namespace_scoped
        if kind.kind == "Namespace" and role == "cluster-admin":
            want = True  # cluster-admin's "*" also covers its own namespace object
        assert got == want, (role, kind.kind, verb)
        # and nothing at all in another namespace
        assert not policy.authorize(Who("u"), attrs_for(kind, verb, OTHER)).allowed


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_builtin_role_bound_cluster_wide(role: str, kind: Any) -> None:
    policy = Policy(cluster_role_bindings=[binding("", "b", role, user("u"))])
    for verb in VERBS:
        for ns in (TEAM, OTHER):
            attrs = attrs_for(kind, verb, ns)
            if not kind.namespaced and kind.kind != "Namespace":
                attrs = Attributes(verb, kind.plural, "", "x")
            got = policy.authorize(Who("u"), attrs).allowed
            assert got == expected(role, kind.plural, verb), (role, kind.kind, verb, ns)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_masters_may_do_everything_and_strangers_nothing(kind: Any) -> None:
    policy = bound_in_team("admin")
    for verb in (*VERBS, "escalate", "bind", "impersonate"):
        assert policy.authorize(Who("root", (MASTERS,)), attrs_for(kind, verb, TEAM)).allowed
        assert not policy.authorize(Who("stranger"), attrs_for(kind, verb, TEAM)).allowed


@pytest.mark.parametrize(
    ("rule", "attrs", "allowed"),
    [
        (Rule(("get",), (GROUP,), ("pods",)), Attributes("get", "pods"), True),
        (Rule(("get",), (GROUP,), ("pods",)), Attributes("get", "pods", "", "", "log"), False),
        (Rule(("get",), (GROUP,), ("pods/log",)), Attributes("get", "pods", "", "", "log"), True),
        (Rule(("get",), (GROUP,), ("*",)), Attributes("get", "pods", subresource="log"), True),
        (Rule(("get",), (GROUP,), ("*/scale",)), Attributes("get", "jobs", "", "", "scale"), True),
        (Rule(("get",), (GROUP,), ("*/scale",)), Attributes("get", "jobs"), False),
        (Rule(("*",), (GROUP,), ("pods",)), Attributes("deletecollection", "pods"), True),
        (Rule(("get",), ("*",), ("pods",)), Attributes("get", "pods", group="other.io"), True),
        (Rule(("get",), ("",), ("pods",)), Attributes("get", "pods"), False),
        (Rule(("get",), (GROUP,), ("pods",), ("a",)), Attributes("get", "pods", name="a"), True),
        (Rule(("get",), (GROUP,), ("pods",), ("a",)), Attributes("get", "pods", name="b"), False),
        (Rule(("list",), (GROUP,), ("pods",), ("a",)), Attributes("list", "pods"), False),
        (Rule(("get",), (GROUP,), ("pods",)), Attributes("list", "pods"), False),
    ],
)  # fmt: skip
def test_rule_matching(rule: Rule, attrs: Attributes, allowed: bool) -> None:
    assert allows(rule, attrs) is allowed


def test_subjects_groups_and_service_accounts() -> None:
    sa = {"kind": "ServiceAccount", "name": "deployer"}  # namespace: the binding's
    policy = Policy(
        role_bindings=[
            binding(TEAM, "g", "view", [{"kind": "Group", "name": "auditors"}]),
            binding(TEAM, "sa", "edit", [sa]),
            binding(TEAM, "all", "view", [{"kind": "Group", "name": "system:authenticated"}]),
        ]
    )
    get = Attributes("get", "pods", TEAM, "p")
    create = Attributes("create", "pods", TEAM)
    assert policy.authorize(Who("x", ("auditors",)), get).allowed
    assert not policy.authorize(Who("x", ("auditors",)), create).allowed
    robot = Who(f"system:serviceaccount:{TEAM}:deployer", ("system:serviceaccounts",))
    assert policy.authorize(robot, create).allowed
    assert not policy.authorize(Who(f"system:serviceaccount:{OTHER}:deployer"), create).allowed
    # every principal is authenticated, even one whose credential does not say so
    assert policy.authorize(Who("anyone", ()), get).allowed


def test_namespaced_roles_and_missing_roles() -> None:
    role = {
        "metadata": {"name": "reader", "namespace": TEAM},
        "rules": [{"verbs": ["get"], "apiGroups": [GROUP], "resources": ["configmaps"],
                   "resourceNames": ["settings"]}],
    }  # fmt: skip
    policy = Policy(
        roles=[role],
        role_bindings=[
            binding(TEAM, "b", "reader", user("u"), kind="Role"),
            binding(OTHER, "b", "reader", user("u"), kind="Role"),  # no such Role there
            binding(TEAM, "c", "no-such-clusterrole", user("u")),
        ],
    )
    assert policy.authorize(Who("u"), Attributes("get", "configmaps", TEAM, "settings")).allowed
    assert not policy.authorize(Who("u"), Attributes("get", "configmaps", TEAM, "other")).allowed
    assert not policy.authorize(
        Who("u"), Attributes("get", "configmaps", OTHER, "settings")
    ).allowed


def test_stored_cluster_roles_cannot_shadow_builtins() -> None:
    everything = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
    sneaky = {"metadata": {"name": "view"}, "rules": everything}
    policy = Policy(cluster_roles=[sneaky], role_bindings=[binding(TEAM, "b", "view", user("u"))])
    assert not policy.authorize(Who("u"), Attributes("delete", "pods", TEAM, "p")).allowed


def test_the_index_holds_only_the_subjects_bindings() -> None:
    bindings = [binding(f"ns{i}", "b", "view", user(f"user{i}")) for i in range(1000)]
    policy = Policy(role_bindings=bindings)
    found = {(b.name, b.namespace) for b in policy.bindings(Who("user7"), "ns7")}
    assert found == {("b", "ns7"), ("system:basic-user", "")}  # its own, and everyone's
    assert len(policy.by_subject["User:user7"]) == 1
    assert policy.binding_namespaces(Who("user7")) == {"ns7"}


def test_visibility_and_namespaces_allowing() -> None:
    policy = Policy(
        role_bindings=[binding("a", "b", "view", user("u")), binding("b", "b", "edit", user("u"))]
    )
    u = Who("u")
    assert policy.visible(u, "a") and policy.visible(u, "b") and not policy.visible(u, "c")
    assert policy.namespaces_allowing(u, Attributes("list", "pods")) == ["a", "b"]
    assert policy.namespaces_allowing(u, Attributes("list", "secrets")) == ["b"]
    assert policy.namespaces_allowing(u, Attributes("list", "namespaces")) == ["a", "b"]
    # access reviews alone (system:basic-user) make no namespace visible
    assert not policy.visible(Who("v"), "a")
    wide = Policy(cluster_role_bindings=[binding("", "b", "view", user("u"))])
    assert wide.namespaces_allowing(u, Attributes("list", "pods")) is None
    assert wide.visible(u, "anything")


ESCALATIONS = [
    # (writer's role in TEAM, kind, object, allowed)
    ("admin", "RoleBinding", binding(TEAM, "x", "edit", user("v")), True),
    ("admin", "RoleBinding", binding(TEAM, "x", "admin", user("v")), True),
    ("admin", "RoleBinding", binding(TEAM, "x", "cluster-admin", user("v")), False),
    ("admin", "RoleBinding", binding(OTHER, "x", "view", user("v")), False),
    ("admin", "RoleBinding", binding(TEAM, "x", "no-such-role", user("v")), False),
    ("admin", "ClusterRoleBinding", binding("", "x", "view", user("v")), False),
    ("edit", "RoleBinding", binding(TEAM, "x", "view", user("v")), True),  # holds all of view
    ("view", "RoleBinding", binding(TEAM, "x", "edit", user("v")), False),
    ("admin", "Role", {"metadata": {"name": "r", "namespace": TEAM}, "rules": [
        {"verbs": ["get"], "apiGroups": [GROUP], "resources": ["pods"]}]}, True),
    ("admin", "Role", {"metadata": {"name": "r", "namespace": TEAM}, "rules": [
        {"verbs": ["*"], "apiGroups": [GROUP], "resources": ["pods"]}]}, False),
    ("admin", "Role", {"metadata": {"name": "r", "namespace": TEAM}, "rules": [
        {"verbs": ["get"], "apiGroups": [GROUP], "resources": ["nodes"]}]}, False),
    ("admin", "ClusterRole", {"metadata": {"name": "r"}, "rules": [
        {"verbs": ["get"], "apiGroups": [GROUP], "resources": ["pods"]}]}, False),
    ("cluster-admin", "ClusterRole", {"metadata": {"name": "r"}, "rules": [
        {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]}, True),
]  # fmt: skip


@pytest.mark.parametrize(("role", "kind", "obj", "allowed"), ESCALATIONS)
def test_escalation_check(role: str, kind: str, obj: dict[str, Any], allowed: bool) -> None:
    if role == "cluster-admin":
        policy = Policy(cluster_role_bindings=[binding("", "w", role, user("writer"))])
    else:
        policy = Policy(role_bindings=[binding(TEAM, "w", role, user("writer"))])
    missing = policy.escalation(Who("writer"), kind, obj)
    assert (not missing) is allowed, missing


def test_escalate_and_bind_verbs_allow_granting_more() -> None:
    binder = {
        "metadata": {"name": "binder", "namespace": TEAM},
        "rules": [
            {"verbs": ["bind"], "apiGroups": [GROUP], "resources": ["clusterroles"],
             "resourceNames": ["cluster-admin"]},
            {"verbs": ["escalate"], "apiGroups": [GROUP], "resources": ["roles"]},
        ],
    }  # fmt: skip
    policy = Policy(roles=[binder], role_bindings=[binding(TEAM, "w", "binder", user("w"), "Role")])
    assert not policy.escalation(
        Who("w"), "RoleBinding", binding(TEAM, "x", "cluster-admin", user("v"))
    )
    assert policy.escalation(Who("w"), "RoleBinding", binding(TEAM, "x", "admin", user("v")))
    everything = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
    wide = {"metadata": {"name": "r", "namespace": TEAM}, "rules": everything}
    assert not policy.escalation(Who("w"), "Role", wide)
    assert not policy.escalation(Who("root", (MASTERS,)), "ClusterRole", wide)


def test_coverage_is_literal_about_wildcards() -> None:
    held = [Rule(("get", "list"), (GROUP,), ("pods",))]
    assert uncovered(held, Rule(("get",), (GROUP,), ("pods",), ("a", "b"))) == []
    assert uncovered(held, Rule(("*",), (GROUP,), ("pods",))) == ["* pods in group 'quaymaster.io'"]
    assert uncovered(held, Rule(("get",), (GROUP,), ("pods/log",)))
    assert not uncovered(
        [Rule(("get",), (GROUP,), ("*/log",))], Rule(("get",), (GROUP,), ("pods/log",))
    )
    named = [Rule(("get",), (GROUP,), ("pods",), ("a",))]
    assert uncovered(named, Rule(("get",), (GROUP,), ("pods",)))  # all names asked, one held
    assert not uncovered(named, Rule(("get",), (GROUP,), ("pods",), ("a",)))


def test_forbidden_message_names_the_permission() -> None:
    u = Who("alice")
    assert forbidden_message(u, Attributes("delete", "pods", "team-a", "x")) == (
        'pods "x" is forbidden: User "alice" cannot delete resource "pods" in API group '
        '"quaymaster.io" in the namespace "team-a"'
    )
    assert forbidden_message(u, Attributes("list", "nodes")) == (
        'nodes is forbidden: User "alice" cannot list resource "nodes" in API group '
        '"quaymaster.io" at the cluster scope'
    )
    assert 'resource "pods/log"' in forbidden_message(u, Attributes("get", "pods", "a", "x", "log"))


def test_rules_review_lists_what_applies() -> None:
    policy = bound_in_team("view")
    rules = policy.rules_review(Who("u"), TEAM)
    assert any("pods" in r.resources and "list" in r.verbs for r in rules)
    assert not any("secrets" in r.resources for r in rules)
    assert policy.rules_review(Who("root", (MASTERS,)), TEAM)[0].verbs == ("*",)


def test_incremental_changes_match_a_rebuild() -> None:
    """A policy kept current change by change decides as one built from the final objects."""
    import random

    rng = random.Random(7)
    users = [f"u{i}" for i in range(6)]
    names = ["a", "b", "c"]
    stored: dict[tuple[str, str, str], dict[str, Any]] = {}
    policy = Policy()
    custom_rules = [{"verbs": ["get"], "apiGroups": [GROUP], "resources": ["secrets"]}]
    for _ in range(400):
        kind = rng.choice(["Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"])
        ns = "" if kind.startswith("Cluster") else rng.choice([TEAM, OTHER])
        name = rng.choice(names)
        key = (kind, ns, name)
        if rng.random() < 0.3 and key in stored:
            del stored[key]
            policy.apply(kind, ns, name, None)
            continue
        meta = {"name": name, "namespace": ns} if ns else {"name": name}
        if kind in ("Role", "ClusterRole"):
            obj: dict[str, Any] = {"metadata": meta, "rules": rng.choice([[], custom_rules])}
        else:
            role_kind = (
                "ClusterRole"
                if kind == "ClusterRoleBinding"
                else rng.choice(["Role", "ClusterRole"])
            )
            role = rng.choice([*names, "view", "edit"])
            subjects = [{"kind": "User", "name": u} for u in rng.sample(users, 2)]
            obj = {"metadata": meta, "roleRef": {"kind": role_kind, "name": role},
                   "subjects": subjects}  # fmt: skip
        stored[key] = obj
        policy.apply(kind, ns, name, obj)

    def of(kind: str) -> list[dict[str, Any]]:
        return [o for (k, _, _), o in stored.items() if k == kind]

    rebuilt = Policy(of("Role"), of("ClusterRole"), of("RoleBinding"), of("ClusterRoleBinding"))
    for u in users:
        for ns in (TEAM, OTHER):
            for verb, res in (("get", "secrets"), ("create", "pods"), ("list", "pods")):
                a = Attributes(verb, res, ns, "x")
                assert policy.authorize(Who(u), a).allowed == rebuilt.authorize(Who(u), a).allowed
            assert policy.visible(Who(u), ns) == rebuilt.visible(Who(u), ns)

    def index(p: Policy) -> dict[str, dict[str, set[Any]]]:
        return {k: {ns: set(bs) for ns, bs in v.items()} for k, v in p.by_subject.items()}

    assert index(policy) == index(rebuilt)
