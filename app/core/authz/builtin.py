"""The built-in ClusterRoles and ClusterRoleBindings, defined in code.

``view``, ``edit`` and ``admin`` are meant to be bound per namespace with a RoleBinding (they
then apply only there); ``cluster-admin`` grants everything. The ``system:`` roles serve the
components and every authenticated principal (asking what it may do). They are never stored,
so no one can edit or delete them and every API server agrees on them without a migration;
a stored ClusterRole or ClusterRoleBinding may not take their names (admission refuses it).
"""

from __future__ import annotations

from app.core.authz import AUTHENTICATED, AUTHZ_GROUP, MASTERS
from app.core.authz.rules import ALL, Rule, rule
from app.core.kinds import GROUP

METRICS_GROUP = f"metrics.{GROUP}"
AUDIT_GROUP = f"audit.{GROUP}"  # the change history, read-only (ADR 0061)
READ = ("get", "list", "watch")
WRITE = ("create", "update", "patch", "delete", "deletecollection")
SCALABLE = ("deployments", "replicasets", "jobs")

# What every role from ``view`` up may read in its namespace (not secrets: reading them is
# reading credentials, as in Kubernetes).
VIEWABLE = (
    "pods", "deployments", "replicasets", "jobs", "cronjobs", "services", "endpointslices",
    "configmaps", "events", "resourcequotas", "poddisruptionbudgets", "namespaces",
    "serviceaccounts",
)  # fmt: skip
WITH_STATUS = (
    "pods", "deployments", "replicasets", "jobs", "cronjobs", "services", "resourcequotas",
    "poddisruptionbudgets", "namespaces",
)  # fmt: skip
# What ``edit`` may also write (ResourceQuotas and Events stay read-only below cluster-admin).
EDITABLE = (
    "pods", "deployments", "replicasets", "jobs", "cronjobs", "services", "configmaps",
    "secrets", "poddisruptionbudgets", "serviceaccounts",
)  # fmt: skip
RBAC_NAMESPACED = ("roles", "rolebindings")

_VIEW = (
    rule(READ, VIEWABLE, [GROUP]),
    rule(READ, [f"{r}/status" for r in WITH_STATUS], [GROUP]),
    rule(["get"], ["pods/log"], [GROUP]),
    rule(READ, [f"{r}/scale" for r in SCALABLE], [GROUP]),
    rule(["get", "list"], ["pods"], [METRICS_GROUP]),
)
_EDIT = (
    *_VIEW,
    rule(READ, ["secrets"], [GROUP]),
    rule(WRITE, [r for r in EDITABLE], [GROUP]),
    rule(["create"], ["pods/eviction"], [GROUP]),
    # as Kubernetes' edit: it can run pods as any account of its namespace anyway
    rule(["create"], ["serviceaccounts/token"], [GROUP]),
    rule(["update", "patch"], [f"{r}/scale" for r in SCALABLE], [GROUP]),
)
_ADMIN = (
    *_EDIT,
    rule([*READ, *WRITE], RBAC_NAMESPACED, [GROUP]),
    # The namespace's whole change history: every kind, RBAC and Secrets' digests included,
    # so only the role that reads all of them. view and edit see an object's history through
    # ``get`` on the object (ADR 0061).
    rule(["list"], ["history"], [AUDIT_GROUP]),
)
_CLUSTER_ADMIN = (rule([ALL], [ALL], [ALL]),)
_BASIC_USER = (
    rule(["create"], ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], [AUTHZ_GROUP]),
)
_SCHEDULER = (
    rule(READ, [ALL], [GROUP]),
    rule(["create"], ["pods/binding", "pods/eviction", "events"], [GROUP]),
    rule(["update", "patch"], ["pods/status", "events"], [GROUP]),
    rule(["delete"], ["pods"], [GROUP]),
    rule([*READ, *WRITE], ["leases"], [GROUP]),
)

CLUSTER_ROLES: dict[str, tuple[Rule, ...]] = {
    "view": _VIEW,
    "edit": _EDIT,
    "admin": _ADMIN,
    "cluster-admin": _CLUSTER_ADMIN,
    "system:basic-user": _BASIC_USER,
    "system:kube-scheduler": _SCHEDULER,
    "system:kube-controller-manager": _CLUSTER_ADMIN,
}

# (binding name, role, subject kind, subject name)
CLUSTER_BINDINGS: tuple[tuple[str, str, str, str], ...] = (
    ("cluster-admin", "cluster-admin", "Group", MASTERS),
    ("system:basic-user", "system:basic-user", "Group", AUTHENTICATED),
    ("system:kube-scheduler", "system:kube-scheduler", "User", "system:kube-scheduler"),
    (
        "system:kube-controller-manager",
        "system:kube-controller-manager",
        "User",
        "system:kube-controller-manager",
    ),
)


def reserved(name: str) -> bool:
    """Names a stored ClusterRole or ClusterRoleBinding may not take."""
    return name in CLUSTER_ROLES or name.startswith("system:")
