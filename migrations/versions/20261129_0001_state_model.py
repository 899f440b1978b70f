"""State model: one typed table per kind, the revision log, tokens and the audit trail.

Revision ID: 0001
Revises:
Create Date: 2026-11-29

Every kind table has the same metadata columns, ``spec`` and ``status`` as JSONB, and the
fields that scheduling, selectors and reports filter on promoted to generated, indexed columns,
so they stay true even when a DBA edits the JSONB by hand. ``row_version`` and ``generation``
are maintained by a trigger for the same reason.
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

KIND_TABLES = (
    "namespaces", "nodes", "leases", "pods", "deployments", "replicasets", "jobs", "cronjobs",
    "services", "endpointslices", "priorityclasses", "resourcequotas", "poddisruptionbudgets",
    "configmaps", "secrets", "events",
)

# Tables rewritten most often get room on each page for HOT updates.
HOT_TABLES = {"pods": 75, "nodes": 75, "leases": 70, "events": 85, "endpointslices": 80}

# Promoted columns: table -> [(column, type, generation expression, indexed)].
PROMOTED: dict[str, list[tuple[str, str, str, bool]]] = {
    "namespaces": [("phase", "text", "status->>'phase'", False)],
    "nodes": [
        ("zone", "text", "labels->>'topology.kubernetes.io/zone'", True),
        ("machine_class", "text", "labels->>'quaymaster.io/machine-class'", True),
        ("unschedulable", "boolean", "coalesce(spec->'unschedulable' = 'true'::jsonb, false)", False),
        ("ready", "boolean", "qm_condition_true(status, 'Ready')", True),
        ("alloc_cpu_milli", "bigint", "qm_cpu_milli(status->'allocatable'->>'cpu')", False),
        ("alloc_memory_bytes", "bigint", "qm_bytes(status->'allocatable'->>'memory')", False),
        ("alloc_gpu", "bigint", "qm_bytes(status->'allocatable'->>'nvidia.com/gpu')", False),
    ],
    "leases": [("holder_identity", "text", "spec->>'holderIdentity'", False)],
    "pods": [
        ("node_name", "text", "spec->>'nodeName'", True),
        ("phase", "text", "status->>'phase'", True),
        ("priority", "integer", "qm_int(spec->>'priority')", True),
        ("scheduler_name", "text", "spec->>'schedulerName'", False),
        ("ready", "boolean", "qm_condition_true(status, 'Ready')", False),
    ],
    "endpointslices": [
        ("service_name", "text", "labels->>'kubernetes.io/service-name'", True),
    ],
    "secrets": [("secret_type", "text", "spec->>'type'", False)],
    "events": [
        ("involved_kind", "text", "spec->'involvedObject'->>'kind'", False),
        ("involved_name", "text", "spec->'involvedObject'->>'name'", True),
        ("involved_uid", "text", "spec->'involvedObject'->>'uid'", True),
        ("reason", "text", "spec->>'reason'", False),
        ("event_type", "text", "spec->>'type'", False),
    ],
}

FUNCTIONS = r"""
CREATE FUNCTION qm_int(v text) RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN v ~ '^-?[0-9]{1,9}$' THEN v::integer END
$$;

-- Kubernetes quantity -> exact numeric (NULL when not a quantity). Plain SQL, no exception
-- block: this runs inside hot writes and must not open a subtransaction.
CREATE FUNCTION qm_quantity(v text) RETURNS numeric LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT m[1]::numeric * CASE m[2]
    WHEN 'Ki' THEN 1024::numeric WHEN 'Mi' THEN 1048576::numeric
    WHEN 'Gi' THEN 1073741824::numeric WHEN 'Ti' THEN 1099511627776::numeric
    WHEN 'Pi' THEN 1125899906842624::numeric WHEN 'Ei' THEN 1152921504606846976::numeric
    WHEN 'n' THEN 0.000000001 WHEN 'u' THEN 0.000001 WHEN 'm' THEN 0.001
    WHEN 'k' THEN 1e3 WHEN 'M' THEN 1e6 WHEN 'G' THEN 1e9 WHEN 'T' THEN 1e12
    WHEN 'P' THEN 1e15 WHEN 'E' THEN 1e18 ELSE 1 END
  FROM regexp_match(v, '^([+]?[0-9]{0,30}\.?[0-9]{1,30}(?:[eE][+-]?[0-9]{1,2})?)'
                       '(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$') AS m
$$;

CREATE FUNCTION qm_cpu_milli(v text) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ceil(qm_quantity(v) * 1000)::bigint
$$;

CREATE FUNCTION qm_bytes(v text) RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ceil(qm_quantity(v))::bigint
$$;

CREATE FUNCTION qm_condition_true(status jsonb, cond text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(jsonb_path_exists(status, '$.conditions[*] ? (@.type == $t && @.status == "True")',
                                    jsonb_build_object('t', cond)), false)
$$;

-- Sum of a resource's requests over a pod's containers (milli-units for cpu, units otherwise).
CREATE FUNCTION qm_pod_request(spec jsonb, resource text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT coalesce(sum(CASE WHEN resource = 'cpu'
                           THEN qm_cpu_milli(c->'resources'->'requests'->>resource)
                           ELSE qm_bytes(c->'resources'->'requests'->>resource) END), 0)::bigint
  FROM jsonb_array_elements(CASE WHEN jsonb_typeof(spec->'containers') = 'array'
                                 THEN spec->'containers' ELSE '[]'::jsonb END) AS c
$$;

CREATE SEQUENCE qm_row_version AS bigint CACHE 1;

-- Every write, through the API or by hand, gets a new row version; generation moves only
-- when spec changes.
CREATE FUNCTION qm_stamp_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.row_version := nextval('qm_row_version');
  IF TG_OP = 'UPDATE' THEN
    NEW.uid := OLD.uid;
    NEW.creation_timestamp := OLD.creation_timestamp;
    IF NEW.spec IS DISTINCT FROM OLD.spec AND NEW.generation = OLD.generation THEN
      NEW.generation := OLD.generation + 1;
    END IF;
  END IF;
  RETURN NEW;
END
$$;

-- A pod's summed requests are recomputed only when its spec changes (a generated column would
-- recompute them on every status write, which tripled the cost of those writes).
CREATE FUNCTION qm_pod_requests() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' OR NEW.spec IS DISTINCT FROM OLD.spec THEN
    NEW.req_cpu_milli := qm_pod_request(NEW.spec, 'cpu');
    NEW.req_memory_bytes := qm_pod_request(NEW.spec, 'memory');
    NEW.req_gpu := qm_pod_request(NEW.spec, 'nvidia.com/gpu');
  END IF;
  RETURN NEW;
END
$$;

CREATE FUNCTION qm_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the audit trail is append-only';
END
$$;
"""


def _kind_table(table: str) -> str:
    fill = HOT_TABLES.get(table)
    promoted = "".join(
        f",\n  {col} {typ} GENERATED ALWAYS AS ({expr}) STORED"
        for col, typ, expr, _ in PROMOTED.get(table, [])
    )
    with_clause = f" WITH (fillfactor = {fill})" if fill else ""
    return f"""
CREATE TABLE {table} (
  uid uuid PRIMARY KEY,
  namespace text NOT NULL DEFAULT '',
  name text NOT NULL,
  generate_name text,
  labels jsonb NOT NULL DEFAULT '{{}}',
  annotations jsonb NOT NULL DEFAULT '{{}}',
  owner_references jsonb NOT NULL DEFAULT '[]',
  finalizers jsonb NOT NULL DEFAULT '[]',
  creation_timestamp timestamptz NOT NULL DEFAULT now(),
  deletion_timestamp timestamptz,
  deletion_grace_period_seconds integer,
  generation bigint NOT NULL DEFAULT 1,
  row_version bigint NOT NULL DEFAULT 0,
  spec jsonb NOT NULL DEFAULT '{{}}',
  status jsonb NOT NULL DEFAULT '{{}}'{promoted},
  CONSTRAINT {table}_namespace_name UNIQUE (namespace, name)
){with_clause};
CREATE INDEX {table}_labels ON {table} USING gin (labels jsonb_path_ops);
CREATE INDEX {table}_owners ON {table} USING gin (owner_references jsonb_path_ops)
  WHERE owner_references <> '[]'::jsonb;
CREATE TRIGGER {table}_stamp BEFORE INSERT OR UPDATE ON {table}
  FOR EACH ROW EXECUTE FUNCTION qm_stamp_row();
""" + "".join(
        f"CREATE INDEX {table}_{col} ON {table} ({col});\n"
        for col, _, _, indexed in PROMOTED.get(table, [])
        if indexed
    )


def upgrade() -> None:
    op.execute(FUNCTIONS)
    for table in KIND_TABLES:
        op.execute(_kind_table(table))
    op.execute(
        """
ALTER TABLE pods ADD COLUMN req_cpu_milli bigint NOT NULL DEFAULT 0,
                 ADD COLUMN req_memory_bytes bigint NOT NULL DEFAULT 0,
                 ADD COLUMN req_gpu bigint NOT NULL DEFAULT 0;
CREATE TRIGGER pods_requests BEFORE INSERT OR UPDATE OF spec ON pods
  FOR EACH ROW EXECUTE FUNCTION qm_pod_requests();
"""
    )
    op.execute("CREATE INDEX pods_unbound ON pods (priority DESC, creation_timestamp) "
               "WHERE node_name IS NULL")
    op.execute(
        """
CREATE TABLE nodes_allocated (
  node_uid uuid PRIMARY KEY REFERENCES nodes (uid) ON DELETE CASCADE,
  cpu_milli bigint NOT NULL DEFAULT 0,
  memory_bytes bigint NOT NULL DEFAULT 0,
  gpu bigint NOT NULL DEFAULT 0,
  pods integer NOT NULL DEFAULT 0
);
COMMENT ON TABLE nodes_allocated IS
  'Requests of the pods bound to each node, kept by the scheduler inside its bind transactions';

-- The revision stream: one row per committed change, numbered in commit order by the single
-- revisioner that reads the logical replication slot. Compaction keeps the latest entry of
-- every live object, so the log always holds the whole current state plus a window of history.
CREATE TABLE qm_revision_log (
  revision bigint PRIMARY KEY,
  kind text NOT NULL,
  uid uuid NOT NULL,
  namespace text NOT NULL,
  name text NOT NULL,
  row_version bigint NOT NULL,
  op "char" NOT NULL CHECK (op IN ('A', 'M', 'D')),
  object json NOT NULL,
  commit_lsn pg_lsn NOT NULL,
  committed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX qm_revision_log_uid ON qm_revision_log (uid, revision DESC);

CREATE TABLE qm_stream_state (
  id integer PRIMARY KEY CHECK (id = 1),
  last_revision bigint NOT NULL DEFAULT 0,
  last_commit_lsn pg_lsn NOT NULL DEFAULT '0/0',
  compacted_revision bigint NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO qm_stream_state (id) VALUES (1);

CREATE TABLE qm_tokens (
  id bigserial PRIMARY KEY,
  username text NOT NULL,
  groups text[] NOT NULL DEFAULT '{}',
  token_sha256 text NOT NULL UNIQUE,
  description text NOT NULL DEFAULT '',
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz
);

CREATE TABLE qm_audit (
  id bigserial PRIMARY KEY,
  at timestamptz NOT NULL DEFAULT clock_timestamp(),
  username text NOT NULL,
  verb text NOT NULL,
  kind text NOT NULL,
  namespace text NOT NULL,
  name text NOT NULL,
  uid uuid,
  subresource text NOT NULL DEFAULT '',
  before jsonb,
  after jsonb
);
CREATE INDEX qm_audit_object ON qm_audit (kind, namespace, name, at);
CREATE INDEX qm_audit_at ON qm_audit USING brin (at);
CREATE TRIGGER qm_audit_append_only BEFORE UPDATE OR DELETE ON qm_audit
  FOR EACH ROW EXECUTE FUNCTION qm_refuse_change();
CREATE TRIGGER qm_audit_no_truncate BEFORE TRUNCATE ON qm_audit
  FOR EACH STATEMENT EXECUTE FUNCTION qm_refuse_change();
"""
    )
    tables = ", ".join(KIND_TABLES)
    op.execute(f"CREATE PUBLICATION qm_stream FOR TABLE {tables}")
    op.execute(
        """
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'qm_reporting') THEN
    CREATE ROLE qm_reporting NOLOGIN;
  END IF;
END $$;
"""
    )
    # Reporting sees everything but secrets (whose data the audit trail omits too).
    readable = ", ".join(t for t in KIND_TABLES if t != "secrets")
    op.execute(f"GRANT SELECT ON {readable}, qm_audit TO qm_reporting")


def downgrade() -> None:
    op.execute("DROP PUBLICATION IF EXISTS qm_stream")
    for table in ("qm_audit", "qm_tokens", "qm_stream_state", "qm_revision_log", "nodes_allocated"):
        op.execute(f"DROP TABLE IF EXISTS {table}")
    for table in reversed(KIND_TABLES):
        op.execute(f"DROP TABLE IF EXISTS {table}")
    op.execute(
        "DROP FUNCTION IF EXISTS qm_refuse_change, qm_pod_requests, qm_stamp_row, qm_pod_request, "
        "qm_condition_true, qm_bytes, qm_cpu_milli, qm_quantity, qm_int"
    )
    op.execute("DROP SEQUENCE IF EXISTS qm_row_version")
