"""ResourceQuota: what each pod charges its namespace's quotas, kept on the pod row.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29

Quota admission and the ResourceQuota controller sum, in one aggregate over a namespace's
pods, what every live pod charges. Summing ``spec`` JSONB there would parse every container of
every pod on each pod create; instead a trigger keeps the charge and the attributes that quota
scopes test in plain columns, computed when the pod is inserted and when one of the spec fields
they come from changes (never on binds or status writes).

The charge is Kubernetes' effective amount, ``max(sum over containers, max over init
containers)``; ``req_cpu_milli`` and friends (from 0001, what the scheduler holds on nodes)
stay the sum over containers alone.
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# (column, type, comment); the first six come from qm_pod_quota_charge(spec), in this order.
COLUMNS: list[tuple[str, str, str]] = [
    ("quota_cpu_milli", "bigint NOT NULL DEFAULT 0",
     "Effective cpu request in millicores (init containers by max) charged to quotas"),
    ("quota_memory_bytes", "bigint NOT NULL DEFAULT 0",
     "Effective memory request in bytes charged to quotas"),
    ("quota_gpu", "bigint NOT NULL DEFAULT 0",
     "Effective nvidia.com/gpu request charged to quotas"),
    ("quota_limit_cpu_milli", "bigint NOT NULL DEFAULT 0",
     "Effective cpu limit in millicores charged to limits.cpu quotas"),
    ("quota_limit_memory_bytes", "bigint NOT NULL DEFAULT 0",
     "Effective memory limit in bytes charged to limits.memory quotas"),
    ("quota_best_effort", "boolean NOT NULL DEFAULT true",
     "No container asks for or limits cpu or memory: the BestEffort quota scope"),
    ("quota_priority_class", "text NOT NULL DEFAULT ''",
     "spec.priorityClassName, for the PriorityClass quota scope"),
    ("quota_terminating", "boolean NOT NULL DEFAULT false",
     "spec.activeDeadlineSeconds is set: the Terminating quota scope"),
    ("quota_cross_namespace", "boolean NOT NULL DEFAULT false",
     "A pod (anti-)affinity term names other namespaces: the CrossNamespacePodAffinity scope"),
]  # fmt: skip
CHARGED = ", ".join(c for c, _, _ in COLUMNS[:6])
NEW_CHARGED = ", ".join(f"NEW.{c}" for c, _, _ in COLUMNS[:6])

# The spec fields the columns are computed from; an update touching none of them skips the
# trigger entirely (binds change only spec.nodeName).
SOURCES = ("containers", "initContainers", "priorityClassName", "activeDeadlineSeconds", "affinity")

# One pass over the containers computes every amount (a query per column cost twice as much).
FUNCTIONS = r"""
CREATE FUNCTION qm_pod_quota_charge(spec jsonb, OUT cpu_milli bigint, OUT memory_bytes bigint,
  OUT gpu bigint, OUT limit_cpu_milli bigint, OUT limit_memory_bytes bigint,
  OUT best_effort boolean)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
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
$$;

CREATE FUNCTION qm_pod_cross_namespace(spec jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT spec ? 'affinity' AND (jsonb_path_exists(spec,
    'lax $.affinity.*.requiredDuringSchedulingIgnoredDuringExecution[*]
       ? (@.namespaceSelector != null || @.namespaces[0] != null)', '{}', true)
      OR jsonb_path_exists(spec,
    'lax $.affinity.*.preferredDuringSchedulingIgnoredDuringExecution[*].podAffinityTerm
       ? (@.namespaceSelector != null || @.namespaces[0] != null)', '{}', true))
$$;
"""


def _rest(s: str) -> str:
    """The three columns read straight from the spec, as assignments."""
    return (
        f"quota_priority_class = coalesce({s}->>'priorityClassName', ''), "
        f"quota_terminating = coalesce({s}->'activeDeadlineSeconds', 'null') <> 'null', "
        f"quota_cross_namespace = qm_pod_cross_namespace({s})"
    )


TRIGGER_FUNCTION = f"""
CREATE FUNCTION qm_pod_quota() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  SELECT * INTO {NEW_CHARGED} FROM qm_pod_quota_charge(NEW.spec);
  NEW.quota_priority_class := coalesce(NEW.spec->>'priorityClassName', '');
  NEW.quota_terminating := coalesce(NEW.spec->'activeDeadlineSeconds', 'null') <> 'null';
  NEW.quota_cross_namespace := qm_pod_cross_namespace(NEW.spec);
  RETURN NEW;
END
$$;
"""


def _changed() -> str:
    return " OR ".join(f"OLD.spec->'{k}' IS DISTINCT FROM NEW.spec->'{k}'" for k in SOURCES)


def upgrade() -> None:
    adds = ",\n  ".join(f"ADD COLUMN {col} {typ}" for col, typ, _ in COLUMNS)
    op.execute(f"ALTER TABLE pods\n  {adds}")
    for col, _, comment in COLUMNS:
        op.execute(f"COMMENT ON COLUMN pods.{col} IS '{comment}'")
    op.execute(FUNCTIONS)
    op.execute(TRIGGER_FUNCTION)
    op.execute(
        f"""
CREATE TRIGGER pods_quota_insert BEFORE INSERT ON pods
  FOR EACH ROW EXECUTE FUNCTION qm_pod_quota();
CREATE TRIGGER pods_quota_update BEFORE UPDATE OF spec ON pods
  FOR EACH ROW WHEN ({_changed()}) EXECUTE FUNCTION qm_pod_quota();
"""
    )
    op.execute(
        f"UPDATE pods SET ({CHARGED}) = (SELECT * FROM qm_pod_quota_charge(spec)), " + _rest("spec")
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS pods_quota_update ON pods")
    op.execute("DROP TRIGGER IF EXISTS pods_quota_insert ON pods")
    op.execute(
        "DROP FUNCTION IF EXISTS qm_pod_quota(), qm_pod_cross_namespace(jsonb), "
        "qm_pod_quota_charge(jsonb)"
    )
    drops = ", ".join(f"DROP COLUMN IF EXISTS {col}" for col, _, _ in reversed(COLUMNS))
    op.execute(f"ALTER TABLE pods {drops}")
