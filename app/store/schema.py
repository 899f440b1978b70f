"""Every table, column, index and generated column of Quaymaster's database, as they are after
``alembic upgrade head``: the schema described once, in SQLAlchemy Core.

The migrations still create and change the schema (they must replay history exactly); this
module says what the result is. ``qm db check`` and the migration suite compare a database
with it (``drift.py``), the store's SQL is checked against it, and a developer whose migration
changes the schema renders the new declarations with ``python -m app.store.schema_render
write URL`` on a database at head and commits them with the migration (ADR 0055). Functions,
triggers, views, policies, grants, row security and index definitions, which SQLAlchemy does
not model, are in ``schema_objects.py``.

Defaults and generated expressions are written as PostgreSQL prints them back, so the
comparison is exact.
"""

# ruff: noqa: E501 (comments and expressions as the database prints them)
from __future__ import annotations

from sqlalchemy import (
    ForeignKeyConstraint,
    Index,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    UniqueConstraint,
    text,
)

from .schema_types import col, kind_table

# The schemas the code owns: drift in any other is none of its business.
SCHEMAS = ("public", "reporting")

metadata = MetaData()

# -- rendered by app.store.schema_render from a database at head; do not edit below --

admissionpolicies = kind_table(metadata, "admissionpolicies")

clusterrolebindings = kind_table(metadata, "clusterrolebindings")

clusterroles = kind_table(metadata, "clusterroles")

configmaps = kind_table(metadata, "configmaps")

cronjobs = kind_table(metadata, "cronjobs")

deployments = kind_table(metadata, "deployments")

endpointslices = kind_table(
    metadata,
    "endpointslices",
    col("service_name", "text", generated="(labels ->> 'kubernetes.io/service-name'::text)"),
    Index("endpointslices_service_name", "service_name"),
    fillfactor=80,
)

events = kind_table(
    metadata,
    "events",
    col("involved_kind", "text", generated="((spec -> 'involvedObject'::text) ->> 'kind'::text)"),
    col("involved_name", "text", generated="((spec -> 'involvedObject'::text) ->> 'name'::text)"),
    col("involved_uid", "text", generated="((spec -> 'involvedObject'::text) ->> 'uid'::text)"),
    col("reason", "text", generated="(spec ->> 'reason'::text)"),
    col("event_type", "text", generated="(spec ->> 'type'::text)"),
    Index("events_involved_name", "involved_name"),
    Index("events_involved_uid", "involved_uid"),
    fillfactor=85,
)

jobs = kind_table(metadata, "jobs")

leases = kind_table(
    metadata,
    "leases",
    col("holder_identity", "text", generated="(spec ->> 'holderIdentity'::text)"),
    fillfactor=70,
)

namespaces = kind_table(
    metadata,
    "namespaces",
    col("phase", "text", generated="(status ->> 'phase'::text)"),
)

nodes = kind_table(
    metadata,
    "nodes",
    col("zone", "text", generated="(labels ->> 'topology.kubernetes.io/zone'::text)"),
    col("machine_class", "text", generated="(labels ->> 'quaymaster.io/machine-class'::text)"),
    col(
        "unschedulable",
        "boolean",
        generated="COALESCE(((spec -> 'unschedulable'::text) = 'true'::jsonb), false)",
    ),
    col("ready", "boolean", generated="qm_condition_true(status, 'Ready'::text)"),
    col(
        "alloc_cpu_milli",
        "bigint",
        generated="qm_cpu_milli(((status -> 'allocatable'::text) ->> 'cpu'::text))",
    ),
    col(
        "alloc_memory_bytes",
        "bigint",
        generated="qm_bytes(((status -> 'allocatable'::text) ->> 'memory'::text))",
    ),
    col(
        "alloc_gpu",
        "bigint",
        generated="qm_bytes(((status -> 'allocatable'::text) ->> 'nvidia.com/gpu'::text))",
    ),
    col(
        "batch_cpu_milli",
        "bigint",
        generated="qm_cpu_milli(((status -> 'batchAllocatable'::text) ->> 'cpu'::text))",
        comment="status.batchAllocatable.cpu in millicores: the ceiling on the summed cpu requests of all pods on the node when the pod being placed is a batch pod; NULL means equal to alloc_cpu_milli",
    ),
    col(
        "batch_memory_bytes",
        "bigint",
        generated="qm_bytes(((status -> 'batchAllocatable'::text) ->> 'memory'::text))",
        comment="status.batchAllocatable.memory in bytes: the ceiling on the summed memory requests of all pods on the node when the pod being placed is a batch pod; NULL means equal to alloc_memory_bytes",
    ),
    col(
        "alloc_pods",
        "integer",
        generated="qm_count(((status -> 'allocatable'::text) ->> 'pods'::text))",
        comment="status.allocatable.pods: how many pods may hold room on the node; NULL means no limit",
    ),
    Index("nodes_machine_class", "machine_class"),
    Index("nodes_ready", "ready"),
    Index("nodes_zone", "zone"),
    fillfactor=75,
)

nodes_allocated = Table(
    "nodes_allocated",
    metadata,
    col("node_uid", "uuid", null=False),
    col("cpu_milli", "bigint", null=False, default="0"),
    col("memory_bytes", "bigint", null=False, default="0"),
    col("gpu", "bigint", null=False, default="0"),
    col("pods", "integer", null=False, default="0"),
    PrimaryKeyConstraint("node_uid", name="nodes_allocated_pkey"),
    ForeignKeyConstraint(
        ["node_uid"], ["nodes.uid"], name="nodes_allocated_node_uid_fkey", ondelete="CASCADE"
    ),
    postgresql_with={"fillfactor": "50"},
    comment="Summed requests (cpu_milli, memory_bytes, gpu) and count (pods) of the pods holding room on each node: spec.nodeName set and phase neither Succeeded nor Failed. Kept by the triggers pods_allocation_* and nodes_allocation_insert; the scheduler locks a row to bind onto its node. Do not edit by hand; SELECT qm_recount_allocations() rebuilds it from pods.",
)

poddisruptionbudgets = kind_table(metadata, "poddisruptionbudgets")

pods = kind_table(
    metadata,
    "pods",
    col("node_name", "text", generated="(spec ->> 'nodeName'::text)"),
    col("phase", "text", generated="(status ->> 'phase'::text)"),
    col("priority", "integer", generated="qm_int((spec ->> 'priority'::text))"),
    col("scheduler_name", "text", generated="(spec ->> 'schedulerName'::text)"),
    col("ready", "boolean", generated="qm_condition_true(status, 'Ready'::text)"),
    col("req_cpu_milli", "bigint", null=False, default="0"),
    col("req_memory_bytes", "bigint", null=False, default="0"),
    col("req_gpu", "bigint", null=False, default="0"),
    col(
        "bound_at",
        "timestamptz",
        comment="When spec.nodeName was first set (the bind), by the database clock; with creation_timestamp it gives created-to-bound latency",
    ),
    col(
        "quota_cpu_milli",
        "bigint",
        null=False,
        default="0",
        comment="Effective cpu request in millicores (init containers by max) charged to quotas",
    ),
    col(
        "quota_memory_bytes",
        "bigint",
        null=False,
        default="0",
        comment="Effective memory request in bytes charged to quotas",
    ),
    col(
        "quota_gpu",
        "bigint",
        null=False,
        default="0",
        comment="Effective nvidia.com/gpu request charged to quotas",
    ),
    col(
        "quota_limit_cpu_milli",
        "bigint",
        null=False,
        default="0",
        comment="Effective cpu limit in millicores charged to limits.cpu quotas",
    ),
    col(
        "quota_limit_memory_bytes",
        "bigint",
        null=False,
        default="0",
        comment="Effective memory limit in bytes charged to limits.memory quotas",
    ),
    col(
        "quota_best_effort",
        "boolean",
        null=False,
        default="true",
        comment="No container asks for or limits cpu or memory: the BestEffort quota scope",
    ),
    col(
        "quota_priority_class",
        "text",
        null=False,
        default="''::text",
        comment="spec.priorityClassName, for the PriorityClass quota scope",
    ),
    col(
        "quota_terminating",
        "boolean",
        null=False,
        default="false",
        comment="spec.activeDeadlineSeconds is set: the Terminating quota scope",
    ),
    col(
        "quota_cross_namespace",
        "boolean",
        null=False,
        default="false",
        comment="A pod (anti-)affinity term names other namespaces: the CrossNamespacePodAffinity scope",
    ),
    Index("pods_node_name", "node_name"),
    Index("pods_phase", "phase"),
    Index("pods_priority", "priority"),
    Index(
        "pods_unbound",
        text("priority DESC"),
        "creation_timestamp",
        postgresql_where=text("(node_name IS NULL)"),
    ),
    fillfactor=75,
)

priorityclasses = kind_table(metadata, "priorityclasses")

qm_api_servers = Table(
    "qm_api_servers",
    metadata,
    col("id", "text", null=False),
    col("started_at", "timestamptz", null=False, default="now()"),
    col("renewed_at", "timestamptz", null=False, default="now()"),
    PrimaryKeyConstraint("id", name="qm_api_servers_pkey"),
)

qm_audit = Table(
    "qm_audit",
    metadata,
    col("id", "bigint", null=False, serial=True),
    col("at", "timestamptz", null=False, default="clock_timestamp()"),
    col("username", "text", null=False),
    col("verb", "text", null=False),
    col("kind", "text", null=False),
    col("namespace", "text", null=False),
    col("name", "text", null=False),
    col("uid", "uuid"),
    col("subresource", "text", null=False, default="''::text"),
    col("before", "jsonb"),
    col("after", "jsonb"),
    col("groups", "text[]", null=False, default="'{}'::text[]"),
    PrimaryKeyConstraint("id", name="qm_audit_pkey"),
    Index("qm_audit_at", "at", postgresql_using="brin"),
    Index("qm_audit_object", "kind", "namespace", "name", "at"),
)

qm_bootstrap_tokens = Table(
    "qm_bootstrap_tokens",
    metadata,
    col("token_id", "text", null=False),
    col("secret_sha256", "text", null=False),
    col("node_name", "text"),
    col("uses_left", "integer", null=False, default="1"),
    col("description", "text", null=False, default="''::text"),
    col("created_by", "text", null=False, default="''::text"),
    col("created_at", "timestamptz", null=False, default="now()"),
    col("expires_at", "timestamptz", null=False),
    col("last_used_at", "timestamptz"),
    PrimaryKeyConstraint("token_id", name="qm_bootstrap_tokens_pkey"),
    comment="One-time tokens node agents join with; only the secret's SHA-256 is kept",
)

qm_history = Table(
    "qm_history",
    metadata,
    col("id", "bigint", null=False, serial=True),
    col("at", "timestamptz", null=False, default="statement_timestamp()"),
    col(
        "xid",
        "xid8",
        null=False,
        default="pg_current_xact_id()",
        comment="The writing transaction (top level); the sealer chains rows in (xid, id) order",
    ),
    col("table_name", "text", null=False),
    col("kind", "text"),
    col("namespace", "text"),
    col("name", "text"),
    col("uid", "uuid"),
    col("op", "text", null=False),
    col(
        "before",
        "jsonb",
        comment="delete: the whole row; update: the old values of the top-level columns that changed",
    ),
    col(
        "after",
        "jsonb",
        comment="insert: the whole row; update: the new values of the columns that changed; summary: the hour and the number of writes counted",
    ),
    col("db_role", "text"),
    col("application_name", "text"),
    col("principal", "text"),
    col("groups", "text[]"),
    col("request_id", "text"),
    col("client_addr", "text"),
    col("user_agent", "text"),
    col("reason", "text"),
    col("verb", "text"),
    col("subresource", "text"),
    col(
        "summary_count",
        "bigint",
        comment="op = summary: how many high-churn writes of that table and namespace the hour saw",
    ),
    PrimaryKeyConstraint("id", "at", name="qm_history_pkey"),
    Index("qm_history_at", "at", postgresql_using="brin"),
    Index("qm_history_object", "table_name", "namespace", "name", "at"),
    Index(
        "qm_history_principal", "principal", "at", postgresql_where=text("(principal IS NOT NULL)")
    ),
    Index("qm_history_xid", "xid", "id"),
    comment="Every insert, update and delete of a state table, with who (database role and application principal), why and when; append-only, chained by SHA-256 in qm_history_links (docs/history.md)",
)

qm_history_anchors = Table(
    "qm_history_anchors",
    metadata,
    col("id", "bigint", null=False, serial=True),
    col("last_seq", "bigint", null=False),
    col("last_hash", "bytea", null=False),
    col("before", "timestamptz"),
    col("partitions", "text[]", null=False, default="'{}'::text[]"),
    col("archived_at", "timestamptz", null=False, default="now()"),
    col("archived_by", "text", null=False, default="SESSION_USER"),
    col("exported", "jsonb", null=False, default="'{}'::jsonb"),
    PrimaryKeyConstraint("id", name="qm_history_anchors_pkey"),
    UniqueConstraint("last_seq", name="qm_history_anchors_last_seq_key"),
    comment="Where verification starts: the genesis, then the last seq and hash of each archived batch",
)

qm_history_backfill = Table(
    "qm_history_backfill",
    metadata,
    col("id", "integer", null=False, default="1"),
    col("audit_cutoff", "bigint", null=False),
    PrimaryKeyConstraint("id", name="qm_history_backfill_pkey"),
)

qm_history_chain = Table(
    "qm_history_chain",
    metadata,
    col("id", "integer", null=False, default="1"),
    col("last_seq", "bigint", null=False),
    col("last_hash", "bytea", null=False),
    col("cursor_xid", "xid8", null=False, default="'0'::xid8"),
    col("cursor_id", "bigint", null=False, default="0"),
    col("sealed_at", "timestamptz", null=False, default="now()"),
    PrimaryKeyConstraint("id", name="qm_history_chain_pkey"),
    comment="The tip of the hash chain: the last sealed seq and hash, and the (xid, id) of the last history row sealed (every row at or before it is sealed)",
)

qm_history_links = Table(
    "qm_history_links",
    metadata,
    col("seq", "bigint", null=False),
    col("id", "bigint", null=False),
    col("at", "timestamptz", null=False),
    col("hash", "bytea", null=False),
    PrimaryKeyConstraint("seq", name="qm_history_links_pkey"),
    Index("qm_history_links_row", "id", "at", unique=True),
    comment="The hash chain over qm_history: seq, the history row (id, at) and sha256(previous hash || qm_history_canon(row, seq)); append-only",
)

qm_history_tally = Table(
    "qm_history_tally",
    metadata,
    col("hour", "timestamptz", null=False),
    col("table_name", "text", null=False),
    col("namespace", "text", null=False),
    col("backend", "integer", null=False),
    col("kind", "text"),
    col("count", "bigint", null=False),
    PrimaryKeyConstraint(
        "hour", "table_name", "namespace", "backend", name="qm_history_tally_pkey"
    ),
    comment="High-churn writes counted, not stored; folded into summary rows of qm_history hourly",
)

qm_node_credentials = Table(
    "qm_node_credentials",
    metadata,
    col("id", "bigint", null=False, serial=True),
    col("node_name", "text", null=False),
    col("token_sha256", "text", null=False),
    col("bootstrap_token_id", "text", null=False),
    col("created_at", "timestamptz", null=False, default="now()"),
    PrimaryKeyConstraint("id", name="qm_node_credentials_pkey"),
    UniqueConstraint("token_sha256", name="qm_node_credentials_token_sha256_key"),
    Index("qm_node_credentials_node", "node_name"),
    comment="Which node credential (a qm_tokens row) each join minted, with which bootstrap token",
)

qm_revision_log = Table(
    "qm_revision_log",
    metadata,
    col("revision", "bigint", null=False),
    col("kind", "text", null=False),
    col("uid", "uuid", null=False),
    col("namespace", "text", null=False),
    col("name", "text", null=False),
    col("row_version", "bigint", null=False),
    col("op", '"char"', null=False),
    col("object", "json", null=False),
    col("commit_lsn", "pg_lsn", null=False),
    col("committed_at", "timestamptz", null=False, default="now()"),
    PrimaryKeyConstraint("revision", name="qm_revision_log_pkey"),
    Index("qm_revision_log_uid", "uid", text("revision DESC")),
)

qm_schema_compat = Table(
    "qm_schema_compat",
    metadata,
    col("schema_revision", "text", null=False),
    col("oldest_code_revision", "text", null=False),
    col("note", "text", null=False, default="''::text"),
    col("recorded_at", "timestamptz", null=False, default="now()"),
    PrimaryKeyConstraint("schema_revision", name="qm_schema_compat_pkey"),
    comment="Per schema revision, the oldest code revision it still serves (components check at start)",
)

qm_stream_state = Table(
    "qm_stream_state",
    metadata,
    col("id", "integer", null=False),
    col("last_revision", "bigint", null=False, default="0"),
    col("last_commit_lsn", "pg_lsn", null=False, default="'0/0'::pg_lsn"),
    col("compacted_revision", "bigint", null=False, default="0"),
    col("updated_at", "timestamptz", null=False, default="now()"),
    PrimaryKeyConstraint("id", name="qm_stream_state_pkey"),
)

qm_tokens = Table(
    "qm_tokens",
    metadata,
    col("id", "bigint", null=False, serial=True),
    col("username", "text", null=False),
    col("groups", "text[]", null=False, default="'{}'::text[]"),
    col("token_sha256", "text", null=False),
    col("description", "text", null=False, default="''::text"),
    col("created_at", "timestamptz", null=False, default="now()"),
    col("expires_at", "timestamptz"),
    col("revoked_at", "timestamptz"),
    col("created_by", "text", null=False, default="''::text"),
    col("sa_namespace", "text"),
    col("sa_name", "text"),
    col("sa_uid", "uuid"),
    col("uid", "uuid", null=False, default="gen_random_uuid()"),
    col("namespace", "text", null=False, default="''::text"),
    col("name", "text", null=False, default="''::text"),
    col("generate_name", "text"),
    col("labels", "jsonb", null=False, default="'{}'::jsonb"),
    col("annotations", "jsonb", null=False, default="'{}'::jsonb"),
    col("owner_references", "jsonb", null=False, default="'[]'::jsonb"),
    col("finalizers", "jsonb", null=False, default="'[]'::jsonb"),
    col("creation_timestamp", "timestamptz", null=False, default="now()"),
    col("deletion_timestamp", "timestamptz"),
    col("deletion_grace_period_seconds", "integer"),
    col("generation", "bigint", null=False, default="1"),
    col("row_version", "bigint", null=False, default="0"),
    col("spec", "jsonb", null=False, default="'{}'::jsonb"),
    col("status", "jsonb", null=False, default="'{}'::jsonb"),
    col(
        "minted_by",
        "text",
        comment="The token (record name) whose holder minted this one for itself; revoking it revokes this one",
    ),
    PrimaryKeyConstraint("id", name="qm_tokens_pkey"),
    UniqueConstraint("namespace", "name", name="qm_tokens_namespace_name"),
    UniqueConstraint("token_sha256", name="qm_tokens_token_sha256_key"),
    ForeignKeyConstraint(
        ["sa_uid"], ["serviceaccounts.uid"], name="qm_tokens_sa_uid_fkey", ondelete="SET NULL"
    ),
    Index("qm_tokens_sa_uid", "sa_uid", postgresql_where=text("(sa_uid IS NOT NULL)")),
    Index("qm_tokens_uid", "uid", unique=True),
    Index("qm_tokens_username", "username"),
)

qm_usage_rollup = Table(
    "qm_usage_rollup",
    metadata,
    col(
        "minute",
        "timestamptz",
        null=False,
        comment="The minute the figures were read in (UTC, truncated)",
    ),
    col("namespace", "text", null=False, comment="The pods' namespace"),
    col("node", "text", null=False, comment="The node the pods ran on (as its agent reported)"),
    col("pods", "integer", null=False, comment="Pods with a fresh sample on that node"),
    col(
        "cpu_milli",
        "bigint",
        null=False,
        comment="Their summed CPU in millicores (each averaged over the agent's sampling interval)",
    ),
    col("memory_bytes", "bigint", null=False, comment="Their summed memory in bytes"),
    PrimaryKeyConstraint("minute", "namespace", "node", name="qm_usage_rollup_pkey"),
    comment="Measured usage per minute, namespace and node, appended by the controller manager's usage-rollup loop from the latest per-pod samples in Redis; telemetry (no history), pruned past its retention (QM_USAGE_ROLLUP_RETENTION_DAYS, 35 by default)",
)

replicasets = kind_table(metadata, "replicasets")

resourcequotas = kind_table(metadata, "resourcequotas")

rolebindings = kind_table(metadata, "rolebindings")

roles = kind_table(metadata, "roles")

secrets = kind_table(
    metadata,
    "secrets",
    col("secret_type", "text", generated="(spec ->> 'type'::text)"),
)

service_ip_range = Table(
    "service_ip_range",
    metadata,
    col("id", "integer", null=False, default="1"),
    col("cidr", "cidr", null=False),
    col("quarantine", "interval", null=False, default="'00:05:00'::interval"),
    col("updated_at", "timestamptz", null=False, default="now()"),
    PrimaryKeyConstraint("id", name="service_ip_range_pkey"),
    comment="The range Service virtual IPs come from, and how long a released one stays out of use",
)

service_ips = Table(
    "service_ips",
    metadata,
    col("ip", "inet", null=False),
    col("service_uid", "uuid"),
    col("namespace", "text", null=False),
    col("name", "text", null=False),
    col("allocated_at", "timestamptz", null=False, default="now()"),
    col("released_at", "timestamptz"),
    PrimaryKeyConstraint("ip", name="service_ips_pkey"),
    UniqueConstraint("service_uid", name="service_ips_service_uid_key"),
    comment="Service virtual IPs: held by service_uid, or in quarantine since released_at",
)

serviceaccounts = kind_table(metadata, "serviceaccounts")

services = kind_table(metadata, "services")

reporting_namespace_access = Table(
    "namespace_access",
    metadata,
    col(
        "role_name",
        "name",
        null=False,
        comment="A login or group role (granted qm_reporting); never qm_reporting itself, which every reader inherits",
    ),
    col(
        "namespace",
        "text",
        null=False,
        comment="A namespace name, '' (cluster-scoped objects) or '*' (every namespace)",
    ),
    col("granted_at", "timestamptz", null=False, default="now()", comment="When the row was added"),
    col(
        "granted_by",
        "name",
        null=False,
        default="CURRENT_USER",
        comment="The database role that added it",
    ),
    PrimaryKeyConstraint("role_name", "namespace", name="namespace_access_pkey"),
    schema="reporting",
    comment="Which namespaces a reporting role sees: a row applies to the role it names and to every role that inherits it. namespace is a namespace name, '' for cluster-scoped objects (their history) or '*' for all. A member of qm_reporting with no row sees nothing. Kept by a DBA; a reader sees only the rows that apply to it.",
)
