"""What ``alembic upgrade head`` leaves besides tables, as PostgreSQL prints it back.

Written by ``python -m app.store.schema_render objects URL`` on a database at head;
``qm db check`` compares a database against it (``app/store/drift.py``).
"""

# ruff: noqa  (generated: SQL as the database prints it)
from __future__ import annotations

# The revision these definitions are at.
REVISION = "0016"

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
    'serviceAccount', CASE WHEN NEW.sa_name IS NOT NULL THEN jsonb_strip_nulls(
      jsonb_build_object('namespace', NEW.sa_namespace, 'name', NEW.sa_name,
                         'uid', NEW.sa_uid)) END));
  NEW.status := jsonb_strip_nulls(jsonb_build_object('revokedAt', qm_rfc3339(NEW.revoked_at)));
  RETURN NEW;
END
$function$""",
}

TRIGGERS: dict[str, str] = {
    "admissionpolicies_stamp on admissionpolicies": """BEFORE INSERT OR UPDATE ON public.admissionpolicies FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "clusterrolebindings_stamp on clusterrolebindings": """BEFORE INSERT OR UPDATE ON public.clusterrolebindings FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "clusterroles_stamp on clusterroles": """BEFORE INSERT OR UPDATE ON public.clusterroles FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "configmaps_stamp on configmaps": """BEFORE INSERT OR UPDATE ON public.configmaps FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "cronjobs_stamp on cronjobs": """BEFORE INSERT OR UPDATE ON public.cronjobs FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "deployments_stamp on deployments": """BEFORE INSERT OR UPDATE ON public.deployments FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "endpointslices_stamp on endpointslices": """BEFORE INSERT OR UPDATE ON public.endpointslices FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "events_stamp on events": """BEFORE INSERT OR UPDATE ON public.events FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "jobs_stamp on jobs": """BEFORE INSERT OR UPDATE ON public.jobs FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "leases_stamp on leases": """BEFORE INSERT OR UPDATE ON public.leases FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "namespaces_stamp on namespaces": """BEFORE INSERT OR UPDATE ON public.namespaces FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "nodes_allocation_insert on nodes": """AFTER INSERT ON public.nodes FOR EACH ROW WHEN ((new.namespace = ''::text)) EXECUTE FUNCTION qm_nodes_allocation()""",
    "nodes_revoke_credentials on nodes": """AFTER DELETE ON public.nodes FOR EACH ROW EXECUTE FUNCTION qm_revoke_node_credentials()""",
    "nodes_revoke_credentials_on_deletion on nodes": """AFTER UPDATE OF deletion_timestamp ON public.nodes FOR EACH ROW WHEN (((old.deletion_timestamp IS NULL) AND (new.deletion_timestamp IS NOT NULL))) EXECUTE FUNCTION qm_revoke_node_credentials()""",
    "nodes_stamp on nodes": """BEFORE INSERT OR UPDATE ON public.nodes FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "poddisruptionbudgets_stamp on poddisruptionbudgets": """BEFORE INSERT OR UPDATE ON public.poddisruptionbudgets FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "pods_allocation_delete on pods": """AFTER DELETE ON public.pods FOR EACH ROW WHEN (((old.node_name IS NOT NULL) AND (COALESCE(old.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text])))) EXECUTE FUNCTION qm_pods_allocation()""",
    "pods_allocation_insert on pods": """AFTER INSERT ON public.pods FOR EACH ROW WHEN (((new.node_name IS NOT NULL) AND (COALESCE(new.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text])))) EXECUTE FUNCTION qm_pods_allocation()""",
    "pods_allocation_update on pods": """AFTER UPDATE ON public.pods FOR EACH ROW WHEN (((((old.node_name IS NOT NULL) AND (COALESCE(old.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text]))) <> ((new.node_name IS NOT NULL) AND (COALESCE(new.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text])))) OR ((new.node_name IS NOT NULL) AND (COALESCE(new.phase, ''::text) <> ALL (ARRAY['Succeeded'::text, 'Failed'::text])) AND ((old.node_name <> new.node_name) OR (old.req_cpu_milli <> new.req_cpu_milli) OR (old.req_memory_bytes <> new.req_memory_bytes) OR (old.req_gpu <> new.req_gpu))))) EXECUTE FUNCTION qm_pods_allocation()""",
    "pods_derived_insert on pods": """BEFORE INSERT ON public.pods FOR EACH ROW EXECUTE FUNCTION qm_pod_derived()""",
    "pods_derived_update on pods": """BEFORE UPDATE OF spec ON public.pods FOR EACH ROW WHEN ((((old.spec -> 'containers'::text) IS DISTINCT FROM (new.spec -> 'containers'::text)) OR ((old.spec -> 'initContainers'::text) IS DISTINCT FROM (new.spec -> 'initContainers'::text)) OR ((old.spec -> 'priorityClassName'::text) IS DISTINCT FROM (new.spec -> 'priorityClassName'::text)) OR ((old.spec -> 'activeDeadlineSeconds'::text) IS DISTINCT FROM (new.spec -> 'activeDeadlineSeconds'::text)) OR ((old.spec -> 'affinity'::text) IS DISTINCT FROM (new.spec -> 'affinity'::text)) OR (((old.spec ->> 'nodeName'::text) IS NULL) AND ((new.spec ->> 'nodeName'::text) IS NOT NULL)))) EXECUTE FUNCTION qm_pod_derived()""",
    "pods_stamp on pods": """BEFORE INSERT OR UPDATE ON public.pods FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "priorityclasses_stamp on priorityclasses": """BEFORE INSERT OR UPDATE ON public.priorityclasses FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "qm_audit_append_only on qm_audit": """BEFORE DELETE OR UPDATE ON public.qm_audit FOR EACH ROW EXECUTE FUNCTION qm_refuse_change()""",
    "qm_audit_no_truncate on qm_audit": """BEFORE TRUNCATE ON public.qm_audit FOR EACH STATEMENT EXECUTE FUNCTION qm_refuse_change()""",
    "qm_tokens_object on qm_tokens": """BEFORE INSERT OR UPDATE ON public.qm_tokens FOR EACH ROW EXECUTE FUNCTION qm_token_object()""",
    "qm_tokens_stamp on qm_tokens": """BEFORE INSERT OR UPDATE ON public.qm_tokens FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "replicasets_stamp on replicasets": """BEFORE INSERT OR UPDATE ON public.replicasets FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "resourcequotas_stamp on resourcequotas": """BEFORE INSERT OR UPDATE ON public.resourcequotas FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "rolebindings_stamp on rolebindings": """BEFORE INSERT OR UPDATE ON public.rolebindings FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "roles_stamp on roles": """BEFORE INSERT OR UPDATE ON public.roles FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "secrets_stamp on secrets": """BEFORE INSERT OR UPDATE ON public.secrets FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "serviceaccounts_revoke on serviceaccounts": """BEFORE DELETE ON public.serviceaccounts FOR EACH ROW EXECUTE FUNCTION qm_revoke_service_account_tokens()""",
    "serviceaccounts_stamp on serviceaccounts": """BEFORE INSERT OR UPDATE ON public.serviceaccounts FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
    "services_ip_insert on services": """BEFORE INSERT ON public.services FOR EACH ROW EXECUTE FUNCTION qm_service_ips_assign()""",
    "services_ip_release on services": """AFTER DELETE ON public.services REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION qm_service_ips_release()""",
    "services_ip_update on services": """BEFORE UPDATE OF spec ON public.services FOR EACH ROW WHEN ((((old.spec -> 'clusterIP'::text) IS DISTINCT FROM (new.spec -> 'clusterIP'::text)) OR ((old.spec -> 'clusterIPs'::text) IS DISTINCT FROM (new.spec -> 'clusterIPs'::text)) OR ((old.spec -> 'type'::text) IS DISTINCT FROM (new.spec -> 'type'::text)))) EXECUTE FUNCTION qm_service_ips_assign()""",
    "services_stamp on services": """BEFORE INSERT OR UPDATE ON public.services FOR EACH ROW EXECUTE FUNCTION qm_stamp_row()""",
}

VIEWS: dict[str, str] = {}

POLICIES: dict[str, str] = {}

GRANTS: dict[str, str] = {
    "admissionpolicies to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "clusterrolebindings to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "clusterroles to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "configmaps to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "cronjobs to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "deployments to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "endpointslices to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, service_name, spec, status, uid""",
    "events to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, event_type, finalizers, generate_name, generation, involved_kind, involved_name, involved_uid, labels, name, namespace, owner_references, reason, row_version, spec, status, uid""",
    "jobs to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "leases to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, holder_identity, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "namespaces to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, phase, row_version, spec, status, uid""",
    "nodes to qm_reporting: SELECT": """alloc_cpu_milli, alloc_gpu, alloc_memory_bytes, alloc_pods, annotations, batch_cpu_milli, batch_memory_bytes, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, machine_class, name, namespace, owner_references, ready, row_version, spec, status, uid, unschedulable, zone""",
    "poddisruptionbudgets to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "pods to qm_reporting: SELECT": """annotations, bound_at, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, node_name, owner_references, phase, priority, quota_best_effort, quota_cpu_milli, quota_cross_namespace, quota_gpu, quota_limit_cpu_milli, quota_limit_memory_bytes, quota_memory_bytes, quota_priority_class, quota_terminating, ready, req_cpu_milli, req_gpu, req_memory_bytes, row_version, scheduler_name, spec, status, uid""",
    "priorityclasses to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "qm_api_servers to qm_reporting: SELECT": """id, renewed_at, started_at""",
    "qm_audit to qm_reporting: SELECT": """after, at, before, groups, id, kind, name, namespace, subresource, uid, username, verb""",
    "qm_node_credentials to qm_reporting: SELECT": """bootstrap_token_id, created_at, id, node_name, token_sha256""",
    "replicasets to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "resourcequotas to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "rolebindings to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "roles to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "service_ip_range to qm_reporting: SELECT": """cidr, id, quarantine, updated_at""",
    "service_ips to qm_reporting: SELECT": """allocated_at, ip, name, namespace, released_at, service_uid""",
    "serviceaccounts to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
    "services to qm_reporting: SELECT": """annotations, creation_timestamp, deletion_grace_period_seconds, deletion_timestamp, finalizers, generate_name, generation, labels, name, namespace, owner_references, row_version, spec, status, uid""",
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
    "qm_node_credentials_node": """CREATE INDEX qm_node_credentials_node ON public.qm_node_credentials USING btree (node_name)""",
    "qm_node_credentials_pkey": """CREATE UNIQUE INDEX qm_node_credentials_pkey ON public.qm_node_credentials USING btree (id)""",
    "qm_node_credentials_token_sha256_key": """CREATE UNIQUE INDEX qm_node_credentials_token_sha256_key ON public.qm_node_credentials USING btree (token_sha256)""",
    "qm_revision_log_pkey": """CREATE UNIQUE INDEX qm_revision_log_pkey ON public.qm_revision_log USING btree (revision)""",
    "qm_revision_log_uid": """CREATE INDEX qm_revision_log_uid ON public.qm_revision_log USING btree (uid, revision DESC)""",
    "qm_stream_state_pkey": """CREATE UNIQUE INDEX qm_stream_state_pkey ON public.qm_stream_state USING btree (id)""",
    "qm_tokens_namespace_name": """CREATE UNIQUE INDEX qm_tokens_namespace_name ON public.qm_tokens USING btree (namespace, name)""",
    "qm_tokens_pkey": """CREATE UNIQUE INDEX qm_tokens_pkey ON public.qm_tokens USING btree (id)""",
    "qm_tokens_sa_uid": """CREATE INDEX qm_tokens_sa_uid ON public.qm_tokens USING btree (sa_uid) WHERE (sa_uid IS NOT NULL)""",
    "qm_tokens_token_sha256_key": """CREATE UNIQUE INDEX qm_tokens_token_sha256_key ON public.qm_tokens USING btree (token_sha256)""",
    "qm_tokens_uid": """CREATE UNIQUE INDEX qm_tokens_uid ON public.qm_tokens USING btree (uid)""",
    "qm_tokens_username": """CREATE INDEX qm_tokens_username ON public.qm_tokens USING btree (username)""",
    "replicasets_labels": """CREATE INDEX replicasets_labels ON public.replicasets USING gin (labels jsonb_path_ops)""",
    "replicasets_namespace_name": """CREATE UNIQUE INDEX replicasets_namespace_name ON public.replicasets USING btree (namespace, name)""",
    "replicasets_owners": """CREATE INDEX replicasets_owners ON public.replicasets USING gin (owner_references jsonb_path_ops) WHERE (owner_references <> '[]'::jsonb)""",
    "replicasets_pkey": """CREATE UNIQUE INDEX replicasets_pkey ON public.replicasets USING btree (uid)""",
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
