"""Roles, ClusterRoles and their bindings: the shape of rules, role references and subjects.

Admission checks only the objects themselves. Whether the writer may grant what they grant
(the escalation check) needs the policy in force, so the API decides it
(``app.core.authz.rbac.Policy.escalation``). Names of the built-in roles and bindings, and
every ``system:`` name, are reserved for the ones defined in code.
"""

from __future__ import annotations

from app.core.admission._util import Errs, Obj, sub
from app.core.authz.builtin import reserved
from app.core.kinds import GROUP

RULE_FIELDS = ("verbs", "apiGroups", "resources", "resourceNames")
SUBJECT_KINDS = ("User", "Group", "ServiceAccount")
# The group a roleRef or subject may name; Kubernetes' own is accepted so manifests port.
REF_GROUPS = (GROUP, "rbac.authorization.k8s.io")


def _reserved_name(e: Errs, obj: Obj, kind: str) -> None:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if isinstance(name, str) and reserved(name):
        e.forbidden("metadata.name", f"{name!r} is a built-in {kind} and cannot be stored")


def _rules(e: Errs, obj: Obj) -> None:
    items = e.get_list(obj, "rules", "")
    for path, r in e.objects(items or [], "rules"):
        for key in r:
            if key not in RULE_FIELDS:
                e.add(sub(path, key), "FieldValueNotSupported", f'unknown field "{key[:64]}"')
        for key in ("verbs", "apiGroups", "resources"):
            values = e.get_str_list(r, key, path, required=True)
            if values is not None and not values:
                e.required(sub(path, key), 'must name at least one, or "*"')
        e.get_str_list(r, "resourceNames", path)


def check_role(e: Errs, obj: Obj, old: Obj | None) -> None:
    _rules(e, obj)


def check_clusterrole(e: Errs, obj: Obj, old: Obj | None) -> None:
    _reserved_name(e, obj, "ClusterRole")
    _rules(e, obj)


def _role_ref(e: Errs, obj: Obj, old: Obj | None, kinds: tuple[str, ...]) -> None:
    ref = e.get_obj(obj, "roleRef", "", required=True)
    if ref is None:
        return
    e.get_enum(ref, "apiGroup", "roleRef", REF_GROUPS)
    e.get_enum(ref, "kind", "roleRef", kinds, required=True)
    e.get_str(ref, "name", "roleRef", required=True)
    if old is not None and isinstance(old.get("roleRef"), dict):
        was = old["roleRef"]
        if (ref.get("kind"), ref.get("name")) != (was.get("kind"), was.get("name")):
            e.immutable("roleRef")


def _subjects(e: Errs, obj: Obj, cluster: bool) -> None:
    items = e.get_list(obj, "subjects", "")
    for path, s in e.objects(items or [], "subjects"):
        kind = e.get_enum(s, "kind", path, SUBJECT_KINDS, required=True)
        e.get_str(s, "name", path, required=True)
        e.get_str(s, "apiGroup", path)
        namespace = e.get_str(s, "namespace", path)
        if kind == "ServiceAccount" and cluster and not namespace:
            e.required(sub(path, "namespace"), "a ServiceAccount subject names its namespace")


def check_rolebinding(e: Errs, obj: Obj, old: Obj | None) -> None:
    _role_ref(e, obj, old, ("Role", "ClusterRole"))
    _subjects(e, obj, cluster=False)


def check_clusterrolebinding(e: Errs, obj: Obj, old: Obj | None) -> None:
    _reserved_name(e, obj, "ClusterRoleBinding")
    _role_ref(e, obj, old, ("ClusterRole",))
    _subjects(e, obj, cluster=True)
