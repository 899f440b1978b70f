"""Admission of Roles, ClusterRoles and their bindings: shapes, reserved names, immutability."""

from __future__ import annotations

from typing import Any

import pytest

from app.core.admission import admit
from app.core.errors import Invalid
from app.core.kinds import BY_KIND

RULE = {"verbs": ["get"], "apiGroups": ["quaymaster.io"], "resources": ["pods"]}


def fields(kind: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
    try:
        admit(BY_KIND[kind], obj, old)
    except Invalid as exc:
        return [c.field for c in exc.causes]
    return []


@pytest.mark.parametrize(
    ("kind", "obj", "bad"),
    [
        ("Role", {"metadata": {"name": "r", "namespace": "a"}, "rules": [RULE]}, []),
        ("Role", {"metadata": {"name": "r", "namespace": "a"}, "rules": [{"verbs": []}]},
         ["rules[0].verbs", "rules[0].apiGroups", "rules[0].resources"]),
        ("Role", {"metadata": {"name": "r", "namespace": "a"}, "rules": [{**RULE, "x": 1}]},
         ["rules[0].x"]),
        ("Role", {"metadata": {"name": "r", "namespace": "a"}, "rules": "all"}, ["rules"]),
        ("ClusterRole", {"metadata": {"name": "admin"}, "rules": [RULE]}, ["metadata.name"]),
        ("ClusterRole", {"metadata": {"name": "system:x"}, "rules": [RULE]}, ["metadata.name"]),
        ("ClusterRole", {"metadata": {"name": "readers"}, "rules": [RULE]}, []),
        ("RoleBinding", {"metadata": {"name": "b", "namespace": "a"},
                         "roleRef": {"kind": "ClusterRole", "name": "edit"},
                         "subjects": [{"kind": "User", "name": "u"},
                                      {"kind": "ServiceAccount", "name": "sa"}]}, []),
        ("RoleBinding", {"metadata": {"name": "b", "namespace": "a"},
                         "roleRef": {"kind": "Secret", "name": "edit"},
                         "subjects": [{"kind": "Robot", "name": ""}]},
         ["roleRef.kind", "subjects[0].kind", "subjects[0].name"]),
        ("RoleBinding", {"metadata": {"name": "b", "namespace": "a"}}, ["roleRef"]),
        ("ClusterRoleBinding", {"metadata": {"name": "b"},
                                "roleRef": {"kind": "Role", "name": "r"},
                                "subjects": [{"kind": "ServiceAccount", "name": "sa"}]},
         ["roleRef.kind", "subjects[0].namespace"]),
        ("ClusterRoleBinding", {"metadata": {"name": "cluster-admin"},
                                "roleRef": {"kind": "ClusterRole", "name": "view"}},
         ["metadata.name"]),
    ],
)  # fmt: skip
def test_rbac_shapes(kind: str, obj: dict[str, Any], bad: list[str]) -> None:
    assert sorted(set(fields(kind, obj))) == sorted(bad)


def test_role_ref_is_immutable() -> None:
    old = admit(
        BY_KIND["RoleBinding"],
        {"metadata": {"name": "b", "namespace": "a", "uid": "u1"},
         "roleRef": {"kind": "ClusterRole", "name": "view"}},
        None,
    )  # fmt: skip
    new = {**old, "roleRef": {"kind": "ClusterRole", "name": "admin"}}
    assert "roleRef" in fields("RoleBinding", new, old)
    same = {**old, "subjects": [{"kind": "User", "name": "v"}]}
    assert fields("RoleBinding", same, old) == []
