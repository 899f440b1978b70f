"""Measured usage, rolled up per minute, and the reporting views over it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02

* ``qm_usage_rollup``: one row per (minute, namespace, node) with the pods measured there and
  their summed CPU millicores and memory bytes, appended every minute by the controller
  manager's ``usage-rollup`` loop from the latest per-pod figures in Redis
  (``app.store.usage``, ADR 0020). Telemetry, not state: no history triggers, not in the
  ``qm_stream`` publication. Bounded: the same loop deletes rows older than the retention
  (35 days by default) in batches.
* Row-level security on it by namespace for reporting roles, exactly as 0015 does for the
  other tables (``reporting.namespace_access``), and column grants for ``qm_reporting``.
* Views ``reporting.usage_hourly`` (per hour by namespace and node, namespace, team, zone,
  node and the whole cluster: average and maximum; ``reporting.usage_hourly_between(since,
  until)`` is the same over a window, read by the primary key) and
  ``reporting.allocation_vs_usage`` (requests now against the last hour's measured usage).

Expand-only: a new table and new views; the previous release never reads them.
"""

from __future__ import annotations

from alembic import op

from migrations.online import serves, unserve

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

PREVIOUS_RELEASE = "0013"
ROLE = "qm_reporting"
TEAM_LABEL = "quaymaster.io/team"
COLUMNS = ("minute", "namespace", "node", "pods", "cpu_milli", "memory_bytes")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# As 0015's ``_visible``: both subqueries are uncorrelated, run once per statement.
VISIBLE = (
    "(EXISTS (SELECT 1 FROM reporting.namespace_access WHERE namespace = '*')"
    " OR namespace IN (SELECT namespace FROM reporting.namespace_access))"
)

TABLE = f"""
CREATE TABLE qm_usage_rollup (
  minute timestamptz NOT NULL,
  namespace text NOT NULL,
  node text NOT NULL,
  pods integer NOT NULL CHECK (pods >= 0),
  cpu_milli bigint NOT NULL CHECK (cpu_milli >= 0),
  memory_bytes bigint NOT NULL CHECK (memory_bytes >= 0),
  PRIMARY KEY (minute, namespace, node)
);
COMMENT ON TABLE qm_usage_rollup IS
  'Measured usage per minute, namespace and node, appended by the controller manager''s '
  'usage-rollup loop from the latest per-pod samples in Redis; telemetry (no history), '
  'pruned past its retention (QM_USAGE_ROLLUP_RETENTION_DAYS, 35 by default)';
COMMENT ON COLUMN qm_usage_rollup.minute IS 'The minute the figures were read in (UTC, truncated)';
COMMENT ON COLUMN qm_usage_rollup.namespace IS 'The pods'' namespace';
COMMENT ON COLUMN qm_usage_rollup.node IS 'The node the pods ran on (as its agent reported)';
COMMENT ON COLUMN qm_usage_rollup.pods IS 'Pods with a fresh sample on that node';
COMMENT ON COLUMN qm_usage_rollup.cpu_milli IS
  'Their summed CPU in millicores (each averaged over the agent''s sampling interval)';
COMMENT ON COLUMN qm_usage_rollup.memory_bytes IS 'Their summed memory in bytes';
CREATE POLICY qm_usage_rollup_everyone ON qm_usage_rollup
  AS PERMISSIVE FOR ALL TO PUBLIC USING (true) WITH CHECK (true);
COMMENT ON POLICY qm_usage_rollup_everyone ON qm_usage_rollup IS
  'Row-level security changes nothing for roles other than {ROLE}''s members';
CREATE POLICY qm_usage_rollup_reporting ON qm_usage_rollup
  AS RESTRICTIVE FOR SELECT TO {ROLE} USING ({VISIBLE});
COMMENT ON POLICY qm_usage_rollup_reporting ON qm_usage_rollup IS
  'A reporting role sees the rows of the namespaces reporting.namespace_access gives it';
ALTER TABLE qm_usage_rollup ENABLE ROW LEVEL SECURITY;
GRANT SELECT ({", ".join(COLUMNS)}) ON qm_usage_rollup TO {ROLE};
"""

View = tuple[str, str, str, dict[str, str]]

# Per minute and group first (a team's figure for a minute is the sum of its namespaces on
# every node), then per hour: so the maximum is the busiest minute of the group, not a sum of
# maxima.
USAGE_HOURLY: View = (
    "usage_hourly",
    "Measured usage per hour, from qm_usage_rollup: for each level (namespace_node, namespace, "
    "team, zone, node, cluster) the figures summed per minute over the level's group, then "
    "averaged and maximised over the minutes of the hour that have figures. A team login sees "
    "only its namespaces' usage, at every level",
    f"""
WITH src AS (
  SELECT u.minute, u.namespace, coalesce(ns.labels->>'{TEAM_LABEL}', u.namespace) AS team,
         n.zone, u.node, u.pods, u.cpu_milli, u.memory_bytes
    FROM qm_usage_rollup AS u
    LEFT JOIN namespaces AS ns ON ns.name = u.namespace
    LEFT JOIN nodes AS n ON n.namespace = '' AND n.name = u.node
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
""",
    {
        "hour": "The hour (UTC, truncated)",
        "level": "What a row sums: namespace_node (one namespace on one node), namespace, team, "
        "zone, node or cluster (everything the reader may see)",
        "namespace": "The namespace (levels namespace_node and namespace)",
        "team": f"The namespace's {TEAM_LABEL} label now, else its name (levels "
        "namespace_node, namespace and team)",
        "zone": "The node's zone now (levels namespace_node and zone; NULL: the node is gone "
        "or has no zone label)",
        "node": "The node (levels namespace_node and node)",
        "minutes": "Minutes of the hour with figures for this group (at most 60)",
        "avg_pods": "Pods measured, averaged over those minutes",
        "max_pods": "Pods measured in the busiest minute",
        "avg_cpu_milli": "CPU in millicores summed per minute, averaged over those minutes",
        "max_cpu_milli": "The highest per-minute sum of CPU millicores",
        "avg_memory_bytes": "Memory in bytes summed per minute, averaged over those minutes",
        "max_memory_bytes": "The highest per-minute sum of memory bytes",
    },
)

ALLOCATION_VS_USAGE: View = (
    "allocation_vs_usage",
    "Requests now (reporting.allocation) against measured usage over the last hour "
    "(qm_usage_rollup), by namespace, team, zone and node: what teams ask for against what "
    "they use",
    f"""
WITH used AS (
  SELECT namespace, node, count(*) AS minutes,
         round(avg(cpu_milli), 1) AS avg_cpu_milli, max(cpu_milli) AS max_cpu_milli,
         round(avg(memory_bytes)) AS avg_memory_bytes, max(memory_bytes) AS max_memory_bytes
    FROM qm_usage_rollup
   WHERE minute >= date_trunc('minute', now()) - interval '60 minutes'
   GROUP BY 1, 2
), asked AS (
  SELECT namespace, node_name AS node, sum(pods)::bigint AS pods,
         sum(cpu_milli)::bigint AS cpu_milli, sum(memory_bytes)::bigint AS memory_bytes
    FROM reporting.allocation
   GROUP BY 1, 2
)
SELECT k.namespace, coalesce(ns.labels->>'{TEAM_LABEL}', k.namespace) AS team, n.zone,
       k.node, coalesce(a.pods, 0) AS requesting_pods,
       coalesce(a.cpu_milli, 0) AS requested_cpu_milli,
       coalesce(a.memory_bytes, 0) AS requested_memory_bytes,
       coalesce(u.minutes, 0) AS measured_minutes,
       u.avg_cpu_milli, u.max_cpu_milli, u.avg_memory_bytes, u.max_memory_bytes,
       round(u.avg_cpu_milli / nullif(a.cpu_milli, 0), 4) AS cpu_used_fraction,
       round(u.avg_memory_bytes / nullif(a.memory_bytes, 0), 4) AS memory_used_fraction
  FROM (SELECT namespace, node FROM asked UNION SELECT namespace, node FROM used) AS k
  LEFT JOIN asked AS a ON a.namespace = k.namespace AND a.node = k.node
  LEFT JOIN used AS u ON u.namespace = k.namespace AND u.node = k.node
  LEFT JOIN namespaces AS ns ON ns.name = k.namespace
  LEFT JOIN nodes AS n ON n.namespace = '' AND n.name = k.node
""",
    {
        "namespace": "The namespace",
        "team": f"The namespace's {TEAM_LABEL} label, else its name",
        "zone": "The node's zone (NULL: no such node, or no zone label)",
        "node": "The node",
        "requesting_pods": "Pods holding room on the node now (as in reporting.allocation)",
        "requested_cpu_milli": "Their summed CPU requests in millicores",
        "requested_memory_bytes": "Their summed memory requests in bytes",
        "measured_minutes": "Minutes of the last hour with measured figures (0: none)",
        "avg_cpu_milli": "Measured CPU millicores, averaged over those minutes (NULL: none)",
        "max_cpu_milli": "Measured CPU millicores in the busiest of those minutes",
        "avg_memory_bytes": "Measured memory bytes, averaged over those minutes",
        "max_memory_bytes": "Measured memory bytes in the busiest of those minutes",
        "cpu_used_fraction": "avg_cpu_milli / requested_cpu_milli (NULL: nothing requested)",
        "memory_used_fraction": "avg_memory_bytes / requested_memory_bytes",
    },
)

VIEWS = (USAGE_HOURLY, ALLOCATION_VS_USAGE)

ALLOCATION = (
    "Requests of the pods holding room on nodes (bound, not finished; terminating ones still "
    "hold it) by namespace, team, zone and node; sum over any of these columns."
)
ALLOCATION_THEN = ALLOCATION + (
    " Measured usage is not here: it lives in Redis (ADR 0020), see docs/reporting.md"
)
ALLOCATION_NOW = ALLOCATION + (
    " Measured usage: reporting.usage_hourly and reporting.allocation_vs_usage"
)


# The view filtered on ``hour`` reads the whole table (the filter stays above the grouping);
# this function takes the window inside, so the primary key's ``minute`` bounds the scan.
_SOURCE = "    LEFT JOIN nodes AS n ON n.namespace = '' AND n.name = u.node\n), per_minute"
assert USAGE_HOURLY[2].count(_SOURCE) == 1
WINDOWED = (
    USAGE_HOURLY[2]
    .replace(_SOURCE, _SOURCE.replace("\n)", "\n   WHERE u.minute >= $1 AND u.minute < $2\n)"))
    .replace("FROM qm_usage_rollup AS u", "FROM public.qm_usage_rollup AS u")
    .replace("JOIN namespaces AS", "JOIN public.namespaces AS")
    .replace("JOIN nodes AS", "JOIN public.nodes AS")
)
BETWEEN = f"""
CREATE FUNCTION reporting.usage_hourly_between(since timestamptz, until timestamptz DEFAULT now())
RETURNS SETOF reporting.usage_hourly LANGUAGE sql STABLE AS $fn${WINDOWED}$fn$;
COMMENT ON FUNCTION reporting.usage_hourly_between(timestamptz, timestamptz) IS
  'reporting.usage_hourly over the minutes in [since, until) only, read by the primary key: '
  'use it for a window of a long retention';
REVOKE ALL ON FUNCTION reporting.usage_hourly_between(timestamptz, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION reporting.usage_hourly_between(timestamptz, timestamptz) TO {ROLE};
"""


def _view(view: View) -> str:
    name, comment, select, columns = view
    out = (
        f"CREATE VIEW reporting.{name} ({', '.join(columns)})"
        f" WITH (security_invoker = true) AS{select};\n"
        f"COMMENT ON VIEW reporting.{name} IS {_quote(comment)};\n"
    )
    for col, text in columns.items():
        out += f"COMMENT ON COLUMN reporting.{name}.{col} IS {_quote(text)};\n"
    return out + f"GRANT SELECT ON reporting.{name} TO {ROLE};\n"


def upgrade() -> None:
    op.execute(TABLE)
    for view in VIEWS:
        op.execute(_view(view))
    op.execute(BETWEEN)
    op.execute(f"COMMENT ON VIEW reporting.allocation IS {_quote(ALLOCATION_NOW)}")
    serves("0017", PREVIOUS_RELEASE, "adds qm_usage_rollup and its reporting views")


def downgrade() -> None:
    unserve("0017")
    op.execute(f"COMMENT ON VIEW reporting.allocation IS {_quote(ALLOCATION_THEN)}")
    op.execute("DROP FUNCTION reporting.usage_hourly_between(timestamptz, timestamptz)")
    for name, *_ in reversed(VIEWS):
        op.execute(f"DROP VIEW reporting.{name}")
    op.execute("DROP TABLE qm_usage_rollup")
