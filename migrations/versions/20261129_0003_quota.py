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

# (column, type, expression over NEW.spec, comment)
COLUMNS: list[tuple[str, str, str, str]] = [
    (
        "quota_cpu_milli",
        "bigint NOT NULL DEFAULT 0",
        "qm_pod_effective({s}, 'requests', 'cpu')",
        "Effective cpu request in millicores (init containers by max) charged to quotas",
    ),
    (
        "quota_memory_bytes",
        "bigint NOT NULL DEFAULT 0",
        "qm_pod_effective({s}, 'requests', 'memory')",
        "Effective memory request in bytes charged to quotas",
    ),
    (
        "quota_gpu",
        "bigint NOT NULL DEFAULT 0",
        "qm_pod_effective({s}, 'requests', 'nvidia.com/gpu')",
        "Effective nvidia.com/gpu request charged to quotas",
    ),
    (
        "quota_limit_cpu_milli",
        "bigint NOT NULL DEFAULT 0",
        "qm_pod_effective({s}, 'limits', 'cpu')",
        "Effective cpu limit in millicores charged to limits.cpu quotas",
    ),
    (
        "quota_limit_memory_bytes",
        "bigint NOT NULL DEFAULT 0",
        "qm_pod_effective({s}, 'limits', 'memory')",
        "Effective memory limit in bytes charged to limits.memory quotas",
    ),
    (
        "quota_priority_class",
        "text NOT NULL DEFAULT ''",
        "coalesce({s}->>'priorityClassName', '')",
        "spec.priorityClassName, for the PriorityClass quota scope",
    ),
    (
        "quota_terminating",
        "boolean NOT NULL DEFAULT false",
        "coalesce({s}->'activeDeadlineSeconds', 'null'::jsonb) <> 'null'::jsonb",
        "spec.activeDeadlineSeconds is set: the Terminating quota scope",
    ),
    (
        "quota_best_effort",
        "boolean NOT NULL DEFAULT true",
        "qm_pod_best_effort({s})",
        "No container asks for or limits cpu or memory: the BestEffort quota scope",
    ),
    (
        "quota_cross_namespace",
        "boolean NOT NULL DEFAULT false",
        "qm_pod_cross_namespace({s})",
        "A pod (anti-)affinity term names other namespaces: the CrossNamespacePodAffinity scope",
    ),
]

# The spec fields the columns are computed from; an update touching none of them skips the
# trigger entirely (binds change only spec.nodeName).
SOURCES = ("containers", "initContainers", "priorityClassName", "activeDeadlineSeconds", "affinity")

FUNCTIONS = r"""
CREATE FUNCTION qm_container_amount(c jsonb, part text, resource text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN resource = 'cpu' THEN qm_cpu_milli(c->'resources'->part->>resource)
              ELSE qm_bytes(c->'resources'->part->>resource) END
$$;

CREATE FUNCTION qm_pod_containers(spec jsonb, key text) RETURNS SETOF jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT c FROM jsonb_array_elements(CASE WHEN jsonb_typeof(spec->key) = 'array'
                                          THEN spec->key ELSE '[]'::jsonb END) AS c
   WHERE jsonb_typeof(c) = 'object'
$$;

-- max(sum over containers, max over init containers), unreadable amounts counting 0.
CREATE FUNCTION qm_pod_effective(spec jsonb, part text, resource text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT greatest(
    (SELECT coalesce(sum(qm_container_amount(c, part, resource)), 0)
       FROM qm_pod_containers(spec, 'containers') AS c),
    (SELECT coalesce(max(qm_container_amount(c, part, resource)), 0)
       FROM qm_pod_containers(spec, 'initContainers') AS c))::bigint
$$;

CREATE FUNCTION qm_pod_best_effort(spec jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT NOT EXISTS (
    SELECT 1 FROM (SELECT * FROM qm_pod_containers(spec, 'containers')
                   UNION ALL SELECT * FROM qm_pod_containers(spec, 'initContainers')) AS k(c),
                  unnest(ARRAY['requests', 'limits']) AS p(part)
     WHERE jsonb_typeof(c->'resources'->part) = 'object'
       AND (c->'resources'->part ? 'cpu' OR c->'resources'->part ? 'memory'))
$$;

CREATE FUNCTION qm_pod_cross_namespace(spec jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT jsonb_path_exists(spec,
    'lax $.affinity.*.requiredDuringSchedulingIgnoredDuringExecution[*]
       ? (@.namespaceSelector != null || @.namespaces[0] != null)', '{}', true)
      OR jsonb_path_exists(spec,
    'lax $.affinity.*.preferredDuringSchedulingIgnoredDuringExecution[*].podAffinityTerm
       ? (@.namespaceSelector != null || @.namespaces[0] != null)', '{}', true)
$$;
"""


def _trigger_function() -> str:
    sets = "\n".join(f"  NEW.{col} := {expr.format(s='NEW.spec')};" for col, _, expr, _ in COLUMNS)
    return f"""
CREATE FUNCTION qm_pod_quota() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
{sets}
  RETURN NEW;
END
$$;
"""


def _changed() -> str:
    return " OR ".join(f"OLD.spec->'{k}' IS DISTINCT FROM NEW.spec->'{k}'" for k in SOURCES)


def upgrade() -> None:
    adds = ",\n  ".join(f"ADD COLUMN {col} {typ}" for col, typ, _, _ in COLUMNS)
    op.execute(f"ALTER TABLE pods\n  {adds}")
    for col, _, _, comment in COLUMNS:
        op.execute(f"COMMENT ON COLUMN pods.{col} IS '{comment}'")
    op.execute(FUNCTIONS)
    op.execute(_trigger_function())
    op.execute(
        f"""
CREATE TRIGGER pods_quota_insert BEFORE INSERT ON pods
  FOR EACH ROW EXECUTE FUNCTION qm_pod_quota();
CREATE TRIGGER pods_quota_update BEFORE UPDATE OF spec ON pods
  FOR EACH ROW WHEN ({_changed()}) EXECUTE FUNCTION qm_pod_quota();
"""
    )
    sets = ", ".join(f"{col} = {expr.format(s='spec')}" for col, _, expr, _ in COLUMNS)
    op.execute(f"UPDATE pods SET {sets}")


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS pods_quota_update ON pods")
    op.execute("DROP TRIGGER IF EXISTS pods_quota_insert ON pods")
    op.execute(
        "DROP FUNCTION IF EXISTS qm_pod_quota(), qm_pod_cross_namespace(jsonb), "
        "qm_pod_best_effort(jsonb), qm_pod_effective(jsonb, text, text), "
        "qm_pod_containers(jsonb, text), qm_container_amount(jsonb, text, text)"
    )
    drops = ", ".join(f"DROP COLUMN IF EXISTS {col}" for col, _, _, _ in reversed(COLUMNS))
    op.execute(f"ALTER TABLE pods {drops}")
