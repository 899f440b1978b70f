"""Scheduler binds: batch ceilings and pod-count limits on nodes, allocation kept by triggers.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29

``nodes_allocated`` holds, for every node, the summed requests of the pods that hold room on
it. A pod holds room from the moment ``spec.nodeName`` is set until it ends (phase
``Succeeded`` or ``Failed``) or its row is deleted. Triggers on ``pods`` keep the table exact
whoever writes the pod (the scheduler's bind, an agent's status write, a DBA), so the
scheduler's bind transaction only has to lock a node's row and compare it with the node's
limits. The triggers' WHEN clauses skip every pod write that cannot change the sums (status
writes that leave the phase alone, label edits, ...), which are most of the pod writes.

``qm_recount_allocations()`` rebuilds the table from ``pods``; the triggers make it
unnecessary in normal operation.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# Generated node columns: (column, type, generation expression, comment).
NODE_COLUMNS: list[tuple[str, str, str, str]] = [
    (
        "batch_cpu_milli",
        "bigint",
        "qm_cpu_milli(status->'batchAllocatable'->>'cpu')",
        "status.batchAllocatable.cpu in millicores: the ceiling on the summed cpu requests of "
        "all pods on the node when the pod being placed is a batch pod; NULL means equal to "
        "alloc_cpu_milli",
    ),
    (
        "batch_memory_bytes",
        "bigint",
        "qm_bytes(status->'batchAllocatable'->>'memory')",
        "status.batchAllocatable.memory in bytes: the ceiling on the summed memory requests of "
        "all pods on the node when the pod being placed is a batch pod; NULL means equal to "
        "alloc_memory_bytes",
    ),
    (
        "alloc_pods",
        "integer",
        "qm_int(status->'allocatable'->>'pods')",
        "status.allocatable.pods: how many pods may hold room on the node; NULL means no limit",
    ),
]


# Whether a pod row (OLD or NEW) holds room on the node named by its node_name.
def _holds(row: str) -> str:
    return (
        f"({row}.node_name IS NOT NULL"
        f" AND coalesce({row}.phase, '') NOT IN ('Succeeded', 'Failed'))"
    )


FUNCTIONS = f"""
-- Moves one pod's requests on or off the node it names. Runs only for the pod writes that
-- the triggers' WHEN clauses let through, so nothing here is on the path of ordinary writes.
CREATE FUNCTION qm_pods_allocation() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  old_holds boolean := TG_OP <> 'INSERT' AND {_holds("OLD")};
  new_holds boolean := TG_OP <> 'DELETE' AND {_holds("NEW")};
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
    UPDATE nodes_allocated AS a
       SET cpu_milli = a.cpu_milli + NEW.req_cpu_milli,
           memory_bytes = a.memory_bytes + NEW.req_memory_bytes,
           gpu = a.gpu + NEW.req_gpu,
           pods = a.pods + 1
      FROM nodes AS n
     WHERE n.namespace = '' AND n.name = NEW.node_name AND a.node_uid = n.uid;
  END IF;
  RETURN NULL;
END
$$;

-- A new node starts with the pods already bound to its name (created with spec.nodeName set,
-- or left over from an earlier node of the same name). A pod written with that nodeName by a
-- transaction still open while the node is inserted is seen neither here nor by the pod
-- trigger (no row to update yet); qm_recount_allocations() puts that right. The scheduler
-- never does this: it binds only onto nodes whose nodes_allocated row it has locked.
CREATE FUNCTION qm_nodes_allocation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO nodes_allocated (node_uid, cpu_milli, memory_bytes, gpu, pods)
  SELECT NEW.uid, coalesce(sum(p.req_cpu_milli), 0), coalesce(sum(p.req_memory_bytes), 0),
         coalesce(sum(p.req_gpu), 0), count(*)
    FROM pods AS p
   WHERE {_holds("p")} AND p.node_name = NEW.name
  ON CONFLICT (node_uid) DO NOTHING;
  RETURN NULL;
END
$$;

-- Rebuilds nodes_allocated from pods and returns how many rows it corrected. It locks the
-- table against binds and allocation-changing pod writes while it runs (they wait, they do
-- not fail), so the result is exact even on a busy cluster. Run it in its own transaction at
-- READ COMMITTED (the default), e.g. SELECT qm_recount_allocations();
CREATE FUNCTION qm_recount_allocations() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  upserted integer;
  removed integer;
BEGIN
  LOCK TABLE nodes_allocated IN EXCLUSIVE MODE;
  INSERT INTO nodes_allocated AS a (node_uid, cpu_milli, memory_bytes, gpu, pods)
  SELECT n.uid, coalesce(sum(p.req_cpu_milli), 0), coalesce(sum(p.req_memory_bytes), 0),
         coalesce(sum(p.req_gpu), 0), count(p.uid)
    FROM nodes AS n
    LEFT JOIN pods AS p ON p.node_name = n.name AND {_holds("p")}
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
$$;
"""

# 0001 recomputed a pod's requests whenever its spec changed, so every bind (which only sets
# spec.nodeName) paid for parsing all the containers' quantities again: most of a bind's cost.
# The requests depend on spec.containers alone; only a change there recomputes them now.
POD_REQUESTS = """
CREATE OR REPLACE FUNCTION qm_pod_requests() RETURNS trigger LANGUAGE plpgsql AS $$
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
$$;
"""

POD_REQUESTS_0001 = """
CREATE OR REPLACE FUNCTION qm_pod_requests() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' OR NEW.spec IS DISTINCT FROM OLD.spec THEN
    NEW.req_cpu_milli := qm_pod_request(NEW.spec, 'cpu');
    NEW.req_memory_bytes := qm_pod_request(NEW.spec, 'memory');
    NEW.req_gpu := qm_pod_request(NEW.spec, 'nvidia.com/gpu');
  END IF;
  RETURN NEW;
END
$$;
"""

# The UPDATE trigger fires only when the write changes whether the pod holds room, or, while
# it holds room, the node it names or its requests. Phase moves between Pending and Running,
# condition and readiness writes, label and annotation edits do not run the function.
UPDATE_WHEN = f"""
  {_holds("OLD")} <> {_holds("NEW")}
  OR ({_holds("NEW")}
      AND (OLD.node_name <> NEW.node_name
           OR OLD.req_cpu_milli <> NEW.req_cpu_milli
           OR OLD.req_memory_bytes <> NEW.req_memory_bytes
           OR OLD.req_gpu <> NEW.req_gpu))
"""

TRIGGERS = f"""
CREATE TRIGGER pods_allocation_insert AFTER INSERT ON pods
  FOR EACH ROW WHEN ({_holds("NEW")}) EXECUTE FUNCTION qm_pods_allocation();
CREATE TRIGGER pods_allocation_delete AFTER DELETE ON pods
  FOR EACH ROW WHEN ({_holds("OLD")}) EXECUTE FUNCTION qm_pods_allocation();
CREATE TRIGGER pods_allocation_update AFTER UPDATE ON pods
  FOR EACH ROW WHEN ({UPDATE_WHEN}) EXECUTE FUNCTION qm_pods_allocation();
CREATE TRIGGER nodes_allocation_insert AFTER INSERT ON nodes
  FOR EACH ROW WHEN (NEW.namespace = '') EXECUTE FUNCTION qm_nodes_allocation();
"""

COMMENTS = """
COMMENT ON TABLE nodes_allocated IS
  'Summed requests (cpu_milli, memory_bytes, gpu) and count (pods) of the pods holding room on '
  'each node: spec.nodeName set and phase neither Succeeded nor Failed. Kept by the triggers '
  'pods_allocation_* and nodes_allocation_insert; the scheduler locks a row to bind onto its '
  'node. Do not edit by hand; SELECT qm_recount_allocations() rebuilds it from pods.';
COMMENT ON FUNCTION qm_pods_allocation() IS
  'Trigger function: moves a pod''s requests onto or off the node its node_name names';
COMMENT ON FUNCTION qm_nodes_allocation() IS
  'Trigger function: creates a new node''s nodes_allocated row from the pods already bound to '
  'its name';
COMMENT ON FUNCTION qm_recount_allocations() IS
  'Rebuilds nodes_allocated from pods (locking it while it runs) and returns the number of '
  'rows corrected; 0 means the triggers had kept it exact';
COMMENT ON TRIGGER pods_allocation_update ON pods IS
  'Fires only when a write changes whether the pod holds room, or the node or requests of a '
  'pod holding room';
"""


def upgrade() -> None:
    columns = ",\n  ".join(
        f"ADD COLUMN {col} {typ} GENERATED ALWAYS AS ({expr}) STORED"
        for col, typ, expr, _ in NODE_COLUMNS
    )
    op.execute(f"ALTER TABLE nodes\n  {columns}")
    for col, _, _, comment in NODE_COLUMNS:
        text = comment.replace("'", "''")
        op.execute(f"COMMENT ON COLUMN nodes.{col} IS '{text}'")
    # Every bind rewrites a node's row once per pod; leave room on the page for HOT updates.
    op.execute("ALTER TABLE nodes_allocated SET (fillfactor = 50)")
    op.execute("ALTER TABLE pods ADD COLUMN bound_at timestamptz")
    op.execute(
        "COMMENT ON COLUMN pods.bound_at IS 'When spec.nodeName was first set (the bind), by the "
        "database clock; with creation_timestamp it gives created-to-bound latency'"
    )
    op.execute(POD_REQUESTS)
    op.execute(FUNCTIONS)
    op.execute(TRIGGERS)
    op.execute(COMMENTS)
    op.execute("SELECT qm_recount_allocations()")


def downgrade() -> None:
    op.execute(
        """
DROP TRIGGER IF EXISTS nodes_allocation_insert ON nodes;
DROP TRIGGER IF EXISTS pods_allocation_update ON pods;
DROP TRIGGER IF EXISTS pods_allocation_delete ON pods;
DROP TRIGGER IF EXISTS pods_allocation_insert ON pods;
DROP FUNCTION IF EXISTS qm_recount_allocations(), qm_nodes_allocation(), qm_pods_allocation();
ALTER TABLE nodes_allocated RESET (fillfactor);
COMMENT ON TABLE nodes_allocated IS
  'Requests of the pods bound to each node, kept by the scheduler inside its bind transactions';
"""
    )
    op.execute(POD_REQUESTS_0001)
    op.execute("ALTER TABLE pods DROP COLUMN IF EXISTS bound_at")
    columns = ", ".join(f"DROP COLUMN IF EXISTS {col}" for col, _, _, _ in reversed(NODE_COLUMNS))
    op.execute(f"ALTER TABLE nodes {columns}")
