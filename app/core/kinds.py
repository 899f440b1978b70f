"""The registry of object kinds Quaymaster serves.

One entry per kind says how the API names it (plural, scope), which table holds it, which
top-level fields form its spec, and which fields are promoted to indexed columns so that
``fieldSelector`` and reports can filter on them. The API, the store, the revision stream and
the CLI all read this one table, so adding a kind is adding a row here plus a migration.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GROUP = "quaymaster.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"


@dataclass(frozen=True, eq=False)
class Kind:
    """One kind; instances are singletons in ``KINDS`` and compare by identity."""

    kind: str
    plural: str
    table: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    # Top-level fields other than metadata that form the desired state. For most kinds this is
    # just ("spec",); ConfigMap, Secret and Event keep their data at the top level, as in
    # Kubernetes, and the store keeps those fields together in the ``spec`` column.
    spec_fields: tuple[str, ...] = ("spec",)
    has_status: bool = True
    # fieldSelector path -> promoted column name. metadata.name / metadata.namespace are implicit.
    field_columns: dict[str, str] = field(default_factory=dict)
    # Printer columns for ``qm get``: (header, dotted path).
    columns: tuple[tuple[str, str], ...] = ()

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


KINDS: tuple[Kind, ...] = (
    Kind(
        "Namespace",
        "namespaces",
        "namespaces",
        namespaced=False,
        short_names=("ns",),
        field_columns={"status.phase": "phase"},
        columns=(("STATUS", "status.phase"),),
    ),
    Kind(
        "Node",
        "nodes",
        "nodes",
        namespaced=False,
        short_names=("no",),
        field_columns={"spec.unschedulable": "unschedulable"},
        columns=(
            ("ZONE", "metadata.labels.topology.kubernetes.io/zone"),
            ("CPU", "status.allocatable.cpu"),
            ("MEMORY", "status.allocatable.memory"),
        ),
    ),
    Kind(
        "Lease",
        "leases",
        "leases",
        field_columns={"spec.holderIdentity": "holder_identity"},
        columns=(("HOLDER", "spec.holderIdentity"), ("RENEWED", "spec.renewTime")),
    ),
    Kind(
        "Pod",
        "pods",
        "pods",
        short_names=("po",),
        field_columns={
            "spec.nodeName": "node_name",
            "status.phase": "phase",
            "spec.priority": "priority",
            "spec.schedulerName": "scheduler_name",
        },
        columns=(
            ("NODE", "spec.nodeName"),
            ("PHASE", "status.phase"),
            ("PRIORITY", "spec.priority"),
        ),
    ),
    Kind(
        "Deployment",
        "deployments",
        "deployments",
        short_names=("deploy",),
        columns=(
            ("DESIRED", "spec.replicas"),
            ("READY", "status.readyReplicas"),
            ("AVAILABLE", "status.availableReplicas"),
        ),
    ),
    Kind(
        "ReplicaSet",
        "replicasets",
        "replicasets",
        short_names=("rs",),
        columns=(("DESIRED", "spec.replicas"), ("READY", "status.readyReplicas")),
    ),
    Kind(
        "Job",
        "jobs",
        "jobs",
        columns=(("COMPLETIONS", "spec.completions"), ("SUCCEEDED", "status.succeeded")),
    ),
    Kind(
        "CronJob",
        "cronjobs",
        "cronjobs",
        short_names=("cj",),
        columns=(("SCHEDULE", "spec.schedule"), ("SUSPEND", "spec.suspend")),
    ),
    Kind(
        "Service",
        "services",
        "services",
        short_names=("svc",),
        columns=(("CLUSTER-IP", "spec.clusterIP"),),
    ),
    Kind(
        "EndpointSlice",
        "endpointslices",
        "endpointslices",
        spec_fields=("addressType", "endpoints", "ports"),
        has_status=False,
        columns=(("ADDRESSTYPE", "addressType"),),
    ),
    Kind(
        "PriorityClass",
        "priorityclasses",
        "priorityclasses",
        namespaced=False,
        short_names=("pc",),
        spec_fields=("value", "globalDefault", "description", "preemptionPolicy"),
        has_status=False,
        columns=(("VALUE", "value"), ("GLOBAL-DEFAULT", "globalDefault")),
    ),
    Kind(
        "ResourceQuota",
        "resourcequotas",
        "resourcequotas",
        short_names=("quota",),
        columns=(("HARD", "spec.hard"),),
    ),
    Kind(
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        "poddisruptionbudgets",
        short_names=("pdb",),
        columns=(
            ("MIN-AVAILABLE", "spec.minAvailable"),
            ("MAX-UNAVAILABLE", "spec.maxUnavailable"),
        ),
    ),
    Kind(
        "ConfigMap",
        "configmaps",
        "configmaps",
        short_names=("cm",),
        spec_fields=("data", "binaryData", "immutable"),
        has_status=False,
    ),
    Kind(
        "Secret",
        "secrets",
        "secrets",
        spec_fields=("type", "data", "stringData", "immutable"),
        has_status=False,
        field_columns={"type": "secret_type"},
        columns=(("TYPE", "type"),),
    ),
    Kind(
        "ServiceAccount",
        "serviceaccounts",
        "serviceaccounts",
        short_names=("sa",),
        spec_fields=("secrets", "imagePullSecrets", "automountServiceAccountToken"),
        has_status=False,
    ),
    Kind(
        "Event",
        "events",
        "events",
        short_names=("ev",),
        spec_fields=(
            "involvedObject",
            "reason",
            "message",
            "type",
            "count",
            "source",
            "firstTimestamp",
            "lastTimestamp",
            "reportingComponent",
        ),
        has_status=False,
        field_columns={
            "involvedObject.kind": "involved_kind",
            "involvedObject.name": "involved_name",
            "involvedObject.uid": "involved_uid",
            "reason": "reason",
            "type": "event_type",
        },
        columns=(
            ("TYPE", "type"),
            ("REASON", "reason"),
            ("OBJECT", "involvedObject.name"),
            ("MESSAGE", "message"),
        ),
    ),
    # RBAC (app.core.authz): served, watched and cached like every other kind.
    Kind("Role", "roles", "roles", spec_fields=("rules",), has_status=False),
    Kind(
        "ClusterRole",
        "clusterroles",
        "clusterroles",
        namespaced=False,
        spec_fields=("rules",),
        has_status=False,
    ),
    Kind(
        "RoleBinding",
        "rolebindings",
        "rolebindings",
        spec_fields=("subjects", "roleRef"),
        has_status=False,
        columns=(("ROLE", "roleRef.name"),),
    ),
    Kind(
        "ClusterRoleBinding",
        "clusterrolebindings",
        "clusterrolebindings",
        namespaced=False,
        spec_fields=("subjects", "roleRef"),
        has_status=False,
        columns=(("ROLE", "roleRef.name"),),
    ),
    Kind(
        "AdmissionPolicy",
        "admissionpolicies",
        "admissionpolicies",
        namespaced=False,
        short_names=("ap",),
        has_status=False,
        columns=(("MODE", "spec.mode"),),
    ),
)

# Kinds the revision stream carries and the watch cache holds but the API does not serve as
# objects: a bearer token's record (``qm_tokens``) is one, so that its revocation reaches every
# API server through the stream (app.api.auth); its own API is app.api.tokens.
TOKEN = Kind(
    "Token",
    "tokens",
    "qm_tokens",
    namespaced=False,
    has_status=True,
)
INTERNAL_KINDS: tuple[Kind, ...] = (TOKEN,)
STREAMED: tuple[Kind, ...] = KINDS + INTERNAL_KINDS

BY_PLURAL: dict[str, Kind] = {k.plural: k for k in KINDS}
BY_KIND: dict[str, Kind] = {k.kind: k for k in STREAMED}
BY_TABLE: dict[str, Kind] = {k.table: k for k in STREAMED}


def resolve(name: str) -> Kind | None:
    """Find a kind by plural, singular, kind name or short name (case-insensitive), as the CLI
    and ``kubectl`` users type them."""
    low = name.lower()
    for k in KINDS:
        if low in (k.plural, k.singular, k.kind.lower()) or low in k.short_names:
            return k
    return None
