"""Roles, ClusterRoles and their bindings: four kind tables, in the stream.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

Shaped like every kind's table (0001) with no promoted columns: the API servers evaluate
RBAC from their watch caches, never by querying these tables, so they join the ``qm_stream``
publication and the revisioner logs their changes like any other kind's. A role names
permissions, not credentials, so ``qm_reporting`` may read them (who may do what is exactly
what an auditor asks).
"""

from __future__ import annotations

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TABLES = ("roles", "clusterroles", "rolebindings", "clusterrolebindings")


def _table(table: str) -> str:
    return f"""
CREATE TABLE {table} (
  uid uuid PRIMARY KEY,
  namespace text NOT NULL DEFAULT '',
  name text NOT NULL,
  generate_name text,
  labels jsonb NOT NULL DEFAULT '{{}}',
  annotations jsonb NOT NULL DEFAULT '{{}}',
  owner_references jsonb NOT NULL DEFAULT '[]',
  finalizers jsonb NOT NULL DEFAULT '[]',
  creation_timestamp timestamptz NOT NULL DEFAULT now(),
  deletion_timestamp timestamptz,
  deletion_grace_period_seconds integer,
  generation bigint NOT NULL DEFAULT 1,
  row_version bigint NOT NULL DEFAULT 0,
  spec jsonb NOT NULL DEFAULT '{{}}',
  status jsonb NOT NULL DEFAULT '{{}}',
  CONSTRAINT {table}_namespace_name UNIQUE (namespace, name)
);
CREATE INDEX {table}_labels ON {table} USING gin (labels jsonb_path_ops);
CREATE INDEX {table}_owners ON {table} USING gin (owner_references jsonb_path_ops)
  WHERE owner_references <> '[]'::jsonb;
CREATE TRIGGER {table}_stamp BEFORE INSERT OR UPDATE ON {table}
  FOR EACH ROW EXECUTE FUNCTION qm_stamp_row();
ALTER PUBLICATION qm_stream ADD TABLE {table};
GRANT SELECT ON {table} TO qm_reporting;
"""


def upgrade() -> None:
    for table in TABLES:
        op.execute(_table(table))


def downgrade() -> None:
    for table in reversed(TABLES):
        op.execute(f"ALTER PUBLICATION qm_stream DROP TABLE {table}")
        op.execute(f"DROP TABLE IF EXISTS {table}")
