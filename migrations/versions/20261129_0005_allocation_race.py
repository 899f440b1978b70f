"""Close the race between a pod bound to a node name and that node's registration.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29

``nodes_allocated`` (0002) is kept by two triggers: a node's insert sums the pods already
bound to its name, and a pod's write adds or removes its requests on its node's row. A pod
bound to a name whose node is being registered at the same moment fell between them: the pod's
trigger found no row (the node was not committed yet), and the node's sum did not see the pod
(not committed yet either), so the pod was never counted and its later removal drove the row
negative. Node agents registering while pods are created for them hit exactly this.

Both triggers now meet on a transaction-scoped advisory lock named after the node: the node's
insert takes it before summing, and a pod write that finds no row for its node takes it and
tries again. Whichever commits second sees the other's work, so every pod is counted once.
Binds onto existing nodes (all the scheduler's) find their row at once and never take the lock.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def _holds(row: str) -> str:
    return (
        f"({row}.node_name IS NOT NULL"
        f" AND coalesce({row}.phase, '') NOT IN ('Succeeded', 'Failed'))"
    )


LOCK = "pg_advisory_xact_lock(hashtextextended('qm-node/' || {name}, 0));"

# A pod that finds no row for its node meets the node's insert on the lock and looks again
# (a new statement sees what the insert committed meanwhile).
_ADD_WITH_RETRY = """
    FOR attempt IN 1..2 LOOP
      {add}
      EXIT WHEN FOUND OR attempt = 2;
      PERFORM {lock}
    END LOOP;"""


def functions(meet_on_lock: bool) -> str:
    """Both trigger functions; without the lock they behave as 0002's (the downgrade restores
    0002's own text, ``_functions_of_0002``)."""
    add = """UPDATE nodes_allocated AS a
         SET cpu_milli = a.cpu_milli + NEW.req_cpu_milli,
             memory_bytes = a.memory_bytes + NEW.req_memory_bytes,
             gpu = a.gpu + NEW.req_gpu,
             pods = a.pods + 1
        FROM nodes AS n
       WHERE n.namespace = '' AND n.name = NEW.node_name AND a.node_uid = n.uid;"""
    if meet_on_lock:
        add = _ADD_WITH_RETRY.format(add=add, lock=LOCK.format(name="NEW.node_name"))
    node_lock = f"PERFORM {LOCK.format(name='NEW.name')}" if meet_on_lock else ""
    return f"""
CREATE OR REPLACE FUNCTION qm_pods_allocation() RETURNS trigger LANGUAGE plpgsql AS $$
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
    {add}
  END IF;
  RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION qm_nodes_allocation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  {node_lock}
  INSERT INTO nodes_allocated (node_uid, cpu_milli, memory_bytes, gpu, pods)
  SELECT NEW.uid, coalesce(sum(p.req_cpu_milli), 0), coalesce(sum(p.req_memory_bytes), 0),
         coalesce(sum(p.req_gpu), 0), count(*)
    FROM pods AS p
   WHERE {_holds("p")} AND p.node_name = NEW.name
  ON CONFLICT (node_uid) DO NOTHING;
  RETURN NULL;
END
$$;
"""


def upgrade() -> None:
    op.execute(functions(meet_on_lock=True))
    op.execute("SELECT qm_recount_allocations()")  # rows the race left wrong before this


def _functions_of_0002() -> str:
    """0002's own text of its functions: ``functions(meet_on_lock=False)`` behaves the same but
    is laid out differently, and the schema check compares function text, so a downgrade must
    leave them exactly as 0002 wrote them."""
    spec = importlib.util.spec_from_file_location(
        "qm_migration_0002", Path(__file__).with_name("20261129_0002_scheduler_binds.py")
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module.FUNCTIONS).replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION")


def downgrade() -> None:
    op.execute(_functions_of_0002())
