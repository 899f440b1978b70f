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
* Append-only: ``qm_history_guard`` refuses UPDATE, DELETE and TRUNCATE, with no exception.
  ``qm_history_seal(max_rows)`` chains committed rows in (xid, id) order by appending to
  ``qm_history_links`` (seq, the row's id and at, ``hash = sha256(previous hash ||
  qm_history_canon(row, seq))``), so no history row is ever rewritten; ``qm_history_verify()``
  returns the first broken link; ``qm_history_archive(before)`` detaches sealed months after
  recording an anchor in ``qm_history_anchors``, from which verification then starts.
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
    "qm_history", "qm_history_links", "qm_history_tally", "qm_history_chain",
    "qm_history_anchors", "qm_history_backfill",
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
  xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
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
  PRIMARY KEY (id, at)
) PARTITION BY RANGE (at);
ALTER SEQUENCE qm_history_id_seq OWNED BY qm_history.id;
CREATE TABLE qm_history_default PARTITION OF qm_history DEFAULT;
ALTER TABLE qm_history_default ALTER COLUMN before SET STATISTICS 0,
  ALTER COLUMN after SET STATISTICS 0;
CREATE INDEX qm_history_object ON qm_history (table_name, namespace, name, at);
CREATE INDEX qm_history_principal ON qm_history (principal, at) WHERE principal IS NOT NULL;
CREATE INDEX qm_history_at ON qm_history USING brin (at);
-- The sealer's order: rows past its cursor are the ones not chained yet.
CREATE INDEX qm_history_xid ON qm_history (xid, id);
COMMENT ON TABLE qm_history IS
  'Every insert, update and delete of a state table, with who (database role and application '
  'principal), why and when; append-only, chained by SHA-256 in qm_history_links '
  '(docs/history.md)';
COMMENT ON COLUMN qm_history.before IS
  'delete: the whole row; update: the old values of the top-level columns that changed';
COMMENT ON COLUMN qm_history.after IS
  'insert: the whole row; update: the new values of the columns that changed; '
  'summary: the hour and the number of writes counted';
COMMENT ON COLUMN qm_history.summary_count IS
  'op = summary: how many high-churn writes of that table and namespace the hour saw';
COMMENT ON COLUMN qm_history.xid IS
  'The writing transaction (top level); the sealer chains rows in (xid, id) order';

-- The hash chain, beside the history rather than in it, so no history row is ever updated:
-- one narrow row per sealed history row, appended by qm_history_seal.
CREATE TABLE qm_history_links (
  seq bigint PRIMARY KEY,
  id bigint NOT NULL,
  at timestamptz NOT NULL,
  hash bytea NOT NULL
);
CREATE UNIQUE INDEX qm_history_links_row ON qm_history_links (id, at);
COMMENT ON TABLE qm_history_links IS
  'The hash chain over qm_history: seq, the history row (id, at) and '
  'sha256(previous hash || qm_history_canon(row, seq)); append-only';

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
  cursor_xid xid8 NOT NULL DEFAULT '0',
  cursor_id bigint NOT NULL DEFAULT 0,
  sealed_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE qm_history_chain IS
  'The tip of the hash chain: the last sealed seq and hash, and the (xid, id) of the last '
  'history row sealed (every row at or before it is sealed)';

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

-- The canonical text hashed for a row: a JSON array of its seq in the chain and every column,
-- timestamps in UTC, so the result does not depend on the session's settings.
CREATE FUNCTION qm_history_canon(h qm_history, seq bigint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT jsonb_build_array(
    seq, h.id, to_char(h.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    h.xid::text, h.table_name, h.kind, h.namespace, h.name, h.uid, h.op, h.before, h.after,
    h.db_role, h.application_name, h.principal, to_jsonb(h.groups), h.request_id,
    h.client_addr, h.user_agent, h.reason, h.verb, h.subresource, h.summary_count)::text
$$;

-- AFTER ... FOR EACH ROW on every state table, and BEFORE TRUNCATE. Arguments: key column,
-- kind ('' for an internal table), summarising rule, columns never copied (a text[] literal).
-- Row level rather than statement level with transition tables: nearly every write is one
-- row, and a row trigger's statements are planned once per session, where the set-based
-- statement over transition tables cost more per write than it saved (ADR 0052).
-- A statement carrying many writers' contexts (qm.contexts) is recorded by
-- qm_history_record_batch instead: the trigger's WHEN clause keeps this one from firing
-- (without a function call) when the setting was there as the row was written.
-- Kept lean, because it runs in every write: plpgsql initialises each expression it evaluates
-- once per transaction, so the row image is built inline (the image function is called for
-- Secrets only), the update's diff is one pass over the new image, and the context is parsed
-- once (groups only when present).
CREATE FUNCTION qm_history_record() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
  v_old jsonb;
  v_row jsonb;
  v_before jsonb;
  v_after jsonb;
  v_ctx jsonb;
  v_text text;
  v_groups text[];
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
  -- Checked again when firing: a statement can set qm.contexts after its rows were queued (the
  -- previous release's qm_audit insert does), and then the statement triggers record them.
  IF current_setting('qm.contexts', true) <> '' THEN
    RETURN NULL;
  END IF;
  IF TG_OP = 'INSERT' THEN
    v_row := to_jsonb(NEW);
  ELSE
    v_row := to_jsonb(OLD);
  END IF;
  IF TG_ARGV[3] <> '{}' THEN
    v_row := v_row - TG_ARGV[3]::text[];
  END IF;
  IF TG_TABLE_NAME = 'secrets' THEN
    v_row := public.qm_history_image('secrets', v_row, '{}');
  END IF;
  IF TG_OP = 'INSERT' THEN
    v_after := v_row;
  ELSIF TG_OP = 'DELETE' THEN
    v_before := v_row;
  ELSE
    v_old := v_row;
    v_row := to_jsonb(NEW);
    IF TG_ARGV[3] <> '{}' THEN
      v_row := v_row - TG_ARGV[3]::text[];
    END IF;
    IF TG_TABLE_NAME = 'secrets' THEN
      v_row := public.qm_history_image('secrets', v_row, '{}');
    END IF;
    SELECT coalesce(jsonb_object_agg(n.key, v_old -> n.key), '{}'),
           coalesce(jsonb_object_agg(n.key, n.value), '{}')
      INTO v_before, v_after
      FROM jsonb_each(v_row) AS n
     WHERE n.value IS DISTINCT FROM v_old -> n.key;
  END IF;
  -- Counted, not stored: this backend's own row for the hour, so no two connections wait.
  IF TG_ARGV[2] = 'all' OR (TG_ARGV[2] <> 'none' AND TG_OP = 'UPDATE'
     AND coalesce(public.qm_history_churn(TG_ARGV[2], v_before, v_after), false)) THEN
    INSERT INTO public.qm_history_tally AS y (hour, table_name, namespace, backend, kind, count)
    VALUES (date_trunc('hour', statement_timestamp(), 'UTC'), TG_TABLE_NAME,
            coalesce(v_row ->> 'namespace', ''), pg_backend_pid(), nullif(TG_ARGV[1], ''), 1)
    ON CONFLICT (hour, table_name, namespace, backend) DO UPDATE SET count = y.count + 1;
    RETURN NULL;
  END IF;
  -- The setting is looked at before it is parsed: most writes carry one, a DBA's none. A value
  -- that is not a JSON object is kept as the reason rather than failing the write.
  v_text := current_setting('qm.context', true);
  IF v_text <> '' THEN
    IF pg_input_is_valid(v_text, 'jsonb') THEN
      v_ctx := v_text::jsonb;
    END IF;
    IF jsonb_typeof(v_ctx) IS DISTINCT FROM 'object' THEN
      v_ctx := jsonb_build_object('reason', 'unreadable qm.context: ' || left(v_text, 200));
    ELSIF jsonb_typeof(v_ctx -> 'groups') = 'array' THEN
      v_groups := ARRAY(SELECT jsonb_array_elements_text(v_ctx -> 'groups'));
    END IF;
  END IF;
  INSERT INTO public.qm_history (xid, table_name, kind, namespace, name, uid, op, before, after,
    db_role, application_name, principal, groups, request_id, client_addr, user_agent, reason,
    verb, subresource)
  VALUES (pg_current_xact_id(), TG_TABLE_NAME, nullif(TG_ARGV[1], ''),
          coalesce(v_row ->> 'namespace', ''), coalesce(v_row ->> 'name', v_row ->> TG_ARGV[0]),
          (v_row ->> 'uid')::uuid, lower(TG_OP), v_before, v_after, session_user,
          current_setting('application_name'), public.qm_history_str(v_ctx, 'principal'),
          v_groups, public.qm_history_str(v_ctx, 'request_id'),
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


-- Append-only, history and chain alike: no UPDATE, DELETE or TRUNCATE, by anyone.
CREATE FUNCTION qm_history_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
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

-- Chain up to ``max_rows`` committed, unsealed rows onto the tip, appending one link each to
-- qm_history_links: history rows are never updated. Rows are taken in (xid, id) order past the
-- cursor the tip keeps, and only those of transactions older than the oldest one still
-- running: such a transaction has ended, so its rows (if it committed) are all visible and no
-- row can ever appear before the cursor. A long-running write transaction anywhere on the
-- server therefore holds sealing back until it ends (the lag metric shows it). One sealer at
-- a time (an advisory lock; a second caller returns 0 at once). Also folds finished hours
-- (sealed by the next call: they belong to this transaction) and makes next month's partition
-- when it is missing. Returns the number of rows sealed.
CREATE FUNCTION qm_history_seal(max_rows integer DEFAULT 5000) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
DECLARE
  tip qm_history_chain;
  r record;
  s bigint;
  h bytea;
  v_xmin xid8;
  v_xid xid8;
  v_id bigint;
  seqs bigint[] := '{}';
  ids bigint[] := '{}';
  ats timestamptz[] := '{}';
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
  -- Taken before the rows are read (the next statement's snapshot sees every row of the
  -- transactions below it that committed).
  v_xmin := pg_snapshot_xmin(pg_current_snapshot());
  s := tip.last_seq;
  h := tip.last_hash;
  v_xid := tip.cursor_xid;
  v_id := tip.cursor_id;
  FOR r IN SELECT q AS q, q.xid, q.id, q.at FROM qm_history AS q
            WHERE (q.xid, q.id) > (tip.cursor_xid, tip.cursor_id) AND q.xid < v_xmin
            ORDER BY q.xid, q.id LIMIT max_rows LOOP
    s := s + 1;
    h := sha256(h || convert_to(qm_history_canon(r.q, s), 'UTF8'));
    seqs := seqs || s;
    ids := ids || r.id;
    ats := ats || r.at;
    hashes := hashes || h;
    v_xid := r.xid;
    v_id := r.id;
  END LOOP;
  IF s = tip.last_seq THEN
    RETURN 0;
  END IF;
  INSERT INTO qm_history_links (seq, id, at, hash)
    SELECT * FROM unnest(seqs, ids, ats, hashes);
  UPDATE qm_history_chain SET last_seq = s, last_hash = h, cursor_xid = v_xid,
         cursor_id = v_id, sealed_at = now()
   WHERE id = 1;
  RETURN s - tip.last_seq;
END
$$;

-- The first broken link of the chain from the latest anchor, or no row: a link whose history
-- row does not hash to it with the previous hash (changed after sealing), a link whose row is
-- gone, a gap or repeat in seq, a row behind the sealer's cursor that no link chains (added
-- with triggers bypassed), or a tip shorter than the one recorded.
CREATE FUNCTION qm_history_verify()
RETURNS TABLE (seq bigint, id bigint, at timestamptz, problem text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  WITH a AS (
    SELECT last_seq, last_hash FROM qm_history_anchors ORDER BY last_seq DESC LIMIT 1
  ), r AS (
    SELECT l.seq, l.id, l.at, l.hash, h.id IS NULL AS gone,
           CASE WHEN h.id IS NOT NULL THEN qm_history_canon(h, l.seq) END AS c,
           lag(l.seq) OVER w AS prev_seq, lag(l.hash) OVER w AS prev_hash
      FROM qm_history_links AS l
      LEFT JOIN qm_history AS h ON h.id = l.id AND h.at = l.at
     WHERE l.seq > (SELECT last_seq FROM a)
    WINDOW w AS (ORDER BY l.seq)
  ), bad AS (
    SELECT r.seq, r.id, r.at, CASE
        WHEN coalesce(r.prev_seq, a.last_seq) <> r.seq - 1 THEN
          CASE WHEN coalesce(r.prev_seq, a.last_seq) = r.seq
               THEN 'seq ' || r.seq || ' appears twice'
               ELSE format('rows with seq %s to %s are missing',
                           coalesce(r.prev_seq, a.last_seq) + 1, r.seq - 1) END
        WHEN r.gone THEN 'the row is gone: it was removed after it was sealed'
        WHEN r.hash IS DISTINCT FROM sha256(coalesce(r.prev_hash, a.last_hash)
                                            || convert_to(r.c, 'UTF8')) THEN
          'the row does not match its hash: it was changed after it was sealed'
      END AS problem
      FROM r CROSS JOIN a
  ), stray AS (
    SELECT NULL::bigint AS seq, h.id, h.at,
           'the row is not in the chain though sealing has passed it: it was added with the '
           || 'guards bypassed' AS problem
      FROM qm_history AS h CROSS JOIN qm_history_chain AS c
     WHERE (h.xid, h.id) <= (c.cursor_xid, c.cursor_id)
       AND h.at >= coalesce((SELECT max(x.before) FROM qm_history_anchors AS x), '-infinity')
       AND NOT EXISTS (SELECT FROM qm_history_links AS l WHERE l.id = h.id AND l.at = h.at)
     ORDER BY h.id
     LIMIT 1
  ), tail AS (
    SELECT NULL::bigint AS seq, NULL::bigint AS id, NULL::timestamptz AS at,
           format('the chain ends at seq %s but seq %s was sealed',
                  coalesce(max(l.seq), a.last_seq), c.last_seq) AS problem
      FROM qm_history_chain AS c CROSS JOIN a
      LEFT JOIN qm_history_links AS l ON l.seq > a.last_seq
     GROUP BY c.last_seq, a.last_seq
    HAVING coalesce(max(l.seq), a.last_seq) < c.last_seq
  )
  SELECT * FROM (SELECT * FROM bad WHERE problem IS NOT NULL ORDER BY seq LIMIT 1) AS first
  UNION ALL
  SELECT * FROM tail
  UNION ALL
  SELECT * FROM stray
  LIMIT 1
$$;

-- How far sealing is: for the sealer's lag metric and ``qm audit verify``.
CREATE FUNCTION qm_history_status(OUT sealed_seq bigint, OUT anchor_seq bigint,
  OUT unsealed bigint, OUT oldest_unsealed timestamptz, OUT tip_hash text)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
  SELECT c.last_seq, (SELECT max(last_seq) FROM qm_history_anchors), u.n, u.oldest,
         encode(c.last_hash, 'hex')
    FROM qm_history_chain AS c
    CROSS JOIN LATERAL (
      SELECT count(*) AS n, min(h.at) AS oldest FROM qm_history AS h
       WHERE (h.xid, h.id) > (c.cursor_xid, c.cursor_id)) AS u
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
  IF EXISTS (SELECT FROM qm_history AS h CROSS JOIN qm_history_chain AS c
              WHERE h.at < v_end AND (h.xid, h.id) > (c.cursor_xid, c.cursor_id)) THEN
    RAISE EXCEPTION 'refused: the history partitions to archive hold rows not sealed yet';
  END IF;
  SELECT l.seq, l.hash INTO v_seq, v_hash FROM qm_history_links AS l
   WHERE l.at < v_end ORDER BY l.seq DESC LIMIT 1;
  IF v_seq IS NULL THEN
    RAISE EXCEPTION 'refused: the history partitions to archive are empty; nothing to anchor';
  END IF;
  IF EXISTS (SELECT FROM qm_history_links AS l WHERE l.at >= v_end AND l.seq < v_seq) THEN
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
CREATE TRIGGER qm_history_links_append_only BEFORE UPDATE OR DELETE ON qm_history_links
  FOR EACH ROW EXECUTE FUNCTION qm_history_guard();
CREATE TRIGGER qm_history_links_no_truncate BEFORE TRUNCATE ON qm_history_links
  FOR EACH STATEMENT EXECUTE FUNCTION qm_history_guard();
ALTER TABLE qm_history ENABLE ALWAYS TRIGGER qm_history_append_only;
ALTER TABLE qm_history ENABLE ALWAYS TRIGGER qm_history_no_truncate;
ALTER TABLE qm_history_default ENABLE ALWAYS TRIGGER qm_history_default_guard;
ALTER TABLE qm_history_links ENABLE ALWAYS TRIGGER qm_history_links_append_only;
ALTER TABLE qm_history_links ENABLE ALWAYS TRIGGER qm_history_links_no_truncate;
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
REVOKE ALL ON qm_history, qm_history_default, qm_history_links, qm_history_tally,
  qm_history_chain, qm_history_anchors, qm_history_backfill FROM qm_app, PUBLIC;
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
GRANT SELECT ON qm_history_anchors, qm_history_links TO qm_archivist;
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
    op.execute("DROP FUNCTION IF EXISTS qm_history_canon(qm_history, bigint)")
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
