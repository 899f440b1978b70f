"""One quantity grammar: the SQL helpers read every amount exactly as ``app.core.quantity`` does.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

``qm_quantity`` (0001) had a grammar of its own. It refused what Python accepts (``"1."``,
``"-1"``, more than 30 digits, an exponent of three digits or with leading zeros) and accepted
what Python refuses (``"1e3k"``: an exponent *and* a suffix), so a pod asking for ``cpu: "1."``
was charged 0 in ``nodes_allocated`` and in quota usage while the scheduler counted 1000m, and a
node with ``allocatable.cpu: "8."`` had a NULL ``alloc_cpu_milli`` and refused every bind. The
helpers are replaced here by the Python grammar, rule for rule (see ``app/core/quantity.py``):

* ``qm_quantity``: sign, number (``1``, ``1.``, ``1.5``, ``.5``), then a suffix *or* an exponent
  of at most 30 in magnitude, at most 64 characters; NULL for anything Python refuses.
* ``qm_cpu_milli``, ``qm_bytes``: rounded up as before, and NULL (never an error) when the
  amount does not fit a bigint; admission refuses such amounts, so both sides agree on every
  stored value.
* ``qm_count`` (new): a count given as a quantity, rounded up, NULL beyond an integer.
  ``nodes.alloc_pods`` reads ``status.allocatable.pods`` with it, as the scheduler does; it used
  ``qm_int``, which refused ``"1k"`` and ``"110.0"``.
* ``qm_int``: the whole int32 range that admission's integer fields accept (it stopped at nine
  digits, so a pod of priority 2000000000 had a NULL ``pods.priority``).

Replacing a function recomputes nothing already stored, so the upgrade then rewrites the rows
whose derived values change, and only those: the pods' request, quota and priority columns and
the nodes' generated columns. ``alloc_pods`` is dropped and added again with its new expression
(a rewrite of ``nodes``, which is small, under its exclusive lock). Pod rows whose requests
change move their node's ``nodes_allocated`` row through the allocation triggers;
``qm_recount_allocations()`` then checks the whole table. Quota usage is summed from the pods'
columns when it is needed, and the dispatcher wakes the quotas of every pod rewritten, so
``status.used`` follows. The downgrade restores 0001's functions and applies the same repair.
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# The Python grammar, group by group: sign, number, suffix, exponent.
PATTERN = (
    r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE]([+-]?[0-9]+))?$"
)

FUNCTIONS = rf"""
-- Kubernetes quantity -> exact numeric, NULL exactly when app.core.quantity.parse_quantity
-- (allow_negative=True) refuses the text. Plain SQL, no exception block: this runs inside hot
-- writes and must not open a subtransaction. The CASE arms keep each cast behind its check.
CREATE OR REPLACE FUNCTION qm_quantity(v text) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
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
  FROM regexp_match(v, '{PATTERN}') AS m
  WHERE length(v) <= 64
$$;

-- A numeric that is already whole -> bigint, NULL when it does not fit (instead of an error).
CREATE OR REPLACE FUNCTION qm_bigint(n numeric) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN n BETWEEN -9223372036854775808 AND 9223372036854775807 THEN n::bigint END
$$;

CREATE OR REPLACE FUNCTION qm_cpu_milli(v text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT qm_bigint(ceil(qm_quantity(v) * 1000))
$$;

CREATE OR REPLACE FUNCTION qm_bytes(v text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT qm_bigint(ceil(qm_quantity(v)))
$$;

CREATE OR REPLACE FUNCTION qm_count(v text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN c BETWEEN -2147483648 AND 2147483647 THEN c::integer END
  FROM ceil(qm_quantity(v)) AS c
$$;

-- A JSON integer (the text of a jsonb number) in the int32 range, else NULL.
CREATE OR REPLACE FUNCTION qm_int(v text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN v ~ '^-?[0-9]{{1,10}}$' THEN
    CASE WHEN v::bigint BETWEEN -2147483648 AND 2147483647 THEN v::integer END END
$$;

COMMENT ON FUNCTION qm_quantity(text) IS
  'A Kubernetes quantity as an exact numeric, by the grammar of app/core/quantity.py; NULL when '
  'that grammar refuses the text';
COMMENT ON FUNCTION qm_count(text) IS
  'A count written as a quantity (status.allocatable.pods), rounded up; NULL beyond an integer';
"""

# 0001's definitions, restored by the downgrade.
FUNCTIONS_0001 = r"""
CREATE OR REPLACE FUNCTION qm_int(v text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN v ~ '^-?[0-9]{1,9}$' THEN v::integer END
$$;

CREATE OR REPLACE FUNCTION qm_quantity(v text) RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
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
COMMENT ON FUNCTION qm_quantity(text) IS NULL;

CREATE OR REPLACE FUNCTION qm_cpu_milli(v text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ceil(qm_quantity(v) * 1000)::bigint
$$;

CREATE OR REPLACE FUNCTION qm_bytes(v text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ceil(qm_quantity(v))::bigint
$$;
"""

ALLOC_PODS_COMMENT = (
    "status.allocatable.pods: how many pods may hold room on the node; NULL means no limit"
)


def _alloc_pods(function: str) -> str:
    return f"""
ALTER TABLE nodes DROP COLUMN alloc_pods,
  ADD COLUMN alloc_pods integer GENERATED ALWAYS AS ({function}(status->'allocatable'->>'pods'))
  STORED;
COMMENT ON COLUMN nodes.alloc_pods IS '{ALLOC_PODS_COMMENT}';
"""


# Rows whose stored values differ from what the functions in place compute now. Setting
# ``spec``/``status`` to themselves recomputes the generated columns; the pods' request and
# quota columns come from 0001's and 0003's SQL twins of the trigger ``qm_pod_derived`` (which
# runs only when a source field changes, so it cannot be asked to recompute).
NODE_COLUMNS = {
    "alloc_cpu_milli": "qm_cpu_milli(status->'allocatable'->>'cpu')",
    "alloc_memory_bytes": "qm_bytes(status->'allocatable'->>'memory')",
    "alloc_gpu": "qm_bytes(status->'allocatable'->>'nvidia.com/gpu')",
    "batch_cpu_milli": "qm_cpu_milli(status->'batchAllocatable'->>'cpu')",
    "batch_memory_bytes": "qm_bytes(status->'batchAllocatable'->>'memory')",
}
POD_COLUMNS = {
    "priority": "qm_int(p.spec->>'priority')",
    "req_cpu_milli": "qm_pod_request(p.spec, 'cpu')",
    "req_memory_bytes": "qm_pod_request(p.spec, 'memory')",
    "req_gpu": "qm_pod_request(p.spec, 'nvidia.com/gpu')",
    "quota_cpu_milli": "q.cpu_milli",
    "quota_memory_bytes": "q.memory_bytes",
    "quota_gpu": "q.gpu",
    "quota_limit_cpu_milli": "q.limit_cpu_milli",
    "quota_limit_memory_bytes": "q.limit_memory_bytes",
}


def _repair() -> str:
    node_old = ", ".join(NODE_COLUMNS)
    node_new = ", ".join(NODE_COLUMNS.values())
    computed = ", ".join(f"{expr} AS {col}" for col, expr in POD_COLUMNS.items())
    assign = ", ".join(f"{col} = f.{col}" for col in POD_COLUMNS if col != "priority")
    pod_old = ", ".join(f"p.{col}" for col in POD_COLUMNS)
    pod_new = ", ".join(f"f.{col}" for col in POD_COLUMNS)
    return f"""
UPDATE nodes SET status = status WHERE ({node_old}) IS DISTINCT FROM ({node_new});
UPDATE pods AS p SET spec = p.spec, {assign}
  FROM (SELECT p.uid, {computed} FROM pods AS p, qm_pod_quota_charge(p.spec) AS q) AS f
 WHERE p.uid = f.uid AND ({pod_old}) IS DISTINCT FROM ({pod_new});
SELECT qm_recount_allocations();
"""


def upgrade() -> None:
    op.execute(FUNCTIONS)
    op.execute(_alloc_pods("qm_count"))
    op.execute(_repair())


def downgrade() -> None:
    op.execute(_alloc_pods("qm_int"))
    op.execute("DROP FUNCTION qm_count(text)")
    op.execute(FUNCTIONS_0001)
    op.execute("DROP FUNCTION qm_bigint(numeric)")
    op.execute(_repair())
