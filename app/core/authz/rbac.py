"""RBAC evaluation over Roles, ClusterRoles and their bindings (Kubernetes' semantics).

:class:`Policy` is built from the objects as plain dicts (the API server builds one from its
watch cache whenever an RBAC object changes) and indexes bindings by subject, so a check costs
O(bindings of the asking principal), never O(all bindings). The built-in roles and bindings
(:mod:`app.core.authz.builtin`) are part of every policy; group ``system:masters`` is allowed
everything without consulting any rule.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from app.core.authz import AUTHENTICATED, MASTERS, Attributes, Decision, Principal
from app.core.authz.builtin import CLUSTER_BINDINGS, CLUSTER_ROLES, METRICS_GROUP, reserved
from app.core.authz.rules import ALL, Rule, any_allows, from_dict, uncovered
from app.core.kinds import GROUP

Obj = dict[str, Any]
# Rules in these groups make a namespace visible to their holder (the access-review group
# does not: being allowed to ask is not being allowed to see).
VISIBLE_GROUPS = frozenset({GROUP, METRICS_GROUP, ALL})
ROLE_RESOURCE = {"Role": "roles", "ClusterRole": "clusterroles"}


@dataclass(frozen=True, slots=True)
class Binding:
    """One grant to one subject: ``role`` (``Role`` or ``ClusterRole``) in ``namespace`` (empty
    for a ClusterRoleBinding, which grants everywhere)."""

    kind: str  # RoleBinding / ClusterRoleBinding
    name: str
    namespace: str
    role_kind: str
    role_name: str


def subject_key(subject: Any, namespace: str) -> str | None:
    """The index key of a binding's subject; service accounts are the users they authenticate
    as (``system:serviceaccount:<ns>:<name>``)."""
    if not isinstance(subject, dict):
        return None
    kind, name = subject.get("kind"), subject.get("name")
    if not isinstance(name, str) or not name:
        return None
    if kind == "ServiceAccount":
        ns = subject.get("namespace") or namespace
        return f"User:system:serviceaccount:{ns}:{name}" if ns else None
    if kind in ("User", "Group"):
        return f"{kind}:{name}"
    return None


def subject_keys(user: Principal) -> list[str]:
    """Index keys of ``user``; every principal is in ``system:authenticated``, even one whose
    credential does not list it."""
    groups = user.groups if AUTHENTICATED in user.groups else (*user.groups, AUTHENTICATED)
    return [f"User:{user.name}", *(f"Group:{g}" for g in groups)]


def _meta(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _rules(obj: Obj) -> tuple[Rule, ...]:
    return tuple(r for r in (from_dict(d) for d in obj.get("rules") or []) if r is not None)


class Policy:
    """Every role and binding, indexed for checks by subject."""

    def __init__(
        self,
        roles: Iterable[Obj] = (),
        cluster_roles: Iterable[Obj] = (),
        role_bindings: Iterable[Obj] = (),
        cluster_role_bindings: Iterable[Obj] = (),
    ) -> None:
        self.roles: dict[tuple[str, str], tuple[Rule, ...]] = {}
        for obj in roles:
            self.roles[_meta(obj)] = _rules(obj)
        self.cluster_roles: dict[str, tuple[Rule, ...]] = {}
        for obj in cluster_roles:
            name = _meta(obj)[1]
            if not reserved(name):
                self.cluster_roles[name] = _rules(obj)
        self.cluster_roles.update(CLUSTER_ROLES)
        # subject key -> binding namespace ("" for cluster-wide) -> bindings
        self.by_subject: dict[str, dict[str, list[Binding]]] = defaultdict(dict)
        # (kind, namespace, name) of a stored binding -> the subject keys it is indexed under
        self._keys: dict[tuple[str, str, str], list[str]] = {}
        for name, role, skind, sname in CLUSTER_BINDINGS:
            self._add(
                f"{skind}:{sname}", Binding("ClusterRoleBinding", name, "", "ClusterRole", role)
            )
        for obj in cluster_role_bindings:
            if not reserved(_meta(obj)[1]):
                self._index(obj, "ClusterRoleBinding", "")
        for obj in role_bindings:
            self._index(obj, "RoleBinding", _meta(obj)[0])

    def _index(self, obj: Obj, kind: str, namespace: str) -> None:
        ref = obj.get("roleRef") or {}
        if not isinstance(ref, dict):
            return
        role_kind, role_name = str(ref.get("kind") or ""), str(ref.get("name") or "")
        if role_kind not in ROLE_RESOURCE or (kind == "ClusterRoleBinding" and role_kind == "Role"):
            return
        binding = Binding(kind, _meta(obj)[1], namespace, role_kind, role_name)
        keys = self._keys.setdefault((kind, namespace, binding.name), [])
        for subject in obj.get("subjects") or []:
            key = subject_key(subject, namespace)
            if key is not None and key not in keys:
                self._add(key, binding)
                keys.append(key)

    def _unindex(self, kind: str, namespace: str, name: str) -> None:
        for key in self._keys.pop((kind, namespace, name), ()):
            scopes = self.by_subject.get(key, {})
            kept = [b for b in scopes.get(namespace, ()) if (b.kind, b.name) != (kind, name)]
            if kept:
                scopes[namespace] = kept
            else:
                scopes.pop(namespace, None)
            if not scopes:
                self.by_subject.pop(key, None)

    def apply(self, kind: str, namespace: str, name: str, obj: Obj | None) -> None:
        """Follow one change of a stored RBAC object (``obj`` None: deleted), in O(its
        subjects): the API server's policy is built once and then kept current this way."""
        if kind == "Role":
            if obj is None:
                self.roles.pop((namespace, name), None)
            else:
                self.roles[(namespace, name)] = _rules(obj)
        elif kind == "ClusterRole" and not reserved(name):
            if obj is None:
                self.cluster_roles.pop(name, None)
            else:
                self.cluster_roles[name] = _rules(obj)
        elif kind == "RoleBinding" or (kind == "ClusterRoleBinding" and not reserved(name)):
            scope = namespace if kind == "RoleBinding" else ""
            self._unindex(kind, scope, name)
            if obj is not None:
                self._index(obj, kind, scope)

    def _add(self, key: str, binding: Binding) -> None:
        self.by_subject[key].setdefault(binding.namespace, []).append(binding)

    # -- lookups -------------------------------------------------------------------------
    def role_rules(self, role_kind: str, role_name: str, namespace: str) -> tuple[Rule, ...] | None:
        if role_kind == "ClusterRole":
            return self.cluster_roles.get(role_name)
        return self.roles.get((namespace, role_name))

    def bindings(self, user: Principal, namespace: str) -> Iterator[Binding]:
        """The bindings that apply to ``user`` in ``namespace`` (cluster-wide ones first)."""
        for key in subject_keys(user):
            scopes = self.by_subject.get(key)
            if not scopes:
                continue
            yield from scopes.get("", ())
            if namespace:
                yield from scopes.get(namespace, ())

    def rules_for(self, user: Principal, namespace: str) -> list[Rule]:
        """Every rule that applies to ``user`` in ``namespace`` ("" = cluster-wide only)."""
        out: list[Rule] = []
        for b in self.bindings(user, namespace):
            out.extend(self.role_rules(b.role_kind, b.role_name, b.namespace) or ())
        return out

    def binding_namespaces(self, user: Principal) -> set[str]:
        """Namespaces where ``user`` holds a RoleBinding."""
        out: set[str] = set()
        for key in subject_keys(user):
            out.update(ns for ns in self.by_subject.get(key, {}) if ns)
        return out

    # -- decisions -----------------------------------------------------------------------
    def authorize(self, user: Principal, attrs: Attributes) -> Decision:
        if MASTERS in user.groups:
            return Decision(True, f"group {MASTERS}")
        for b in self.bindings(user, attrs.namespace):
            rules = self.role_rules(b.role_kind, b.role_name, b.namespace) or ()
            if any_allows(rules, attrs):
                where = f"{b.namespace}/" if b.namespace else ""
                return Decision(True, f'RBAC: allowed by {b.kind} "{where}{b.name}"')
        return Decision(False, "")

    def visible(self, user: Principal, namespace: str) -> bool:
        """Whether ``user`` holds any permission in ``namespace``; where it holds none, the
        namespace and everything in it answers as if it did not exist."""
        if MASTERS in user.groups:
            return True
        return any(
            VISIBLE_GROUPS.intersection(r.api_groups) for r in self.rules_for(user, namespace)
        )

    def namespaces_allowing(self, user: Principal, attrs: Attributes) -> list[str] | None:
        """The namespaces where ``attrs`` (its namespace ignored) is allowed, sorted; None when
        it is allowed cluster-wide. For namespaces themselves the namespace is also the name."""
        if self.authorize(user, replace(attrs, namespace="", name="")).allowed:
            return None
        namespaced = attrs.resource == "namespaces"
        return sorted(
            ns
            for ns in self.binding_namespaces(user)
            if self.authorize(
                user, replace(attrs, namespace=ns, name=ns if namespaced else attrs.name)
            ).allowed
        )

    def escalation(self, user: Principal, kind: str, obj: Obj) -> list[str]:
        """Why ``user`` may not store this Role, ClusterRole or binding: the permissions it
        would grant that ``user`` does not hold (empty when allowed). Holding ``escalate`` on
        the role, or ``bind`` on the role a binding refers to, allows it anyway."""
        if MASTERS in user.groups:
            return []
        namespace, name = _meta(obj)
        if kind in ROLE_RESOURCE:
            ns = namespace if kind == "Role" else ""
            if self.authorize(user, Attributes("escalate", ROLE_RESOURCE[kind], ns, name)).allowed:
                return []
            asked = _rules(obj)
        else:
            ref = obj.get("roleRef") or {}
            role_kind, role_name = str(ref.get("kind") or ""), str(ref.get("name") or "")
            ns = namespace if kind == "RoleBinding" else ""
            resource = ROLE_RESOURCE.get(role_kind, "roles")
            if self.authorize(user, Attributes("bind", resource, ns, role_name)).allowed:
                return []
            found = self.role_rules(role_kind, role_name, ns)
            if found is None:
                return [f'{role_kind} "{role_name}" not found']
            asked = found
        held = self.rules_for(user, ns)
        return [m for r in asked for m in uncovered(held, r)]

    def rules_review(self, user: Principal, namespace: str) -> list[Rule]:
        """What ``user`` may do in ``namespace`` (for SelfSubjectRulesReview)."""
        if MASTERS in user.groups:
            return [Rule((ALL,), (ALL,), (ALL,))]
        return self.rules_for(user, namespace)
