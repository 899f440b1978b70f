"""The reporting schema: documented views for report writers and auditors, by namespace.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02

* Schema ``reporting``: views (``security_invoker``, so every read is checked as the reader)
  over the state tables and ``qm_history``, each view and column described with ``COMMENT ON``.
* ``qm_reporting`` loses its old table grants (every kind table, ``qm_audit``, the service IP
  tables, node credentials, API servers) and gets, instead, ``SELECT`` on the views and on the
  *columns* of the base tables those views read, never a Secret's, a token's or a credential's.
* ``reporting.namespace_access`` maps a role (a reporting login, or a group role granted to
  logins) to the namespaces it may see: a namespace name, ``''`` for cluster-scoped objects'
  history, ``'*'`` for everything. Row-level security on the base tables applies it to members
  of ``qm_reporting`` only (a restrictive ``SELECT`` policy); a permissive ``true`` policy keeps
  every other role's reads and writes as before, and ``qm_app`` gets ``BYPASSRLS`` so its
  statements are planned exactly as before (no policy at all).

ADR 0054 explains why the reporting role's column grants plus row-level security are the
boundary (a reader may query the granted columns directly, and sees there exactly what the
views show it), and ``docs/reporting.md`` is the reader's guide.

Expand-only: nothing the previous release reads changes; it connects as the tables' owner (or
``qm_app``), which row-level security does not filter.
"""

from __future__ import annotations

from alembic import op

from migrations import online
from migrations.kind_table import history_triggers

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

ROLE = "qm_reporting"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# What qm_reporting could read before this revision (restored by the downgrade).
OLD_GRANTS = (
    "admissionpolicies", "clusterrolebindings", "clusterroles", "configmaps", "cronjobs",
    "deployments", "endpointslices", "events", "jobs", "leases", "namespaces", "nodes",
    "poddisruptionbudgets", "pods", "priorityclasses", "qm_api_servers", "qm_audit",
    "qm_node_credentials", "replicasets", "resourcequotas", "rolebindings", "roles",
    "service_ip_range", "service_ips", "serviceaccounts", "services",
)  # fmt: skip

# The base-table columns the views read: the reporting role's only grants outside the schema.
COLUMNS: dict[str, tuple[str, ...]] = {
    "namespaces": ("uid", "name", "labels", "creation_timestamp", "phase"),
    "nodes": (
        "uid", "namespace", "name", "labels", "creation_timestamp", "spec", "status", "zone",
        "machine_class", "unschedulable", "ready", "alloc_cpu_milli", "alloc_memory_bytes",
        "alloc_gpu", "batch_cpu_milli", "batch_memory_bytes",
    ),
    "pods": (
        "uid", "namespace", "name", "owner_references", "creation_timestamp",
        "deletion_timestamp", "status", "node_name", "phase", "priority", "ready",
        "req_cpu_milli", "req_memory_bytes", "req_gpu", "bound_at",
    ),
    "deployments": (
        "uid", "namespace", "name", "creation_timestamp", "generation", "spec", "status",
    ),
    "replicasets": (
        "uid", "namespace", "name", "annotations", "owner_references", "creation_timestamp",
        "generation", "spec", "status",
    ),
    "jobs": ("uid", "namespace", "name", "creation_timestamp", "generation", "spec", "status"),
    "resourcequotas": ("uid", "namespace", "name", "spec", "status"),
    "poddisruptionbudgets": ("uid", "namespace", "name", "spec", "status"),
    "events": ("namespace", "involved_uid", "reason", "spec"),
    "rolebindings": ("uid", "namespace", "name", "spec"),
    "clusterrolebindings": ("uid", "namespace", "name", "spec"),
    "service_ips": ("ip", "namespace", "name", "allocated_at", "released_at"),
    "qm_history": (
        "id", "at", "xid", "table_name", "kind", "namespace", "name", "uid", "op", "before",
        "after", "db_role", "application_name", "principal", "groups", "request_id",
        "client_addr", "user_agent", "reason", "verb", "subresource", "summary_count",
    ),
    # The hash chain (migration 0014): a history row's place in it, no content.
    "qm_history_links": ("seq", "id", "at"),
}  # fmt: skip

# Row-level security: table -> the column holding the namespace a row belongs to. Nodes are
# not filtered: every team's allocation report needs the nodes' zones and capacity, and a
# node holds no tenant's data (their history rows are filtered: namespace '').
RLS: dict[str, str] = {
    "namespaces": "name",
    "pods": "namespace",
    "deployments": "namespace",
    "replicasets": "namespace",
    "jobs": "namespace",
    "resourcequotas": "namespace",
    "poddisruptionbudgets": "namespace",
    "events": "namespace",
    "rolebindings": "namespace",
    "clusterrolebindings": "namespace",
    "service_ips": "namespace",
    "qm_history": "namespace",
}

ACCESS = f"""
CREATE SCHEMA reporting;
COMMENT ON SCHEMA reporting IS
  'Views for report writers and auditors (docs/reporting.md); members of {ROLE} read only '
  'these, limited by row-level security to the namespaces reporting.namespace_access gives them';
GRANT USAGE ON SCHEMA reporting TO {ROLE};

CREATE TABLE reporting.namespace_access (
  role_name name NOT NULL CHECK (role_name NOT IN ('{ROLE}', 'public')),
  namespace text NOT NULL,
  granted_at timestamptz NOT NULL DEFAULT now(),
  granted_by name NOT NULL DEFAULT current_user,
  PRIMARY KEY (role_name, namespace)
);
COMMENT ON TABLE reporting.namespace_access IS
  'Which namespaces a reporting role sees: a row applies to the role it names and to every '
  'role that inherits it. namespace is a namespace name, '''' for cluster-scoped objects '
  '(their history) or ''*'' for all. A member of {ROLE} with no row sees nothing. Kept by a '
  'DBA; a reader sees only the rows that apply to it.';
COMMENT ON COLUMN reporting.namespace_access.role_name IS
  'A login or group role (granted {ROLE}); never {ROLE} itself, which every reader inherits';
COMMENT ON COLUMN reporting.namespace_access.namespace IS
  'A namespace name, '''' (cluster-scoped objects) or ''*'' (every namespace)';
COMMENT ON COLUMN reporting.namespace_access.granted_at IS 'When the row was added';
COMMENT ON COLUMN reporting.namespace_access.granted_by IS 'The database role that added it';
ALTER TABLE reporting.namespace_access ENABLE ROW LEVEL SECURITY;
CREATE POLICY namespace_access_own ON reporting.namespace_access FOR SELECT TO {ROLE}
  USING (role_name IN (SELECT r.rolname FROM pg_catalog.pg_roles AS r
                        WHERE pg_catalog.pg_has_role(current_user, r.oid, 'USAGE')));
"""


# Who was given which namespaces is itself audited: the history's own triggers (migration 0014,
# through its helper, so they stay whatever that helper makes) on the mapping, resolved in the
# reporting schema. All of it once: the step commits before the per-table ones, and a retried
# migration must not create it twice.
ACCESS_ONCE = f"""
DO $once$
DECLARE
  path text := current_setting('search_path');
BEGIN
  IF to_regclass('reporting.namespace_access') IS NULL THEN
    EXECUTE $ddl${ACCESS}$ddl$;
    PERFORM set_config('search_path', 'reporting, public', true);
    EXECUTE $ddl${history_triggers("namespace_access", "", key="role_name")}$ddl$;
    PERFORM set_config('search_path', path, true);
  END IF;
END $once$
"""


def _visible(column: str) -> str:
    """Whether the current reporting role may see a row whose namespace is ``column``. Both
    subqueries are uncorrelated: PostgreSQL runs them once per statement, not per row."""
    return (
        "(EXISTS (SELECT 1 FROM reporting.namespace_access WHERE namespace = '*')"
        f" OR {column} IN (SELECT namespace FROM reporting.namespace_access))"
    )


def _policy(table: str, name: str, definition: str, comment: str) -> str:
    """``CREATE POLICY`` unless it exists (a migration retried after a lock timeout runs its
    committed steps again), with its comment."""
    return f"""
  IF NOT EXISTS (SELECT 1 FROM pg_policies WHERE schemaname = 'public'
                  AND tablename = '{table}' AND policyname = '{name}') THEN
    CREATE POLICY {name} ON {table} {definition};
  END IF;
  COMMENT ON POLICY {name} ON {table} IS {_quote(comment)};"""


def _policies(table: str, column: str) -> str:
    """One statement per table (one short ACCESS EXCLUSIVE lock, in a transaction of its own):
    the policies first, so no role is ever denied rows while RLS is on without them."""
    everyone = _policy(
        table, f"{table}_everyone",
        "AS PERMISSIVE FOR ALL TO PUBLIC USING (true) WITH CHECK (true)",
        f"Row-level security changes nothing for roles other than {ROLE}'s members",
    )  # fmt: skip
    reporting = _policy(
        table, f"{table}_reporting",
        f"AS RESTRICTIVE FOR SELECT TO {ROLE} USING ({_visible(column)})",
        "A reporting role sees the rows of the namespaces reporting.namespace_access gives it",
    )  # fmt: skip
    return f"""DO $do$ BEGIN{everyone}{reporting}
  ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
END $do$"""


LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _carries_value(image: str) -> str:
    """Whether a Secret's row image in the history could hold a value: a last-applied
    annotation (it repeats the data) or data that is not the history's digest string."""
    return (
        f"coalesce({image}->'annotations' ? '{LAST_APPLIED}', false)"
        f" OR coalesce(jsonb_typeof({image}->'spec'->'data') = 'object', false)"
        f" OR coalesce(jsonb_typeof({image}->'spec'->'stringData') = 'object', false)"
    )


# Defence in depth: whatever path wrote a Secret's history row (the triggers keep only a
# digest of its data; a row copied from the legacy audit trail kept its annotations), a
# reporting role never reads one that could carry a value.
SECRET_ROWS = "DO $do$ BEGIN" + _policy(
    "qm_history", "qm_history_reporting_secrets",
    f"AS RESTRICTIVE FOR SELECT TO {ROLE} USING (table_name IS DISTINCT FROM 'secrets'"
    f" OR NOT ({_carries_value('before')} OR {_carries_value('after')}))",
    "A reporting role never reads a Secret's history row that could carry its value",
) + "\nEND $do$"  # fmt: skip


# Whether a pod holds room on its node (the allocation triggers' rule, migration 0002).
HOLDS = "p.node_name IS NOT NULL AND coalesce(p.phase, '') NOT IN ('Succeeded', 'Failed')"
TEAM_LABEL = "quaymaster.io/team"


def _array(expr: str) -> str:
    return f"CASE WHEN jsonb_typeof({expr}) = 'array' THEN {expr} ELSE '[]'::jsonb END"


# Each view: (name, description, SELECT, {column: description}), columns in the SELECT's order.
View = tuple[str, str, str, dict[str, str]]

WORKLOADS: View = (
    "workloads",
    "Desired against actual for every Deployment, ReplicaSet and Job: what the spec asks, what "
    "the controllers last published, and the live pods counted from the pods table",
    f"""
WITH owned AS (
  SELECT o->>'uid' AS owner_uid,
         count(*) FILTER (WHERE p.deletion_timestamp IS NULL
                            AND coalesce(p.phase, '') NOT IN ('Succeeded', 'Failed')) AS live,
         count(*) FILTER (WHERE p.deletion_timestamp IS NULL AND p.ready) AS ready
    FROM pods AS p, jsonb_array_elements({_array("p.owner_references")}) AS o
   GROUP BY 1
), by_deployment AS (
  SELECT o->>'uid' AS owner_uid, sum(w.live) AS live, sum(w.ready) AS ready
    FROM replicasets AS rs
    CROSS JOIN LATERAL jsonb_array_elements({_array("rs.owner_references")}) AS o
    JOIN owned AS w ON w.owner_uid = rs.uid::text
   GROUP BY 1
), workloads AS (
  SELECT 'Deployment' AS kind, d.namespace, d.name, d.uid, d.creation_timestamp,
         d.generation, qm_int(d.status->>'observedGeneration') AS observed_generation,
         coalesce(qm_int(d.spec->>'replicas'), 1) AS desired,
         coalesce(qm_int(d.status->>'replicas'), 0) AS current,
         coalesce(qm_int(d.status->>'updatedReplicas'), 0) AS updated,
         coalesce(qm_int(d.status->>'readyReplicas'), 0) AS ready,
         coalesce(qm_int(d.status->>'availableReplicas'), 0) AS available,
         NULL::integer AS succeeded, NULL::integer AS failed,
         coalesce(b.live, 0) AS live_pods, coalesce(b.ready, 0) AS ready_pods
    FROM deployments AS d LEFT JOIN by_deployment AS b ON b.owner_uid = d.uid::text
  UNION ALL
  SELECT 'ReplicaSet', r.namespace, r.name, r.uid, r.creation_timestamp, r.generation,
         qm_int(r.status->>'observedGeneration'),
         coalesce(qm_int(r.spec->>'replicas'), 1),
         coalesce(qm_int(r.status->>'replicas'), 0),
         NULL, coalesce(qm_int(r.status->>'readyReplicas'), 0),
         coalesce(qm_int(r.status->>'availableReplicas'), 0), NULL, NULL,
         coalesce(w.live, 0), coalesce(w.ready, 0)
    FROM replicasets AS r LEFT JOIN owned AS w ON w.owner_uid = r.uid::text
  UNION ALL
  SELECT 'Job', j.namespace, j.name, j.uid, j.creation_timestamp, j.generation, NULL,
         coalesce(qm_int(j.spec->>'completions'), qm_int(j.spec->>'parallelism'), 1),
         coalesce(qm_int(j.status->>'active'), 0), NULL,
         coalesce(qm_int(j.status->>'ready'), 0), NULL,
         coalesce(qm_int(j.status->>'succeeded'), 0), coalesce(qm_int(j.status->>'failed'), 0),
         coalesce(w.live, 0), coalesce(w.ready, 0)
    FROM jobs AS j LEFT JOIN owned AS w ON w.owner_uid = j.uid::text
)
SELECT kind, namespace, name, uid, creation_timestamp AS created, generation,
       observed_generation, desired, current, updated, ready, available, succeeded, failed,
       live_pods, ready_pods,
       CASE WHEN kind = 'Job' THEN succeeded >= desired
            ELSE ready = desired AND current = desired
                 AND coalesce(observed_generation >= generation, false) END AS converged
  FROM workloads
""",
    {
        "kind": "Deployment, ReplicaSet or Job",
        "namespace": "The workload's namespace",
        "name": "The workload's name",
        "uid": "The workload's uid",
        "created": "metadata.creationTimestamp",
        "generation": "metadata.generation: moves on every spec change",
        "observed_generation": "status.observedGeneration: the generation the controller last "
        "acted on (NULL for Jobs)",
        "desired": "spec.replicas (default 1); for a Job spec.completions, else "
        "spec.parallelism, else 1",
        "current": "status.replicas; for a Job status.active",
        "updated": "status.updatedReplicas: pods of the current template (Deployments only)",
        "ready": "status.readyReplicas; for a Job status.ready",
        "available": "status.availableReplicas (NULL for Jobs)",
        "succeeded": "status.succeeded (Jobs only)",
        "failed": "status.failed (Jobs only)",
        "live_pods": "Pods owned (for a Deployment through its ReplicaSets) that are neither "
        "terminating nor finished, counted from the pods table",
        "ready_pods": "Of those pods, the ones whose Ready condition is True",
        "converged": "A Deployment or ReplicaSet: the controller saw the latest spec and ready "
        "= current = desired; a Job: succeeded reached desired",
    },
)

PENDING_PODS: View = (
    "pending_pods",
    "Every pod in phase Pending and not terminating, with why it waits and for how long",
    """
SELECT p.namespace, p.name, p.uid, p.priority, p.node_name, p.creation_timestamp AS created,
       extract(epoch FROM now() - p.creation_timestamp)::bigint AS age_seconds,
       CASE WHEN p.node_name IS NOT NULL THEN 'WaitingForNode'
            ELSE coalesce(c->>'reason', 'NotYetScheduled') END AS reason,
       c->>'message' AS message
  FROM pods AS p
  LEFT JOIN LATERAL jsonb_path_query_first(p.status,
    '$.conditions[*] ? (@.type == "PodScheduled" && @.status == "False")') AS c ON true
 WHERE coalesce(p.phase, 'Pending') = 'Pending' AND p.deletion_timestamp IS NULL
""",
    {
        "namespace": "The pod's namespace",
        "name": "The pod's name",
        "uid": "The pod's uid",
        "priority": "spec.priority",
        "node_name": "spec.nodeName: set once the pod is bound",
        "created": "metadata.creationTimestamp",
        "age_seconds": "Seconds since the pod was created, at the time of the query",
        "reason": "Unschedulable (or the reason of another PodScheduled=False condition) when the "
        "scheduler found no node; NotYetScheduled when it has not tried yet; WaitingForNode "
        "when bound and the node's agent has not started it",
        "message": "The PodScheduled=False condition's message: how many nodes refused and why",
    },
)

PENDING_BY_REASON: View = (
    "pending_pods_by_reason",
    "Pending pods counted by namespace and reason, with their age distribution",
    """
SELECT namespace, reason, count(*) AS pods, max(age_seconds) AS oldest_seconds,
       percentile_disc(0.5) WITHIN GROUP (ORDER BY age_seconds) AS median_seconds,
       count(*) FILTER (WHERE age_seconds < 60) AS under_1m,
       count(*) FILTER (WHERE age_seconds >= 60 AND age_seconds < 600) AS from_1m_to_10m,
       count(*) FILTER (WHERE age_seconds >= 600 AND age_seconds < 3600) AS from_10m_to_1h,
       count(*) FILTER (WHERE age_seconds >= 3600) AS over_1h
  FROM reporting.pending_pods
 GROUP BY namespace, reason
""",
    {
        "namespace": "The pods' namespace",
        "reason": "As in reporting.pending_pods",
        "pods": "How many pending pods",
        "oldest_seconds": "The oldest one's age in seconds",
        "median_seconds": "The median age in seconds",
        "under_1m": "Pods pending for less than a minute",
        "from_1m_to_10m": "Pods pending for one to ten minutes",
        "from_10m_to_1h": "Pods pending for ten minutes to an hour",
        "over_1h": "Pods pending for an hour or more",
    },
)

ALLOCATION: View = (
    "allocation",
    "Requests of the pods holding room on nodes (bound, not finished; terminating ones still "
    "hold it) by namespace, team, zone and node; sum over any of these columns. Measured usage "
    "is not here: it lives in Redis (ADR 0020), see docs/reporting.md",
    f"""
SELECT p.namespace, coalesce(ns.labels->>'{TEAM_LABEL}', p.namespace) AS team,
       n.zone, p.node_name, n.machine_class,
       count(*) AS pods,
       count(*) FILTER (WHERE p.priority >= 1000) AS production_pods,
       sum(p.req_cpu_milli)::bigint AS cpu_milli,
       sum(p.req_memory_bytes)::bigint AS memory_bytes,
       sum(p.req_gpu)::bigint AS gpu
  FROM pods AS p
  LEFT JOIN namespaces AS ns ON ns.name = p.namespace
  LEFT JOIN nodes AS n ON n.namespace = '' AND n.name = p.node_name
 WHERE {HOLDS}
 GROUP BY 1, 2, 3, 4, 5
""",
    {
        "namespace": "The pods' namespace",
        "team": f"The namespace's {TEAM_LABEL} label, else the namespace's name",
        "zone": "The node's topology.kubernetes.io/zone label (NULL: no such node, or no label)",
        "node_name": "The node the pods are bound to",
        "machine_class": "The node's quaymaster.io/machine-class label",
        "pods": "Pods holding room on the node",
        "production_pods": "Of those, pods of priority 1000 or more (the default production "
        "threshold, ADR 0021)",
        "cpu_milli": "Their summed cpu requests in millicores (pods.req_cpu_milli)",
        "memory_bytes": "Their summed memory requests in bytes",
        "gpu": "Their summed nvidia.com/gpu requests",
    },
)

NODE_CAPACITY: View = (
    "node_capacity",
    "Every node's allocatable capacity against the requests of the pods the reader may see "
    "holding room on it, and the batch ceiling the reclaim controller derives from measured "
    "usage",
    f"""
WITH held AS (
  SELECT p.node_name, count(*) AS pods, sum(p.req_cpu_milli)::bigint AS cpu_milli,
         sum(p.req_memory_bytes)::bigint AS memory_bytes, sum(p.req_gpu)::bigint AS gpu
    FROM pods AS p WHERE {HOLDS} GROUP BY 1
)
SELECT n.name AS node, n.zone, n.machine_class, n.ready, n.unschedulable,
       n.alloc_cpu_milli, n.alloc_memory_bytes, n.alloc_gpu,
       coalesce(h.pods, 0) AS pods, coalesce(h.cpu_milli, 0) AS requested_cpu_milli,
       coalesce(h.memory_bytes, 0) AS requested_memory_bytes, coalesce(h.gpu, 0) AS requested_gpu,
       round(coalesce(h.cpu_milli, 0)::numeric / nullif(n.alloc_cpu_milli, 0), 4) AS cpu_fraction,
       round(coalesce(h.memory_bytes, 0)::numeric / nullif(n.alloc_memory_bytes, 0), 4)
         AS memory_fraction,
       n.batch_cpu_milli, n.batch_memory_bytes
  FROM nodes AS n LEFT JOIN held AS h ON h.node_name = n.name
 WHERE n.namespace = ''
""",
    {
        "node": "The node's name",
        "zone": "topology.kubernetes.io/zone label",
        "machine_class": "quaymaster.io/machine-class label",
        "ready": "The node's Ready condition is True",
        "unschedulable": "spec.unschedulable: cordoned (by hand or by a drain)",
        "alloc_cpu_milli": "status.allocatable.cpu in millicores",
        "alloc_memory_bytes": "status.allocatable.memory in bytes",
        "alloc_gpu": "status.allocatable nvidia.com/gpu",
        "pods": "Pods the reader may see holding room on the node (a team login: its own)",
        "requested_cpu_milli": "Their summed cpu requests in millicores",
        "requested_memory_bytes": "Their summed memory requests in bytes",
        "requested_gpu": "Their summed nvidia.com/gpu requests",
        "cpu_fraction": "requested_cpu_milli / alloc_cpu_milli",
        "memory_fraction": "requested_memory_bytes / alloc_memory_bytes",
        "batch_cpu_milli": "status.batchAllocatable.cpu: the ceiling for batch pods the reclaim "
        "controller sets from production's measured usage over the last hour (ADR 0021); NULL: "
        "no fresh usage, equal to allocatable",
        "batch_memory_bytes": "status.batchAllocatable.memory, likewise",
    },
)

# Lookups of one object's history name its table, namespace and name (the history's
# qm_history_object index) as well as its uid, which no index covers.
# A history row of a change to the row, with the writer's identity (shared by several views).
WHO = {
    "principal": "The application principal that made the change (NULL: no application "
    "context, e.g. a DBA's SQL)",
    "reason": "The reason the writer gave (X-Reason, --reason, a controller's plan step)",
    "request_id": "The request id (an API request, a controller's reconcile task, a "
    "scheduling cycle)",
    "db_role": "The database role of the session that wrote it",
}

ROLLOUT_HISTORY: View = (
    "rollout_history",
    "Each Deployment's revisions, one row per ReplicaSet it owns, newest revision first; "
    "who changed the pod template that a revision's ReplicaSet was created for, and why",
    """
SELECT d.namespace, d.name AS deployment, d.uid AS deployment_uid,
       qm_int(rs.annotations->>'deployment.kubernetes.io/revision') AS revision,
       rs.name AS replicaset, rs.creation_timestamp AS created,
       rs.annotations->>'kubernetes.io/change-cause' AS change_cause,
       coalesce(qm_int(rs.spec->>'replicas'), 0) AS replicas,
       coalesce(qm_int(rs.status->>'readyReplicas'), 0) AS ready_replicas,
       qm_int(rs.annotations->>'deployment.kubernetes.io/revision')
         = max(qm_int(rs.annotations->>'deployment.kubernetes.io/revision'))
             OVER (PARTITION BY d.uid) AS current,
       h.at AS changed_at, h.principal AS changed_by, h.reason, h.request_id, h.db_role
  FROM deployments AS d
  JOIN replicasets AS rs ON rs.namespace = d.namespace
   AND rs.owner_references @> jsonb_build_array(jsonb_build_object('uid', d.uid::text))
  LEFT JOIN LATERAL (
    SELECT x.at, x.principal, x.reason, x.request_id, x.db_role FROM qm_history AS x
     WHERE x.table_name = 'deployments' AND x.namespace = d.namespace AND x.name = d.name
       AND x.uid = d.uid AND x.at <= rs.creation_timestamp
       AND (x.op = 'insert' OR (x.op = 'update' AND x.after ? 'spec'
            AND x.after->'spec'->'template' IS DISTINCT FROM x.before->'spec'->'template'))
     ORDER BY x.at DESC, x.id DESC LIMIT 1) AS h ON true
""",
    {
        "namespace": "The Deployment's namespace",
        "deployment": "The Deployment's name",
        "deployment_uid": "The Deployment's uid",
        "revision": "The ReplicaSet's deployment.kubernetes.io/revision annotation",
        "replicaset": "The ReplicaSet's name",
        "created": "When the ReplicaSet was created",
        "change_cause": "The kubernetes.io/change-cause annotation, if any",
        "replicas": "The ReplicaSet's spec.replicas now",
        "ready_replicas": "Its status.readyReplicas now",
        "current": "The highest revision: the Deployment's current template",
        "changed_at": "When the template change this ReplicaSet was created for was written "
        "(the latest creation or template change of the Deployment before the ReplicaSet; a "
        "rollback reuses an old ReplicaSet, so see reporting.rollout_changes for it)",
        "changed_by": WHO["principal"],
        "reason": WHO["reason"],
        "request_id": WHO["request_id"],
        "db_role": WHO["db_role"],
    },
)

ROLLOUT_CHANGES: View = (
    "rollout_changes",
    "Every creation, pod-template change (a rollout or a rollback), scale and deletion of a "
    "Deployment, from the history, with who and why",
    """
SELECT h.at, h.namespace, h.name AS deployment, h.uid AS deployment_uid,
       CASE h.op WHEN 'insert' THEN 'created' WHEN 'delete' THEN 'deleted'
            WHEN 'update' THEN CASE
              WHEN h.after->'spec'->'template' IS DISTINCT FROM h.before->'spec'->'template'
                THEN 'template'
              ELSE 'scale' END END AS change,
       h.before->'spec'->'replicas' AS replicas_before,
       h.after->'spec'->'replicas' AS replicas_after,
       h.principal, h.reason, h.request_id, h.verb, h.subresource, h.db_role, h.id AS history_id
  FROM qm_history AS h
 WHERE h.table_name = 'deployments' AND h.op IN ('insert', 'delete', 'update')
   AND (h.op <> 'update' OR (h.after ? 'spec' AND (
        h.after->'spec'->'template' IS DISTINCT FROM h.before->'spec'->'template'
        OR h.after->'spec'->'replicas' IS DISTINCT FROM h.before->'spec'->'replicas')))
""",
    {
        "at": "When the change was written (statement time)",
        "namespace": "The Deployment's namespace",
        "deployment": "The Deployment's name",
        "deployment_uid": "The Deployment's uid",
        "change": "created, template (a rollout, or a rollback to an earlier template), scale "
        "or deleted",
        "replicas_before": "spec.replicas before a change of the spec",
        "replicas_after": "spec.replicas after it",
        "principal": WHO["principal"],
        "reason": WHO["reason"],
        "request_id": WHO["request_id"],
        "verb": "The API verb (update, patch, ...)",
        "subresource": "The subresource written (scale, ...), if any",
        "db_role": WHO["db_role"],
        "history_id": "qm_history.id of the row (for reporting.changes)",
    },
)

NODE_FAILURES: View = (
    "node_failures",
    "Each time a node's Ready condition stopped being True, from the history, and when it came "
    "back (NULL: not yet)",
    """
SELECT h.name AS node, h.uid AS node_uid, h.at AS failed_at,
       jsonb_path_query_first(h.after->'status', '$.conditions[*] ? (@.type == "Ready")')
         ->>'status' AS ready_status,
       jsonb_path_query_first(h.after->'status', '$.conditions[*] ? (@.type == "Ready")')
         ->>'reason' AS condition_reason,
       r.at AS recovered_at,
       extract(epoch FROM coalesce(r.at, now()) - h.at)::bigint AS down_seconds,
       h.principal, h.reason, h.db_role
  FROM qm_history AS h
  LEFT JOIN LATERAL (
    SELECT x.at FROM qm_history AS x
     WHERE x.table_name = 'nodes' AND x.namespace = '' AND x.name = h.name AND x.uid = h.uid
       AND x.op = 'update' AND x.at >= h.at AND (x.at > h.at OR x.id > h.id)
       AND x.after ? 'status'
       AND qm_condition_true(x.after->'status', 'Ready')
     ORDER BY x.at, x.id LIMIT 1) AS r ON true
 WHERE h.table_name = 'nodes' AND h.op = 'update' AND h.after ? 'status'
   AND qm_condition_true(h.before->'status', 'Ready')
   AND NOT qm_condition_true(h.after->'status', 'Ready')
""",
    {
        "node": "The node's name",
        "node_uid": "The node's uid",
        "failed_at": "When the write that turned Ready from True to False or Unknown was made",
        "ready_status": "The Ready condition's status after it: False (the agent said so) or "
        "Unknown (the node lifecycle controller: its lease was not renewed)",
        "condition_reason": "The Ready condition's reason (NodeStatusUnknown, ...)",
        "recovered_at": "The next write that made Ready True again",
        "down_seconds": "recovered_at (or now) minus failed_at, in seconds",
        "principal": WHO["principal"],
        "reason": WHO["reason"],
        "db_role": WHO["db_role"],
    },
)

# A pod's DisruptionTarget=True condition: the platform took it (eviction, drain, preemption,
# a silent node, reclaim), with the taker in its reason.
DISRUPTED = '$.conditions[*] ? (@.type == "DisruptionTarget" && @.status == "True")'
DISRUPTION = "$.status" + DISRUPTED[1:]

EVICTIONS: View = (
    "evictions",
    "Pods the platform took away (the eviction API, a drain, preemption, a silent node, "
    "reclaim): a pod whose DisruptionTarget condition shows in its history or on its row, "
    "with who started its deletion and why",
    f"""
WITH taken AS (
  SELECT DISTINCT ON (h.uid) h.uid, h.namespace, h.name,
         coalesce(h.after->>'node_name', h.before->>'node_name') AS node,
         jsonb_path_query_first(coalesce(h.after, h.before), '{DISRUPTION}') AS cond
    FROM qm_history AS h
   WHERE h.table_name = 'pods'
     AND ((h.op = 'update' AND jsonb_path_exists(h.after, '{DISRUPTION}'))
          OR (h.op = 'delete' AND jsonb_path_exists(h.before, '{DISRUPTION}')))
   ORDER BY h.uid, h.at, h.id
), candidates AS (
  SELECT t.uid, t.namespace, t.name, coalesce(t.node, p.node_name) AS node, t.cond
    FROM taken AS t LEFT JOIN pods AS p ON p.uid = t.uid
  UNION ALL
  SELECT p.uid, p.namespace, p.name, p.node_name, jsonb_path_query_first(p.status, '{DISRUPTED}')
    FROM pods AS p
   WHERE jsonb_path_exists(p.status, '{DISRUPTED}')
     AND NOT EXISTS (SELECT 1 FROM taken AS t WHERE t.uid = p.uid)
)
SELECT c.namespace, c.name AS pod, c.uid AS pod_uid, w.at AS evicted_at, c.node,
       c.cond->>'reason' AS cause, c.cond->>'message' AS message,
       w.principal, w.reason, w.request_id, w.db_role
  FROM candidates AS c
  LEFT JOIN LATERAL (
    SELECT x.at, x.principal, x.reason, x.request_id, x.db_role FROM qm_history AS x
     WHERE x.table_name = 'pods' AND x.namespace = c.namespace AND x.name = c.name
       AND x.uid = c.uid
       AND (x.op = 'delete' OR (x.op = 'update' AND x.after->>'deletion_timestamp' IS NOT NULL
                                AND x.before->>'deletion_timestamp' IS NULL))
     ORDER BY x.at, x.id LIMIT 1) AS w ON true
""",
    {
        "namespace": "The pod's namespace",
        "pod": "The pod's name",
        "pod_uid": "The pod's uid",
        "evicted_at": "When its deletion started (deletionTimestamp set, or the row deleted); "
        "NULL when the history holds neither (written before it, or archived)",
        "node": "The node the pod was on",
        "cause": "The condition's reason: EvictionByEvictionAPI (the eviction API and drains), "
        "PreemptionByScheduler, DeletionByNodeLifecycle (a silent node), EvictionByReclaim",
        "message": "The condition's message (a drain names its node)",
        "principal": "Who started the deletion: " + WHO["principal"],
        "reason": WHO["reason"],
        "request_id": WHO["request_id"],
        "db_role": WHO["db_role"],
    },
)

DRAINS: View = (
    "drains",
    "Who drained which node and why: one row per drain request (or a cordon made any other "
    "way), with the cordon and the pods it evicted (their DisruptionTarget message names the "
    "node)",
    """
WITH steps AS (
  SELECT h.request_id, h.name AS node, h.at, true AS cordon, h.principal, h.reason, h.db_role
    FROM qm_history AS h
   WHERE h.table_name = 'nodes' AND h.op = 'update'
     AND h.after->'spec'->'unschedulable' = 'true'::jsonb
     AND h.before->'spec'->'unschedulable' IS DISTINCT FROM 'true'::jsonb
  UNION ALL
  SELECT e.request_id, substring(e.message FROM '^Evicted while draining node (.*)$'), e.evicted_at,
         false, e.principal, e.reason, e.db_role
    FROM reporting.evictions AS e
   WHERE e.message LIKE 'Evicted while draining node %'
)
SELECT node, request_id, min(at) AS started_at, max(at) AS last_at, bool_or(cordon) AS cordoned,
       count(*) FILTER (WHERE NOT cordon) AS pods_evicted,
       (array_agg(principal ORDER BY at) FILTER (WHERE principal IS NOT NULL))[1] AS principal,
       (array_agg(reason ORDER BY cordon DESC, at) FILTER (WHERE reason IS NOT NULL))[1]
         AS reason,
       (array_agg(db_role ORDER BY at))[1] AS db_role
  FROM steps
 GROUP BY node, request_id, CASE WHEN request_id IS NULL THEN at END
""",
    {
        "node": "The node drained (or cordoned)",
        "request_id": "The drain's request id: its cordon and its evictions share it (NULL: "
        "a cordon without one, e.g. by SQL)",
        "started_at": "The first step (the cordon, unless the node was already cordoned)",
        "last_at": "The last step seen",
        "cordoned": "This request cordoned the node (false: it was cordoned before)",
        "pods_evicted": "Pods this request evicted, as the evictions view sees them (a team "
        "login: its own)",
        "principal": WHO["principal"],
        "reason": "The reason given for the cordon (else for the evictions)",
        "db_role": WHO["db_role"],
    },
)

QUOTA_USAGE: View = (
    "quota_usage",
    "Every ResourceQuota's limits against its usage as the quota controller last published "
    "it, one row per resource",
    """
SELECT q.namespace, q.name AS quota, h.key AS resource, h.value #>> '{}' AS hard,
       q.status->'used'->>h.key AS used,
       qm_quantity(h.value #>> '{}') AS hard_amount,
       qm_quantity(q.status->'used'->>h.key) AS used_amount,
       round(qm_quantity(q.status->'used'->>h.key)
             / nullif(qm_quantity(h.value #>> '{}'), 0), 4) AS used_fraction
  FROM resourcequotas AS q,
       jsonb_each(CASE WHEN jsonb_typeof(q.spec->'hard') = 'object'
                       THEN q.spec->'hard' ELSE '{}'::jsonb END) AS h
""",
    {
        "namespace": "The quota's namespace",
        "quota": "The ResourceQuota's name",
        "resource": "The resource named in spec.hard (requests.cpu, pods, ...)",
        "hard": "spec.hard for it, as written",
        "used": "status.used for it, as the quota controller last published it",
        "hard_amount": "hard as a number (cpu in cores, memory in bytes)",
        "used_amount": "used as a number",
        "used_fraction": "used_amount / hard_amount",
    },
)

BUDGET_BLOCKS: View = (
    "disruption_budget_blocks",
    "Every PodDisruptionBudget with what it allows now and the evictions it refused (from "
    "their EvictionBlocked Events, kept for the Event retention, an hour by default)",
    """
SELECT b.namespace, b.name AS budget, b.uid AS budget_uid,
       b.spec->'minAvailable' AS min_available, b.spec->'maxUnavailable' AS max_unavailable,
       qm_int(b.status->>'expectedPods') AS expected_pods,
       qm_int(b.status->>'currentHealthy') AS current_healthy,
       qm_int(b.status->>'desiredHealthy') AS desired_healthy,
       qm_int(b.status->>'disruptionsAllowed') AS disruptions_allowed,
       coalesce(qm_int(b.status->>'disruptionsAllowed'), 0) = 0 AS blocking,
       coalesce(e.refusals, 0) AS refused_evictions, e.last_refused, e.message AS last_message
  FROM poddisruptionbudgets AS b
  LEFT JOIN LATERAL (
    SELECT sum(coalesce(qm_int(v.spec->>'count'), 1))::bigint AS refusals,
           max(v.spec->>'lastTimestamp') AS last_refused,
           (array_agg(v.spec->>'message' ORDER BY v.spec->>'lastTimestamp' DESC))[1] AS message
      FROM events AS v
     WHERE v.namespace = b.namespace AND v.involved_uid = b.uid::text
       AND v.reason = 'EvictionBlocked') AS e ON true
""",
    {
        "namespace": "The budget's namespace",
        "budget": "The PodDisruptionBudget's name",
        "budget_uid": "Its uid",
        "min_available": "spec.minAvailable as written (a number or a percentage)",
        "max_unavailable": "spec.maxUnavailable as written",
        "expected_pods": "status.expectedPods",
        "current_healthy": "status.currentHealthy",
        "desired_healthy": "status.desiredHealthy",
        "disruptions_allowed": "status.disruptionsAllowed",
        "blocking": "No disruption allowed now: an eviction of one of its pods is refused",
        "refused_evictions": "Evictions refused, counted by the EvictionBlocked Event still kept",
        "last_refused": "When the last refusal happened (the Event's lastTimestamp)",
        "last_message": "The last refusal's message",
    },
)

CHANGES: View = (
    "changes",
    "Who changed what: every insert, update and delete kept in the history (qm_history), by "
    "the API, a controller, the scheduler or SQL typed by a DBA; summarised writes are in "
    "reporting.change_summaries",
    """
SELECT h.id, h.at, h.kind, h.table_name, h.namespace, h.name, h.uid, h.op,
       CASE WHEN h.op = 'update'
            THEN ARRAY(SELECT jsonb_object_keys(coalesce(h.after, '{}'::jsonb)) ORDER BY 1)
       END AS changed_fields,
       h.principal, h.groups, h.reason, h.request_id, h.verb, h.subresource, h.client_addr,
       h.user_agent, h.db_role, h.application_name, h.before, h.after, h.xid::text AS xid,
       l.seq, l.seq IS NOT NULL AS sealed
  FROM qm_history AS h
  LEFT JOIN qm_history_links AS l ON l.id = h.id AND l.at = h.at
 WHERE h.op <> 'summary'
""",
    {
        "id": "qm_history.id",
        "at": "When the statement that made the change started",
        "kind": "The API kind (NULL for an internal table)",
        "table_name": "The table written",
        "namespace": "The object's namespace ('' for a cluster-scoped object)",
        "name": "The object's name",
        "uid": "The object's uid",
        "op": "insert, update or delete",
        "changed_fields": "For an update, the top-level columns it changed",
        "principal": WHO["principal"],
        "groups": "The principal's groups",
        "reason": WHO["reason"],
        "request_id": WHO["request_id"],
        "verb": "The API verb (create, update, patch, delete, evict, drain, bind, ...)",
        "subresource": "The subresource written (status, scale, eviction, binding, ...)",
        "client_addr": "The API client's address",
        "user_agent": "The API client's User-Agent",
        "db_role": WHO["db_role"],
        "application_name": "The session's application_name (qm-api, qm-workers, psql, ...)",
        "before": "delete: the whole row; update: the old values of the columns it changed",
        "after": "insert: the whole row; update: the new values of the columns it changed",
        "xid": "The writing transaction's id",
        "seq": "The row's place in the hash chain (NULL until sealed)",
        "sealed": "The row is in the hash chain (qm audit verify checks it)",
    },
)

CHANGE_SUMMARIES: View = (
    "change_summaries",
    "High-churn writes (lease renewals, status-only writes that change no milestone, Events, "
    "heartbeats) counted per hour instead of kept row by row",
    """
SELECT h.at, h.table_name, h.kind, h.namespace, h.summary_count AS writes, h.after AS detail,
       l.seq, l.seq IS NOT NULL AS sealed
  FROM qm_history AS h
  LEFT JOIN qm_history_links AS l ON l.id = h.id AND l.at = h.at
 WHERE h.op = 'summary'
""",
    {
        "at": "The hour the count belongs to (as the summary row records it)",
        "table_name": "The table written",
        "kind": "The API kind",
        "namespace": "The namespace counted ('' for cluster-scoped objects)",
        "writes": "How many writes were counted",
        "detail": "What the summary row records besides the count, if anything",
        "seq": "The row's place in the hash chain",
        "sealed": "The row is in the hash chain",
    },
)

ROLE_BINDINGS: View = (
    "role_bindings",
    "Who may do what: one row per subject of every RoleBinding and ClusterRoleBinding",
    f"""
SELECT b.kind, b.namespace, b.name AS binding, b.spec->'roleRef'->>'kind' AS role_kind,
       b.spec->'roleRef'->>'name' AS role_name, s->>'kind' AS subject_kind,
       s->>'name' AS subject_name, s->>'namespace' AS subject_namespace
  FROM (SELECT 'RoleBinding' AS kind, namespace, name, spec FROM rolebindings
        UNION ALL
        SELECT 'ClusterRoleBinding', namespace, name, spec FROM clusterrolebindings) AS b
  CROSS JOIN LATERAL jsonb_array_elements({_array("b.spec->'subjects'")}) AS s
""",
    {
        "kind": "RoleBinding or ClusterRoleBinding",
        "namespace": "The RoleBinding's namespace ('' for a ClusterRoleBinding)",
        "binding": "The binding's name",
        "role_kind": "roleRef.kind: Role or ClusterRole",
        "role_name": "roleRef.name",
        "subject_kind": "User, Group or ServiceAccount",
        "subject_name": "The subject's name",
        "subject_namespace": "A ServiceAccount subject's namespace",
    },
)

SERVICE_IPS: View = (
    "service_ips",
    "Service virtual IPs: held by a Service, or in quarantine since released",
    """
SELECT host(i.ip) AS ip, i.namespace, i.name AS service, i.allocated_at, i.released_at,
       i.released_at IS NULL AS held
  FROM service_ips AS i
""",
    {
        "ip": "The address",
        "namespace": "The holder's namespace (the last holder's, in quarantine)",
        "service": "The Service's name",
        "allocated_at": "When it was allocated",
        "released_at": "When it was released (NULL while held)",
        "held": "Held by its Service now",
    },
)

VIEWS: tuple[View, ...] = (
    WORKLOADS, PENDING_PODS, PENDING_BY_REASON, ALLOCATION, NODE_CAPACITY, ROLLOUT_HISTORY,
    ROLLOUT_CHANGES, NODE_FAILURES, EVICTIONS, DRAINS, QUOTA_USAGE, BUDGET_BLOCKS, CHANGES,
    CHANGE_SUMMARIES, ROLE_BINDINGS, SERVICE_IPS,
)  # fmt: skip


def _view(view: View) -> str:
    name, comment, select, columns = view
    cols = ", ".join(columns)
    out = (
        f"CREATE OR REPLACE VIEW reporting.{name} ({cols})"
        f" WITH (security_invoker = true) AS{select};\n"
        f"COMMENT ON VIEW reporting.{name} IS {_quote(comment)};\n"
    )
    for col, text in columns.items():
        out += f"COMMENT ON COLUMN reporting.{name}.{col} IS {_quote(text)};\n"
    return out


# ``qm_app`` skips row-level security entirely (its plans stay as they were), when the
# migrating role may say so (a superuser; a managed database may refuse: then the ``true``
# policies still let it see and write every row). The downgrade leaves it: roles belong to the
# whole server, where other databases may be at this revision, and without policies it
# changes nothing.
APP_BYPASSES = """
DO $$ BEGIN
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'qm_app')
     AND (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    ALTER ROLE qm_app BYPASSRLS;
  END IF;
END $$;
"""


def upgrade() -> None:
    # Everything here is idempotent: the per-table steps commit on their own, and a migration
    # retried after a lock timeout runs them again.
    op.execute(APP_BYPASSES)
    op.execute(f"REVOKE ALL ON {', '.join(OLD_GRANTS)} FROM {ROLE}")
    op.execute(ACCESS_ONCE)
    online.each_in_own_transaction([SECRET_ROWS, *(_policies(t, c) for t, c in RLS.items())])
    for table, cols in COLUMNS.items():
        op.execute(f"GRANT SELECT ({', '.join(cols)}) ON {table} TO {ROLE}")
    for view in VIEWS:
        op.execute(_view(view))
    op.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA reporting TO {ROLE}")


def downgrade() -> None:
    op.execute("DROP SCHEMA IF EXISTS reporting CASCADE")
    op.execute("DROP POLICY IF EXISTS qm_history_reporting_secrets ON qm_history")
    for table in RLS:
        op.execute(
            f"DROP POLICY IF EXISTS {table}_reporting ON {table};\n"
            f"DROP POLICY IF EXISTS {table}_everyone ON {table};\n"
            f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY;"
        )
    for table, cols in COLUMNS.items():
        op.execute(f"REVOKE SELECT ({', '.join(cols)}) ON {table} FROM {ROLE}")
    op.execute(f"GRANT SELECT ON {', '.join(OLD_GRANTS)} TO {ROLE}")
