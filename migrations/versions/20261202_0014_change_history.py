"""The history of every change, from any path, chained by SHA-256 (ADR 0052).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02

* Roles (cluster-wide, created if missing): ``qm_app`` (LOGIN, REPLICATION) is what the API
  servers, workers, scheduler and revisioner connect as: read and write on the state tables and
  sequences, no grant at all on the history; default privileges give it the tables later
  migrations create. ``qm_archivist`` (NOLOGIN) may run the archive functions only.
* ``qm_history``: one row per inserted, updated or deleted row of every state table, range
  partitioned by month on ``at`` (plus a default partition that should stay empty).
  ``qm_history_partitions(ahead)`` creates the months ahead; the sealer calls it.
* Row-level AFTER triggers on every state table (``<table>_history``, plus
  ``<table>_history_truncate``) call ``qm_history_record``: one INSERT per row written; a
  statement that sets ``qm.contexts`` (a batch of many writers) is recorded set-based instead,
  by statement-level triggers with transition tables (``<table>_history_ins|upd|del``,
  ``qm_history_record_batch``). They read the writer's context from the transaction-local
  settings ``qm.context`` (a JSON object) and ``qm.contexts`` (``"namespace/name"`` -> such an
  object, which wins).
  ``ENABLE ALWAYS``: ``session_replication_role = replica`` does not silence them.
* High-churn writes (the summarising rule argument: a pod's or node's status-only write that changes
  no promoted column, a lease renewal by the same holder, every write to events, an API
  server's heartbeat) are counted in ``qm_history_tally`` (one row per hour, table, namespace
  and backend, so connections never wait on each other) and folded into one ``op = 'summary'``
  row per hour, table and namespace once the hour is over.
* Append-only: ``qm_history_guard`` refuses UPDATE (but the sealer setting ``seq``/``hash``
  once), DELETE and TRUNCATE. ``qm_history_seal(max_rows)`` chains committed, unsealed rows:
  ``hash = sha256(previous hash || qm_history_canon(row))``; ``qm_history_verify()`` returns the
  first broken link; ``qm_history_archive(before)`` detaches sealed months after recording an
  anchor in ``qm_history_anchors``, from which verification then starts.
* The legacy ``qm_audit`` stays for the previous release (which still writes it): a row it
  inserts lends its user to the history row of the same write (``qm.contexts``), and the rows
  written before this revision are copied into the history in batches after the DDL commits.
"""

from __future__ import annotations

from alembic import op

from migrations import online
from migrations.kind_table import history_triggers

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

# Frozen copies (a migration never reads app code): table -> API kind.
KIND_TABLES: dict[str, str] = {
    "namespaces": "Namespace", "nodes": "Node", "leases": "Lease", "pods": "Pod",
    "deployments": "Deployment", "replicasets": "ReplicaSet", "jobs": "Job",
    "cronjobs": "CronJob", "services": "Service", "endpointslices": "EndpointSlice",
    "priorityclasses": "PriorityClass", "resourcequotas": "ResourceQuota",
    "poddisruptionbudgets": "PodDisruptionBudget", "configmaps": "ConfigMap",
    "secrets": "Secret", "serviceaccounts": "ServiceAccount", "events": "Event",
    "roles": "Role", "clusterroles": "ClusterRole", "rolebindings": "RoleBinding",
    "clusterrolebindings": "ClusterRoleBinding", "admissionpolicies": "AdmissionPolicy",
    "qm_tokens": "Token",
}  # fmt: skip

# Every table whose rows are state an operator cares about:
# table -> (key column, kind or '', summarising rule, columns never copied).
TRACKED: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    **{t: ("uid", k, "none", ()) for t, k in KIND_TABLES.items()},
    "pods": ("uid", "Pod", "status", ()),
    "nodes": ("uid", "Node", "status", ()),
    "leases": ("uid", "Lease", "lease", ()),
    "events": ("uid", "Event", "all", ()),
    "qm_tokens": ("uid", "Token", "none", ("token_sha256",)),
    "qm_bootstrap_tokens": ("token_id", "", "none", ("secret_sha256",)),
    "qm_node_credentials": ("id", "", "none", ("token_sha256",)),
    "qm_api_servers": ("id", "", "heartbeat", ()),
    "service_ip_range": ("id", "", "none", ()),
    "service_ips": ("ip", "", "none", ()),
}

HISTORY_TABLES = (
    "qm_history", "qm_history_tally", "qm_history_chain", "qm_history_anchors",
    "qm_history_backfill",
)  # fmt: skip

ROLES = """
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'qm_app') THEN
    CREATE ROLE qm_app LOGIN REPLICATION;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'qm_archivist') THEN
    CREATE ROLE qm_archivist NOLOGIN;
  END IF;
END
$$;
"""

TABLES = r"""
CREATE SEQUENCE qm_history_id_seq AS bigint;

CREATE TABLE qm_history (
  id bigint NOT NULL DEFAULT nextval('qm_history_id_seq'),
  at timestamptz NOT NULL DEFAULT statement_timestamp(),
  xid xid8,
  table_name text NOT NULL,
  kind text,
  namespace text,
  name text,
  uid uuid,
  op text NOT NULL CHECK (op IN ('insert', 'update', 'delete', 'summary')),
  before jsonb,
  after jsonb,
  db_role text,
  application_name text,
  principal text,
  groups text[],
  request_id text,
  client_addr text,
  user_agent text,
  reason text,
  verb text,
  subresource text,
  summary_count bigint,
  seq bigint,
  hash bytea,
  PRIMARY KEY (id, at)
) PARTITION BY RANGE (at);
ALTER SEQUENCE qm_history_id_seq OWNED BY qm_history.id;
CREATE TABLE qm_history_default PARTITION OF qm_history DEFAULT;
ALTER TABLE qm_history_default ALTER COLUMN before SET STATISTICS 0,
  ALTER COLUMN after SET STATISTICS 0;
CREATE INDEX qm_history_object ON qm_history (table_name, namespace, name, at);
CREATE INDEX qm_history_principal ON qm_history (principal, at) WHERE principal IS NOT NULL;
CREATE INDEX qm_history_at ON qm_history USING brin (at);
CREATE INDEX qm_history_seq ON qm_history (seq) WHERE seq IS NOT NULL;
CREATE INDEX qm_history_unsealed ON qm_history (id) WHERE seq IS NULL;
COMMENT ON TABLE qm_history IS
  'Every insert, update and delete of a state table, with who (database role and application '
  'principal), why and when; append-only, chained by SHA-256 (docs/history.md)';
COMMENT ON COLUMN qm_history.before IS
  'delete: the whole row; update: the old values of the top-level columns that changed';
COMMENT ON COLUMN qm_history.after IS
  'insert: the whole row; update: the new values of the columns that changed; '
  'summary: the hour and the number of writes counted';
COMMENT ON COLUMN qm_history.summary_count IS
  'op = summary: how many high-churn writes of that table and namespace the hour saw';
COMMENT ON COLUMN qm_history.seq IS 'Position in the hash chain, set once by qm_history_seal';
COMMENT ON COLUMN qm_history.hash IS
  'sha256(previous hash || qm_history_canon(row)), set once by qm_history_seal';

-- Summarised writes, counted per hour, table, namespace and backend: each backend has its own
-- row, so two connections never wait on one counter.
CREATE TABLE qm_history_tally (
  hour timestamptz NOT NULL,
  table_name text NOT NULL,
  namespace text NOT NULL,
  backend integer NOT NULL,
  kind text,
  count bigint NOT NULL,
  PRIMARY KEY (hour, table_name, namespace, backend)
);
COMMENT ON TABLE qm_history_tally IS
  'High-churn writes counted, not stored; folded into summary rows of qm_history hourly';

CREATE TABLE qm_history_chain (
  id integer PRIMARY KEY DEFAULT 1 CHECK (id = 1),
  last_seq bigint NOT NULL,
  last_hash bytea NOT NULL,
  sealed_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE qm_history_chain IS 'The tip of the hash chain: the last sealed seq and hash';

CREATE TABLE qm_history_anchors (
  id bigserial PRIMARY KEY,
  last_seq bigint NOT NULL UNIQUE,
  last_hash bytea NOT NULL,
  before timestamptz,
  partitions text[] NOT NULL DEFAULT '{}',
  archived_at timestamptz NOT NULL DEFAULT now(),
  archived_by text NOT NULL DEFAULT session_user,
  exported jsonb NOT NULL DEFAULT '{}'
);
COMMENT ON TABLE qm_history_anchors IS
  'Where verification starts: the genesis, then the last seq and hash of each archived batch';
-- The genesis: the chain's first row hashes over this.
INSERT INTO qm_history_chain (last_seq, last_hash)
  VALUES (0, sha256(convert_to('quaymaster history', 'UTF8')));
INSERT INTO qm_history_anchors (last_seq, last_hash, archived_by)
  SELECT last_seq, last_hash, 'genesis' FROM qm_history_chain;

-- The qm_audit rows written before this revision (ids up to audit_cutoff) are copied in.
CREATE TABLE qm_history_backfill (
  id integer PRIMARY KEY DEFAULT 1 CHECK (id = 1),
  audit_cutoff bigint NOT NULL
);
"""

FUNCTIONS = r"""
-- The writer's context from a transaction-local setting: a JSON object, NULL when unset. An
-- unreadable value is kept as the reason rather than failing the write.
CREATE FUNCTION qm_history_context(setting text) RETURNS jsonb
LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT CASE
    WHEN coalesce(current_setting(setting, true), '') = '' THEN NULL
    WHEN pg_input_is_valid(current_setting(setting, true), 'jsonb')
         AND jsonb_typeof(CASE WHEN pg_input_is_valid(current_setting(setting, true), 'jsonb')
                               THEN current_setting(setting, true)::jsonb END) = 'object'
      THEN current_setting(setting, true)::jsonb
    ELSE jsonb_build_object('reason',
           'unreadable ' || setting || ': ' || left(current_setting(setting, true), 200))
  END
$$;

-- A context's string field (NULL unless a string), and its groups (NULL unless an array).
CREATE FUNCTION qm_history_str(c jsonb, field text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN jsonb_typeof(c -> field) = 'string' THEN left(c ->> field, 1024) END
$$;
CREATE FUNCTION qm_history_groups(c jsonb) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN jsonb_typeof(c -> 'groups') = 'array'
              THEN ARRAY(SELECT jsonb_array_elements_text(c -> 'groups')) END
$$;

-- The row image kept: less the columns never copied (token digests); a Secret's data (and a
-- last-applied annotation, which would repeat it) only as a digest of the sealed value, so a
-- change shows without the value.
CREATE FUNCTION qm_history_image(tbl text, j jsonb, dropped text[]) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN tbl <> 'secrets' THEN j - dropped
    ELSE (j - dropped)
      || jsonb_build_object('spec', (j -> 'spec') - 'data' - 'stringData'
           || CASE WHEN j -> 'spec' ? 'data' THEN jsonb_build_object('data', 'sha256:'
                || encode(sha256(convert_to((j -> 'spec' -> 'data')::text, 'UTF8')), 'hex'))
              ELSE '{}' END
           || CASE WHEN j -> 'spec' ? 'stringData' THEN jsonb_build_object('stringData', 'sha256:'
                || encode(sha256(convert_to((j -> 'spec' -> 'stringData')::text, 'UTF8')), 'hex'))
              ELSE '{}' END)
      || CASE WHEN j -> 'annotations' ? 'kubectl.kubernetes.io/last-applied-configuration'
              THEN jsonb_build_object('annotations', (j -> 'annotations')
                     - 'kubectl.kubernetes.io/last-applied-configuration')
              ELSE '{}' END
  END
$$;

-- Whether an update is a high-churn write to count instead of store. ``before``/``after`` hold
-- only the changed columns. Promoted (generated) columns such as a pod's phase and ready or a
-- node's ready are columns of their own, so a status write that moves one is a milestone. A
-- lease's renewTime is in its spec, so a renewal moves its generation too.
CREATE FUNCTION qm_history_churn(rule text, before jsonb, after jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE rule
    WHEN 'all' THEN true
    WHEN 'status' THEN (before - 'status' - 'row_version') = '{}'::jsonb
    WHEN 'lease' THEN (before - 'spec' - 'generation' - 'row_version') = '{}'::jsonb
                      AND coalesce((before -> 'spec') - 'renewTime', '{}')
                          = coalesce((after -> 'spec') - 'renewTime', '{}')
    WHEN 'heartbeat' THEN (before - 'renewed_at') = '{}'::jsonb
    ELSE false
  END
$$;

-- The canonical text hashed for a row: a JSON array of every column but the hash, timestamps
-- in UTC, so the result does not depend on the session's settings.
CREATE FUNCTION qm_history_canon(h qm_history) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT jsonb_build_array(
    h.seq, h.id, to_char(h.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    h.xid::text, h.table_name, h.kind, h.namespace, h.name, h.uid, h.op, h.before, h.after,
    h.db_role, h.application_name, h.principal, to_jsonb(h.groups), h.request_id,
    h.client_addr, h.user_agent, h.reason, h.verb, h.subresource, h.summary_count)::text
$$;

-- AFTER ... FOR EACH ROW on every state table, and BEFORE TRUNCATE. Arguments: key column,
-- kind ('' for an internal table), summarising rule, columns never copied (a text[] literal).
-- Row level rather than statement level with transition tables: nearly every write is one
-- row, and a row trigger's statements are planned once per session, where the set-based
-- statement over transition tables cost more per write than it saved (ADR 0052).
CREATE FUNCTION qm_history_record() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
  v_old jsonb;
  v_new jsonb;
  v_row jsonb;
  v_before jsonb;
  v_after jsonb;
  v_ctx jsonb;
  v_ns text;
  v_name text;
  v_churn boolean;
  v_text text;
BEGIN
  IF TG_OP = 'TRUNCATE' THEN
    -- Every row about to go is recorded as deleted.
    v_ctx := public.qm_history_context('qm.context');
    EXECUTE format($f$
      INSERT INTO public.qm_history (xid, table_name, kind, namespace, name, uid, op, before,
        db_role, application_name, principal, groups, request_id, reason, verb)
      SELECT pg_current_xact_id(), %1$L, %2$L, coalesce(j ->> 'namespace', ''),
             coalesce(j ->> 'name', j ->> %3$L), (j ->> 'uid')::uuid, 'delete', j,
             session_user, current_setting('application_name'),
             public.qm_history_str($1, 'principal'), public.qm_history_groups($1),
             public.qm_history_str($1, 'request_id'),
             coalesce(public.qm_history_str($1, 'reason'), 'TRUNCATE'),
             coalesce(public.qm_history_str($1, 'verb'), 'truncate')
        FROM (SELECT public.qm_history_image(%1$L, to_jsonb(t), %4$L::text[]) AS j
                FROM %5$I.%1$I AS t) AS r
    $f$, TG_TABLE_NAME, nullif(TG_ARGV[1], ''), TG_ARGV[0], TG_ARGV[3], TG_TABLE_SCHEMA)
    USING v_ctx;
    RETURN NULL;
  END IF;
  -- A statement carrying many writers' contexts is recorded by qm_history_record_batch, once
  -- for all its rows: parsing the whole map again for every row would cost O(rows^2).
  IF current_setting('qm.contexts', true) <> '' THEN
    RETURN NULL;
  END IF;
  IF TG_OP = 'INSERT' THEN
    v_new := public.qm_history_image(TG_TABLE_NAME, to_jsonb(NEW), TG_ARGV[3]::text[]);
    v_after := v_new;
    v_row := v_new;
    v_churn := TG_ARGV[2] = 'all';
  ELSIF TG_OP = 'DELETE' THEN
    v_old := public.qm_history_image(TG_TABLE_NAME, to_jsonb(OLD), TG_ARGV[3]::text[]);
    v_before := v_old;
    v_row := v_old;
    v_churn := TG_ARGV[2] = 'all';
  ELSE
    v_old := public.qm_history_image(TG_TABLE_NAME, to_jsonb(OLD), TG_ARGV[3]::text[]);
    v_new := public.qm_history_image(TG_TABLE_NAME, to_jsonb(NEW), TG_ARGV[3]::text[]);
    v_row := v_new;
    -- Only the top-level columns that changed, old values before and new after.
    SELECT coalesce(jsonb_object_agg(o.key, o.value), '{}'),
           coalesce(jsonb_object_agg(o.key, n.value), '{}')
      INTO v_before, v_after
      FROM jsonb_each(v_old) AS o JOIN jsonb_each(v_new) AS n ON n.key = o.key
     WHERE o.value IS DISTINCT FROM n.value;
    v_churn := coalesce(public.qm_history_churn(TG_ARGV[2], v_before, v_after), false);
  END IF;
  v_ns := coalesce(v_row ->> 'namespace', '');
  v_name := coalesce(v_row ->> 'name', v_row ->> TG_ARGV[0]);
  IF v_churn THEN
    -- Counted, not stored: this backend's own row for the hour, so no two connections wait.
    INSERT INTO public.qm_history_tally AS y (hour, table_name, namespace, backend, kind, count)
    VALUES (date_trunc('hour', statement_timestamp(), 'UTC'), TG_TABLE_NAME, v_ns,
            pg_backend_pid(), nullif(TG_ARGV[1], ''), 1)
    ON CONFLICT (hour, table_name, namespace, backend) DO UPDATE SET count = y.count + 1;
    RETURN NULL;
  END IF;
  -- The setting is looked at before it is parsed: most writes carry one, a DBA's none.
  v_text := current_setting('qm.context', true);
  IF v_text <> '' THEN
    v_ctx := public.qm_history_context('qm.context');
  END IF;
  INSERT INTO public.qm_history (xid, table_name, kind, namespace, name, uid, op, before, after,
    db_role, application_name, principal, groups, request_id, client_addr, user_agent, reason,
    verb, subresource)
  VALUES (pg_current_xact_id(), TG_TABLE_NAME, nullif(TG_ARGV[1], ''), v_ns, v_name,
          (v_row ->> 'uid')::uuid, lower(TG_OP), v_before, v_after, session_user,
          current_setting('application_name'), public.qm_history_str(v_ctx, 'principal'),
          public.qm_history_groups(v_ctx), public.qm_history_str(v_ctx, 'request_id'),
          public.qm_history_str(v_ctx, 'client'), public.qm_history_str(v_ctx, 'user_agent'),
          public.qm_history_str(v_ctx, 'reason'), public.qm_history_str(v_ctx, 'verb'),
          public.qm_history_str(v_ctx, 'subresource'));
  RETURN NULL;
END
$$;

-- Statement-level AFTER triggers with transition tables, for statements that set
-- qm.contexts (batches of many writers: group commit, the scheduler's binds); same arguments.
CREATE FUNCTION qm_history_record_batch() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
  v_key text := TG_ARGV[0];
  v_kind text := nullif(TG_ARGV[1], '');
  v_rule text := TG_ARGV[2];
  v_dropped text[] := TG_ARGV[3]::text[];
  v_ctx jsonb;
  v_ctxs jsonb;
  v_hour timestamptz := date_trunc('hour', statement_timestamp(), 'UTC');
BEGIN
  -- Only statements that carry many writers' contexts come this way (the row trigger took
  -- the others): qm.contexts is parsed once for the whole statement.
  IF coalesce(current_setting('qm.contexts', true), '') = '' THEN
    RETURN NULL;
  END IF;
  v_ctx := public.qm_history_context('qm.context');
  v_ctxs := public.qm_history_context('qm.contexts');
  IF TG_OP = 'INSERT' THEN
    WITH r AS (
      SELECT public.qm_history_image(TG_TABLE_NAME, to_jsonb(n), v_dropped) AS j FROM new_rows AS n
    ), d AS (
      SELECT coalesce(j ->> 'namespace', '') AS ns, coalesce(j ->> 'name', j ->> v_key) AS nm,
             NULL::jsonb AS b, j AS a, v_rule = 'all' AS churn
        FROM r
    ), t AS (
      INSERT INTO public.qm_history_tally AS y (hour, table_name, namespace, backend, kind, count)
      SELECT v_hour, TG_TABLE_NAME, ns, pg_backend_pid(), v_kind, count(*) FROM d WHERE churn
       GROUP BY ns
      ON CONFLICT (hour, table_name, namespace, backend)
        DO UPDATE SET count = y.count + EXCLUDED.count
    )
    INSERT INTO public.qm_history (xid, table_name, kind, namespace, name, uid, op, before, after,
      db_role, application_name, principal, groups, request_id, client_addr, user_agent, reason,
      verb, subresource)
    SELECT pg_current_xact_id(), TG_TABLE_NAME, v_kind, d.ns, d.nm, (d.a ->> 'uid')::uuid,
           'insert', d.b, d.a, session_user, current_setting('application_name'),
           public.qm_history_str(c, 'principal'), public.qm_history_groups(c),
           public.qm_history_str(c, 'request_id'),
           public.qm_history_str(c, 'client'), public.qm_history_str(c, 'user_agent'),
           public.qm_history_str(c, 'reason'), public.qm_history_str(c, 'verb'),
           public.qm_history_str(c, 'subresource')
      FROM d CROSS JOIN LATERAL (SELECT coalesce(v_ctxs -> (d.ns || '/' || d.nm), v_ctx) AS c) AS x
     WHERE NOT d.churn;
  ELSIF TG_OP = 'UPDATE' THEN
    WITH o AS (
      SELECT public.qm_history_image(TG_TABLE_NAME, to_jsonb(o), v_dropped) AS j FROM old_rows AS o
    ), n AS (
      SELECT public.qm_history_image(TG_TABLE_NAME, to_jsonb(n), v_dropped) AS j FROM new_rows AS n
    ), p AS (
      SELECT o.j AS oj, n.j AS nj FROM o JOIN n ON (o.j -> v_key) = (n.j -> v_key)
    ), e AS (
      SELECT coalesce(p.nj ->> 'namespace', '') AS ns,
             coalesce(p.nj ->> 'name', p.nj ->> v_key) AS nm, p.nj ->> 'uid' AS uid, x.b, x.a
        FROM p CROSS JOIN LATERAL (
          SELECT coalesce(jsonb_object_agg(f.k, f.ov), '{}') AS b,
                 coalesce(jsonb_object_agg(f.k, f.nv), '{}') AS a
            FROM (SELECT oe.key AS k, oe.value AS ov, ne.value AS nv
                    FROM jsonb_each(p.oj) AS oe JOIN jsonb_each(p.nj) AS ne ON ne.key = oe.key
                   WHERE oe.value IS DISTINCT FROM ne.value) AS f) AS x
    ), d AS (
      SELECT e.*, coalesce(public.qm_history_churn(v_rule, e.b, e.a), false) AS churn FROM e
    ), t AS (
      INSERT INTO public.qm_history_tally AS y (hour, table_name, namespace, backend, kind, count)
      SELECT v_hour, TG_TABLE_NAME, ns, pg_backend_pid(), v_kind, count(*) FROM d WHERE churn
       GROUP BY ns
      ON CONFLICT (hour, table_name, namespace, backend)
        DO UPDATE SET count = y.count + EXCLUDED.count
    )
    INSERT INTO public.qm_history (xid, table_name, kind, namespace, name, uid, op, before, after,
      db_role, application_name, principal, groups, request_id, client_addr, user_agent, reason,
      verb, subresource)
    SELECT pg_current_xact_id(), TG_TABLE_NAME, v_kind, d.ns, d.nm, d.uid::uuid,
           'update', d.b, d.a, session_user, current_setting('application_name'),
           public.qm_history_str(c, 'principal'), public.qm_history_groups(c),
           public.qm_history_str(c, 'request_id'),
           public.qm_history_str(c, 'client'), public.qm_history_str(c, 'user_agent'),
           public.qm_history_str(c, 'reason'), public.qm_history_str(c, 'verb'),
           public.qm_history_str(c, 'subresource')
      FROM d CROSS JOIN LATERAL (SELECT coalesce(v_ctxs -> (d.ns || '/' || d.nm), v_ctx) AS c) AS x
     WHERE NOT d.churn;
  ELSIF TG_OP = 'DELETE' THEN
    WITH r AS (
      SELECT public.qm_history_image(TG_TABLE_NAME, to_jsonb(o), v_dropped) AS j FROM old_rows AS o
    ), d AS (
      SELECT coalesce(j ->> 'namespace', '') AS ns, coalesce(j ->> 'name', j ->> v_key) AS nm,
             j AS b, NULL::jsonb AS a, v_rule = 'all' AS churn
        FROM r
    ), t AS (
      INSERT INTO public.qm_history_tally AS y (hour, table_name, namespace, backend, kind, count)
      SELECT v_hour, TG_TABLE_NAME, ns, pg_backend_pid(), v_kind, count(*) FROM d WHERE churn
       GROUP BY ns
      ON CONFLICT (hour, table_name, namespace, backend)
        DO UPDATE SET count = y.count + EXCLUDED.count
    )
    INSERT INTO public.qm_history (xid, table_name, kind, namespace, name, uid, op, before, after,
      db_role, application_name, principal, groups, request_id, client_addr, user_agent, reason,
      verb, subresource)
    SELECT pg_current_xact_id(), TG_TABLE_NAME, v_kind, d.ns, d.nm, (d.b ->> 'uid')::uuid,
           'delete', d.b, d.a, session_user, current_setting('application_name'),
           public.qm_history_str(c, 'principal'), public.qm_history_groups(c),
           public.qm_history_str(c, 'request_id'),
           public.qm_history_str(c, 'client'), public.qm_history_str(c, 'user_agent'),
           public.qm_history_str(c, 'reason'), public.qm_history_str(c, 'verb'),
           public.qm_history_str(c, 'subresource')
      FROM d CROSS JOIN LATERAL (SELECT coalesce(v_ctxs -> (d.ns || '/' || d.nm), v_ctx) AS c) AS x
     WHERE NOT d.churn;
  END IF;
  RETURN NULL;
END
$$;


-- Append-only: no DELETE or TRUNCATE, and no UPDATE but the sealer setting seq and hash once.
CREATE FUNCTION qm_history_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND current_setting('qm.sealing', true) = 'on'
     AND OLD.seq IS NULL AND OLD.hash IS NULL
     AND NEW.seq IS NOT NULL AND NEW.hash IS NOT NULL
     AND (NEW.id, NEW.at, NEW.xid, NEW.table_name, NEW.kind, NEW.namespace, NEW.name, NEW.uid,
          NEW.op, NEW.before, NEW.after, NEW.db_role, NEW.application_name, NEW.principal,
          NEW.groups, NEW.request_id, NEW.client_addr, NEW.user_agent, NEW.reason, NEW.verb,
          NEW.subresource, NEW.summary_count)
         IS NOT DISTINCT FROM
         (OLD.id, OLD.at, OLD.xid, OLD.table_name, OLD.kind, OLD.namespace, OLD.name, OLD.uid,
          OLD.op, OLD.before, OLD.after, OLD.db_role, OLD.application_name, OLD.principal,
          OLD.groups, OLD.request_id, OLD.client_addr, OLD.user_agent, OLD.reason, OLD.verb,
          OLD.subresource, OLD.summary_count) THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
    MESSAGE = format('the change history is append-only (%s on %s refused)', TG_OP, TG_TABLE_NAME);
END
$$;

-- One month's partition (UTC), created and attached if missing: made standalone then attached,
-- which locks the parent for SHARE UPDATE EXCLUSIVE only, so writers keep going.
CREATE FUNCTION qm_history_partition(month timestamptz) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  lo timestamptz := date_trunc('month', month, 'UTC');
  hi timestamptz := date_trunc('month', month + interval '32 days', 'UTC');
  part text := 'qm_history_' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMM');
BEGIN
  IF to_regclass(part) IS NOT NULL THEN
    RETURN part;
  END IF;
  EXECUTE format('CREATE TABLE public.%I '
                 '(LIKE qm_history INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
  EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (at >= %L AND at < %L)',
                 part, part || '_range', lo, hi);
  EXECUTE format('ALTER TABLE qm_history ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                 part, lo, hi);
  EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', part, part || '_range');
  -- No planner statistics for the row images: nothing filters on them by value, and
  -- autoanalyze of a fast-growing month would spend its time on them.
  EXECUTE format('ALTER TABLE %I ALTER COLUMN before SET STATISTICS 0, '
                 'ALTER COLUMN after SET STATISTICS 0', part);
  EXECUTE format('REVOKE ALL ON %I FROM PUBLIC', part);
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'qm_app') THEN
    EXECUTE format('REVOKE ALL ON %I FROM qm_app', part);
  END IF;
  EXECUTE format('CREATE TRIGGER %I BEFORE TRUNCATE ON %I '
                 'FOR EACH STATEMENT EXECUTE FUNCTION qm_history_guard()', part || '_guard', part);
  EXECUTE format('ALTER TABLE %I ENABLE ALWAYS TRIGGER %I', part, part || '_guard');
  RETURN part;
END
$$;

-- The partitions of this month and the next ``ahead`` months.
CREATE FUNCTION qm_history_partitions(ahead integer DEFAULT 2) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  made integer := 0;
BEGIN
  FOR i IN 0..ahead LOOP
    IF to_regclass('qm_history_' || to_char((date_trunc('month', now(), 'UTC')
         + make_interval(months => i)) AT TIME ZONE 'UTC', 'YYYYMM')) IS NULL THEN
      PERFORM qm_history_partition(date_trunc('month', now(), 'UTC') + make_interval(months => i));
      made := made + 1;
    END IF;
  END LOOP;
  RETURN made;
END
$$;

-- Completed hours of counted writes become summary rows.
CREATE FUNCTION qm_history_fold() RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  n integer;
BEGIN
  WITH done AS (
    DELETE FROM qm_history_tally WHERE hour < date_trunc('hour', now(), 'UTC') RETURNING *
  ), s AS (
    INSERT INTO qm_history (at, xid, table_name, kind, namespace, op, after, summary_count,
                            db_role, application_name)
    SELECT hour, pg_current_xact_id(), table_name, min(kind), namespace, 'summary',
           jsonb_build_object(
             'from', to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
             'hours', 1, 'writes', sum(count)),
           sum(count), session_user, current_setting('application_name')
      FROM done GROUP BY hour, table_name, namespace
    RETURNING 1
  )
  SELECT count(*) INTO n FROM s;
  RETURN n;
END
$$;

-- Chain up to ``max_rows`` committed, unsealed rows (in id order) onto the tip. One sealer at a
-- time (an advisory lock; a second caller returns 0 at once). Also folds finished hours and
-- makes next month's partition when it is missing. Returns the number of rows sealed.
CREATE FUNCTION qm_history_seal(max_rows integer DEFAULT 5000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  tip qm_history_chain;
  r qm_history;
  s bigint;
  h bytea;
  ids bigint[] := '{}';
  ats timestamptz[] := '{}';
  seqs bigint[] := '{}';
  hashes bytea[] := '{}';
  v_lock_timeout text := current_setting('lock_timeout');
BEGIN
  IF NOT pg_try_advisory_xact_lock(hashtextextended('qm_history_seal', 0)) THEN
    RETURN 0;
  END IF;
  IF to_regclass('qm_history_' || to_char((date_trunc('month', now(), 'UTC')
       + interval '1 month') AT TIME ZONE 'UTC', 'YYYYMM')) IS NULL THEN
    BEGIN
      -- Never queue behind a long transaction: every writer would queue behind this.
      PERFORM set_config('lock_timeout', '200ms', true);
      PERFORM qm_history_partitions(1);
      PERFORM set_config('lock_timeout', v_lock_timeout, true);
    EXCEPTION WHEN lock_not_available THEN
      RAISE NOTICE 'next month''s history partition not made yet: lock not available';
    END;
  END IF;
  PERFORM qm_history_fold();
  SELECT * INTO STRICT tip FROM qm_history_chain WHERE id = 1 FOR UPDATE;
  s := tip.last_seq;
  h := tip.last_hash;
  FOR r IN SELECT * FROM qm_history WHERE seq IS NULL ORDER BY id LIMIT max_rows LOOP
    s := s + 1;
    r.seq := s;
    h := sha256(h || convert_to(qm_history_canon(r), 'UTF8'));
    ids := ids || r.id;
    ats := ats || r.at;
    seqs := seqs || s;
    hashes := hashes || h;
  END LOOP;
  IF s = tip.last_seq THEN
    RETURN 0;
  END IF;
  PERFORM set_config('qm.sealing', 'on', true);
  UPDATE qm_history AS q SET seq = u.seq, hash = u.hash
    FROM unnest(ids, ats, seqs, hashes) AS u(id, at, seq, hash)
   WHERE q.id = u.id AND q.at = u.at;
  PERFORM set_config('qm.sealing', '', true);
  UPDATE qm_history_chain SET last_seq = s, last_hash = h, sealed_at = now() WHERE id = 1;
  RETURN s - tip.last_seq;
END
$$;

-- The first broken link of the chain from the latest anchor, or no row: a row whose hash does
-- not follow from its content and the previous hash, a gap or repeat in seq, or a tip shorter
-- than the one recorded.
CREATE FUNCTION qm_history_verify()
RETURNS TABLE (seq bigint, id bigint, at timestamptz, problem text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH a AS (
    SELECT last_seq, last_hash FROM qm_history_anchors ORDER BY last_seq DESC LIMIT 1
  ), r AS (
    SELECT h.seq, h.id, h.at, h.hash, qm_history_canon(h) AS c,
           lag(h.seq) OVER w AS prev_seq, lag(h.hash) OVER w AS prev_hash
      FROM qm_history AS h
     WHERE h.seq > (SELECT last_seq FROM a)
    WINDOW w AS (ORDER BY h.seq, h.id)
  ), bad AS (
    SELECT r.seq, r.id, r.at, CASE
        WHEN coalesce(r.prev_seq, a.last_seq) <> r.seq - 1 THEN
          CASE WHEN coalesce(r.prev_seq, a.last_seq) = r.seq
               THEN 'seq ' || r.seq || ' appears twice'
               ELSE format('rows with seq %s to %s are missing',
                           coalesce(r.prev_seq, a.last_seq) + 1, r.seq - 1) END
        WHEN r.hash IS DISTINCT FROM sha256(coalesce(r.prev_hash, a.last_hash)
                                            || convert_to(r.c, 'UTF8')) THEN
          'the row does not match its hash: it was changed after it was sealed'
      END AS problem
      FROM r CROSS JOIN a
  ), tail AS (
    SELECT NULL::bigint AS seq, NULL::bigint AS id, NULL::timestamptz AS at,
           format('the chain ends at seq %s but seq %s was sealed',
                  coalesce(max(h.seq), a.last_seq), c.last_seq) AS problem
      FROM qm_history_chain AS c CROSS JOIN a
      LEFT JOIN qm_history AS h ON h.seq > a.last_seq
     GROUP BY c.last_seq, a.last_seq
    HAVING coalesce(max(h.seq), a.last_seq) < c.last_seq
  )
  SELECT * FROM (SELECT * FROM bad WHERE problem IS NOT NULL ORDER BY seq LIMIT 1) AS first
  UNION ALL
  SELECT * FROM tail
  LIMIT 1
$$;

-- How far sealing is: for the sealer's lag metric and ``qm audit verify``.
CREATE FUNCTION qm_history_status(OUT sealed_seq bigint, OUT anchor_seq bigint,
  OUT unsealed bigint, OUT oldest_unsealed timestamptz, OUT tip_hash text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT c.last_seq, (SELECT max(last_seq) FROM qm_history_anchors),
         (SELECT count(*) FROM qm_history WHERE seq IS NULL),
         (SELECT min(at) FROM qm_history WHERE seq IS NULL),
         encode(c.last_hash, 'hex')
    FROM qm_history_chain AS c
$$;

-- Retention: detach every monthly partition that ends at or before ``before``, provided all
-- their rows are sealed and precede every row that stays; record an anchor (their last seq and
-- hash) from which verification then starts. The detached tables stay, readable by the
-- archivist, until ``qm_history_drop_archived`` drops each once it is exported.
CREATE FUNCTION qm_history_archive(before timestamptz) RETURNS SETOF text
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  v_parts text[];
  v_end timestamptz;
  v_seq bigint;
  v_hash bytea;
  v_part text;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('qm_history_seal', 0));
  SELECT array_agg(p.name ORDER BY p.name), max(p.ends) INTO v_parts, v_end
    FROM (SELECT c.relname::text AS name,
                 to_date(substr(c.relname, 12), 'YYYYMM')::timestamp AT TIME ZONE 'UTC'
                   + interval '1 month' AS ends
            FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid
           WHERE i.inhparent = 'qm_history'::regclass
             AND c.relname ~ '^qm_history_[0-9]{6}$') AS p
   WHERE p.ends <= before;
  IF v_parts IS NULL THEN
    RAISE EXCEPTION 'no history partition ends at or before %', before;
  END IF;
  IF EXISTS (SELECT FROM qm_history AS h WHERE h.at < v_end AND h.seq IS NULL) THEN
    RAISE EXCEPTION 'refused: the history partitions to archive hold rows not sealed yet';
  END IF;
  SELECT h.seq, h.hash INTO v_seq, v_hash FROM qm_history AS h
   WHERE h.at < v_end ORDER BY h.seq DESC LIMIT 1;
  IF v_seq IS NULL THEN
    RAISE EXCEPTION 'refused: the history partitions to archive are empty; nothing to anchor';
  END IF;
  IF EXISTS (SELECT FROM qm_history AS h
              WHERE h.at >= v_end AND h.seq IS NOT NULL AND h.seq < v_seq) THEN
    RAISE EXCEPTION 'refused: rows that stay were sealed before seq %, the last to archive',
      v_seq;
  END IF;
  INSERT INTO qm_history_anchors (last_seq, last_hash, before, partitions)
    VALUES (v_seq, v_hash, before, v_parts);
  FOREACH v_part IN ARRAY v_parts LOOP
    EXECUTE format('ALTER TABLE qm_history DETACH PARTITION %I', v_part);
    EXECUTE format('GRANT SELECT ON %I TO qm_archivist', v_part);
    RETURN NEXT v_part;
  END LOOP;
END
$$;

-- Drop one archived (detached) partition, recording the digest of its exported file.
CREATE FUNCTION qm_history_drop_archived(tbl text, file_sha256 text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
  IF NOT EXISTS (SELECT FROM qm_history_anchors AS a WHERE tbl = ANY (a.partitions)) THEN
    RAISE EXCEPTION 'refused: % is not an archived history partition', tbl;
  END IF;
  IF EXISTS (SELECT FROM pg_inherits WHERE inhrelid = to_regclass(tbl)) THEN
    RAISE EXCEPTION 'refused: % is still attached', tbl;
  END IF;
  UPDATE qm_history_anchors AS a
     SET exported = a.exported || jsonb_build_object(tbl, file_sha256)
   WHERE tbl = ANY (a.partitions);
  EXECUTE format('DROP TABLE IF EXISTS %I', tbl);
END
$$;

-- While the previous release runs it writes qm_audit in the same statement as the change: its
-- user becomes that row's context, unless the writer set one.
CREATE FUNCTION qm_history_legacy_context() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  IF coalesce(current_setting('qm.context', true), '') = '' THEN
    PERFORM set_config('qm.contexts', (coalesce(qm_history_context('qm.contexts'), '{}')
      || jsonb_build_object(NEW.namespace || '/' || NEW.name, jsonb_build_object(
           'principal', NEW.username, 'groups', to_jsonb(NEW.groups), 'verb', NEW.verb,
           'subresource', nullif(NEW.subresource, ''))))::text, true);
  END IF;
  RETURN NEW;
END
$$;
"""

GUARDS = """
CREATE TRIGGER qm_history_append_only BEFORE UPDATE OR DELETE ON qm_history
  FOR EACH ROW EXECUTE FUNCTION qm_history_guard();
CREATE TRIGGER qm_history_no_truncate BEFORE TRUNCATE ON qm_history
  FOR EACH STATEMENT EXECUTE FUNCTION qm_history_guard();
CREATE TRIGGER qm_history_default_guard BEFORE TRUNCATE ON qm_history_default
  FOR EACH STATEMENT EXECUTE FUNCTION qm_history_guard();
ALTER TABLE qm_history ENABLE ALWAYS TRIGGER qm_history_append_only;
ALTER TABLE qm_history ENABLE ALWAYS TRIGGER qm_history_no_truncate;
ALTER TABLE qm_history_default ENABLE ALWAYS TRIGGER qm_history_default_guard;
"""

LEGACY_TRIGGER = """
CREATE TRIGGER qm_audit_history_context BEFORE INSERT ON qm_audit
  FOR EACH ROW EXECUTE FUNCTION qm_history_legacy_context();
"""


GRANTS = """
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO qm_app;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO qm_app;
REVOKE UPDATE, DELETE ON qm_audit FROM qm_app;
REVOKE INSERT, UPDATE, DELETE ON alembic_version FROM qm_app;
REVOKE ALL ON qm_history, qm_history_default, qm_history_tally, qm_history_chain,
  qm_history_anchors, qm_history_backfill FROM qm_app, PUBLIC;
REVOKE ALL ON SEQUENCE qm_history_id_seq, qm_history_anchors_id_seq FROM qm_app, PUBLIC;
ALTER DEFAULT PRIVILEGES IN SCHEMA public
  GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO qm_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public
  GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO qm_app;
REVOKE ALL ON FUNCTION qm_history_seal(integer), qm_history_verify(), qm_history_status(),
  qm_history_archive(timestamptz), qm_history_drop_archived(text, text),
  qm_history_partition(timestamptz), qm_history_partitions(integer), qm_history_fold()
  FROM PUBLIC;
GRANT EXECUTE ON FUNCTION qm_history_seal(integer), qm_history_verify(), qm_history_status()
  TO qm_app;
GRANT EXECUTE ON FUNCTION qm_history_verify(), qm_history_status(),
  qm_history_archive(timestamptz), qm_history_drop_archived(text, text) TO qm_archivist;
GRANT SELECT ON qm_history_anchors TO qm_archivist;
"""

# Partitions for every month the legacy audit rows cover, this month and the next two.
# Then (CUTOFF) the copy's cutoff and the history ids after it, read while the triggers' locks
# are held, so no write is in flight on a state table: every qm_audit row past the cutoff
# belongs to a write the triggers record.
PARTITIONS_AND_CUTOFF = """
SELECT qm_history_partition(m)
  FROM generate_series(date_trunc('month', (SELECT min(at) FROM qm_audit), 'UTC'),
                       date_trunc('month', now(), 'UTC') - interval '1 month',
                       interval '1 month') AS m;
SELECT qm_history_partitions(2);
"""

CUTOFF = """
INSERT INTO qm_history_backfill (audit_cutoff)
  SELECT coalesce(max(id), 0) FROM qm_audit;
SELECT setval('qm_history_id_seq', (SELECT audit_cutoff + 1 FROM qm_history_backfill), false);
"""

LEGACY_COLUMNS = (
    "id, at, table_name, kind, namespace, name, uid, op, before, after, db_role, "
    "application_name, principal, groups, verb, subresource"
)


def _legacy_select() -> str:
    tables = " ".join(f"WHEN '{k}' THEN '{t}'" for t, k in KIND_TABLES.items())
    return f"""
SELECT a.id, a.at, CASE a.kind {tables} ELSE lower(a.kind) END AS table_name, a.kind,
       a.namespace, a.name, a.uid,
       CASE a.verb WHEN 'create' THEN 'insert' WHEN 'delete' THEN 'delete' ELSE 'update' END
         AS op,
       a.before, a.after, NULL::text AS db_role, 'qm_audit' AS application_name,
       a.username AS principal, a.groups, a.verb, nullif(a.subresource, '') AS subresource
  FROM qm_audit AS a
 WHERE a.id <= (SELECT audit_cutoff FROM qm_history_backfill)"""


def upgrade() -> None:
    op.execute(ROLES)
    op.execute(TABLES)
    op.execute(FUNCTIONS)
    op.execute(GUARDS)
    op.execute(GRANTS)
    op.execute(PARTITIONS_AND_CUTOFF)
    # Last, the triggers on the tables the application writes, their locks taken at once in
    # the order its statements take them (a kind table, then qm_audit), held for milliseconds.
    online.lock_tables(*TRACKED, "qm_audit")
    for table, (key, kind, rule, dropped) in TRACKED.items():
        op.execute(history_triggers(table, kind, key=key, rule=rule, dropped=dropped))
    op.execute(LEGACY_TRIGGER)
    op.execute(CUTOFF)
    # After the DDL commits, so the copy holds no lock a writer waits on.
    online.insert_batched("qm_history", LEGACY_COLUMNS, _legacy_select(), key="id", batch=5000)


def downgrade() -> None:
    for table in TRACKED:
        for suffix in ("", "_ins", "_upd", "_del", "_truncate"):
            op.execute(f"DROP TRIGGER IF EXISTS {table}_history{suffix} ON {table}")
    op.execute("DROP TRIGGER IF EXISTS qm_audit_history_context ON qm_audit")
    op.execute(
        """
ALTER DEFAULT PRIVILEGES IN SCHEMA public
  REVOKE SELECT, INSERT, UPDATE, DELETE ON TABLES FROM qm_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public
  REVOKE USAGE, SELECT, UPDATE ON SEQUENCES FROM qm_app;
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM qm_app, qm_archivist;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM qm_app, qm_archivist;
"""
    )
    # Archived partitions that were detached but not dropped yet go too.
    op.execute(
        """
DO $$
DECLARE
  t text;
BEGIN
  FOR t IN SELECT unnest(partitions) FROM qm_history_anchors LOOP
    EXECUTE format('DROP TABLE IF EXISTS %I', t);
  END LOOP;
END
$$;
"""
    )
    # The canonical form takes the table's row type; the partitions' guards need the guard.
    op.execute("DROP FUNCTION IF EXISTS qm_history_canon(qm_history)")
    op.execute("DROP TABLE IF EXISTS " + ", ".join(HISTORY_TABLES))
    op.execute(
        "DROP FUNCTION IF EXISTS qm_history_legacy_context(), "
        "qm_history_drop_archived(text, text), qm_history_archive(timestamptz), "
        "qm_history_status(), qm_history_verify(), qm_history_seal(integer), qm_history_fold(), "
        "qm_history_partitions(integer), qm_history_partition(timestamptz), qm_history_guard(), "
        "qm_history_record(), qm_history_record_batch(), qm_history_churn(text, jsonb, jsonb), "
        "qm_history_image(text, jsonb, text[]), qm_history_groups(jsonb), "
        "qm_history_str(jsonb, text), qm_history_context(text)"
    )
    # The roles are cluster-wide and other databases may use them: they stay.
