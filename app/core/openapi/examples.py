"""One small object per kind that admission accepts, shown as each create's and replace's
request example in the OpenAPI document.

Readers of the document (and the Swagger view) get a manifest that works; schemathesis' examples
phase sends them, so a real object of each kind exists in ``default`` and reads, lists, patches
and deletes of ``example`` answer with stored objects, whose responses the run then checks
against their schemas. ``tests/unit/test_openapi_document.py`` admits every one of them.
A kind with no entry here simply has no example.
"""

from __future__ import annotations

from typing import Any

from app.core.kinds import API_VERSION, Kind

NAME = "example"
NAMESPACE = "default"
_LABELS = {"app": NAME}
_CONTAINER = {
    "name": "app",
    "image": "registry.example/app:1.0",
    "resources": {
        "requests": {"cpu": "100m", "memory": "64Mi"},
        "limits": {"cpu": "100m", "memory": "64Mi"},
    },
}
_TEMPLATE = {"metadata": {"labels": _LABELS}, "spec": {"containers": [_CONTAINER]}}
_RUN_ONCE = {"spec": {"containers": [_CONTAINER], "restartPolicy": "Never"}}
_RULES = [{"apiGroups": ["quaymaster.io"], "resources": ["pods"], "verbs": ["get", "list"]}]
_BINDING = {
    "subjects": [{"kind": "User", "name": NAME}],
    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
}

# Everything but apiVersion, kind and metadata, by kind.
BODIES: dict[str, dict[str, Any]] = {
    "Namespace": {},
    "Node": {"spec": {}},
    "Lease": {"spec": {"holderIdentity": NAME}},
    "Pod": {"spec": {"containers": [_CONTAINER]}},
    "Deployment": {
        "spec": {"replicas": 1, "selector": {"matchLabels": _LABELS}, "template": _TEMPLATE}
    },
    "ReplicaSet": {
        "spec": {"replicas": 1, "selector": {"matchLabels": _LABELS}, "template": _TEMPLATE}
    },
    "Job": {"spec": {"template": {"metadata": {"labels": _LABELS}, **_RUN_ONCE}}},
    "CronJob": {
        "spec": {"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": _RUN_ONCE}}}
    },
    "Service": {"spec": {"selector": _LABELS, "ports": [{"port": 80}]}},
    "EndpointSlice": {"addressType": "IPv4", "endpoints": [], "ports": []},
    "PriorityClass": {"value": 10, "description": "An example priority."},
    "ResourceQuota": {"spec": {"hard": {"pods": "10"}}},
    "PodDisruptionBudget": {"spec": {"minAvailable": 1, "selector": {"matchLabels": _LABELS}}},
    "ConfigMap": {"data": {"key": "value"}},
    "Secret": {"type": "Opaque", "stringData": {"key": "value"}},
    "ServiceAccount": {},
    "Event": {
        "involvedObject": {"kind": "Pod", "name": NAME, "namespace": NAMESPACE},
        "reason": "Example",
        "message": "An example event.",
        "type": "Normal",
    },
    "Role": {"rules": _RULES},
    "ClusterRole": {"rules": _RULES},
    "RoleBinding": _BINDING,
    "ClusterRoleBinding": _BINDING,
}


def example(kind: Kind) -> dict[str, Any] | None:
    """The example object of ``kind``, or None when there is none."""
    body = BODIES.get(kind.kind)
    if body is None:
        return None
    meta: dict[str, Any] = {"name": NAME}
    if kind.namespaced:
        meta["namespace"] = NAMESPACE
    return {"apiVersion": API_VERSION, "kind": kind.kind, "metadata": meta, **body}
