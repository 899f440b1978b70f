"""The admission policies' review of pods and pod templates, table-driven."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app.core.errors import Forbidden
from app.core.policy import Policy, forbidden, pod_spec, review

NS = "team-a"


def pod(**spec: Any) -> dict[str, Any]:
    container = {
        "name": "app",
        "image": "registry.internal/web:1",
        "resources": {
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "1", "memory": "128Mi"},
        },
    }
    base: dict[str, Any] = {"containers": [container], "priority": 0}
    base.update(spec)
    return {"kind": "Pod", "metadata": {"name": "web", "namespace": NS}, "spec": base}


def policy(rules: dict[str, Any], mode: str = "Enforce", selector: Any = None) -> Policy:
    spec: dict[str, Any] = {"mode": mode, "rules": rules}
    if selector is not None:
        spec["namespaceSelector"] = selector
    return Policy.of({"metadata": {"name": "baseline"}, "spec": spec})


def with_container(**fields: Any) -> dict[str, Any]:
    p = pod()
    p["spec"]["containers"][0].update(fields)
    return p


NO_RESOURCES = with_container(resources={"requests": {"cpu": "1"}})
PRIVILEGED = with_container(securityContext={"privileged": True})
HOST_PATH = pod(volumes=[{"name": "root", "hostPath": {"path": "/"}}])
PINNED = with_container(image="docker.io/library/nginx@sha256:" + "a" * 64)
ELSEWHERE = with_container(image="docker.io/library/nginx:1.27")

# (rules, pod, broken rule or None, field, words in the message)
CASES = [
    ({"denyPrivileged": True}, PRIVILEGED, "denyPrivileged",
     "spec.containers[0].securityContext.privileged", 'container "app" must not set'),
    ({"denyPrivileged": True}, with_container(securityContext={"privileged": False}), None, "", ""),
    ({"denyPrivileged": False}, PRIVILEGED, None, "", ""),
    ({"denyHostNamespaces": True}, pod(hostNetwork=True), "denyHostNamespaces",
     "spec.hostNetwork", "hostNetwork=true is not allowed"),
    ({"denyHostNamespaces": True}, pod(hostPID=True), "denyHostNamespaces", "spec.hostPID",
     "hostPID"),
    ({"denyHostNamespaces": True}, pod(hostIPC=True), "denyHostNamespaces", "spec.hostIPC",
     "hostIPC"),
    ({"denyHostNamespaces": True}, pod(hostNetwork=False), None, "", ""),
    ({"denyHostPath": True}, HOST_PATH, "denyHostPath", "spec.volumes[0].hostPath",
     'hostPath volume "root"'),
    ({"denyHostPath": True}, pod(volumes=[{"name": "c", "emptyDir": {}}]), None, "", ""),
    ({"requireResources": True}, NO_RESOURCES, "requireResources",
     "spec.containers[0].resources",
     "must set resources.requests.memory, resources.limits.cpu, resources.limits.memory"),
    ({"requireResources": True}, pod(), None, "", ""),
    ({"allowedImages": {"registries": ["registry.internal/"]}}, ELSEWHERE, "allowedImages",
     "spec.containers[0].image", "must be from 'registry.internal/'"),
    ({"allowedImages": {"registries": ["registry.internal/"]}}, pod(), None, "", ""),
    ({"allowedImages": {"registries": ["registry.internal/"]}}, PINNED, "allowedImages",
     "spec.containers[0].image", "must be from"),
    ({"allowedImages": {"registries": ["registry.internal/"], "digests": True}}, PINNED,
     None, "", ""),
    ({"allowedImages": {"digests": True}}, ELSEWHERE, "allowedImages",
     "spec.containers[0].image", "must be pinned by digest"),
    ({"maxPriority": 999}, pod(priority=1000, priorityClassName="production"), "maxPriority",
     "spec.priority", 'priority 1000 (priorityClassName "production") exceeds'),
    ({"maxPriority": 999}, pod(priority=999), None, "", ""),
    ({"maxPriority": 0}, pod(priority=1), "maxPriority", "spec.priority", "maximum of 0"),
]  # fmt: skip


@pytest.mark.parametrize(("rules", "obj", "rule", "field", "words"), CASES)
def test_each_rule(rules: dict[str, Any], obj: dict[str, Any], rule: str | None, field: str,
                   words: str) -> None:  # fmt: skip
    r = review([policy(rules)], "Pod", obj, {})
    if rule is None:
        assert r.denied == () and r.warnings == ()
        return
    assert [(v.policy, v.rule, v.field) for v in r.denied] == [("baseline", rule, field)]
    assert words in r.denied[0].message


def test_init_containers_are_checked_too() -> None:
    p = pod(
        initContainers=[{"name": "setup", "image": "x", "securityContext": {"privileged": True}}]
    )
    r = review([policy({"denyPrivileged": True})], "Pod", p, {})
    assert [v.field for v in r.denied] == ["spec.initContainers[0].securityContext.privileged"]


def test_warn_mode_only_warns() -> None:
    r = review([policy({"denyPrivileged": True}, mode="Warn")], "Pod", PRIVILEGED, {})
    assert r.denied == ()
    assert r.warnings == (
        'would violate AdmissionPolicy "baseline": denyPrivileged (container "app" must not set '
        "securityContext.privileged=true)",
    )


@pytest.mark.parametrize(
    ("kind", "wrap"),
    [
        ("Deployment", lambda s: {"spec": {"template": {"spec": s}}}),
        ("ReplicaSet", lambda s: {"spec": {"template": {"spec": s}}}),
        ("Job", lambda s: {"spec": {"template": {"spec": s}}}),
        ("CronJob", lambda s: {"spec": {"jobTemplate": {"spec": {"template": {"spec": s}}}}}),
    ],
)
def test_workload_templates_are_warned_about_not_refused(kind: str, wrap: Any) -> None:
    obj = {"kind": kind, "metadata": {"name": "w", "namespace": NS}, **wrap(PRIVILEGED["spec"])}
    r = review([policy({"denyPrivileged": True})], kind, obj, {})
    assert r.denied == ()
    assert len(r.warnings) == 1 and "denyPrivileged" in r.warnings[0]
    assert pod_spec(kind, obj) is not None


@pytest.mark.parametrize(
    ("selector", "labels", "governed"),
    [
        (None, {}, True),
        ({}, {}, True),
        ({"matchLabels": {"tier": "shared"}}, {"tier": "shared"}, True),
        ({"matchLabels": {"tier": "shared"}}, {"tier": "prod"}, False),
        ({"matchLabels": {"tier": "shared"}}, None, False),
        (
            {"matchExpressions": [{"key": "quaymaster.io/production", "operator": "DoesNotExist"}]},
            {"quaymaster.io/production": "true"},
            False,
        ),
        (
            {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                   "values": [NS]}]},
            {},
            True,
        ),
    ],
)  # fmt: skip
def test_namespace_selector(selector: Any, labels: Any, governed: bool) -> None:
    r = review([policy({"denyPrivileged": True}, selector=selector)], "Pod", PRIVILEGED, labels)
    assert bool(r.denied) is governed


def test_kinds_without_pods_are_not_reviewed() -> None:
    cm = {"kind": "ConfigMap", "metadata": {"name": "c", "namespace": NS}, "data": {}}
    assert review([policy({"denyPrivileged": True})], "ConfigMap", cm, {}) == review(
        [], "Pod", pod(), {}
    )


def test_the_forbidden_message_names_every_policy_and_rule() -> None:
    bad = copy.deepcopy(PRIVILEGED)
    bad["spec"]["priority"] = 2000
    strict = Policy.of({"metadata": {"name": "strict"}, "spec": {"rules": {"maxPriority": 10}}})
    r = review([strict, policy({"denyPrivileged": True, "maxPriority": 999})], "Pod", bad, {})
    err = forbidden("pods", "web", r.denied)
    assert isinstance(err, Forbidden) and err.code == 403
    assert err.message == (
        'pods "web" is forbidden: violates AdmissionPolicy "baseline": denyPrivileged (container '
        '"app" must not set securityContext.privileged=true); maxPriority (priority 2000 exceeds '
        'this namespace\'s maximum of 999); violates AdmissionPolicy "strict": maxPriority '
        "(priority 2000 exceeds this namespace's maximum of 10)"
    )
    status = err.to_status()
    assert status["reason"] == "Forbidden"
    assert [c["field"] for c in status["details"]["causes"]] == [
        "spec.containers[0].securityContext.privileged",
        "spec.priority",
        "spec.priority",
    ]


@pytest.mark.parametrize(
    ("prefix", "image", "allowed"),
    [
        ("registry.internal", "registry.internal/web:1", True),
        ("registry.internal", "registry.internal.evil.io/web:1", False),
        ("registry.internal", "registry.internal-evil/web", False),
        ("registry.internal", "registry.internal:5000/web", False),  # another port
        ("registry.internal:5000", "registry.internal:5000/web", True),
        ("registry.internal/", "registry.internal/web", True),
        ("registry.internal/team", "registry.internal/team/app:2", True),
        ("registry.internal/team", "registry.internal/team-b/app", False),
        ("registry.internal/team/app", "registry.internal/team/app:2", True),
        ("registry.internal/team/app", "registry.internal/team/app@sha256:" + "0" * 64, True),
        ("registry.internal/team/app", "registry.internal/team/app", True),
        ("registry.internal/team/app", "registry.internal/team/apple", False),
    ],
)
def test_a_listed_registry_is_matched_at_a_name_boundary(
    prefix: str, image: str, allowed: bool
) -> None:
    rules = {"allowedImages": {"registries": [prefix]}}
    r = review([policy(rules)], "Pod", with_container(image=image), {})
    assert (r.denied == ()) is allowed


@pytest.mark.parametrize(
    "image",
    ["nginx@sha256:", "nginx@sha256:abc", "nginx@sha256:" + "A" * 64,
     "nginx@sha256:" + "a" * 64 + ":latest", "nginx:1@sha256:" + "g" * 64],
)  # fmt: skip
def test_only_a_whole_digest_pins_an_image(image: str) -> None:
    r = review(
        [policy({"allowedImages": {"digests": True}})], "Pod", with_container(image=image), {}
    )
    assert [v.rule for v in r.denied] == ["allowedImages"]
