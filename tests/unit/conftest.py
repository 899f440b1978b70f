"""Shared fixtures for the pure-core unit tests: a valid manifest of every kind and helpers to
admit, reject and edit them."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import wall_clock

from app.core.admission import admit
from app.core.errors import Cause, Invalid
from app.core.kinds import API_VERSION, BY_KIND


def _meta(name: str, namespaced: bool = True, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespaced:
        meta["namespace"] = "default"
    meta.update(extra)
    return meta


def _pod_spec(**extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "nginx:1.25"}]}
    spec.update(extra)
    return spec


def _template(labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"labels": labels}, "spec": _pod_spec(**spec)}


MANIFESTS: dict[str, dict[str, Any]] = {
    "Namespace": {"metadata": _meta("team-a", False)},
    "Node": {
        "metadata": _meta("node-1", False, labels={"topology.kubernetes.io/zone": "z1"}),
        "spec": {"taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
    },
    "Lease": {
        "metadata": _meta("scheduler"),
        "spec": {
            "holderIdentity": "sched-1",
            "leaseDurationSeconds": 15,
            "renewTime": "2024-05-01T10:00:00.123456Z",
            "leaseTransitions": 0,
        },
    },
    "Pod": {"metadata": _meta("web-0", labels={"app": "web"}), "spec": _pod_spec()},
    "Deployment": {
        "metadata": _meta("web"),
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": _template({"app": "web"}),
        },
    },
    "ReplicaSet": {
        "metadata": _meta("web-abc"),
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": _template({"app": "web"}),
        },
    },
    "Job": {
        "metadata": _meta("batch"),
        "spec": {"template": _template({"job": "batch"}, restartPolicy="Never")},
    },
    "CronJob": {
        "metadata": _meta("nightly"),
        "spec": {
            "schedule": "0 3 * * *",
            "jobTemplate": {"spec": {"template": _template({}, restartPolicy="OnFailure")}},
        },
    },
    "Service": {
        "metadata": _meta("web"),
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    },
    "EndpointSlice": {
        "metadata": _meta("web-x1", labels={"kubernetes.io/service-name": "web"}),
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.0.0.5"], "conditions": {"ready": True}}],
        "ports": [{"name": "http", "port": 8080}],
    },
    "PriorityClass": {"metadata": _meta("high", False), "value": 1000},
    "ResourceQuota": {
        "metadata": _meta("quota"),
        "spec": {"hard": {"requests.cpu": "10", "limits.memory": "20Gi", "pods": "50"}},
    },
    "PodDisruptionBudget": {
        "metadata": _meta("web-pdb"),
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    },
    "ConfigMap": {"metadata": _meta("settings"), "data": {"key": "value"}},
    "Secret": {"metadata": _meta("creds"), "data": {"password": "aHVudGVyMg=="}},
    "ServiceAccount": {
        "metadata": _meta("ci"),
        "secrets": [{"name": "creds"}],
        "automountServiceAccountToken": False,
    },
    "Event": {
        "metadata": _meta("web-0.1"),
        "involvedObject": {"kind": "Pod", "name": "web-0", "namespace": "default"},
        "reason": "Scheduled",
        "message": "assigned to node-1",
    },
    "Role": {
        "metadata": _meta("pod-reader"),
        "rules": [{"verbs": ["get", "list"], "apiGroups": ["quaymaster.io"], "resources": ["pod"]}],
    },
    "ClusterRole": {
        "metadata": _meta("node-reader", namespaced=False),
        "rules": [{"verbs": ["get"], "apiGroups": ["quaymaster.io"], "resources": ["nodes"]}],
    },
    "RoleBinding": {
        "metadata": _meta("team-edit"),
        "roleRef": {"kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "User", "name": "alice"}, {"kind": "ServiceAccount", "name": "ci"}],
    },
    "ClusterRoleBinding": {
        "metadata": _meta("readers", namespaced=False),
        "roleRef": {"kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "Group", "name": "auditors"}],
    },
    "AdmissionPolicy": {
        "metadata": _meta("baseline", namespaced=False),
        "spec": {"mode": "Enforce", "rules": {"denyPrivileged": True, "maxPriority": 999}},
    },
}


def manifest(kind: str) -> dict[str, Any]:
    obj = copy.deepcopy(MANIFESTS[kind])
    return {"apiVersion": API_VERSION, "kind": kind, **obj}


def put(obj: Any, path: Sequence[str | int], value: Any) -> Any:
    """Set ``value`` at ``path`` (keys and list indices), creating objects on the way."""
    cur = obj
    for key in path[:-1]:
        if isinstance(cur, dict) and key not in cur:
            cur[key] = {}
        cur = cur[key]
    cur[path[-1]] = value
    return obj


def drop(obj: Any, path: Sequence[str | int]) -> Any:
    cur = obj
    for key in path[:-1]:
        cur = cur[key]
    del cur[path[-1]]
    return obj


@pytest.fixture(scope="session")
def valid() -> Callable[[str], dict[str, Any]]:
    """``valid(kind)``: a fresh, valid manifest of ``kind``."""
    return manifest


@pytest.fixture(scope="session")
def accept() -> Callable[..., dict[str, Any]]:
    """``accept(kind, obj, old=None)``: admit and return the result."""

    def run(kind: str, obj: Any, old: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        return admit(BY_KIND[kind], obj, old, **kw)

    return run


@pytest.fixture(scope="session")
def reject() -> Callable[..., list[Cause]]:
    """``reject(kind, obj, old=None)``: assert admission fails with 422 and return causes."""

    def run(kind: str, obj: Any, old: dict[str, Any] | None = None) -> list[Cause]:
        with pytest.raises(Invalid) as info:
            admit(BY_KIND[kind], obj, old)
        assert info.value.code == 422
        assert info.value.causes, "an Invalid error must carry causes"
        return info.value.causes

    return run


@pytest.fixture(scope="session")
def fields_of(reject: Callable[..., list[Cause]]) -> Callable[..., set[str]]:
    """``fields_of(kind, obj, old=None)``: the set of cause field paths of a rejection."""

    def run(kind: str, obj: Any, old: dict[str, Any] | None = None) -> set[str]:
        return {c.field for c in reject(kind, obj, old)}

    return run


@pytest.fixture(scope="session")
def edit() -> Callable[..., Any]:
    return put


@pytest.fixture(scope="session")
def remove() -> Callable[..., Any]:
    return drop


@pytest.fixture(autouse=True)
def no_wall_clock_sleep(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every unit test runs under :func:`wall_clock.forbid_sleeps` (see that module)."""
    if request.path.name not in wall_clock.ALLOWED:
        wall_clock.forbid_sleeps(monkeypatch)
