"""The change history's row trigger in C, where the server has it (ADR 0066).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-02

* ``qm_history_native(tbl, native)``: points one state table's history row trigger
  (``<tbl>_history``) at ``qm_history_record_native()``, the ``qm_history`` extension's C
  function (``ext/qm_history``), or back at ``qm_history_record()``, with the same arguments
  and WHEN clause, ``ENABLE ALWAYS`` again; returns whether it changed it. Secrets always stay
  with ``qm_history_record()``. Both functions write the same rows.
* When a superuser runs the migration on a server where the extension is installed (``make
  install`` builds it into the embedded PostgreSQL; a DBA builds it with the server's
  ``pg_config``), it is created and every table's trigger is pointed at it, one table per
  transaction. Elsewhere nothing changes, and a DBA can do it later (``docs/upgrades.md``).

* Every ``SECURITY DEFINER`` function of the history sets ``search_path = pg_catalog, public,
  pg_temp``: the two recording triggers set none (they ran with the writer's path), and the
  others left ``pg_temp`` implicit, which PostgreSQL then searches first for tables and types.
  Either let a writer's own objects (a temporary domain named ``uuid``, an operator in a
  schema it owns) run as the functions' owner.

Expand-only: the triggers record the same rows whichever function they call, and the previous
release neither calls nor reads these functions.
"""

from __future__ import annotations

from alembic import op

from migrations.online import each_in_own_transaction, serves, unserve

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

PREVIOUS_RELEASE = "0013"

# Frozen: every table with a history row trigger at 0019 (0014's and 0015's namespace_access).
TABLES = (
    "namespaces", "nodes", "leases", "pods", "deployments", "replicasets", "jobs", "cronjobs",
    "services", "endpointslices", "priorityclasses", "resourcequotas", "poddisruptionbudgets",
    "configmaps", "serviceaccounts", "events", "roles", "clusterroles", "rolebindings",
    "clusterrolebindings", "admissionpolicies", "qm_tokens", "qm_bootstrap_tokens",
    "qm_node_credentials", "qm_api_servers", "service_ip_range", "service_ips",
    "namespace_access",
)  # fmt: skip

SWITCH = r"""
CREATE FUNCTION qm_history_native(tbl text, native boolean DEFAULT true) RETURNS boolean
LANGUAGE plpgsql SET search_path = pg_catalog, public, pg_temp AS $$
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
$$;
COMMENT ON FUNCTION qm_history_native(text, boolean) IS
  'Points a table''s history row trigger at the C function of the qm_history extension '
  '(native) or at qm_history_record() (ADR 0066)';
"""

# Created only by a superuser (the extension's function is SECURITY DEFINER, owned by its
# creator) and only where the server has it.
CREATE_EXTENSION = """
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_available_extensions WHERE name = 'qm_history')
     AND (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    CREATE EXTENSION IF NOT EXISTS qm_history;
  END IF;
END
$$;
"""

DROP_EXTENSION = """
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_extension WHERE extname = 'qm_history')
     AND (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    DROP EXTENSION qm_history;
  END IF;
END
$$;
"""


# The history's SECURITY DEFINER functions, and the search_path each had before.
DEFINERS = {
    "qm_history_record()": None,
    "qm_history_record_batch()": None,
    "qm_history_partition(timestamptz)": "pg_catalog, public",
    "qm_history_partitions(integer)": "pg_catalog, public",
    "qm_history_fold()": "pg_catalog, public",
    "qm_history_seal(integer)": "pg_catalog, public",
    "qm_history_verify()": "pg_catalog, public",
    "qm_history_status()": "pg_catalog, public",
    "qm_history_archive(timestamptz)": "pg_catalog, public",
    "qm_history_drop_archived(text, text)": "pg_catalog, public",
}


def upgrade() -> None:
    for function in DEFINERS:
        op.execute(f"ALTER FUNCTION {function} SET search_path = pg_catalog, public, pg_temp")
    op.execute(SWITCH)
    op.execute(CREATE_EXTENSION)
    serves("0020", PREVIOUS_RELEASE, "the history's row trigger may be the C one")
    # Last: each table's trigger in a transaction of its own (one lock at a time).
    each_in_own_transaction([f"SELECT qm_history_native('{t}')" for t in TABLES])


def downgrade() -> None:
    unserve("0020")
    for t in TABLES:
        op.execute(f"SELECT qm_history_native('{t}', false)")
    op.execute(DROP_EXTENSION)
    op.execute("DROP FUNCTION IF EXISTS qm_history_native(text, boolean)")
    for function, path in DEFINERS.items():
        reset = f"SET search_path = {path}" if path else "RESET search_path"
        op.execute(f"ALTER FUNCTION {function} {reset}")
