"""What ``alembic upgrade head`` leaves besides tables, as PostgreSQL prints it back.

Written by ``python -m app.store.schema_render write URL`` on a database at head;
``qm db check`` compares a database against it (``app/store/drift.py``).
"""

# ruff: noqa  (generated: SQL as the database prints it)
from __future__ import annotations

# The revision these definitions are at.
REVISION = "0020"

FUNCTIONS: dict[str, str] = {
    "qm_actor_groups(actor text)": r"""returns text[]
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT coalesce((string_to_array(actor, E'\x1f'))[2\:], '{}')
$function$""",
    "qm_actor_name(actor text)": r"""returns text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$ SELECT split_part(actor, E'\x1f', 1) $function$""",
    "qm_bigint(n numeric)": """returns bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN n BETWEEN -9223372036854775808 AND 9223372036854775807 THEN n::bigint END
$function$""",
    "qm_bytes(v text)": """returns bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT qm_bigint(ceil(qm_quantity(v)))
$function$""",
    "qm_condition_true(status jsonb, cond text)": """returns boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT coalesce(jsonb_path_exists(status, '$.conditions[*] ? (@.type == $t && @.status == "True")',
                                    jsonb_build_object('t', cond)), false)
$function$""",
    "qm_count(v text)": """returns integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN c BETWEEN -2147483648 AND 2147483647 THEN c::integer END
  FROM ceil(qm_quantity(v)) AS c
$function$""",
    "qm_cpu_milli(v text)": """returns bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT qm_bigint(ceil(qm_quantity(v) * 1000))
$function$""",
    "qm_history_archive(before timestamp with time zone)": r"""returns SETOF text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
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
    RAISE EXCEPTION 'refused\: the history partitions to archive hold rows not sealed yet';
  END IF;
  SELECT l.seq, l.hash INTO v_seq, v_hash FROM qm_history_links AS l
   WHERE l.at < v_end ORDER BY l.seq DESC LIMIT 1;
  IF v_seq IS NULL THEN
    RAISE EXCEPTION 'refused\: the history partitions to archive are empty; nothing to anchor';
  END IF;
  IF EXISTS (SELECT FROM qm_history_links AS l WHERE l.at >= v_end AND l.seq < v_seq) THEN
    RAISE EXCEPTION 'refused\: rows that stay were sealed before seq %, the last to archive',
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
$function$""",
    "qm_history_canon(h qm_history, seq bigint)": r"""returns text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT jsonb_build_array(
    seq, h.id, to_char(h.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24\:MI\:SS.US"Z"'),
    h.xid::text, h.table_name, h.kind, h.namespace, h.name, h.uid, h.op, h.before, h.after,
    h.db_role, h.application_name, h.principal, to_jsonb(h.groups), h.request_id,
    h.client_addr, h.user_agent, h.reason, h.verb, h.subresource, h.summary_count)::text
$function$""",
    "qm_history_churn(rule text, before jsonb, after jsonb)": """returns boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE rule
    WHEN 'all' THEN true
    WHEN 'status' THEN (before - 'status' - 'row_version') = '{}'::jsonb
    WHEN 'lease' THEN (before - 'spec' - 'generation' - 'row_version') = '{}'::jsonb
                      AND coalesce((before -> 'spec') - 'renewTime', '{}')
                          = coalesce((after -> 'spec') - 'renewTime', '{}')
    WHEN 'heartbeat' THEN (before - 'renewed_at') = '{}'::jsonb
    ELSE false
  END
$function$""",
    "qm_history_context(setting text)": r"""returns jsonb
 LANGUAGE sql
 STABLE PARALLEL SAFE
AS $function$
  SELECT CASE
    WHEN coalesce(current_setting(setting, true), '') = '' THEN NULL
    WHEN pg_input_is_valid(current_setting(setting, true), 'jsonb')
         AND jsonb_typeof(CASE WHEN pg_input_is_valid(current_setting(setting, true), 'jsonb')
                               THEN current_setting(setting, true)::jsonb END) = 'object'
      THEN current_setting(setting, true)::jsonb
    ELSE jsonb_build_object('reason',
           'unreadable ' || setting || '\: ' || left(current_setting(setting, true), 200))
  END
$function$""",
    "qm_history_drop_archived(tbl text, file_sha256 text)": r"""returns void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
BEGIN
  IF NOT EXISTS (SELECT FROM qm_history_anchors AS a WHERE tbl = ANY (a.partitions)) THEN
    RAISE EXCEPTION 'refused\: % is not an archived history partition', tbl;
  END IF;
  IF EXISTS (SELECT FROM pg_inherits WHERE inhrelid = to_regclass(tbl)) THEN
    RAISE EXCEPTION 'refused\: % is still attached', tbl;
  END IF;
  UPDATE qm_history_anchors AS a
     SET exported = a.exported || jsonb_build_object(tbl, file_sha256)
   WHERE tbl = ANY (a.partitions);
  EXECUTE format('DROP TABLE IF EXISTS %I', tbl);
END
$function$""",
    "qm_history_fold()": r"""returns integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
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
             'from', to_char(hour AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24\:MI\:SS"Z"'),
             'hours', 1, 'writes', sum(count)),
           sum(count), session_user, current_setting('application_name')
      FROM done GROUP BY hour, table_name, namespace
    RETURNING 1
  )
  SELECT count(*) INTO n FROM s;
  RETURN n;
END
$function$""",
    "qm_history_groups(c jsonb)": """returns text[]
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN jsonb_typeof(c -> 'groups') = 'array'
              THEN ARRAY(SELECT jsonb_array_elements_text(c -> 'groups')) END
$function$""",
    "qm_history_guard()": """returns trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege',
    MESSAGE = format('the change history is append-only (%s on %s refused)', TG_OP, TG_TABLE_NAME);
END
$function$""",
    "qm_history_image(tbl text, j jsonb, dropped text[])": r"""returns jsonb
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN tbl <> 'secrets' THEN j - dropped
    ELSE (j - dropped)
      || jsonb_build_object('spec', (j -> 'spec') - 'data' - 'stringData'
           || CASE WHEN j -> 'spec' ? 'data' THEN jsonb_build_object('data', 'sha256\:'
                || encode(sha256(convert_to((j -> 'spec' -> 'data')::text, 'UTF8')), 'hex'))
              ELSE '{}' END
           || CASE WHEN j -> 'spec' ? 'stringData' THEN jsonb_build_object('stringData', 'sha256\:'
                || encode(sha256(convert_to((j -> 'spec' -> 'stringData')::text, 'UTF8')), 'hex'))
              ELSE '{}' END)
      || CASE WHEN j -> 'annotations' ? 'kubectl.kubernetes.io/last-applied-configuration'
              THEN jsonb_build_object('annotations', (j -> 'annotations')
                     - 'kubectl.kubernetes.io/last-applied-configuration')
              ELSE '{}' END
  END
$function$""",
    "qm_history_legacy_context()": """returns trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'public'
AS $function$
BEGIN
  IF coalesce(current_setting('qm.context', true), '') = '' THEN
    PERFORM set_config('qm.contexts', (coalesce(qm_history_context('qm.contexts'), '{}')
      || jsonb_build_object(NEW.namespace || '/' || NEW.name, jsonb_build_object(
           'principal', NEW.username, 'groups', to_jsonb(NEW.groups), 'verb', NEW.verb,
           'subresource', nullif(NEW.subresource, ''))))::text, true);
  END IF;
  RETURN NEW;
END
$function$""",
    "qm_history_native(tbl text, native boolean DEFAULT true)": """returns boolean
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
DECLARE
  v_from text := CASE WHEN native THEN 'qm_history_record' ELSE 'qm_history_record_native' END;
  v_to text := CASE WHEN native THEN 'qm_history_record_native' ELSE 'qm_history_record' END;
  v_def text;
BEGIN
  IF tbl = 'secrets' OR to_regprocedure('public.' || v_to || '()') IS NULL THEN
    RETURN false;
  END IF;
  SELECT pg_get_triggerdef(t.oid) INTO v_def FROM pg_trigger t
   WHERE t.tgrelid = to_regclass(format('public.%I', tbl)) AND t.tgname = tbl || '_history'
     AND t.tgfoid = to_regprocedure('public.' || v_from || '()');
  IF v_def IS NULL THEN
    RETURN false;
  END IF;
  EXECUTE replace(replace(v_def, 'CREATE TRIGGER ', 'CREATE OR REPLACE TRIGGER '),
                  'EXECUTE FUNCTION ' || v_from || '(', 'EXECUTE FUNCTION ' || v_to || '(');
  EXECUTE format('ALTER TABLE public.%I ENABLE ALWAYS TRIGGER %I', tbl, tbl || '_history');
  RETURN true;
END
$function$""",
    "qm_history_partition(month timestamp with time zone)": r"""returns text
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
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
  -- No planner statistics for the row images\: nothing filters on them by value, and
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
$function$""",
    "qm_history_partitions(ahead integer DEFAULT 2)": """returns integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
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
$function$""",
    "qm_history_record()": r"""returns trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
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
  -- Checked again when firing\: a statement can set qm.contexts after its rows were queued (the
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
  -- Counted, not stored\: this backend's own row for the hour, so no two connections wait.
  IF TG_ARGV[2] = 'all' OR (TG_ARGV[2] <> 'none' AND TG_OP = 'UPDATE'
     AND coalesce(public.qm_history_churn(TG_ARGV[2], v_before, v_after), false)) THEN
    INSERT INTO public.qm_history_tally AS y (hour, table_name, namespace, backend, kind, count)
    VALUES (date_trunc('hour', statement_timestamp(), 'UTC'), TG_TABLE_NAME,
            coalesce(v_row ->> 'namespace', ''), pg_backend_pid(), nullif(TG_ARGV[1], ''), 1)
    ON CONFLICT (hour, table_name, namespace, backend) DO UPDATE SET count = y.count + 1;
    RETURN NULL;
  END IF;
  -- The setting is looked at before it is parsed\: most writes carry one, a DBA's none. A value
  -- that is not a JSON object is kept as the reason rather than failing the write.
  v_text := current_setting('qm.context', true);
  IF v_text <> '' THEN
    IF pg_input_is_valid(v_text, 'jsonb') THEN
      v_ctx := v_text::jsonb;
    END IF;
    IF jsonb_typeof(v_ctx) IS DISTINCT FROM 'object' THEN
      v_ctx := jsonb_build_object('reason', 'unreadable qm.context\: ' || left(v_text, 200));
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
$function$""",
    "qm_history_record_batch()": r"""returns trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
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
  -- the others)\: qm.contexts is parsed once for the whole statement.
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
$function$""",
    "qm_history_seal(max_rows integer DEFAULT 5000)": r"""returns integer
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
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
      -- Never queue behind a long transaction\: every writer would queue behind this.
      PERFORM set_config('lock_timeout', '200ms', true);
      PERFORM qm_history_partitions(1);
      PERFORM set_config('lock_timeout', v_lock_timeout, true);
    EXCEPTION WHEN lock_not_available THEN
      RAISE NOTICE 'next month''s history partition not made yet\: lock not available';
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
$function$""",
    "qm_history_status(OUT sealed_seq bigint, OUT anchor_seq bigint, OUT unsealed bigint, OUT oldest_unsealed timestamp with time zone, OUT tip_hash text)": """returns record
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
  SELECT c.last_seq, (SELECT max(last_seq) FROM qm_history_anchors), u.n, u.oldest,
         encode(c.last_hash, 'hex')
    FROM qm_history_chain AS c
    CROSS JOIN LATERAL (
      SELECT count(*) AS n, min(h.at) AS oldest FROM qm_history AS h
       WHERE (h.xid, h.id) > (c.cursor_xid, c.cursor_id)) AS u
$function$""",
    "qm_history_str(c jsonb, field text)": """returns text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN jsonb_typeof(c -> field) = 'string' THEN left(c ->> field, 1024) END
$function$""",
    "qm_history_verify()": r"""returns TABLE(seq bigint, id bigint, at timestamp with time zone, problem text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public', 'pg_temp'
AS $function$
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
        WHEN r.gone THEN 'the row is gone\: it was removed after it was sealed'
        WHEN r.hash IS DISTINCT FROM sha256(coalesce(r.prev_hash, a.last_hash)
                                            || convert_to(r.c, 'UTF8')) THEN
          'the row does not match its hash\: it was changed after it was sealed'
      END AS problem
      FROM r CROSS JOIN a
  ), stray AS (
    SELECT NULL::bigint AS seq, h.id, h.at,
           'the row is not in the chain though sealing has passed it\: it was added with the '
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
$function$""",
    "qm_int(v text)": """returns integer
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN v ~ '^-?[0-9]{1,10}$' THEN
    CASE WHEN v::bigint BETWEEN -2147483648 AND 2147483647 THEN v::integer END END
$function$""",
    "qm_ipv4(v text)": r"""returns inet
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN m IS NOT NULL THEN v::inet END FROM regexp_match(v, '^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])$') AS m
$function$""",
    "qm_nodes_allocation()": """returns trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  PERFORM pg_advisory_xact_lock(hashtextextended('qm-node/' || NEW.name, 0));
  INSERT INTO nodes_allocated (node_uid, cpu_milli, memory_bytes, gpu, pods)
  SELECT NEW.uid, coalesce(sum(p.req_cpu_milli), 0), coalesce(sum(p.req_memory_bytes), 0),
         coalesce(sum(p.req_gpu), 0), count(*)
    FROM pods AS p
   WHERE (p.node_name IS NOT NULL AND coalesce(p.phase, '') NOT IN ('Succeeded', 'Failed')) AND p.node_name = NEW.name
  ON CONFLICT (node_uid) DO NOTHING;
  RETURN NULL;
END
$function$""",
    "qm_pod_cross_namespace(spec jsonb)": """returns boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT spec ? 'affinity' AND (jsonb_path_exists(spec,
    'lax $.affinity.*.requiredDuringSchedulingIgnoredDuringExecution[*]
       ? (@.namespaceSelector != null || @.namespaces[0] != null)', '{}', true)
      OR jsonb_path_exists(spec,
    'lax $.affinity.*.preferredDuringSchedulingIgnoredDuringExecution[*].podAffinityTerm
       ? (@.namespaceSelector != null || @.namespaces[0] != null)', '{}', true))
$function$""",
    "qm_pod_derived()": """returns trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  list jsonb; c jsonb; r jsonb; l jsonb; init boolean;
  rc bigint; rm bigint; rg bigint; lc bigint; lm bigint;
  s_rc bigint := 0; s_rm bigint := 0; s_rg bigint := 0; s_lc bigint := 0; s_lm bigint := 0;
  i_rc bigint := 0; i_rm bigint := 0; i_rg bigint := 0; i_lc bigint := 0; i_lm bigint := 0;
  qos boolean := false;
BEGIN
  IF NEW.spec->>'nodeName' IS NOT NULL
     AND (TG_OP = 'INSERT' OR OLD.spec->>'nodeName' IS NULL) THEN
    NEW.bound_at := clock_timestamp();
  END IF;
  IF TG_OP = 'UPDATE' AND NOT (OLD.spec->'containers' IS DISTINCT FROM NEW.spec->'containers' OR OLD.spec->'initContainers' IS DISTINCT FROM NEW.spec->'initContainers' OR OLD.spec->'priorityClassName' IS DISTINCT FROM NEW.spec->'priorityClassName' OR OLD.spec->'activeDeadlineSeconds' IS DISTINCT FROM NEW.spec->'activeDeadlineSeconds' OR OLD.spec->'affinity' IS DISTINCT FROM NEW.spec->'affinity') THEN
    RETURN NEW;
  END IF;
  FOREACH init IN ARRAY ARRAY[false, true] LOOP
    list := NEW.spec->(CASE WHEN init THEN 'initContainers' ELSE 'containers' END);
    CONTINUE WHEN jsonb_typeof(list) IS DISTINCT FROM 'array';
    FOR c IN SELECT jsonb_array_elements(list) LOOP
      CONTINUE WHEN jsonb_typeof(c) IS DISTINCT FROM 'object';
      r := c->'resources'->'requests';
      l := c->'resources'->'limits';
      rc := coalesce(qm_cpu_milli(r->>'cpu'), 0);
      rm := coalesce(qm_bytes(r->>'memory'), 0);
      rg := coalesce(qm_bytes(r->>'nvidia.com/gpu'), 0);
      lc := coalesce(qm_cpu_milli(l->>'cpu'), 0);
      lm := coalesce(qm_bytes(l->>'memory'), 0);
      qos := qos
        OR coalesce(jsonb_typeof(r) = 'object' AND r ?| ARRAY['cpu', 'memory'], false)
        OR coalesce(jsonb_typeof(l) = 'object' AND l ?| ARRAY['cpu', 'memory'], false);
      IF init THEN
        i_rc := greatest(i_rc, rc); i_rm := greatest(i_rm, rm); i_rg := greatest(i_rg, rg);
        i_lc := greatest(i_lc, lc); i_lm := greatest(i_lm, lm);
      ELSE
        s_rc := s_rc + rc; s_rm := s_rm + rm; s_rg := s_rg + rg;
        s_lc := s_lc + lc; s_lm := s_lm + lm;
      END IF;
    END LOOP;
  END LOOP;
  NEW.req_cpu_milli := s_rc;
  NEW.req_memory_bytes := s_rm;
  NEW.req_gpu := s_rg;
  NEW.quota_cpu_milli := greatest(s_rc, i_rc);
  NEW.quota_memory_bytes := greatest(s_rm, i_rm);
  NEW.quota_gpu := greatest(s_rg, i_rg);
  NEW.quota_limit_cpu_milli := greatest(s_lc, i_lc);
  NEW.quota_limit_memory_bytes := greatest(s_lm, i_lm);
  NEW.quota_best_effort := NOT qos;
  NEW.quota_priority_class := coalesce(NEW.spec->>'priorityClassName', '');
  NEW.quota_terminating := coalesce(NEW.spec->'activeDeadlineSeconds', 'null') <> 'null';
  NEW.quota_cross_namespace := NEW.spec ? 'affinity' AND qm_pod_cross_namespace(NEW.spec);
  RETURN NEW;
END
$function$""",
    "qm_pod_quota()": """returns trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  SELECT * INTO NEW.quota_cpu_milli, NEW.quota_memory_bytes, NEW.quota_gpu, NEW.quota_limit_cpu_milli, NEW.quota_limit_memory_bytes, NEW.quota_best_effort FROM qm_pod_quota_charge(NEW.spec);
  NEW.quota_priority_class := coalesce(NEW.spec->>'priorityClassName', '');
  NEW.quota_terminating := coalesce(NEW.spec->'activeDeadlineSeconds', 'null') <> 'null';
  NEW.quota_cross_namespace := qm_pod_cross_namespace(NEW.spec);
  RETURN NEW;
END
$function$""",
    "qm_pod_quota_charge(spec jsonb, OUT cpu_milli bigint, OUT memory_bytes bigint, OUT gpu bigint, OUT limit_cpu_milli bigint, OUT limit_memory_bytes bigint, OUT best_effort boolean)": """returns record
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT greatest(coalesce(sum(rc) FILTER (WHERE NOT init), 0),
                  coalesce(max(rc) FILTER (WHERE init), 0))::bigint,
         greatest(coalesce(sum(rm) FILTER (WHERE NOT init), 0),
                  coalesce(max(rm) FILTER (WHERE init), 0))::bigint,
         greatest(coalesce(sum(rg) FILTER (WHERE NOT init), 0),
                  coalesce(max(rg) FILTER (WHERE init), 0))::bigint,
         greatest(coalesce(sum(lc) FILTER (WHERE NOT init), 0),
                  coalesce(max(lc) FILTER (WHERE init), 0))::bigint,
         greatest(coalesce(sum(lm) FILTER (WHERE NOT init), 0),
                  coalesce(max(lm) FILTER (WHERE init), 0))::bigint,
         NOT coalesce(bool_or(qos), false)
  FROM (
    SELECT init,
           qm_cpu_milli(r->>'cpu') AS rc, qm_bytes(r->>'memory') AS rm,
           qm_bytes(r->>'nvidia.com/gpu') AS rg,
           qm_cpu_milli(l->>'cpu') AS lc, qm_bytes(l->>'memory') AS lm,
           coalesce(jsonb_typeof(r) = 'object' AND r ?| ARRAY['cpu', 'memory'], false)
             OR coalesce(jsonb_typeof(l) = 'object' AND l ?| ARRAY['cpu', 'memory'], false) AS qos
    FROM (
      SELECT k.init, c->'resources'->'requests' AS r, c->'resources'->'limits' AS l
      FROM (VALUES (false, 'containers'), (true, 'initContainers')) AS k(init, key),
           jsonb_array_elements(CASE WHEN jsonb_typeof(spec->k.key) = 'array'
                                     THEN spec->k.key ELSE '[]'::jsonb END) AS c
      WHERE jsonb_typeof(c) = 'object'
    ) AS containers
  ) AS amounts
$function$""",
    "qm_pod_request(spec jsonb, resource text)": """returns bigint
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT coalesce(sum(CASE WHEN resource = 'cpu'
                           THEN qm_cpu_milli(c->'resources'->'requests'->>resource)
                           ELSE qm_bytes(c->'resources'->'requests'->>resource) END), 0)::bigint
  FROM jsonb_array_elements(CASE WHEN jsonb_typeof(spec->'containers') = 'array'
                                 THEN spec->'containers' ELSE '[]'::jsonb END) AS c
$function$""",
    "qm_pod_requests()": """returns trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  IF TG_OP = 'INSERT' OR NEW.spec->'containers' IS DISTINCT FROM OLD.spec->'containers' THEN
    NEW.req_cpu_milli := qm_pod_request(NEW.spec, 'cpu');
    NEW.req_memory_bytes := qm_pod_request(NEW.spec, 'memory');
    NEW.req_gpu := qm_pod_request(NEW.spec, 'nvidia.com/gpu');
  END IF;
  IF NEW.spec->>'nodeName' IS NOT NULL
     AND (TG_OP = 'INSERT' OR OLD.spec->>'nodeName' IS NULL) THEN
    NEW.bound_at := clock_timestamp();
  END IF;
  RETURN NEW;
END
$function$""",
    "qm_pods_allocation()": """returns trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  old_holds boolean := TG_OP <> 'INSERT' AND (OLD.node_name IS NOT NULL AND coalesce(OLD.phase, '') NOT IN ('Succeeded', 'Failed'));
  new_holds boolean := TG_OP <> 'DELETE' AND (NEW.node_name IS NOT NULL AND coalesce(NEW.phase, '') NOT IN ('Succeeded', 'Failed'));
BEGIN
  IF old_holds AND new_holds AND OLD.node_name = NEW.node_name THEN
    UPDATE nodes_allocated AS a
       SET cpu_milli = a.cpu_milli + NEW.req_cpu_milli - OLD.req_cpu_milli,
           memory_bytes = a.memory_bytes + NEW.req_memory_bytes - OLD.req_memory_bytes,
           gpu = a.gpu + NEW.req_gpu - OLD.req_gpu
      FROM nodes AS n
     WHERE n.namespace = '' AND n.name = NEW.node_name AND a.node_uid = n.uid;
    RETURN NULL;
  END IF;
  IF old_holds THEN
    UPDATE nodes_allocated AS a
       SET cpu_milli = a.cpu_milli - OLD.req_cpu_milli,
           memory_bytes = a.memory_bytes - OLD.req_memory_bytes,
           gpu = a.gpu - OLD.req_gpu,
           pods = a.pods - 1
      FROM nodes AS n
     WHERE n.namespace = '' AND n.name = OLD.node_name AND a.node_uid = n.uid;
  END IF;
  IF new_holds THEN
    
    FOR attempt IN 1..2 LOOP
      UPDATE nodes_allocated AS a
         SET cpu_milli = a.cpu_milli + NEW.req_cpu_milli,
             memory_bytes = a.memory_bytes + NEW.req_memory_bytes,
             gpu = a.gpu + NEW.req_gpu,
             pods = a.pods + 1
        FROM nodes AS n
       WHERE n.namespace = '' AND n.name = NEW.node_name AND a.node_uid = n.uid;
      EXIT WHEN FOUND OR attempt = 2;
      PERFORM pg_advisory_xact_lock(hashtextextended('qm-node/' || NEW.node_name, 0));
    END LOOP;
  END IF;
  RETURN NULL;
END
$function$""",
    "qm_purge_bootstrap_tokens()": """returns integer
 LANGUAGE sql
AS $function$
  WITH gone AS (
    DELETE FROM qm_bootstrap_tokens
    WHERE (uses_left = 0 OR expires_at < now())
      AND coalesce(last_used_at, expires_at) < now() - interval '1 hour'
    RETURNING 1
  )
  SELECT count(*)::integer FROM gone
$function$""",
    "qm_quantity(v text)": r"""returns numeric
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT CASE WHEN m[1] = '-' THEN -1 ELSE 1 END * CASE
    WHEN m[4] IS NOT NULL THEN
      CASE WHEN abs(m[4]::numeric) <= 30 THEN m[2]::numeric * ('1e' || m[4])::numeric END
    ELSE m[2]::numeric * CASE m[3]
      WHEN 'Ki' THEN 1024::numeric WHEN 'Mi' THEN 1048576::numeric
      WHEN 'Gi' THEN 1073741824::numeric WHEN 'Ti' THEN 1099511627776::numeric
      WHEN 'Pi' THEN 1125899906842624::numeric WHEN 'Ei' THEN 1152921504606846976::numeric
      WHEN 'n' THEN 0.000000001 WHEN 'u' THEN 0.000001 WHEN 'm' THEN 0.001
      WHEN 'k' THEN 1e3 WHEN 'M' THEN 1e6 WHEN 'G' THEN 1e9 WHEN 'T' THEN 1e12
      WHEN 'P' THEN 1e15 WHEN 'E' THEN 1e18 ELSE 1 END
    END
  FROM regexp_match(v, '^([+-]?)([0-9]+(?\:\.[0-9]*)?|\.[0-9]+)(?\:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE]([+-]?[0-9]+))?$') AS m
  WHERE length(v) <= 64
$function$""",
    "qm_recount_allocations()": """returns integer
 LANGUAGE plpgsql
AS $function$
DECLARE
  upserted integer;
  removed integer;
BEGIN
  LOCK TABLE nodes_allocated IN EXCLUSIVE MODE;
  INSERT INTO nodes_allocated AS a (node_uid, cpu_milli, memory_bytes, gpu, pods)
  SELECT n.uid, coalesce(sum(p.req_cpu_milli), 0), coalesce(sum(p.req_memory_bytes), 0),
         coalesce(sum(p.req_gpu), 0), count(p.uid)
    FROM nodes AS n
    LEFT JOIN pods AS p ON p.node_name = n.name AND (p.node_name IS NOT NULL AND coalesce(p.phase, '') NOT IN ('Succeeded', 'Failed'))
   WHERE n.namespace = ''
   GROUP BY n.uid
  ON CONFLICT (node_uid) DO UPDATE
     SET cpu_milli = excluded.cpu_milli, memory_bytes = excluded.memory_bytes,
         gpu = excluded.gpu, pods = excluded.pods
   WHERE (a.cpu_milli, a.memory_bytes, a.gpu, a.pods)
         IS DISTINCT FROM (excluded.cpu_milli, excluded.memory_bytes, excluded.gpu, excluded.pods);
  GET DIAGNOSTICS upserted = ROW_COUNT;
  DELETE FROM nodes_allocated AS a
   WHERE NOT EXISTS (SELECT 1 FROM nodes AS n WHERE n.uid = a.node_uid AND n.namespace = '');
  GET DIAGNOSTICS removed = ROW_COUNT;
  RETURN upserted + removed;
END
$function$""",
    "qm_refuse_change()": """returns trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION 'the audit trail is append-only';
END
$function$""",
    "qm_repair_service_ips(OUT released integer, OUT restored integer, OUT duplicates integer, OUT purged integer)": r"""returns record
 LANGUAGE plpgsql
AS $function$
BEGIN
  -- Held for a service that is gone, is ExternalName, or names another address.
  UPDATE service_ips AS a SET service_uid = NULL, released_at = now()
   WHERE a.service_uid IS NOT NULL AND NOT EXISTS (
     SELECT 1 FROM services AS s
      WHERE s.uid = a.service_uid
        AND coalesce(s.spec->>'type', 'ClusterIP') <> 'ExternalName'
        AND qm_ipv4(s.spec->>'clusterIP') = a.ip);
  GET DIAGNOSTICS released = ROW_COUNT;
  -- A service naming an address no row holds for it takes the row (even in quarantine\: the
  -- address is in use); the oldest service wins an address several name.
  WITH claimed AS (
    INSERT INTO service_ips AS a (ip, service_uid, namespace, name)
    SELECT DISTINCT ON (ip) qm_ipv4(s.spec->>'clusterIP') AS ip, s.uid, s.namespace, s.name
      FROM services AS s
     WHERE coalesce(s.spec->>'type', 'ClusterIP') <> 'ExternalName'
       AND qm_ipv4(s.spec->>'clusterIP') IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM service_ips AS h WHERE h.service_uid = s.uid)
     ORDER BY ip, s.creation_timestamp, s.uid
    ON CONFLICT (ip) DO UPDATE
      SET service_uid = EXCLUDED.service_uid, namespace = EXCLUDED.namespace,
          name = EXCLUDED.name, allocated_at = now(), released_at = NULL
      WHERE a.service_uid IS NULL
    RETURNING 1)
  SELECT count(*) INTO restored FROM claimed;
  -- An address two services name\: only a person can say which one keeps it.
  SELECT count(*) INTO duplicates
    FROM services AS s JOIN service_ips AS a ON a.ip = qm_ipv4(s.spec->>'clusterIP')
   WHERE a.service_uid <> s.uid
     AND coalesce(s.spec->>'type', 'ClusterIP') <> 'ExternalName';
  DELETE FROM service_ips
   WHERE service_uid IS NULL
     AND released_at <= now() - (SELECT quarantine FROM service_ip_range);
  GET DIAGNOSTICS purged = ROW_COUNT;
END
$function$""",
    "qm_revoke_node_credentials()": r"""returns trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  UPDATE qm_tokens SET revoked_at = now()
  WHERE username = 'system\:node\:' || OLD.name AND 'system\:nodes' = ANY(groups)
    AND revoked_at IS NULL;
  RETURN NULL;
END
$function$""",
    "qm_revoke_service_account_tokens()": """returns trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  UPDATE qm_tokens SET revoked_at = now() WHERE sa_uid = OLD.uid AND revoked_at IS NULL;
  RETURN OLD;
END
$function$""",
    "qm_rfc3339(t timestamp with time zone)": r"""returns text
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
AS $function$
  SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24\:MI\:SS"Z"')
$function$""",
    "qm_service_ip_claim(want inet, svc uuid, ns text, nm text, cutoff timestamp with time zone)": """returns inet
 LANGUAGE sql
AS $function$
  INSERT INTO service_ips AS s (ip, service_uid, namespace, name) VALUES (want, svc, ns, nm)
  ON CONFLICT (ip) DO UPDATE
    SET service_uid = EXCLUDED.service_uid, namespace = EXCLUDED.namespace,
        name = EXCLUDED.name, allocated_at = now(), released_at = NULL
    WHERE s.service_uid IS NULL AND s.released_at <= cutoff
  RETURNING s.ip
$function$""",
    "qm_service_ip_refuse(wanted text, problem text)": r"""returns void
 LANGUAGE plpgsql
AS $function$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QM422', COLUMN = 'spec.clusterIP',
    DETAIL = 'FieldValueInvalid',
    MESSAGE = format('Invalid value\: %s\: %s', to_jsonb(wanted)::text, problem);
END
$function$""",
    "qm_service_ip_take(svc uuid, ns text, nm text, wanted text)": r"""returns inet
 LANGUAGE plpgsql
AS $function$
DECLARE
  r service_ip_range;
  base inet;
  hosts bigint;
  cutoff timestamptz;
  addr inet;
  got inet;
  start bigint;
  since timestamptz;
BEGIN
  SELECT * INTO STRICT r FROM service_ip_range;
  base := set_masklen(network(r.cidr)::inet, 32);
  hosts := (2::bigint ^ (32 - masklen(r.cidr)))::bigint - 2;  -- less network and broadcast
  cutoff := now() - r.quarantine;
  IF wanted IS NOT NULL THEN
    addr := qm_ipv4(wanted);
    IF addr IS NULL OR NOT addr << r.cidr OR addr - base NOT BETWEEN 1 AND hosts THEN
      PERFORM qm_service_ip_refuse(wanted,
        format('provided IP is not in the valid range %s', r.cidr));
    END IF;
    got := qm_service_ip_claim(addr, svc, ns, nm, cutoff);
    IF got IS NULL THEN
      SELECT s.released_at INTO since FROM service_ips AS s
       WHERE s.ip = addr AND s.service_uid IS NULL;
      IF since IS NULL THEN
        PERFORM qm_service_ip_refuse(wanted, 'provided IP is already allocated');
      END IF;
      PERFORM qm_service_ip_refuse(wanted, format(
        'provided IP is already allocated\: released at %s, reusable after a quarantine of %s',
        to_char(since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24\:MI\:SS"Z"'), r.quarantine));
    END IF;
    RETURN got;
  END IF;
  -- The first free address after a random offset\: racing creates start far apart, and the
  -- one that loses a race tries again from elsewhere. generate_series in the select list
  -- streams, so a sparse range costs one probe.
  FOR attempt IN 1..16 LOOP
    start := floor(random() * hosts)::bigint;
    SELECT c.ip INTO addr
      FROM (SELECT base + (1 + (start + generate_series(0::bigint, hosts - 1)) % hosts) AS ip)
           AS c
     WHERE NOT EXISTS (SELECT 1 FROM service_ips AS s
                        WHERE s.ip = c.ip AND (s.service_uid IS NOT NULL OR s.released_at > cutoff))
     LIMIT 1;
    IF addr IS NULL THEN
      RAISE EXCEPTION USING ERRCODE = 'QM503', MESSAGE = format(
        'no virtual IP is free in the service range %s\: %s held, %s in quarantine for %s '
        'after release', r.cidr,
        (SELECT count(*) FROM service_ips WHERE service_uid IS NOT NULL),
        (SELECT count(*) FROM service_ips WHERE service_uid IS NULL AND released_at > cutoff),
        r.quarantine);
    END IF;
    got := qm_service_ip_claim(addr, svc, ns, nm, cutoff);
    IF got IS NOT NULL THEN
      RETURN got;
    END IF;
  END LOOP;
  RAISE EXCEPTION USING ERRCODE = 'QM503',
    MESSAGE = 'racing creates took every virtual IP this create tried; try again';
END
$function$""",
    "qm_service_ips_assign()": r"""returns trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
  wanted text;
  held inet;
  addr inet;
BEGIN
  IF jsonb_typeof(NEW.spec) IS DISTINCT FROM 'object' THEN
    RETURN NEW;
  END IF;
  wanted := nullif(NEW.spec->>'clusterIP', '');
  IF TG_OP = 'INSERT' THEN
    -- INSERT ... ON CONFLICT keeps what a BEFORE trigger did even when the row then meets an
    -- existing name, so a create of a taken name must allocate nothing. Creates of one name
    -- meet on this lock; the later one sees the earlier one's row once it committed.
    PERFORM pg_advisory_xact_lock(
      hashtextextended('qm-service/' || NEW.namespace || '/' || NEW.name, 0));
    IF EXISTS (SELECT 1 FROM services AS s
                WHERE s.namespace = NEW.namespace AND s.name = NEW.name) THEN
      RETURN NEW;
    END IF;
  ELSE
    SELECT a.ip INTO held FROM service_ips AS a WHERE a.service_uid = OLD.uid;
  END IF;
  IF coalesce(NEW.spec->>'type', 'ClusterIP') = 'ExternalName' THEN
    UPDATE service_ips SET service_uid = NULL, released_at = now()
     WHERE held IS NOT NULL AND service_uid = OLD.uid;
    NEW.spec := NEW.spec - 'clusterIP' - 'clusterIPs';
    RETURN NEW;
  END IF;
  IF held IS NOT NULL THEN
    IF wanted IS NOT NULL AND wanted IS DISTINCT FROM host(held) THEN
      RAISE EXCEPTION USING ERRCODE = 'QM422', COLUMN = 'spec.clusterIP',
        DETAIL = 'FieldValueInvalid', MESSAGE = 'field is immutable';
    END IF;
    addr := held;
  ELSIF wanted = 'None' THEN
    NEW.spec := NEW.spec || '{"clusterIPs"\: ["None"]}'::jsonb;
    RETURN NEW;
  ELSE
    addr := qm_service_ip_take(NEW.uid, NEW.namespace, NEW.name, wanted);
  END IF;
  NEW.spec := NEW.spec || jsonb_build_object(
    'clusterIP', host(addr), 'clusterIPs', jsonb_build_array(host(addr)));
  RETURN NEW;
END
$function$""",
    "qm_service_ips_release()": """returns trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  UPDATE service_ips AS a SET service_uid = NULL, released_at = now()
    FROM gone WHERE a.service_uid = gone.uid;
  RETURN NULL;
END
$function$""",
    "qm_stamp_row()": """returns trigger
 LANGUAGE plpgsql
AS $function$
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
$function$""",
    "qm_token_object()": """returns trigger
 LANGUAGE plpgsql
AS $function$
BEGIN
  NEW.namespace := '';
  NEW.name := substr(NEW.token_sha256, 1, 12);
  NEW.creation_timestamp := NEW.created_at;
  NEW.spec := jsonb_strip_nulls(jsonb_build_object(
    'user', NEW.username,
    'groups', to_jsonb(NEW.groups),
    'description', nullif(NEW.description, ''),
    'expirationTimestamp', qm_rfc3339(NEW.expires_at),
    'createdBy', nullif(NEW.created_by, ''),
    'mintedBy', NEW.minted_by,
    'serviceAccount', CASE WHEN NEW.sa_name IS NOT NULL THEN jsonb_strip_nulls(
      jsonb_build_object('namespace', NEW.sa_namespace, 'name', NEW.sa_name,
                         'uid', NEW.sa_uid)) END));
  NEW.status := jsonb_strip_nulls(jsonb_build_object('revokedAt', qm_rfc3339(NEW.revoked_at)));
  RETURN NEW;
END
$function$""",
    "reporting.usage_hourly_between(since timestamp with time zone, until timestamp with time zone DEFAULT now())": """returns SETOF reporting.usage_hourly
 LANGUAGE sql
 STABLE
AS $function$
WITH src AS (
  SELECT u.minute, u.namespace, coalesce(ns.labels->>'quaymaster.io/team', u.namespace) AS team,
         n.zone, u.node, u.pods, u.cpu_milli, u.memory_bytes
    FROM public.qm_usage_rollup AS u
    LEFT JOIN public.namespaces AS ns ON ns.name = u.namespace
    LEFT JOIN public.nodes AS n ON n.namespace = '' AND n.name = u.node
   WHERE u.minute >= $1 AND u.minute < $2
), per_minute AS (
  SELECT minute, namespace, team, zone, node, GROUPING(namespace, team, zone, node) AS g,
         sum(pods)::bigint AS pods, sum(cpu_milli)::bigint AS cpu_milli,
         sum(memory_bytes)::bigint AS memory_bytes
    FROM src
   GROUP BY minute, GROUPING SETS ((namespace, team, zone, node), (namespace, team), (team),
                                   (zone), (node), ())
)
SELECT date_trunc('hour', minute) AS hour,
       CASE g WHEN 0 THEN 'namespace_node' WHEN 3 THEN 'namespace' WHEN 11 THEN 'team'
              WHEN 13 THEN 'zone' WHEN 14 THEN 'node' ELSE 'cluster' END AS level,
       CASE WHEN g IN (0, 3) THEN namespace END AS namespace,
       CASE WHEN g IN (0, 3, 11) THEN team END AS team,
       CASE WHEN g IN (0, 13) THEN zone END AS zone,
       CASE WHEN g IN (0, 14) THEN node END AS node,
       count(*) AS minutes,
       round(avg(pods), 2) AS avg_pods, max(pods) AS max_pods,
       round(avg(cpu_milli), 1) AS avg_cpu_milli, max(cpu_milli) AS max_cpu_milli,
       round(avg(memory_bytes)) AS avg_memory_bytes, max(memory_bytes) AS max_memory_bytes
  FROM per_minute
 GROUP BY 1, 2, 3, 4, 5, 6
$function$""",
}

TRIGGERS: dict[str, str] = {
    "admissionpolicies_history on admissionpolicies": """AFTER INSERT OR DELETE OR UPDATE ON public.admissionpolicies FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'AdmissionPolicy', 'none', '{}')""",
    "admissionpolicies_history_del on admissionpolicies": """AFTER DELETE ON public.admissionpolicies REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'AdmissionPolicy', 'none', '{}')""",
    "admissionpolicies_history_ins on admissionpolicies": """AFTER INSERT ON public.admissionpolicies REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'AdmissionPolicy', 'none', '{}')""",
    "admissionpolicies_history_truncate on admissionpolicies": """BEFORE TRUNCATE ON public.admissionpolicies FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'AdmissionPolicy', 'none', '{}')""",
    "admissionpolicies_history_upd on admissionpolicies": """AFTER UPDATE ON public.admissionpolicies REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'AdmissionPolicy', 'none', '{}')""",
    "admissionpolicies_stamp on admissionpolicies": """BEFORE INSERT OR UPDATE ON public.admissionpolicies FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "clusterrolebindings_history on clusterrolebindings": """AFTER INSERT OR DELETE OR UPDATE ON public.clusterrolebindings FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'ClusterRoleBinding', 'none', '{}')""",
    "clusterrolebindings_history_del on clusterrolebindings": """AFTER DELETE ON public.clusterrolebindings REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ClusterRoleBinding', 'none', '{}')""",
    "clusterrolebindings_history_ins on clusterrolebindings": """AFTER INSERT ON public.clusterrolebindings REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ClusterRoleBinding', 'none', '{}')""",
    "clusterrolebindings_history_truncate on clusterrolebindings": """BEFORE TRUNCATE ON public.clusterrolebindings FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'ClusterRoleBinding', 'none', '{}')""",
    "clusterrolebindings_history_upd on clusterrolebindings": """AFTER UPDATE ON public.clusterrolebindings REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ClusterRoleBinding', 'none', '{}')""",
    "clusterrolebindings_stamp on clusterrolebindings": """BEFORE INSERT OR UPDATE ON public.clusterrolebindings FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "clusterroles_history on clusterroles": """AFTER INSERT OR DELETE OR UPDATE ON public.clusterroles FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'ClusterRole', 'none', '{}')""",
    "clusterroles_history_del on clusterroles": """AFTER DELETE ON public.clusterroles REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ClusterRole', 'none', '{}')""",
    "clusterroles_history_ins on clusterroles": """AFTER INSERT ON public.clusterroles REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ClusterRole', 'none', '{}')""",
    "clusterroles_history_truncate on clusterroles": """BEFORE TRUNCATE ON public.clusterroles FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'ClusterRole', 'none', '{}')""",
    "clusterroles_history_upd on clusterroles": """AFTER UPDATE ON public.clusterroles REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ClusterRole', 'none', '{}')""",
    "clusterroles_stamp on clusterroles": """BEFORE INSERT OR UPDATE ON public.clusterroles FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "configmaps_history on configmaps": """AFTER INSERT OR DELETE OR UPDATE ON public.configmaps FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'ConfigMap', 'none', '{}')""",
    "configmaps_history_del on configmaps": """AFTER DELETE ON public.configmaps REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ConfigMap', 'none', '{}')""",
    "configmaps_history_ins on configmaps": """AFTER INSERT ON public.configmaps REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ConfigMap', 'none', '{}')""",
    "configmaps_history_truncate on configmaps": """BEFORE TRUNCATE ON public.configmaps FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'ConfigMap', 'none', '{}')""",
    "configmaps_history_upd on configmaps": """AFTER UPDATE ON public.configmaps REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ConfigMap', 'none', '{}')""",
    "configmaps_stamp on configmaps": """BEFORE INSERT OR UPDATE ON public.configmaps FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "cronjobs_history on cronjobs": """AFTER INSERT OR DELETE OR UPDATE ON public.cronjobs FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'CronJob', 'none', '{}')""",
    "cronjobs_history_del on cronjobs": """AFTER DELETE ON public.cronjobs REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'CronJob', 'none', '{}')""",
    "cronjobs_history_ins on cronjobs": """AFTER INSERT ON public.cronjobs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'CronJob', 'none', '{}')""",
    "cronjobs_history_truncate on cronjobs": """BEFORE TRUNCATE ON public.cronjobs FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'CronJob', 'none', '{}')""",
    "cronjobs_history_upd on cronjobs": """AFTER UPDATE ON public.cronjobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'CronJob', 'none', '{}')""",
    "cronjobs_stamp on cronjobs": """BEFORE INSERT OR UPDATE ON public.cronjobs FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "deployments_history on deployments": """AFTER INSERT OR DELETE OR UPDATE ON public.deployments FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'Deployment', 'none', '{}')""",
    "deployments_history_del on deployments": """AFTER DELETE ON public.deployments REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Deployment', 'none', '{}')""",
    "deployments_history_ins on deployments": """AFTER INSERT ON public.deployments REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Deployment', 'none', '{}')""",
    "deployments_history_truncate on deployments": """BEFORE TRUNCATE ON public.deployments FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'Deployment', 'none', '{}')""",
    "deployments_history_upd on deployments": """AFTER UPDATE ON public.deployments REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Deployment', 'none', '{}')""",
    "deployments_stamp on deployments": """BEFORE INSERT OR UPDATE ON public.deployments FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "endpointslices_history on endpointslices": """AFTER INSERT OR DELETE OR UPDATE ON public.endpointslices FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'EndpointSlice', 'none', '{}')""",
    "endpointslices_history_del on endpointslices": """AFTER DELETE ON public.endpointslices REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'EndpointSlice', 'none', '{}')""",
    "endpointslices_history_ins on endpointslices": """AFTER INSERT ON public.endpointslices REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'EndpointSlice', 'none', '{}')""",
    "endpointslices_history_truncate on endpointslices": """BEFORE TRUNCATE ON public.endpointslices FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'EndpointSlice', 'none', '{}')""",
    "endpointslices_history_upd on endpointslices": """AFTER UPDATE ON public.endpointslices REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'EndpointSlice', 'none', '{}')""",
    "endpointslices_stamp on endpointslices": """BEFORE INSERT OR UPDATE ON public.endpointslices FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "events_history on events": """AFTER INSERT OR DELETE OR UPDATE ON public.events FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'Event', 'all', '{}')""",
    "events_history_del on events": """AFTER DELETE ON public.events REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Event', 'all', '{}')""",
    "events_history_ins on events": """AFTER INSERT ON public.events REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Event', 'all', '{}')""",
    "events_history_truncate on events": """BEFORE TRUNCATE ON public.events FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'Event', 'all', '{}')""",
    "events_history_upd on events": """AFTER UPDATE ON public.events REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Event', 'all', '{}')""",
    "events_stamp on events": """BEFORE INSERT OR UPDATE ON public.events FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "jobs_history on jobs": """AFTER INSERT OR DELETE OR UPDATE ON public.jobs FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'Job', 'none', '{}')""",
    "jobs_history_del on jobs": """AFTER DELETE ON public.jobs REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Job', 'none', '{}')""",
    "jobs_history_ins on jobs": """AFTER INSERT ON public.jobs REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Job', 'none', '{}')""",
    "jobs_history_truncate on jobs": """BEFORE TRUNCATE ON public.jobs FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'Job', 'none', '{}')""",
    "jobs_history_upd on jobs": """AFTER UPDATE ON public.jobs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Job', 'none', '{}')""",
    "jobs_stamp on jobs": """BEFORE INSERT OR UPDATE ON public.jobs FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "leases_history on leases": """AFTER INSERT OR DELETE OR UPDATE ON public.leases FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'Lease', 'lease', '{}')""",
    "leases_history_del on leases": """AFTER DELETE ON public.leases REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Lease', 'lease', '{}')""",
    "leases_history_ins on leases": """AFTER INSERT ON public.leases REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Lease', 'lease', '{}')""",
    "leases_history_truncate on leases": """BEFORE TRUNCATE ON public.leases FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'Lease', 'lease', '{}')""",
    "leases_history_upd on leases": """AFTER UPDATE ON public.leases REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Lease', 'lease', '{}')""",
    "leases_stamp on leases": """BEFORE INSERT OR UPDATE ON public.leases FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "namespaces_history on namespaces": """AFTER INSERT OR DELETE OR UPDATE ON public.namespaces FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'Namespace', 'none', '{}')""",
    "namespaces_history_del on namespaces": """AFTER DELETE ON public.namespaces REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Namespace', 'none', '{}')""",
    "namespaces_history_ins on namespaces": """AFTER INSERT ON public.namespaces REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Namespace', 'none', '{}')""",
    "namespaces_history_truncate on namespaces": """BEFORE TRUNCATE ON public.namespaces FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'Namespace', 'none', '{}')""",
    "namespaces_history_upd on namespaces": """AFTER UPDATE ON public.namespaces REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Namespace', 'none', '{}')""",
    "namespaces_stamp on namespaces": """BEFORE INSERT OR UPDATE ON public.namespaces FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "nodes_allocation_insert on nodes": """AFTER INSERT ON public.nodes FOR EACH ROW WHEN ((new.namespace = ''::text)) EXECUTE FUNCTION qm_nodes_allocation()""",
    "nodes_history on nodes": """AFTER INSERT OR DELETE OR UPDATE ON public.nodes FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'Node', 'status', '{}')""",
    "nodes_history_del on nodes": """AFTER DELETE ON public.nodes REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Node', 'status', '{}')""",
    "nodes_history_ins on nodes": """AFTER INSERT ON public.nodes REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Node', 'status', '{}')""",
    "nodes_history_truncate on nodes": """BEFORE TRUNCATE ON public.nodes FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'Node', 'status', '{}')""",
    "nodes_history_upd on nodes": """AFTER UPDATE ON public.nodes REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Node', 'status', '{}')""",
    "nodes_revoke_credentials on nodes": """AFTER DELETE ON public.nodes FOR EACH ROW EXECUTE FUNCTION qm_revoke_node_credentials()""",
    "nodes_revoke_credentials_on_deletion on nodes": """AFTER UPDATE OF deletion_timestamp ON public.nodes FOR EACH ROW WHEN (((old.deletion_timestamp IS NULL) AND (new.deletion_timestamp IS NOT NULL))) EXECUTE FUNCTION qm_revoke_node_credentials()""",
    "nodes_stamp on nodes": """BEFORE INSERT OR UPDATE ON public.nodes FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "poddisruptionbudgets_history on poddisruptionbudgets": """AFTER INSERT OR DELETE OR UPDATE ON public.poddisruptionbudgets FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'PodDisruptionBudget', 'none', '{}')""",
    "poddisruptionbudgets_history_del on poddisruptionbudgets": """AFTER DELETE ON public.poddisruptionbudgets REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'PodDisruptionBudget', 'none', '{}')""",
    "poddisruptionbudgets_history_ins on poddisruptionbudgets": """AFTER INSERT ON public.poddisruptionbudgets REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'PodDisruptionBudget', 'none', '{}')""",
    "poddisruptionbudgets_history_truncate on poddisruptionbudgets": """BEFORE TRUNCATE ON public.poddisruptionbudgets FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'PodDisruptionBudget', 'none', '{}')""",
    "poddisruptionbudgets_history_upd on poddisruptionbudgets": """AFTER UPDATE ON public.poddisruptionbudgets REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'PodDisruptionBudget', 'none', '{}')""",
    "poddisruptionbudgets_stamp on poddisruptionbudgets": """BEFORE INSERT OR UPDATE ON public.poddisruptionbudgets FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "pods_allocation_delete on pods": """AFTER DELETE ON public.pods FOR EACH ROW WHEN (((old.node_name IS NOT NULL) AND (COALESCE(old.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text])))) EXECUTE FUNCTION qm_pods_allocation()""",
    "pods_allocation_insert on pods": """AFTER INSERT ON public.pods FOR EACH ROW WHEN (((new.node_name IS NOT NULL) AND (COALESCE(new.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text])))) EXECUTE FUNCTION qm_pods_allocation()""",
    "pods_allocation_update on pods": """AFTER UPDATE ON public.pods FOR EACH ROW WHEN (((((old.node_name IS NOT NULL) AND (COALESCE(old.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text]))) <> ((new.node_name IS NOT NULL) AND (COALESCE(new.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text])))) OR ((new.node_name IS NOT NULL) AND (COALESCE(new.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text])) AND ((old.node_name <> new.node_name) OR (old.req_cpu_milli <> new.req_cpu_milli) OR (old.req_memory_bytes <> new.req_memory_bytes) OR (old.req_gpu <> new.req_gpu))))) EXECUTE FUNCTION qm_pods_allocation()""",
    "pods_derived_insert on pods": """BEFORE INSERT ON public.pods FOR EACH ROW EXECUTE FUNCTION qm_pod_derived()""",
    "pods_derived_update on pods": """BEFORE UPDATE OF spec ON public.pods FOR EACH ROW WHEN ((((old.spec -> 'containers'::text) IS DISTINCT FROM (new.spec -> 'containers'::text)) OR ((old.spec -> 'initContainers'::text) IS DISTINCT FROM (new.spec -> 'initContainers'::text)) OR ((old.spec -> 'priorityClassName'::text) IS DISTINCT FROM (new.spec -> 'priorityClassName'::text)) OR ((old.spec -> 'activeDeadlineSeconds'::text) IS DISTINCT FROM (new.spec -> 'activeDeadlineSeconds'::text)) OR ((old.spec -> 'affinity'::text) IS DISTINCT FROM (new.spec -> 'affinity'::text)) OR (((old.spec ->> 'nodeName'::text) IS NULL) AND ((new.spec ->> 'nodeName'::text) IS NOT NULL)))) EXECUTE FUNCTION qm_pod_derived()""",
    "pods_history on pods": """AFTER INSERT OR DELETE OR UPDATE ON public.pods FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'Pod', 'status', '{}')""",
    "pods_history_del on pods": """AFTER DELETE ON public.pods REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Pod', 'status', '{}')""",
    "pods_history_ins on pods": """AFTER INSERT ON public.pods REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Pod', 'status', '{}')""",
    "pods_history_truncate on pods": """BEFORE TRUNCATE ON public.pods FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'Pod', 'status', '{}')""",
    "pods_history_upd on pods": """AFTER UPDATE ON public.pods REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Pod', 'status', '{}')""",
    "pods_stamp on pods": """BEFORE INSERT OR UPDATE ON public.pods FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "priorityclasses_history on priorityclasses": """AFTER INSERT OR DELETE OR UPDATE ON public.priorityclasses FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'PriorityClass', 'none', '{}')""",
    "priorityclasses_history_del on priorityclasses": """AFTER DELETE ON public.priorityclasses REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'PriorityClass', 'none', '{}')""",
    "priorityclasses_history_ins on priorityclasses": """AFTER INSERT ON public.priorityclasses REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'PriorityClass', 'none', '{}')""",
    "priorityclasses_history_truncate on priorityclasses": """BEFORE TRUNCATE ON public.priorityclasses FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'PriorityClass', 'none', '{}')""",
    "priorityclasses_history_upd on priorityclasses": """AFTER UPDATE ON public.priorityclasses REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'PriorityClass', 'none', '{}')""",
    "priorityclasses_stamp on priorityclasses": """BEFORE INSERT OR UPDATE ON public.priorityclasses FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "qm_api_servers_history on qm_api_servers": """AFTER INSERT OR DELETE OR UPDATE ON public.qm_api_servers FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('id', '', 'heartbeat', '{}')""",
    "qm_api_servers_history_del on qm_api_servers": """AFTER DELETE ON public.qm_api_servers REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('id', '', 'heartbeat', '{}')""",
    "qm_api_servers_history_ins on qm_api_servers": """AFTER INSERT ON public.qm_api_servers REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('id', '', 'heartbeat', '{}')""",
    "qm_api_servers_history_truncate on qm_api_servers": """BEFORE TRUNCATE ON public.qm_api_servers FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('id', '', 'heartbeat', '{}')""",
    "qm_api_servers_history_upd on qm_api_servers": """AFTER UPDATE ON public.qm_api_servers REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('id', '', 'heartbeat', '{}')""",
    "qm_audit_append_only on qm_audit": """BEFORE DELETE OR UPDATE ON public.qm_audit FOR EACH ROW EXECUTE FUNCTION qm_refuse_change()""",
    "qm_audit_history_context on qm_audit": """BEFORE INSERT ON public.qm_audit FOR EACH ROW EXECUTE FUNCTION qm_history_legacy_context()""",
    "qm_audit_no_truncate on qm_audit": """BEFORE TRUNCATE ON public.qm_audit FOR EACH STATEMENT EXECUTE FUNCTION qm_refuse_change()""",
    "qm_bootstrap_tokens_history on qm_bootstrap_tokens": """AFTER INSERT OR DELETE OR UPDATE ON public.qm_bootstrap_tokens FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('token_id', '', 'none', '{secret_sha256}')""",
    "qm_bootstrap_tokens_history_del on qm_bootstrap_tokens": """AFTER DELETE ON public.qm_bootstrap_tokens REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('token_id', '', 'none', '{secret_sha256}')""",
    "qm_bootstrap_tokens_history_ins on qm_bootstrap_tokens": """AFTER INSERT ON public.qm_bootstrap_tokens REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('token_id', '', 'none', '{secret_sha256}')""",
    "qm_bootstrap_tokens_history_truncate on qm_bootstrap_tokens": """BEFORE TRUNCATE ON public.qm_bootstrap_tokens FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('token_id', '', 'none', '{secret_sha256}')""",
    "qm_bootstrap_tokens_history_upd on qm_bootstrap_tokens": """AFTER UPDATE ON public.qm_bootstrap_tokens REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('token_id', '', 'none', '{secret_sha256}')""",
    "qm_history_append_only on qm_history": """BEFORE DELETE OR UPDATE ON public.qm_history FOR EACH ROW EXECUTE FUNCTION qm_history_guard()""",
    "qm_history_links_append_only on qm_history_links": """BEFORE DELETE OR UPDATE ON public.qm_history_links FOR EACH ROW EXECUTE FUNCTION qm_history_guard()""",
    "qm_history_links_no_truncate on qm_history_links": """BEFORE TRUNCATE ON public.qm_history_links FOR EACH STATEMENT EXECUTE FUNCTION qm_history_guard()""",
    "qm_history_no_truncate on qm_history": """BEFORE TRUNCATE ON public.qm_history FOR EACH STATEMENT EXECUTE FUNCTION qm_history_guard()""",
    "qm_node_credentials_history on qm_node_credentials": """AFTER INSERT OR DELETE OR UPDATE ON public.qm_node_credentials FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('id', '', 'none', '{token_sha256}')""",
    "qm_node_credentials_history_del on qm_node_credentials": """AFTER DELETE ON public.qm_node_credentials REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('id', '', 'none', '{token_sha256}')""",
    "qm_node_credentials_history_ins on qm_node_credentials": """AFTER INSERT ON public.qm_node_credentials REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('id', '', 'none', '{token_sha256}')""",
    "qm_node_credentials_history_truncate on qm_node_credentials": """BEFORE TRUNCATE ON public.qm_node_credentials FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('id', '', 'none', '{token_sha256}')""",
    "qm_node_credentials_history_upd on qm_node_credentials": """AFTER UPDATE ON public.qm_node_credentials REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('id', '', 'none', '{token_sha256}')""",
    "qm_tokens_history on qm_tokens": """AFTER INSERT OR DELETE OR UPDATE ON public.qm_tokens FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'Token', 'none', '{token_sha256}')""",
    "qm_tokens_history_del on qm_tokens": """AFTER DELETE ON public.qm_tokens REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Token', 'none', '{token_sha256}')""",
    "qm_tokens_history_ins on qm_tokens": """AFTER INSERT ON public.qm_tokens REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Token', 'none', '{token_sha256}')""",
    "qm_tokens_history_truncate on qm_tokens": """BEFORE TRUNCATE ON public.qm_tokens FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'Token', 'none', '{token_sha256}')""",
    "qm_tokens_history_upd on qm_tokens": """AFTER UPDATE ON public.qm_tokens REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Token', 'none', '{token_sha256}')""",
    "qm_tokens_object on qm_tokens": """BEFORE INSERT OR UPDATE ON public.qm_tokens FOR EACH ROW EXECUTE FUNCTION qm_token_object()""",
    "qm_tokens_stamp on qm_tokens": """BEFORE INSERT OR UPDATE ON public.qm_tokens FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "replicasets_history on replicasets": """AFTER INSERT OR DELETE OR UPDATE ON public.replicasets FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'ReplicaSet', 'none', '{}')""",
    "replicasets_history_del on replicasets": """AFTER DELETE ON public.replicasets REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ReplicaSet', 'none', '{}')""",
    "replicasets_history_ins on replicasets": """AFTER INSERT ON public.replicasets REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ReplicaSet', 'none', '{}')""",
    "replicasets_history_truncate on replicasets": """BEFORE TRUNCATE ON public.replicasets FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'ReplicaSet', 'none', '{}')""",
    "replicasets_history_upd on replicasets": """AFTER UPDATE ON public.replicasets REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ReplicaSet', 'none', '{}')""",
    "replicasets_stamp on replicasets": """BEFORE INSERT OR UPDATE ON public.replicasets FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "reporting.namespace_access_history on reporting.namespace_access": """AFTER INSERT OR DELETE OR UPDATE ON reporting.namespace_access FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('role_name', '', 'none', '{}')""",
    "reporting.namespace_access_history_del on reporting.namespace_access": """AFTER DELETE ON reporting.namespace_access REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('role_name', '', 'none', '{}')""",
    "reporting.namespace_access_history_ins on reporting.namespace_access": """AFTER INSERT ON reporting.namespace_access REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('role_name', '', 'none', '{}')""",
    "reporting.namespace_access_history_truncate on reporting.namespace_access": """BEFORE TRUNCATE ON reporting.namespace_access FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('role_name', '', 'none', '{}')""",
    "reporting.namespace_access_history_upd on reporting.namespace_access": """AFTER UPDATE ON reporting.namespace_access REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('role_name', '', 'none', '{}')""",
    "resourcequotas_history on resourcequotas": """AFTER INSERT OR DELETE OR UPDATE ON public.resourcequotas FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'ResourceQuota', 'none', '{}')""",
    "resourcequotas_history_del on resourcequotas": """AFTER DELETE ON public.resourcequotas REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ResourceQuota', 'none', '{}')""",
    "resourcequotas_history_ins on resourcequotas": """AFTER INSERT ON public.resourcequotas REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ResourceQuota', 'none', '{}')""",
    "resourcequotas_history_truncate on resourcequotas": """BEFORE TRUNCATE ON public.resourcequotas FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'ResourceQuota', 'none', '{}')""",
    "resourcequotas_history_upd on resourcequotas": """AFTER UPDATE ON public.resourcequotas REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ResourceQuota', 'none', '{}')""",
    "resourcequotas_stamp on resourcequotas": """BEFORE INSERT OR UPDATE ON public.resourcequotas FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "rolebindings_history on rolebindings": """AFTER INSERT OR DELETE OR UPDATE ON public.rolebindings FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'RoleBinding', 'none', '{}')""",
    "rolebindings_history_del on rolebindings": """AFTER DELETE ON public.rolebindings REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'RoleBinding', 'none', '{}')""",
    "rolebindings_history_ins on rolebindings": """AFTER INSERT ON public.rolebindings REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'RoleBinding', 'none', '{}')""",
    "rolebindings_history_truncate on rolebindings": """BEFORE TRUNCATE ON public.rolebindings FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'RoleBinding', 'none', '{}')""",
    "rolebindings_history_upd on rolebindings": """AFTER UPDATE ON public.rolebindings REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'RoleBinding', 'none', '{}')""",
    "rolebindings_stamp on rolebindings": """BEFORE INSERT OR UPDATE ON public.rolebindings FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "roles_history on roles": """AFTER INSERT OR DELETE OR UPDATE ON public.roles FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'Role', 'none', '{}')""",
    "roles_history_del on roles": """AFTER DELETE ON public.roles REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Role', 'none', '{}')""",
    "roles_history_ins on roles": """AFTER INSERT ON public.roles REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Role', 'none', '{}')""",
    "roles_history_truncate on roles": """BEFORE TRUNCATE ON public.roles FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'Role', 'none', '{}')""",
    "roles_history_upd on roles": """AFTER UPDATE ON public.roles REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Role', 'none', '{}')""",
    "roles_stamp on roles": """BEFORE INSERT OR UPDATE ON public.roles FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "secrets_history on secrets": """AFTER INSERT OR DELETE OR UPDATE ON public.secrets FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'Secret', 'none', '{}')""",
    "secrets_history_del on secrets": """AFTER DELETE ON public.secrets REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Secret', 'none', '{}')""",
    "secrets_history_ins on secrets": """AFTER INSERT ON public.secrets REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Secret', 'none', '{}')""",
    "secrets_history_truncate on secrets": """BEFORE TRUNCATE ON public.secrets FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'Secret', 'none', '{}')""",
    "secrets_history_upd on secrets": """AFTER UPDATE ON public.secrets REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Secret', 'none', '{}')""",
    "secrets_stamp on secrets": """BEFORE INSERT OR UPDATE ON public.secrets FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "service_ip_range_history on service_ip_range": """AFTER INSERT OR DELETE OR UPDATE ON public.service_ip_range FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('id', '', 'none', '{}')""",
    "service_ip_range_history_del on service_ip_range": """AFTER DELETE ON public.service_ip_range REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('id', '', 'none', '{}')""",
    "service_ip_range_history_ins on service_ip_range": """AFTER INSERT ON public.service_ip_range REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('id', '', 'none', '{}')""",
    "service_ip_range_history_truncate on service_ip_range": """BEFORE TRUNCATE ON public.service_ip_range FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('id', '', 'none', '{}')""",
    "service_ip_range_history_upd on service_ip_range": """AFTER UPDATE ON public.service_ip_range REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('id', '', 'none', '{}')""",
    "service_ips_history on service_ips": """AFTER INSERT OR DELETE OR UPDATE ON public.service_ips FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('ip', '', 'none', '{}')""",
    "service_ips_history_del on service_ips": """AFTER DELETE ON public.service_ips REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('ip', '', 'none', '{}')""",
    "service_ips_history_ins on service_ips": """AFTER INSERT ON public.service_ips REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('ip', '', 'none', '{}')""",
    "service_ips_history_truncate on service_ips": """BEFORE TRUNCATE ON public.service_ips FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('ip', '', 'none', '{}')""",
    "service_ips_history_upd on service_ips": """AFTER UPDATE ON public.service_ips REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('ip', '', 'none', '{}')""",
    "serviceaccounts_history on serviceaccounts": """AFTER INSERT OR DELETE OR UPDATE ON public.serviceaccounts FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'ServiceAccount', 'none', '{}')""",
    "serviceaccounts_history_del on serviceaccounts": """AFTER DELETE ON public.serviceaccounts REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ServiceAccount', 'none', '{}')""",
    "serviceaccounts_history_ins on serviceaccounts": """AFTER INSERT ON public.serviceaccounts REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ServiceAccount', 'none', '{}')""",
    "serviceaccounts_history_truncate on serviceaccounts": """BEFORE TRUNCATE ON public.serviceaccounts FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'ServiceAccount', 'none', '{}')""",
    "serviceaccounts_history_upd on serviceaccounts": """AFTER UPDATE ON public.serviceaccounts REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'ServiceAccount', 'none', '{}')""",
    "serviceaccounts_revoke on serviceaccounts": """BEFORE DELETE ON public.serviceaccounts FOR EACH ROW EXECUTE FUNCTION qm_revoke_service_account_tokens()""",
    "serviceaccounts_stamp on serviceaccounts": """BEFORE INSERT OR UPDATE ON public.serviceaccounts FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "services_history on services": """AFTER INSERT OR DELETE OR UPDATE ON public.services FOR EACH ROW WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) = ''::text)) EXECUTE FUNCTION qm_history_record('uid', 'Service', 'none', '{}')""",
    "services_history_del on services": """AFTER DELETE ON public.services REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Service', 'none', '{}')""",
    "services_history_ins on services": """AFTER INSERT ON public.services REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Service', 'none', '{}')""",
    "services_history_truncate on services": """BEFORE TRUNCATE ON public.services FOR EACH STATEMENT EXECUTE FUNCTION qm_history_record('uid', 'Service', 'none', '{}')""",
    "services_history_upd on services": """AFTER UPDATE ON public.services REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT WHEN ((COALESCE(current_setting('qm.contexts'::text, true), ''::text) <> ''::text)) EXECUTE FUNCTION qm_history_record_batch('uid', 'Service', 'none', '{}')""",
    "services_ip_insert on services": """BEFORE INSERT ON public.services FOR EACH ROW EXECUTE FUNCTION qm_service_ips_assign()""",
    "services_ip_release on services": """AFTER DELETE ON public.services REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION qm_service_ips_release()""",
    "services_ip_update on services": """BEFORE UPDATE OF spec ON public.services FOR EACH ROW WHEN ((((old.spec -> 'clusterIP'::text) IS DISTINCT FROM (new.spec -> 'clusterIP'::text)) OR ((old.spec -> 'clusterIPs'::text) IS DISTINCT FROM (new.spec -> 'clusterIPs'::text)) OR ((old.spec -> 'type'::text) IS DISTINCT FROM (new.spec -> 'type'::text)))) EXECUTE FUNCTION qm_service_ips_assign()""",
    "services_stamp on services": """BEFORE INSERT OR UPDATE ON public.services FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
}

VIEWS: dict[str, str] = {
    "reporting.allocation": """SELECT p.namespace,
    COALESCE((ns.labels ->> 'quaymaster.io/team'::text), p.namespace) AS team,
    n.zone,
    p.node_name,
    n.machine_class,
    count(*) AS pods,
    count(*) FILTER (WHERE (p.priority >= 1000)) AS production_pods,
    (sum(p.req_cpu_milli))::bigint AS cpu_milli,
    (sum(p.req_memory_bytes))::bigint AS memory_bytes,
    (sum(p.req_gpu))::bigint AS gpu
   FROM ((pods p
     LEFT JOIN namespaces ns ON ((ns.name = p.namespace)))
     LEFT JOIN nodes n ON (((n.namespace = ''::text) AND (n.name = p.node_name))))
  WHERE ((p.node_name IS NOT NULL) AND (COALESCE(p.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text])))
  GROUP BY p.namespace, COALESCE((ns.labels ->> 'quaymaster.io/team'::text), p.namespace), n.zone, p.node_name, n.machine_class""",
    "reporting.allocation_vs_usage": """WITH used AS (
         SELECT qm_usage_rollup.namespace,
            qm_usage_rollup.node,
            count(*) AS minutes,
            round(avg(qm_usage_rollup.cpu_milli), 1) AS avg_cpu_milli,
            max(qm_usage_rollup.cpu_milli) AS max_cpu_milli,
            round(avg(qm_usage_rollup.memory_bytes)) AS avg_memory_bytes,
            max(qm_usage_rollup.memory_bytes) AS max_memory_bytes
           FROM qm_usage_rollup
          WHERE (qm_usage_rollup.minute >= (date_trunc('minute'::text, now()) - '01:00:00'::interval))
          GROUP BY qm_usage_rollup.namespace, qm_usage_rollup.node
        ), asked AS (
         SELECT allocation.namespace,
            allocation.node_name AS node,
            (sum(allocation.pods))::bigint AS pods,
            (sum(allocation.cpu_milli))::bigint AS cpu_milli,
            (sum(allocation.memory_bytes))::bigint AS memory_bytes
           FROM reporting.allocation
          GROUP BY allocation.namespace, allocation.node_name
        )
 SELECT k.namespace,
    COALESCE((ns.labels ->> 'quaymaster.io/team'::text), k.namespace) AS team,
    n.zone,
    k.node,
    COALESCE(a.pods, (0)::bigint) AS requesting_pods,
    COALESCE(a.cpu_milli, (0)::bigint) AS requested_cpu_milli,
    COALESCE(a.memory_bytes, (0)::bigint) AS requested_memory_bytes,
    COALESCE(u.minutes, (0)::bigint) AS measured_minutes,
    u.avg_cpu_milli,
    u.max_cpu_milli,
    u.avg_memory_bytes,
    u.max_memory_bytes,
    round((u.avg_cpu_milli / (NULLIF(a.cpu_milli, 0))::numeric), 4) AS cpu_used_fraction,
    round((u.avg_memory_bytes / (NULLIF(a.memory_bytes, 0))::numeric), 4) AS memory_used_fraction
   FROM ((((( SELECT asked.namespace,
            asked.node
           FROM asked
        UNION
         SELECT used.namespace,
            used.node
           FROM used) k
     LEFT JOIN asked a ON (((a.namespace = k.namespace) AND (a.node = k.node))))
     LEFT JOIN used u ON (((u.namespace = k.namespace) AND (u.node = k.node))))
     LEFT JOIN namespaces ns ON ((ns.name = k.namespace)))
     LEFT JOIN nodes n ON (((n.namespace = ''::text) AND (n.name = k.node))))""",
    "reporting.change_summaries": """SELECT h.at,
    h.table_name,
    h.kind,
    h.namespace,
    h.summary_count AS writes,
    h.after AS detail,
    l.seq,
    (l.seq IS NOT NULL) AS sealed
   FROM (qm_history h
     LEFT JOIN qm_history_links l ON (((l.id = h.id) AND (l.at = h.at))))
  WHERE (h.op = 'summary'::text)""",
    "reporting.changes": """SELECT h.id,
    h.at,
    h.kind,
    h.table_name,
    h.namespace,
    h.name,
    h.uid,
    h.op,
        CASE
            WHEN (h.op = 'update'::text) THEN ARRAY( SELECT jsonb_object_keys(COALESCE(h.after, '{}'::jsonb)) AS jsonb_object_keys
              ORDER BY (jsonb_object_keys(COALESCE(h.after, '{}'::jsonb))))
            ELSE NULL::text[]
        END AS changed_fields,
    h.principal,
    h.groups,
    h.reason,
    h.request_id,
    h.verb,
    h.subresource,
    h.client_addr,
    h.user_agent,
    h.db_role,
    h.application_name,
    h.before,
    h.after,
    (h.xid)::text AS xid,
    l.seq,
    (l.seq IS NOT NULL) AS sealed
   FROM (qm_history h
     LEFT JOIN qm_history_links l ON (((l.id = h.id) AND (l.at = h.at))))
  WHERE (h.op <> 'summary'::text)""",
    "reporting.disruption_budget_blocks": """SELECT b.namespace,
    b.name AS budget,
    b.uid AS budget_uid,
    (b.spec -> 'minAvailable'::text) AS min_available,
    (b.spec -> 'maxUnavailable'::text) AS max_unavailable,
    qm_int((b.status ->> 'expectedPods'::text)) AS expected_pods,
    qm_int((b.status ->> 'currentHealthy'::text)) AS current_healthy,
    qm_int((b.status ->> 'desiredHealthy'::text)) AS desired_healthy,
    qm_int((b.status ->> 'disruptionsAllowed'::text)) AS disruptions_allowed,
    (COALESCE(qm_int((b.status ->> 'disruptionsAllowed'::text)), 0) = 0) AS blocking,
    COALESCE(e.refusals, (0)::bigint) AS refused_evictions,
    e.last_refused,
    e.message AS last_message
   FROM (poddisruptionbudgets b
     LEFT JOIN LATERAL ( SELECT sum(COALESCE(qm_int((v.spec ->> 'count'::text)), 1)) AS refusals,
            max((v.spec ->> 'lastTimestamp'::text)) AS last_refused,
            (array_agg((v.spec ->> 'message'::text) ORDER BY (v.spec ->> 'lastTimestamp'::text) DESC))[1] AS message
           FROM events v
          WHERE ((v.namespace = b.namespace) AND (v.involved_uid = (b.uid)::text) AND (v.reason = 'EvictionBlocked'::text))) e ON (true))""",
    "reporting.drains": """WITH steps AS (
         SELECT h.request_id,
            h.name AS node,
            h.at,
            true AS cordon,
            h.principal,
            h.reason,
            h.db_role
           FROM qm_history h
          WHERE ((h.table_name = 'nodes'::text) AND (h.op = 'update'::text) AND (((h.after -> 'spec'::text) -> 'unschedulable'::text) = 'true'::jsonb) AND (((h.before -> 'spec'::text) -> 'unschedulable'::text) IS DISTINCT FROM 'true'::jsonb))
        UNION ALL
         SELECT e.request_id,
            "substring"(e.message, '^Evicted while draining node (.*)$'::text) AS "substring",
            e.evicted_at,
            false,
            e.principal,
            e.reason,
            e.db_role
           FROM reporting.evictions e
          WHERE (e.message ~~ 'Evicted while draining node %'::text)
        )
 SELECT node,
    request_id,
    min(at) AS started_at,
    max(at) AS last_at,
    bool_or(cordon) AS cordoned,
    count(*) FILTER (WHERE (NOT cordon)) AS pods_evicted,
    (array_agg(principal ORDER BY at) FILTER (WHERE (principal IS NOT NULL)))[1] AS principal,
    (array_agg(reason ORDER BY cordon DESC, at) FILTER (WHERE (reason IS NOT NULL)))[1] AS reason,
    (array_agg(db_role ORDER BY at))[1] AS db_role
   FROM steps
  GROUP BY node, request_id,
        CASE
            WHEN (request_id IS NULL) THEN at
            ELSE NULL::timestamp with time zone
        END""",
    "reporting.evictions": """WITH taken AS (
         SELECT DISTINCT ON (h.uid) h.uid,
            h.namespace,
            h.name,
            COALESCE((h.after ->> 'node_name'::text), (h.before ->> 'node_name'::text)) AS node,
            jsonb_path_query_first(COALESCE(h.after, h.before), '$."status"."conditions"[*]?(@."type" == "DisruptionTarget" && @."status" == "True")'::jsonpath) AS cond
           FROM qm_history h
          WHERE ((h.table_name = 'pods'::text) AND (((h.op = 'update'::text) AND jsonb_path_exists(h.after, '$."status"."conditions"[*]?(@."type" == "DisruptionTarget" && @."status" == "True")'::jsonpath)) OR ((h.op = 'delete'::text) AND jsonb_path_exists(h.before, '$."status"."conditions"[*]?(@."type" == "DisruptionTarget" && @."status" == "True")'::jsonpath))))
          ORDER BY h.uid, h.at, h.id
        ), candidates AS (
         SELECT t.uid,
            t.namespace,
            t.name,
            COALESCE(t.node, p.node_name) AS node,
            t.cond
           FROM (taken t
             LEFT JOIN pods p ON ((p.uid = t.uid)))
        UNION ALL
         SELECT p.uid,
            p.namespace,
            p.name,
            p.node_name,
            jsonb_path_query_first(p.status, '$."conditions"[*]?(@."type" == "DisruptionTarget" && @."status" == "True")'::jsonpath) AS jsonb_path_query_first
           FROM pods p
          WHERE (jsonb_path_exists(p.status, '$."conditions"[*]?(@."type" == "DisruptionTarget" && @."status" == "True")'::jsonpath) AND (NOT (EXISTS ( SELECT 1
                   FROM taken t
                  WHERE (t.uid = p.uid)))))
        )
 SELECT c.namespace,
    c.name AS pod,
    c.uid AS pod_uid,
    w.at AS evicted_at,
    c.node,
    (c.cond ->> 'reason'::text) AS cause,
    (c.cond ->> 'message'::text) AS message,
    w.principal,
    w.reason,
    w.request_id,
    w.db_role
   FROM (candidates c
     LEFT JOIN LATERAL ( SELECT x.at,
            x.principal,
            x.reason,
            x.request_id,
            x.db_role
           FROM qm_history x
          WHERE ((x.table_name = 'pods'::text) AND (x.namespace = c.namespace) AND (x.name = c.name) AND (x.uid = c.uid) AND ((x.op = 'delete'::text) OR ((x.op = 'update'::text) AND ((x.after ->> 'deletion_timestamp'::text) IS NOT NULL) AND ((x.before ->> 'deletion_timestamp'::text) IS NULL))))
          ORDER BY x.at, x.id
         LIMIT 1) w ON (true))""",
    "reporting.node_capacity": """WITH held AS (
         SELECT p.node_name,
            count(*) AS pods,
            (sum(p.req_cpu_milli))::bigint AS cpu_milli,
            (sum(p.req_memory_bytes))::bigint AS memory_bytes,
            (sum(p.req_gpu))::bigint AS gpu
           FROM pods p
          WHERE ((p.node_name IS NOT NULL) AND (COALESCE(p.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text])))
          GROUP BY p.node_name
        )
 SELECT n.name AS node,
    n.zone,
    n.machine_class,
    n.ready,
    n.unschedulable,
    n.alloc_cpu_milli,
    n.alloc_memory_bytes,
    n.alloc_gpu,
    COALESCE(h.pods, (0)::bigint) AS pods,
    COALESCE(h.cpu_milli, (0)::bigint) AS requested_cpu_milli,
    COALESCE(h.memory_bytes, (0)::bigint) AS requested_memory_bytes,
    COALESCE(h.gpu, (0)::bigint) AS requested_gpu,
    round(((COALESCE(h.cpu_milli, (0)::bigint))::numeric / (NULLIF(n.alloc_cpu_milli, 0))::numeric), 4) AS cpu_fraction,
    round(((COALESCE(h.memory_bytes, (0)::bigint))::numeric / (NULLIF(n.alloc_memory_bytes, 0))::numeric), 4) AS memory_fraction,
    n.batch_cpu_milli,
    n.batch_memory_bytes
   FROM (nodes n
     LEFT JOIN held h ON ((h.node_name = n.name)))
  WHERE (n.namespace = ''::text)""",
    "reporting.node_failures": """SELECT h.name AS node,
    h.uid AS node_uid,
    h.at AS failed_at,
    (jsonb_path_query_first((h.after -> 'status'::text), '$."conditions"[*]?(@."type" == "Ready")'::jsonpath) ->> 'status'::text) AS ready_status,
    (jsonb_path_query_first((h.after -> 'status'::text), '$."conditions"[*]?(@."type" == "Ready")'::jsonpath) ->> 'reason'::text) AS condition_reason,
    r.at AS recovered_at,
    (EXTRACT(epoch FROM (COALESCE(r.at, now()) - h.at)))::bigint AS down_seconds,
    h.principal,
    h.reason,
    h.db_role
   FROM (qm_history h
     LEFT JOIN LATERAL ( SELECT x.at
           FROM qm_history x
          WHERE ((x.table_name = 'nodes'::text) AND (x.namespace = ''::text) AND (x.name = h.name) AND (x.uid = h.uid) AND (x.op = 'update'::text) AND (x.at >= h.at) AND ((x.at > h.at) OR (x.id > h.id)) AND (x.after ? 'status'::text) AND qm_condition_true((x.after -> 'status'::text), 'Ready'::text))
          ORDER BY x.at, x.id
         LIMIT 1) r ON (true))
  WHERE ((h.table_name = 'nodes'::text) AND (h.op = 'update'::text) AND (h.after ? 'status'::text) AND qm_condition_true((h.before -> 'status'::text), 'Ready'::text) AND (NOT qm_condition_true((h.after -> 'status'::text), 'Ready'::text)))""",
    "reporting.pending_pods": """SELECT p.namespace,
    p.name,
    p.uid,
    p.priority,
    p.node_name,
    p.creation_timestamp AS created,
    (EXTRACT(epoch FROM (now() - p.creation_timestamp)))::bigint AS age_seconds,
        CASE
            WHEN (p.node_name IS NOT NULL) THEN 'WaitingForNode'::text
            ELSE COALESCE((c.c ->> 'reason'::text), 'NotYetScheduled'::text)
        END AS reason,
    (c.c ->> 'message'::text) AS message
   FROM (pods p
     LEFT JOIN LATERAL jsonb_path_query_first(p.status, '$."conditions"[*]?(@."type" == "PodScheduled" && @."status" == "False")'::jsonpath) c(c) ON (true))
  WHERE ((COALESCE(p.phase, 'Pending'::text) = 'Pending'::text) AND (p.deletion_timestamp IS NULL))""",
    "reporting.pending_pods_by_reason": """SELECT namespace,
    reason,
    count(*) AS pods,
    max(age_seconds) AS oldest_seconds,
    percentile_disc((0.5)::double precision) WITHIN GROUP (ORDER BY age_seconds) AS median_seconds,
    count(*) FILTER (WHERE (age_seconds < 60)) AS under_1m,
    count(*) FILTER (WHERE ((age_seconds >= 60) AND (age_seconds < 600))) AS from_1m_to_10m,
    count(*) FILTER (WHERE ((age_seconds >= 600) AND (age_seconds < 3600))) AS from_10m_to_1h,
    count(*) FILTER (WHERE (age_seconds >= 3600)) AS over_1h
   FROM reporting.pending_pods
  GROUP BY namespace, reason""",
    "reporting.quota_usage": """SELECT q.namespace,
    q.name AS quota,
    h.key AS resource,
    (h.value #>> '{}'::text[]) AS hard,
    ((q.status -> 'used'::text) ->> h.key) AS used,
    qm_quantity((h.value #>> '{}'::text[])) AS hard_amount,
    qm_quantity(((q.status -> 'used'::text) ->> h.key)) AS used_amount,
    round((qm_quantity(((q.status -> 'used'::text) ->> h.key)) / NULLIF(qm_quantity((h.value #>> '{}'::text[])), (0)::numeric)), 4) AS used_fraction
   FROM resourcequotas q,
    LATERAL jsonb_each(
        CASE
            WHEN (jsonb_typeof((q.spec -> 'hard'::text)) = 'object'::text) THEN (q.spec -> 'hard'::text)
            ELSE '{}'::jsonb
        END) h(key, value)""",
    "reporting.role_bindings": """SELECT b.kind,
    b.namespace,
    b.name AS binding,
    ((b.spec -> 'roleRef'::text) ->> 'kind'::text) AS role_kind,
    ((b.spec -> 'roleRef'::text) ->> 'name'::text) AS role_name,
    (s.value ->> 'kind'::text) AS subject_kind,
    (s.value ->> 'name'::text) AS subject_name,
    (s.value ->> 'namespace'::text) AS subject_namespace
   FROM (( SELECT 'RoleBinding'::text AS kind,
            rolebindings.namespace,
            rolebindings.name,
            rolebindings.spec
           FROM rolebindings
        UNION ALL
         SELECT 'ClusterRoleBinding'::text,
            clusterrolebindings.namespace,
            clusterrolebindings.name,
            clusterrolebindings.spec
           FROM clusterrolebindings) b
     CROSS JOIN LATERAL jsonb_array_elements(
        CASE
            WHEN (jsonb_typeof((b.spec -> 'subjects'::text)) = 'array'::text) THEN (b.spec -> 'subjects'::text)
            ELSE '[]'::jsonb
        END) s(value))""",
    "reporting.rollout_changes": """SELECT at,
    namespace,
    name AS deployment,
    uid AS deployment_uid,
        CASE op
            WHEN 'insert'::text THEN 'created'::text
            WHEN 'delete'::text THEN 'deleted'::text
            WHEN 'update'::text THEN
            CASE
                WHEN (((after -> 'spec'::text) -> 'template'::text) IS DISTINCT FROM ((before -> 'spec'::text) -> 'template'::text)) THEN 'template'::text
                ELSE 'scale'::text
            END
            ELSE NULL::text
        END AS change,
    ((before -> 'spec'::text) -> 'replicas'::text) AS replicas_before,
    ((after -> 'spec'::text) -> 'replicas'::text) AS replicas_after,
    principal,
    reason,
    request_id,
    verb,
    subresource,
    db_role,
    id AS history_id
   FROM qm_history h
  WHERE ((table_name = 'deployments'::text) AND (op = ANY (ARRAY['insert'::text, 'delete'::text, 'update'::text])) AND ((op <> 'update'::text) OR ((after ? 'spec'::text) AND ((((after -> 'spec'::text) -> 'template'::text) IS DISTINCT FROM ((before -> 'spec'::text) -> 'template'::text)) OR (((after -> 'spec'::text) -> 'replicas'::text) IS DISTINCT FROM ((before -> 'spec'::text) -> 'replicas'::text))))))""",
    "reporting.rollout_history": """SELECT d.namespace,
    d.name AS deployment,
    d.uid AS deployment_uid,
    qm_int((rs.annotations ->> 'deployment.kubernetes.io/revision'::text)) AS revision,
    rs.name AS replicaset,
    rs.creation_timestamp AS created,
    (rs.annotations ->> 'kubernetes.io/change-cause'::text) AS change_cause,
    COALESCE(qm_int((rs.spec ->> 'replicas'::text)), 0) AS replicas,
    COALESCE(qm_int((rs.status ->> 'readyReplicas'::text)), 0) AS ready_replicas,
    (qm_int((rs.annotations ->> 'deployment.kubernetes.io/revision'::text)) = max(qm_int((rs.annotations ->> 'deployment.kubernetes.io/revision'::text))) OVER (PARTITION BY d.uid)) AS current,
    h.at AS changed_at,
    h.principal AS changed_by,
    h.reason,
    h.request_id,
    h.db_role
   FROM ((deployments d
     JOIN replicasets rs ON (((rs.namespace = d.namespace) AND (rs.owner_references @> jsonb_build_array(jsonb_build_object('uid', (d.uid)::text))))))
     LEFT JOIN LATERAL ( SELECT x.at,
            x.principal,
            x.reason,
            x.request_id,
            x.db_role
           FROM qm_history x
          WHERE ((x.table_name = 'deployments'::text) AND (x.namespace = d.namespace) AND (x.name = d.name) AND (x.uid = d.uid) AND (x.at <= rs.creation_timestamp) AND ((x.op = 'insert'::text) OR ((x.op = 'update'::text) AND (x.after ? 'spec'::text) AND (((x.after -> 'spec'::text) -> 'template'::text) IS DISTINCT FROM ((x.before -> 'spec'::text) -> 'template'::text)))))
          ORDER BY x.at DESC, x.id DESC
         LIMIT 1) h ON (true))""",
    "reporting.service_ips": """SELECT host(ip) AS ip,
    namespace,
    name AS service,
    allocated_at,
    released_at,
    (released_at IS NULL) AS held
   FROM service_ips i""",
    "reporting.usage_hourly": """WITH src AS (
         SELECT u.minute,
            u.namespace,
            COALESCE((ns.labels ->> 'quaymaster.io/team'::text), u.namespace) AS team,
            n.zone,
            u.node,
            u.pods,
            u.cpu_milli,
            u.memory_bytes
           FROM ((qm_usage_rollup u
             LEFT JOIN namespaces ns ON ((ns.name = u.namespace)))
             LEFT JOIN nodes n ON (((n.namespace = ''::text) AND (n.name = u.node))))
        ), per_minute AS (
         SELECT src.minute,
            src.namespace,
            src.team,
            src.zone,
            src.node,
            GROUPING(src.namespace, src.team, src.zone, src.node) AS g,
            sum(src.pods) AS pods,
            (sum(src.cpu_milli))::bigint AS cpu_milli,
            (sum(src.memory_bytes))::bigint AS memory_bytes
           FROM src
          GROUP BY src.minute, GROUPING SETS ((src.namespace, src.team, src.zone, src.node), (src.namespace, src.team), (src.team), (src.zone), (src.node), ())
        )
 SELECT date_trunc('hour'::text, minute) AS hour,
        CASE g
            WHEN 0 THEN 'namespace_node'::text
            WHEN 3 THEN 'namespace'::text
            WHEN 11 THEN 'team'::text
            WHEN 13 THEN 'zone'::text
            WHEN 14 THEN 'node'::text
            ELSE 'cluster'::text
        END AS level,
        CASE
            WHEN (g = ANY (ARRAY[0, 3])) THEN namespace
            ELSE NULL::text
        END AS namespace,
        CASE
            WHEN (g = ANY (ARRAY[0, 3, 11])) THEN team
            ELSE NULL::text
        END AS team,
        CASE
            WHEN (g = ANY (ARRAY[0, 13])) THEN zone
            ELSE NULL::text
        END AS zone,
        CASE
            WHEN (g = ANY (ARRAY[0, 14])) THEN node
            ELSE NULL::text
        END AS node,
    count(*) AS minutes,
    round(avg(pods), 2) AS avg_pods,
    max(pods) AS max_pods,
    round(avg(cpu_milli), 1) AS avg_cpu_milli,
    max(cpu_milli) AS max_cpu_milli,
    round(avg(memory_bytes)) AS avg_memory_bytes,
    max(memory_bytes) AS max_memory_bytes
   FROM per_minute
  GROUP BY (date_trunc('hour'::text, minute)),
        CASE g
            WHEN 0 THEN 'namespace_node'::text
            WHEN 3 THEN 'namespace'::text
            WHEN 11 THEN 'team'::text
            WHEN 13 THEN 'zone'::text
            WHEN 14 THEN 'node'::text
            ELSE 'cluster'::text
        END,
        CASE
            WHEN (g = ANY (ARRAY[0, 3])) THEN namespace
            ELSE NULL::text
        END,
        CASE
            WHEN (g = ANY (ARRAY[0, 3, 11])) THEN team
            ELSE NULL::text
        END,
        CASE
            WHEN (g = ANY (ARRAY[0, 13])) THEN zone
            ELSE NULL::text
        END,
        CASE
            WHEN (g = ANY (ARRAY[0, 14])) THEN node
            ELSE NULL::text
        END""",
    "reporting.workloads": """WITH owned AS (
         SELECT (o.value ->> 'uid'::text) AS owner_uid,
            count(*) FILTER (WHERE ((p.deletion_timestamp IS NULL) AND (COALESCE(p.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text])))) AS live,
            count(*) FILTER (WHERE ((p.deletion_timestamp IS NULL) AND p.ready)) AS ready
           FROM pods p,
            LATERAL jsonb_array_elements(
                CASE
                    WHEN (jsonb_typeof(p.owner_references) = 'array'::text) THEN p.owner_references
                    ELSE '[]'::jsonb
                END) o(value)
          GROUP BY (o.value ->> 'uid'::text)
        ), by_deployment AS (
         SELECT (o.value ->> 'uid'::text) AS owner_uid,
            sum(w.live) AS live,
            sum(w.ready) AS ready
           FROM ((replicasets rs
             CROSS JOIN LATERAL jsonb_array_elements(
                CASE
                    WHEN (jsonb_typeof(rs.owner_references) = 'array'::text) THEN rs.owner_references
                    ELSE '[]'::jsonb
                END) o(value))
             JOIN owned w ON ((w.owner_uid = (rs.uid)::text)))
          GROUP BY (o.value ->> 'uid'::text)
        ), workloads AS (
         SELECT 'Deployment'::text AS kind,
            d.namespace,
            d.name,
            d.uid,
            d.creation_timestamp,
            d.generation,
            qm_int((d.status ->> 'observedGeneration'::text)) AS observed_generation,
            COALESCE(qm_int((d.spec ->> 'replicas'::text)), 1) AS desired,
            COALESCE(qm_int((d.status ->> 'replicas'::text)), 0) AS current,
            COALESCE(qm_int((d.status ->> 'updatedReplicas'::text)), 0) AS updated,
            COALESCE(qm_int((d.status ->> 'readyReplicas'::text)), 0) AS ready,
            COALESCE(qm_int((d.status ->> 'availableReplicas'::text)), 0) AS available,
            NULL::integer AS succeeded,
            NULL::integer AS failed,
            COALESCE(b.live, (0)::numeric) AS live_pods,
            COALESCE(b.ready, (0)::numeric) AS ready_pods
           FROM (deployments d
             LEFT JOIN by_deployment b ON ((b.owner_uid = (d.uid)::text)))
        UNION ALL
         SELECT 'ReplicaSet'::text,
            r.namespace,
            r.name,
            r.uid,
            r.creation_timestamp,
            r.generation,
            qm_int((r.status ->> 'observedGeneration'::text)) AS qm_int,
            COALESCE(qm_int((r.spec ->> 'replicas'::text)), 1) AS "coalesce",
            COALESCE(qm_int((r.status ->> 'replicas'::text)), 0) AS "coalesce",
            NULL::integer,
            COALESCE(qm_int((r.status ->> 'readyReplicas'::text)), 0) AS "coalesce",
            COALESCE(qm_int((r.status ->> 'availableReplicas'::text)), 0) AS "coalesce",
            NULL::integer,
            NULL::integer,
            COALESCE(w.live, (0)::bigint) AS "coalesce",
            COALESCE(w.ready, (0)::bigint) AS "coalesce"
           FROM (replicasets r
             LEFT JOIN owned w ON ((w.owner_uid = (r.uid)::text)))
        UNION ALL
         SELECT 'Job'::text,
            j.namespace,
            j.name,
            j.uid,
            j.creation_timestamp,
            j.generation,
            NULL::integer,
            COALESCE(qm_int((j.spec ->> 'completions'::text)), qm_int((j.spec ->> 'parallelism'::text)), 1) AS "coalesce",
            COALESCE(qm_int((j.status ->> 'active'::text)), 0) AS "coalesce",
            NULL::integer,
            COALESCE(qm_int((j.status ->> 'ready'::text)), 0) AS "coalesce",
            NULL::integer,
            COALESCE(qm_int((j.status ->> 'succeeded'::text)), 0) AS "coalesce",
            COALESCE(qm_int((j.status ->> 'failed'::text)), 0) AS "coalesce",
            COALESCE(w.live, (0)::bigint) AS "coalesce",
            COALESCE(w.ready, (0)::bigint) AS "coalesce"
           FROM (jobs j
             LEFT JOIN owned w ON ((w.owner_uid = (j.uid)::text)))
        )
 SELECT kind,
    namespace,
    name,
    uid,
    creation_timestamp AS created,
    generation,
    observed_generation,
    desired,
    current,
    updated,
    ready,
    available,
    succeeded,
    failed,
    live_pods,
    ready_pods,
        CASE
            WHEN (kind = 'Job'::text) THEN (succeeded >= desired)
            ELSE ((ready = desired) AND (current = desired) AND COALESCE((observed_generation >= generation), false))
        END AS converged
   FROM workloads""",
}

POLICIES: dict[str, str] = {
    "clusterrolebindings_everyone on clusterrolebindings": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "clusterrolebindings_reporting on clusterrolebindings": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (namespace IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
    "deployments_everyone on deployments": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "deployments_reporting on deployments": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (namespace IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
    "events_everyone on events": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "events_reporting on events": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (namespace IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
    "jobs_everyone on jobs": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "jobs_reporting on jobs": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (namespace IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
    "namespaces_everyone on namespaces": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "namespaces_reporting on namespaces": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (name IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
    "poddisruptionbudgets_everyone on poddisruptionbudgets": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "poddisruptionbudgets_reporting on poddisruptionbudgets": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (namespace IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
    "pods_everyone on pods": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "pods_reporting on pods": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (namespace IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
    "qm_history_everyone on qm_history": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "qm_history_reporting on qm_history": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (namespace IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
    "qm_history_reporting_secrets on qm_history": """as RESTRICTIVE for SELECT to qm_reporting using ((table_name IS DISTINCT FROM 'secrets'::text) OR (NOT (COALESCE(((before -> 'annotations'::text) ? 'kubectl.kubernetes.io/last-applied-configuration'::text), false) OR COALESCE((jsonb_typeof(((before -> 'spec'::text) -> 'data'::text)) = 'object'::text), false) OR COALESCE((jsonb_typeof(((before -> 'spec'::text) -> 'stringData'::text)) = 'object'::text), false) OR COALESCE(((after -> 'annotations'::text) ? 'kubectl.kubernetes.io/last-applied-configuration'::text), false) OR COALESCE((jsonb_typeof(((after -> 'spec'::text) -> 'data'::text)) = 'object'::text), false) OR COALESCE((jsonb_typeof(((after -> 'spec'::text) -> 'stringData'::text)) = 'object'::text), false))))""",
    "qm_usage_rollup_everyone on qm_usage_rollup": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "qm_usage_rollup_reporting on qm_usage_rollup": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (namespace IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
    "replicasets_everyone on replicasets": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "replicasets_reporting on replicasets": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (namespace IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
    "reporting.namespace_access_own on reporting.namespace_access": """as PERMISSIVE for SELECT to qm_reporting using (role_name IN ( SELECT r.rolname
   FROM pg_roles r
  WHERE pg_has_role(CURRENT_USER, r.oid, 'USAGE'::text)))""",
    "resourcequotas_everyone on resourcequotas": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "resourcequotas_reporting on resourcequotas": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (namespace IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
    "rolebindings_everyone on rolebindings": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "rolebindings_reporting on rolebindings": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (namespace IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
    "service_ips_everyone on service_ips": """as PERMISSIVE for ALL to public using (true) with check (true)""",
    "service_ips_reporting on service_ips": """as RESTRICTIVE for SELECT to qm_reporting using ((EXISTS ( SELECT 1
   FROM reporting.namespace_access
  WHERE (namespace_access.namespace = '*'::text))) OR (namespace IN ( SELECT namespace_access.namespace
   FROM reporting.namespace_access)))""",
}

GRANTS: dict[str, str] = {
    "admissionpolicies to qm_app: DELETE": """whole""",
    "admissionpolicies to qm_app: INSERT": """whole""",
    "admissionpolicies to qm_app: SELECT": """whole""",
    "admissionpolicies to qm_app: UPDATE": """whole""",
    "alembic_version to qm_app: SELECT": """whole""",
    "clusterrolebindings to qm_app: DELETE": """whole""",
    "clusterrolebindings to qm_app: INSERT": """whole""",
    "clusterrolebindings to qm_app: SELECT": """whole""",
    "clusterrolebindings to qm_app: UPDATE": """whole""",
    "clusterrolebindings to qm_reporting: SELECT": """name, namespace, spec, uid""",
    "clusterroles to qm_app: DELETE": """whole""",
    "clusterroles to qm_app: INSERT": """whole""",
    "clusterroles to qm_app: SELECT": """whole""",
    "clusterroles to qm_app: UPDATE": """whole""",
    "configmaps to qm_app: DELETE": """whole""",
    "configmaps to qm_app: INSERT": """whole""",
    "configmaps to qm_app: SELECT": """whole""",
    "configmaps to qm_app: UPDATE": """whole""",
    "cronjobs to qm_app: DELETE": """whole""",
    "cronjobs to qm_app: INSERT": """whole""",
    "cronjobs to qm_app: SELECT": """whole""",
    "cronjobs to qm_app: UPDATE": """whole""",
    "deployments to qm_app: DELETE": """whole""",
    "deployments to qm_app: INSERT": """whole""",
    "deployments to qm_app: SELECT": """whole""",
    "deployments to qm_app: UPDATE": """whole""",
    "deployments to qm_reporting: SELECT": """creation_timestamp, generation, name, namespace, spec, status, uid""",
    "endpointslices to qm_app: DELETE": """whole""",
    "endpointslices to qm_app: INSERT": """whole""",
    "endpointslices to qm_app: SELECT": """whole""",
    "endpointslices to qm_app: UPDATE": """whole""",
    "events to qm_app: DELETE": """whole""",
    "events to qm_app: INSERT": """whole""",
    "events to qm_app: SELECT": """whole""",
    "events to qm_app: UPDATE": """whole""",
    "events to qm_reporting: SELECT": """involved_uid, namespace, reason, spec""",
    "jobs to qm_app: DELETE": """whole""",
    "jobs to qm_app: INSERT": """whole""",
    "jobs to qm_app: SELECT": """whole""",
    "jobs to qm_app: UPDATE": """whole""",
    "jobs to qm_reporting: SELECT": """creation_timestamp, generation, name, namespace, spec, status, uid""",
    "leases to qm_app: DELETE": """whole""",
    "leases to qm_app: INSERT": """whole""",
    "leases to qm_app: SELECT": """whole""",
    "leases to qm_app: UPDATE": """whole""",
    "namespaces to qm_app: DELETE": """whole""",
    "namespaces to qm_app: INSERT": """whole""",
    "namespaces to qm_app: SELECT": """whole""",
    "namespaces to qm_app: UPDATE": """whole""",
    "namespaces to qm_reporting: SELECT": """creation_timestamp, labels, name, phase, uid""",
    "nodes to qm_app: DELETE": """whole""",
    "nodes to qm_app: INSERT": """whole""",
    "nodes to qm_app: SELECT": """whole""",
    "nodes to qm_app: UPDATE": """whole""",
    "nodes to qm_reporting: SELECT": """alloc_cpu_milli, alloc_gpu, alloc_memory_bytes, batch_cpu_milli, batch_memory_bytes, creation_timestamp, labels, machine_class, name, namespace, ready, spec, status, uid, unschedulable, zone""",
    "nodes_allocated to qm_app: DELETE": """whole""",
    "nodes_allocated to qm_app: INSERT": """whole""",
    "nodes_allocated to qm_app: SELECT": """whole""",
    "nodes_allocated to qm_app: UPDATE": """whole""",
    "poddisruptionbudgets to qm_app: DELETE": """whole""",
    "poddisruptionbudgets to qm_app: INSERT": """whole""",
    "poddisruptionbudgets to qm_app: SELECT": """whole""",
    "poddisruptionbudgets to qm_app: UPDATE": """whole""",
    "poddisruptionbudgets to qm_reporting: SELECT": """name, namespace, spec, status, uid""",
    "pods to qm_app: DELETE": """whole""",
    "pods to qm_app: INSERT": """whole""",
    "pods to qm_app: SELECT": """whole""",
    "pods to qm_app: UPDATE": """whole""",
    "pods to qm_reporting: SELECT": """bound_at, creation_timestamp, deletion_timestamp, name, namespace, node_name, owner_references, phase, priority, ready, req_cpu_milli, req_gpu, req_memory_bytes, status, uid""",
    "priorityclasses to qm_app: DELETE": """whole""",
    "priorityclasses to qm_app: INSERT": """whole""",
    "priorityclasses to qm_app: SELECT": """whole""",
    "priorityclasses to qm_app: UPDATE": """whole""",
    "public to PUBLIC: USAGE": """whole""",
    "qm_api_servers to qm_app: DELETE": """whole""",
    "qm_api_servers to qm_app: INSERT": """whole""",
    "qm_api_servers to qm_app: SELECT": """whole""",
    "qm_api_servers to qm_app: UPDATE": """whole""",
    "qm_audit to qm_app: INSERT": """whole""",
    "qm_audit to qm_app: SELECT": """whole""",
    "qm_audit_id_seq to qm_app: SELECT": """whole""",
    "qm_audit_id_seq to qm_app: UPDATE": """whole""",
    "qm_audit_id_seq to qm_app: USAGE": """whole""",
    "qm_bootstrap_tokens to qm_app: DELETE": """whole""",
    "qm_bootstrap_tokens to qm_app: INSERT": """whole""",
    "qm_bootstrap_tokens to qm_app: SELECT": """whole""",
    "qm_bootstrap_tokens to qm_app: UPDATE": """whole""",
    "qm_history to qm_app: SELECT": """whole""",
    "qm_history to qm_reporting: SELECT": """after, application_name, at, before, client_addr, db_role, groups, id, kind, name, namespace, op, principal, reason, request_id, subresource, summary_count, table_name, uid, user_agent, verb, xid""",
    "qm_history_anchors to qm_archivist: SELECT": """whole""",
    "qm_history_archive(timestamp with time zone) to qm_archivist: EXECUTE": """whole""",
    "qm_history_drop_archived(text,text) to qm_archivist: EXECUTE": """whole""",
    "qm_history_links to qm_app: SELECT": """whole""",
    "qm_history_links to qm_archivist: SELECT": """whole""",
    "qm_history_links to qm_reporting: SELECT": """at, id, seq""",
    "qm_history_seal(integer) to qm_app: EXECUTE": """whole""",
    "qm_history_status() to qm_app: EXECUTE": """whole""",
    "qm_history_status() to qm_archivist: EXECUTE": """whole""",
    "qm_history_verify() to qm_app: EXECUTE": """whole""",
    "qm_history_verify() to qm_archivist: EXECUTE": """whole""",
    "qm_node_credentials to qm_app: DELETE": """whole""",
    "qm_node_credentials to qm_app: INSERT": """whole""",
    "qm_node_credentials to qm_app: SELECT": """whole""",
    "qm_node_credentials to qm_app: UPDATE": """whole""",
    "qm_node_credentials_id_seq to qm_app: SELECT": """whole""",
    "qm_node_credentials_id_seq to qm_app: UPDATE": """whole""",
    "qm_node_credentials_id_seq to qm_app: USAGE": """whole""",
    "qm_revision_log to qm_app: DELETE": """whole""",
    "qm_revision_log to qm_app: INSERT": """whole""",
    "qm_revision_log to qm_app: SELECT": """whole""",
    "qm_revision_log to qm_app: UPDATE": """whole""",
    "qm_row_version to qm_app: SELECT": """whole""",
    "qm_row_version to qm_app: UPDATE": """whole""",
    "qm_row_version to qm_app: USAGE": """whole""",
    "qm_schema_compat to qm_app: SELECT": """whole""",
    "qm_stream_state to qm_app: DELETE": """whole""",
    "qm_stream_state to qm_app: INSERT": """whole""",
    "qm_stream_state to qm_app: SELECT": """whole""",
    "qm_stream_state to qm_app: UPDATE": """whole""",
    "qm_tokens to qm_app: DELETE": """whole""",
    "qm_tokens to qm_app: INSERT": """whole""",
    "qm_tokens to qm_app: SELECT": """whole""",
    "qm_tokens to qm_app: UPDATE": """whole""",
    "qm_tokens_id_seq to qm_app: SELECT": """whole""",
    "qm_tokens_id_seq to qm_app: UPDATE": """whole""",
    "qm_tokens_id_seq to qm_app: USAGE": """whole""",
    "qm_usage_rollup to qm_app: DELETE": """whole""",
    "qm_usage_rollup to qm_app: INSERT": """whole""",
    "qm_usage_rollup to qm_app: SELECT": """whole""",
    "qm_usage_rollup to qm_app: UPDATE": """whole""",
    "qm_usage_rollup to qm_reporting: SELECT": """cpu_milli, memory_bytes, minute, namespace, node, pods""",
    "replicasets to qm_app: DELETE": """whole""",
    "replicasets to qm_app: INSERT": """whole""",
    "replicasets to qm_app: SELECT": """whole""",
    "replicasets to qm_app: UPDATE": """whole""",
    "replicasets to qm_reporting: SELECT": """annotations, creation_timestamp, generation, name, namespace, owner_references, spec, status, uid""",
    "reporting.allocation to qm_reporting: SELECT": """whole""",
    "reporting.allocation_vs_usage to qm_reporting: SELECT": """whole""",
    "reporting.change_summaries to qm_reporting: SELECT": """whole""",
    "reporting.changes to qm_reporting: SELECT": """whole""",
    "reporting.disruption_budget_blocks to qm_reporting: SELECT": """whole""",
    "reporting.drains to qm_reporting: SELECT": """whole""",
    "reporting.evictions to qm_reporting: SELECT": """whole""",
    "reporting.namespace_access to qm_reporting: SELECT": """whole""",
    "reporting.node_capacity to qm_reporting: SELECT": """whole""",
    "reporting.node_failures to qm_reporting: SELECT": """whole""",
    "reporting.pending_pods to qm_reporting: SELECT": """whole""",
    "reporting.pending_pods_by_reason to qm_reporting: SELECT": """whole""",
    "reporting.quota_usage to qm_reporting: SELECT": """whole""",
    "reporting.reporting to qm_reporting: USAGE": """whole""",
    "reporting.reporting.usage_hourly_between(timestamp with time zone,timesta to qm_reporting: EXECUTE": """whole""",
    "reporting.role_bindings to qm_reporting: SELECT": """whole""",
    "reporting.rollout_changes to qm_reporting: SELECT": """whole""",
    "reporting.rollout_history to qm_reporting: SELECT": """whole""",
    "reporting.service_ips to qm_reporting: SELECT": """whole""",
    "reporting.usage_hourly to qm_reporting: SELECT": """whole""",
    "reporting.workloads to qm_reporting: SELECT": """whole""",
    "resourcequotas to qm_app: DELETE": """whole""",
    "resourcequotas to qm_app: INSERT": """whole""",
    "resourcequotas to qm_app: SELECT": """whole""",
    "resourcequotas to qm_app: UPDATE": """whole""",
    "resourcequotas to qm_reporting: SELECT": """name, namespace, spec, status, uid""",
    "rolebindings to qm_app: DELETE": """whole""",
    "rolebindings to qm_app: INSERT": """whole""",
    "rolebindings to qm_app: SELECT": """whole""",
    "rolebindings to qm_app: UPDATE": """whole""",
    "rolebindings to qm_reporting: SELECT": """name, namespace, spec, uid""",
    "roles to qm_app: DELETE": """whole""",
    "roles to qm_app: INSERT": """whole""",
    "roles to qm_app: SELECT": """whole""",
    "roles to qm_app: UPDATE": """whole""",
    "secrets to qm_app: DELETE": """whole""",
    "secrets to qm_app: INSERT": """whole""",
    "secrets to qm_app: SELECT": """whole""",
    "secrets to qm_app: UPDATE": """whole""",
    "service_ip_range to qm_app: DELETE": """whole""",
    "service_ip_range to qm_app: INSERT": """whole""",
    "service_ip_range to qm_app: SELECT": """whole""",
    "service_ip_range to qm_app: UPDATE": """whole""",
    "service_ips to qm_app: DELETE": """whole""",
    "service_ips to qm_app: INSERT": """whole""",
    "service_ips to qm_app: SELECT": """whole""",
    "service_ips to qm_app: UPDATE": """whole""",
    "service_ips to qm_reporting: SELECT": """allocated_at, ip, name, namespace, released_at""",
    "serviceaccounts to qm_app: DELETE": """whole""",
    "serviceaccounts to qm_app: INSERT": """whole""",
    "serviceaccounts to qm_app: SELECT": """whole""",
    "serviceaccounts to qm_app: UPDATE": """whole""",
    "services to qm_app: DELETE": """whole""",
    "services to qm_app: INSERT": """whole""",
    "services to qm_app: SELECT": """whole""",
    "services to qm_app: UPDATE": """whole""",
}

SETTINGS: dict[str, str] = {
    "clusterrolebindings": """row security""",
    "deployments": """row security""",
    "endpointslices": """fillfactor=80""",
    "events": """row security; fillfactor=85""",
    "jobs": """row security""",
    "leases": """fillfactor=70""",
    "namespaces": """row security""",
    "nodes": """fillfactor=75""",
    "nodes_allocated": """fillfactor=50""",
    "poddisruptionbudgets": """row security""",
    "pods": """row security; fillfactor=75""",
    "qm_history": """row security""",
    "qm_usage_rollup": """row security""",
    "replicasets": """row security""",
    "reporting.allocation": """security_invoker=true""",
    "reporting.allocation_vs_usage": """security_invoker=true""",
    "reporting.change_summaries": """security_invoker=true""",
    "reporting.changes": """security_invoker=true""",
    "reporting.disruption_budget_blocks": """security_invoker=true""",
    "reporting.drains": """security_invoker=true""",
    "reporting.evictions": """security_invoker=true""",
    "reporting.namespace_access": """row security""",
    "reporting.node_capacity": """security_invoker=true""",
    "reporting.node_failures": """security_invoker=true""",
    "reporting.pending_pods": """security_invoker=true""",
    "reporting.pending_pods_by_reason": """security_invoker=true""",
    "reporting.quota_usage": """security_invoker=true""",
    "reporting.role_bindings": """security_invoker=true""",
    "reporting.rollout_changes": """security_invoker=true""",
    "reporting.rollout_history": """security_invoker=true""",
    "reporting.service_ips": """security_invoker=true""",
    "reporting.usage_hourly": """security_invoker=true""",
    "reporting.workloads": """security_invoker=true""",
    "resourcequotas": """row security""",
    "rolebindings": """row security""",
    "service_ips": """row security""",
}

INDEXES: dict[str, str] = {
    "admissionpolicies_labels": """CREATE INDEX admissionpolicies_labels ON public.admissionpolicies USING gin (labels jsonb_path_ops)""",
    "admissionpolicies_namespace_name": """CREATE UNIQUE INDEX admissionpolicies_namespace_name ON public.admissionpolicies USING btree (namespace, name)""",
    "admissionpolicies_owners": """CREATE INDEX admissionpolicies_owners ON public.admissionpolicies USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "admissionpolicies_pkey": """CREATE UNIQUE INDEX admissionpolicies_pkey ON public.admissionpolicies USING btree (uid)""",
    "clusterrolebindings_labels": """CREATE INDEX clusterrolebindings_labels ON public.clusterrolebindings USING gin (labels jsonb_path_ops)""",
    "clusterrolebindings_namespace_name": """CREATE UNIQUE INDEX clusterrolebindings_namespace_name ON public.clusterrolebindings USING btree (namespace, name)""",
    "clusterrolebindings_owners": """CREATE INDEX clusterrolebindings_owners ON public.clusterrolebindings USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "clusterrolebindings_pkey": """CREATE UNIQUE INDEX clusterrolebindings_pkey ON public.clusterrolebindings USING btree (uid)""",
    "clusterroles_labels": """CREATE INDEX clusterroles_labels ON public.clusterroles USING gin (labels jsonb_path_ops)""",
    "clusterroles_namespace_name": """CREATE UNIQUE INDEX clusterroles_namespace_name ON public.clusterroles USING btree (namespace, name)""",
    "clusterroles_owners": """CREATE INDEX clusterroles_owners ON public.clusterroles USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "clusterroles_pkey": """CREATE UNIQUE INDEX clusterroles_pkey ON public.clusterroles USING btree (uid)""",
    "configmaps_labels": """CREATE INDEX configmaps_labels ON public.configmaps USING gin (labels jsonb_path_ops)""",
    "configmaps_namespace_name": """CREATE UNIQUE INDEX configmaps_namespace_name ON public.configmaps USING btree (namespace, name)""",
    "configmaps_owners": """CREATE INDEX configmaps_owners ON public.configmaps USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "configmaps_pkey": """CREATE UNIQUE INDEX configmaps_pkey ON public.configmaps USING btree (uid)""",
    "cronjobs_labels": """CREATE INDEX cronjobs_labels ON public.cronjobs USING gin (labels jsonb_path_ops)""",
    "cronjobs_namespace_name": """CREATE UNIQUE INDEX cronjobs_namespace_name ON public.cronjobs USING btree (namespace, name)""",
    "cronjobs_owners": """CREATE INDEX cronjobs_owners ON public.cronjobs USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "cronjobs_pkey": """CREATE UNIQUE INDEX cronjobs_pkey ON public.cronjobs USING btree (uid)""",
    "deployments_labels": """CREATE INDEX deployments_labels ON public.deployments USING gin (labels jsonb_path_ops)""",
    "deployments_namespace_name": """CREATE UNIQUE INDEX deployments_namespace_name ON public.deployments USING btree (namespace, name)""",
    "deployments_owners": """CREATE INDEX deployments_owners ON public.deployments USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "deployments_pkey": """CREATE UNIQUE INDEX deployments_pkey ON public.deployments USING btree (uid)""",
    "endpointslices_labels": """CREATE INDEX endpointslices_labels ON public.endpointslices USING gin (labels jsonb_path_ops)""",
    "endpointslices_namespace_name": """CREATE UNIQUE INDEX endpointslices_namespace_name ON public.endpointslices USING btree (namespace, name)""",
    "endpointslices_owners": """CREATE INDEX endpointslices_owners ON public.endpointslices USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "endpointslices_pkey": """CREATE UNIQUE INDEX endpointslices_pkey ON public.endpointslices USING btree (uid)""",
    "endpointslices_service_name": """CREATE INDEX endpointslices_service_name ON public.endpointslices USING btree (service_name)""",
    "events_involved_name": """CREATE INDEX events_involved_name ON public.events USING btree (involved_name)""",
    "events_involved_uid": """CREATE INDEX events_involved_uid ON public.events USING btree (involved_uid)""",
    "events_labels": """CREATE INDEX events_labels ON public.events USING gin (labels jsonb_path_ops)""",
    "events_namespace_name": """CREATE UNIQUE INDEX events_namespace_name ON public.events USING btree (namespace, name)""",
    "events_owners": """CREATE INDEX events_owners ON public.events USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "events_pkey": """CREATE UNIQUE INDEX events_pkey ON public.events USING btree (uid)""",
    "jobs_labels": """CREATE INDEX jobs_labels ON public.jobs USING gin (labels jsonb_path_ops)""",
    "jobs_namespace_name": """CREATE UNIQUE INDEX jobs_namespace_name ON public.jobs USING btree (namespace, name)""",
    "jobs_owners": """CREATE INDEX jobs_owners ON public.jobs USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "jobs_pkey": """CREATE UNIQUE INDEX jobs_pkey ON public.jobs USING btree (uid)""",
    "leases_labels": """CREATE INDEX leases_labels ON public.leases USING gin (labels jsonb_path_ops)""",
    "leases_namespace_name": """CREATE UNIQUE INDEX leases_namespace_name ON public.leases USING btree (namespace, name)""",
    "leases_owners": """CREATE INDEX leases_owners ON public.leases USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "leases_pkey": """CREATE UNIQUE INDEX leases_pkey ON public.leases USING btree (uid)""",
    "namespaces_labels": """CREATE INDEX namespaces_labels ON public.namespaces USING gin (labels jsonb_path_ops)""",
    "namespaces_namespace_name": """CREATE UNIQUE INDEX namespaces_namespace_name ON public.namespaces USING btree (namespace, name)""",
    "namespaces_owners": """CREATE INDEX namespaces_owners ON public.namespaces USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "namespaces_pkey": """CREATE UNIQUE INDEX namespaces_pkey ON public.namespaces USING btree (uid)""",
    "nodes_allocated_pkey": """CREATE UNIQUE INDEX nodes_allocated_pkey ON public.nodes_allocated USING btree (node_uid)""",
    "nodes_labels": """CREATE INDEX nodes_labels ON public.nodes USING gin (labels jsonb_path_ops)""",
    "nodes_machine_class": """CREATE INDEX nodes_machine_class ON public.nodes USING btree (machine_class)""",
    "nodes_namespace_name": """CREATE UNIQUE INDEX nodes_namespace_name ON public.nodes USING btree (namespace, name)""",
    "nodes_owners": """CREATE INDEX nodes_owners ON public.nodes USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "nodes_pkey": """CREATE UNIQUE INDEX nodes_pkey ON public.nodes USING btree (uid)""",
    "nodes_ready": """CREATE INDEX nodes_ready ON public.nodes USING btree (ready)""",
    "nodes_zone": """CREATE INDEX nodes_zone ON public.nodes USING btree (zone)""",
    "poddisruptionbudgets_labels": """CREATE INDEX poddisruptionbudgets_labels ON public.poddisruptionbudgets USING gin (labels jsonb_path_ops)""",
    "poddisruptionbudgets_namespace_name": """CREATE UNIQUE INDEX poddisruptionbudgets_namespace_name ON public.poddisruptionbudgets USING btree (namespace, name)""",
    "poddisruptionbudgets_owners": """CREATE INDEX poddisruptionbudgets_owners ON public.poddisruptionbudgets USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "poddisruptionbudgets_pkey": """CREATE UNIQUE INDEX poddisruptionbudgets_pkey ON public.poddisruptionbudgets USING btree (uid)""",
    "pods_labels": """CREATE INDEX pods_labels ON public.pods USING gin (labels jsonb_path_ops)""",
    "pods_namespace_name": """CREATE UNIQUE INDEX pods_namespace_name ON public.pods USING btree (namespace, name)""",
    "pods_node_name": """CREATE INDEX pods_node_name ON public.pods USING btree (node_name)""",
    "pods_owners": """CREATE INDEX pods_owners ON public.pods USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "pods_phase": """CREATE INDEX pods_phase ON public.pods USING btree (phase)""",
    "pods_pkey": """CREATE UNIQUE INDEX pods_pkey ON public.pods USING btree (uid)""",
    "pods_priority": """CREATE INDEX pods_priority ON public.pods USING btree (priority)""",
    "pods_unbound": """CREATE INDEX pods_unbound ON public.pods USING btree (priority DESC, creation_timestamp) WHERE (node_name IS NULL)""",
    "priorityclasses_labels": """CREATE INDEX priorityclasses_labels ON public.priorityclasses USING gin (labels jsonb_path_ops)""",
    "priorityclasses_namespace_name": """CREATE UNIQUE INDEX priorityclasses_namespace_name ON public.priorityclasses USING btree (namespace, name)""",
    "priorityclasses_owners": """CREATE INDEX priorityclasses_owners ON public.priorityclasses USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "priorityclasses_pkey": """CREATE UNIQUE INDEX priorityclasses_pkey ON public.priorityclasses USING btree (uid)""",
    "qm_api_servers_pkey": """CREATE UNIQUE INDEX qm_api_servers_pkey ON public.qm_api_servers USING btree (id)""",
    "qm_audit_at": """CREATE INDEX qm_audit_at ON public.qm_audit USING brin (at)""",
    "qm_audit_object": """CREATE INDEX qm_audit_object ON public.qm_audit USING btree (kind, namespace, name, at)""",
    "qm_audit_pkey": """CREATE UNIQUE INDEX qm_audit_pkey ON public.qm_audit USING btree (id)""",
    "qm_bootstrap_tokens_pkey": """CREATE UNIQUE INDEX qm_bootstrap_tokens_pkey ON public.qm_bootstrap_tokens USING btree (token_id)""",
    "qm_history_anchors_last_seq_key": """CREATE UNIQUE INDEX qm_history_anchors_last_seq_key ON public.qm_history_anchors USING btree (last_seq)""",
    "qm_history_anchors_pkey": """CREATE UNIQUE INDEX qm_history_anchors_pkey ON public.qm_history_anchors USING btree (id)""",
    "qm_history_at": """CREATE INDEX qm_history_at ON ONLY public.qm_history USING brin (at)""",
    "qm_history_backfill_pkey": """CREATE UNIQUE INDEX qm_history_backfill_pkey ON public.qm_history_backfill USING btree (id)""",
    "qm_history_chain_pkey": """CREATE UNIQUE INDEX qm_history_chain_pkey ON public.qm_history_chain USING btree (id)""",
    "qm_history_links_pkey": """CREATE UNIQUE INDEX qm_history_links_pkey ON public.qm_history_links USING btree (seq)""",
    "qm_history_links_row": """CREATE UNIQUE INDEX qm_history_links_row ON public.qm_history_links USING btree (id, at)""",
    "qm_history_object": """CREATE INDEX qm_history_object ON ONLY public.qm_history USING btree (table_name, namespace, name, at)""",
    "qm_history_pkey": """CREATE UNIQUE INDEX qm_history_pkey ON ONLY public.qm_history USING btree (id, at)""",
    "qm_history_principal": """CREATE INDEX qm_history_principal ON ONLY public.qm_history USING btree (principal, at) WHERE (principal IS NOT NULL)""",
    "qm_history_tally_pkey": """CREATE UNIQUE INDEX qm_history_tally_pkey ON public.qm_history_tally USING btree (hour, table_name, namespace, backend)""",
    "qm_history_xid": """CREATE INDEX qm_history_xid ON ONLY public.qm_history USING btree (xid, id)""",
    "qm_node_credentials_node": """CREATE INDEX qm_node_credentials_node ON public.qm_node_credentials USING btree (node_name)""",
    "qm_node_credentials_pkey": """CREATE UNIQUE INDEX qm_node_credentials_pkey ON public.qm_node_credentials USING btree (id)""",
    "qm_node_credentials_token_sha256_key": """CREATE UNIQUE INDEX qm_node_credentials_token_sha256_key ON public.qm_node_credentials USING btree (token_sha256)""",
    "qm_revision_log_pkey": """CREATE UNIQUE INDEX qm_revision_log_pkey ON public.qm_revision_log USING btree (revision)""",
    "qm_revision_log_uid": """CREATE INDEX qm_revision_log_uid ON public.qm_revision_log USING btree (uid, revision DESC)""",
    "qm_schema_compat_pkey": """CREATE UNIQUE INDEX qm_schema_compat_pkey ON public.qm_schema_compat USING btree (schema_revision)""",
    "qm_stream_state_pkey": """CREATE UNIQUE INDEX qm_stream_state_pkey ON public.qm_stream_state USING btree (id)""",
    "qm_tokens_namespace_name": """CREATE UNIQUE INDEX qm_tokens_namespace_name ON public.qm_tokens USING btree (namespace, name)""",
    "qm_tokens_pkey": """CREATE UNIQUE INDEX qm_tokens_pkey ON public.qm_tokens USING btree (id)""",
    "qm_tokens_sa_uid": """CREATE INDEX qm_tokens_sa_uid ON public.qm_tokens USING btree (sa_uid) WHERE (sa_uid IS NOT NULL)""",
    "qm_tokens_token_sha256_key": """CREATE UNIQUE INDEX qm_tokens_token_sha256_key ON public.qm_tokens USING btree (token_sha256)""",
    "qm_tokens_uid": """CREATE UNIQUE INDEX qm_tokens_uid ON public.qm_tokens USING btree (uid)""",
    "qm_tokens_username": """CREATE INDEX qm_tokens_username ON public.qm_tokens USING btree (username)""",
    "qm_usage_rollup_pkey": """CREATE UNIQUE INDEX qm_usage_rollup_pkey ON public.qm_usage_rollup USING btree (minute, namespace, node)""",
    "replicasets_labels": """CREATE INDEX replicasets_labels ON public.replicasets USING gin (labels jsonb_path_ops)""",
    "replicasets_namespace_name": """CREATE UNIQUE INDEX replicasets_namespace_name ON public.replicasets USING btree (namespace, name)""",
    "replicasets_owners": """CREATE INDEX replicasets_owners ON public.replicasets USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "replicasets_pkey": """CREATE UNIQUE INDEX replicasets_pkey ON public.replicasets USING btree (uid)""",
    "reporting.namespace_access_pkey": """CREATE UNIQUE INDEX namespace_access_pkey ON reporting.namespace_access USING btree (role_name, namespace)""",
    "resourcequotas_labels": """CREATE INDEX resourcequotas_labels ON public.resourcequotas USING gin (labels jsonb_path_ops)""",
    "resourcequotas_namespace_name": """CREATE UNIQUE INDEX resourcequotas_namespace_name ON public.resourcequotas USING btree (namespace, name)""",
    "resourcequotas_owners": """CREATE INDEX resourcequotas_owners ON public.resourcequotas USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "resourcequotas_pkey": """CREATE UNIQUE INDEX resourcequotas_pkey ON public.resourcequotas USING btree (uid)""",
    "rolebindings_labels": """CREATE INDEX rolebindings_labels ON public.rolebindings USING gin (labels jsonb_path_ops)""",
    "rolebindings_namespace_name": """CREATE UNIQUE INDEX rolebindings_namespace_name ON public.rolebindings USING btree (namespace, name)""",
    "rolebindings_owners": """CREATE INDEX rolebindings_owners ON public.rolebindings USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "rolebindings_pkey": """CREATE UNIQUE INDEX rolebindings_pkey ON public.rolebindings USING btree (uid)""",
    "roles_labels": """CREATE INDEX roles_labels ON public.roles USING gin (labels jsonb_path_ops)""",
    "roles_namespace_name": """CREATE UNIQUE INDEX roles_namespace_name ON public.roles USING btree (namespace, name)""",
    "roles_owners": """CREATE INDEX roles_owners ON public.roles USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "roles_pkey": """CREATE UNIQUE INDEX roles_pkey ON public.roles USING btree (uid)""",
    "secrets_labels": """CREATE INDEX secrets_labels ON public.secrets USING gin (labels jsonb_path_ops)""",
    "secrets_namespace_name": """CREATE UNIQUE INDEX secrets_namespace_name ON public.secrets USING btree (namespace, name)""",
    "secrets_owners": """CREATE INDEX secrets_owners ON public.secrets USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "secrets_pkey": """CREATE UNIQUE INDEX secrets_pkey ON public.secrets USING btree (uid)""",
    "service_ip_range_pkey": """CREATE UNIQUE INDEX service_ip_range_pkey ON public.service_ip_range USING btree (id)""",
    "service_ips_pkey": """CREATE UNIQUE INDEX service_ips_pkey ON public.service_ips USING btree (ip)""",
    "service_ips_service_uid_key": """CREATE UNIQUE INDEX service_ips_service_uid_key ON public.service_ips USING btree (service_uid)""",
    "serviceaccounts_labels": """CREATE INDEX serviceaccounts_labels ON public.serviceaccounts USING gin (labels jsonb_path_ops)""",
    "serviceaccounts_namespace_name": """CREATE UNIQUE INDEX serviceaccounts_namespace_name ON public.serviceaccounts USING btree (namespace, name)""",
    "serviceaccounts_owners": """CREATE INDEX serviceaccounts_owners ON public.serviceaccounts USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "serviceaccounts_pkey": """CREATE UNIQUE INDEX serviceaccounts_pkey ON public.serviceaccounts USING btree (uid)""",
    "services_labels": """CREATE INDEX services_labels ON public.services USING gin (labels jsonb_path_ops)""",
    "services_namespace_name": """CREATE UNIQUE INDEX services_namespace_name ON public.services USING btree (namespace, name)""",
    "services_owners": """CREATE INDEX services_owners ON public.services USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "services_pkey": """CREATE UNIQUE INDEX services_pkey ON public.services USING btree (uid)""",
}

PUBLICATIONS: dict[str, str] = {
    "qm_stream: admissionpolicies": """""",
    "qm_stream: clusterrolebindings": """""",
    "qm_stream: clusterroles": """""",
    "qm_stream: configmaps": """""",
    "qm_stream: cronjobs": """""",
    "qm_stream: deployments": """""",
    "qm_stream: endpointslices": """""",
    "qm_stream: events": """""",
    "qm_stream: jobs": """""",
    "qm_stream: leases": """""",
    "qm_stream: namespaces": """""",
    "qm_stream: nodes": """""",
    "qm_stream: poddisruptionbudgets": """""",
    "qm_stream: pods": """""",
    "qm_stream: priorityclasses": """""",
    "qm_stream: qm_tokens": """""",
    "qm_stream: replicasets": """""",
    "qm_stream: resourcequotas": """""",
    "qm_stream: rolebindings": """""",
    "qm_stream: roles": """""",
    "qm_stream: secrets": """""",
    "qm_stream: serviceaccounts": """""",
    "qm_stream: services": """""",
}
