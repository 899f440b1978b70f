"""Stable virtual IPs for Services, allocated by the database in the create's transaction.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

* ``service_ip_range`` (one row): the range addresses come from (``cidr``, default
  ``127.100.0.0/16``: all of 127/8 is routed to loopback on one host) and how long a released
  address stays out of use (``quarantine``, default 5 minutes), so that a proxy still routing
  the old service's address never sends its traffic to a new one. An operator changes them with
  ``UPDATE service_ip_range SET cidr = ..., quarantine = ...``; addresses already held outside
  a new range stay with their services.
* ``service_ips``: one row per address, the address its primary key, so no two services can
  hold one. ``service_uid`` is the holder; NULL (with ``released_at``) while in quarantine.
* ``services_ip_insert`` / ``services_ip_update`` (BEFORE, so API writes and a DBA's INSERT
  alike): a ClusterIP, NodePort or LoadBalancer service gets an address (the client's choice in
  the range, else the first free one after a random offset, claimed with INSERT ... ON
  CONFLICT, another tried when a racing create won it) and ``spec.clusterIP`` /
  ``spec.clusterIPs`` are written into the row itself, so the API's answer and the revision
  stream carry them. ``clusterIP: None`` (headless) holds none; a type change to ExternalName
  releases it; an address once held never changes. A refusal raises SQLSTATE ``QM422`` (the
  field in COLUMN, the cause's reason in DETAIL) or ``QM503`` (range exhausted), which
  ``app.store.db_errors`` turns into the API's 422 / 503; the statement is rolled back whole.
* ``services_ip_release`` (AFTER DELETE, per statement): a deleted service's address goes into
  quarantine.
* ``qm_repair_service_ips()``: releases rows held for services that are gone (or that no
  longer name that address), claims rows for services naming an address no row holds for them
  (written with triggers disabled, or before this revision), counts addresses two services
  name, and purges rows whose quarantine is over. The controller manager's ``service-ips``
  loop calls it every minute; the upgrade calls it once, then gives an address to every
  existing service that needs one.
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# The dotted quad as Python's ipaddress accepts it (no leading zeros, each part <= 255).
_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
IPV4 = rf"^{_OCTET}\.{_OCTET}\.{_OCTET}\.{_OCTET}$"

TABLES = r"""
CREATE TABLE service_ip_range (
  id integer PRIMARY KEY DEFAULT 1 CHECK (id = 1),
  cidr cidr NOT NULL CHECK (family(cidr) = 4 AND masklen(cidr) BETWEEN 8 AND 30),
  quarantine interval NOT NULL DEFAULT '5 minutes' CHECK (quarantine >= interval '0'),
  updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO service_ip_range (id, cidr) VALUES (1, '127.100.0.0/16');
COMMENT ON TABLE service_ip_range IS
  'The range Service virtual IPs come from, and how long a released one stays out of use';

CREATE TABLE service_ips (
  ip inet PRIMARY KEY CHECK (family(ip) = 4 AND masklen(ip) = 32),
  service_uid uuid UNIQUE,
  namespace text NOT NULL,
  name text NOT NULL,
  allocated_at timestamptz NOT NULL DEFAULT now(),
  released_at timestamptz,
  CHECK ((service_uid IS NULL) = (released_at IS NOT NULL))
);
COMMENT ON TABLE service_ips IS
  'Service virtual IPs: held by service_uid, or in quarantine since released_at';
"""

FUNCTIONS = rf"""
-- A dotted-quad IPv4 address as inet (/32), NULL for anything else. The cast only ever sees
-- text that matched, so no exception block (and no subtransaction) is needed.
CREATE FUNCTION qm_ipv4(v text) RETURNS inet
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN m IS NOT NULL THEN v::inet END FROM regexp_match(v, '{IPV4}') AS m
$$;

-- Claim one address for a service: a new row, or a released one whose quarantine is over.
-- NULL when another service holds it or it is still in quarantine.
CREATE FUNCTION qm_service_ip_claim(want inet, svc uuid, ns text, nm text, cutoff timestamptz)
RETURNS inet LANGUAGE sql AS $$
  INSERT INTO service_ips AS s (ip, service_uid, namespace, name) VALUES (want, svc, ns, nm)
  ON CONFLICT (ip) DO UPDATE
    SET service_uid = EXCLUDED.service_uid, namespace = EXCLUDED.namespace,
        name = EXCLUDED.name, allocated_at = now(), released_at = NULL
    WHERE s.service_uid IS NULL AND s.released_at <= cutoff
  RETURNING s.ip
$$;

CREATE FUNCTION qm_service_ip_refuse(wanted text, problem text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'QM422', COLUMN = 'spec.clusterIP',
    DETAIL = 'FieldValueInvalid',
    MESSAGE = format('Invalid value: %s: %s', to_jsonb(wanted)::text, problem);
END
$$;

-- The address for a new holder: ``wanted`` (the client's choice) or a free one.
CREATE FUNCTION qm_service_ip_take(svc uuid, ns text, nm text, wanted text) RETURNS inet
LANGUAGE plpgsql AS $$
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
        'provided IP is already allocated: released at %s, reusable after a quarantine of %s',
        to_char(since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), r.quarantine));
    END IF;
    RETURN got;
  END IF;
  -- The first free address after a random offset: racing creates start far apart, and the
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
        'no virtual IP is free in the service range %s: %s held, %s in quarantine for %s '
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
$$;

-- BEFORE INSERT and BEFORE UPDATE (of the type or the addresses) on services.
CREATE FUNCTION qm_service_ips_assign() RETURNS trigger LANGUAGE plpgsql AS $$
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
    NEW.spec := NEW.spec || '{{"clusterIPs": ["None"]}}'::jsonb;
    RETURN NEW;
  ELSE
    addr := qm_service_ip_take(NEW.uid, NEW.namespace, NEW.name, wanted);
  END IF;
  NEW.spec := NEW.spec || jsonb_build_object(
    'clusterIP', host(addr), 'clusterIPs', jsonb_build_array(host(addr)));
  RETURN NEW;
END
$$;

CREATE FUNCTION qm_service_ips_release() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE service_ips AS a SET service_uid = NULL, released_at = now()
    FROM gone WHERE a.service_uid = gone.uid;
  RETURN NULL;
END
$$;

-- Reconciliation of rows the triggers did not keep (triggers disabled, a TRUNCATE, rows older
-- than this revision). Safe beside live writes: each statement sees committed services and
-- allocations together, since a service and its row commit in one transaction.
CREATE FUNCTION qm_repair_service_ips(OUT released integer, OUT restored integer,
  OUT duplicates integer, OUT purged integer)
LANGUAGE plpgsql AS $$
BEGIN
  -- Held for a service that is gone, is ExternalName, or names another address.
  UPDATE service_ips AS a SET service_uid = NULL, released_at = now()
   WHERE a.service_uid IS NOT NULL AND NOT EXISTS (
     SELECT 1 FROM services AS s
      WHERE s.uid = a.service_uid
        AND coalesce(s.spec->>'type', 'ClusterIP') <> 'ExternalName'
        AND qm_ipv4(s.spec->>'clusterIP') = a.ip);
  GET DIAGNOSTICS released = ROW_COUNT;
  -- A service naming an address no row holds for it takes the row (even in quarantine: the
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
  -- An address two services name: only a person can say which one keeps it.
  SELECT count(*) INTO duplicates
    FROM services AS s JOIN service_ips AS a ON a.ip = qm_ipv4(s.spec->>'clusterIP')
   WHERE a.service_uid <> s.uid
     AND coalesce(s.spec->>'type', 'ClusterIP') <> 'ExternalName';
  DELETE FROM service_ips
   WHERE service_uid IS NULL
     AND released_at <= now() - (SELECT quarantine FROM service_ip_range);
  GET DIAGNOSTICS purged = ROW_COUNT;
END
$$;

COMMENT ON FUNCTION qm_repair_service_ips() IS
  'Repair leaked Service IP allocations; called every minute by the controller manager';
"""

TRIGGERS = """
CREATE TRIGGER services_ip_insert BEFORE INSERT ON services
  FOR EACH ROW EXECUTE FUNCTION qm_service_ips_assign();
CREATE TRIGGER services_ip_update BEFORE UPDATE OF spec ON services
  FOR EACH ROW WHEN (OLD.spec->'clusterIP' IS DISTINCT FROM NEW.spec->'clusterIP'
                     OR OLD.spec->'clusterIPs' IS DISTINCT FROM NEW.spec->'clusterIPs'
                     OR OLD.spec->'type' IS DISTINCT FROM NEW.spec->'type')
  EXECUTE FUNCTION qm_service_ips_assign();
CREATE TRIGGER services_ip_release AFTER DELETE ON services
  REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION qm_service_ips_release();
"""

# Services from before this revision: the addresses they name are claimed, then every one that
# should have an address and has none gets one through the update trigger.
BACKFILL = """
SELECT qm_repair_service_ips();
UPDATE services SET spec = spec || '{"clusterIP": ""}'::jsonb
 WHERE jsonb_typeof(spec) = 'object'
   AND coalesce(spec->>'type', 'ClusterIP') <> 'ExternalName'
   AND coalesce(spec->>'clusterIP', '') <> 'None'
   AND NOT EXISTS (SELECT 1 FROM service_ips AS a WHERE a.service_uid = services.uid);
"""


def upgrade() -> None:
    op.execute(TABLES)
    op.execute(FUNCTIONS)
    op.execute(TRIGGERS)
    op.execute(BACKFILL)
    op.execute("GRANT SELECT ON service_ips, service_ip_range TO qm_reporting")


def downgrade() -> None:
    # Addresses stay in the services' specs; they are just no longer kept unique.
    for trigger in ("services_ip_release", "services_ip_update", "services_ip_insert"):
        op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON services")
    op.execute(
        "DROP FUNCTION IF EXISTS qm_repair_service_ips(), qm_service_ips_release(), "
        "qm_service_ips_assign(), qm_service_ip_take(uuid, text, text, text), "
        "qm_service_ip_refuse(text, text), "
        "qm_service_ip_claim(inet, uuid, text, text, timestamptz), qm_ipv4(text)"
    )
    op.execute("DROP TABLE IF EXISTS service_ips, service_ip_range")
