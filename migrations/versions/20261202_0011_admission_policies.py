"""Admission policies: the ``admissionpolicies`` table, shaped like every kind's, in the stream.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02

Cluster-scoped (``namespace`` is always ''), no promoted columns: the API reads policies from
its watch cache and the workers read the few there are whole. The table joins the
``qm_stream`` publication, so the revisioner logs its changes like any other kind's, and
``qm_reporting`` may read it (a policy holds no secret).
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

TABLE = "admissionpolicies"


def upgrade() -> None:
    op.execute(
        f"""
CREATE TABLE {TABLE} (
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
  CONSTRAINT {TABLE}_namespace_name UNIQUE (namespace, name)
);
CREATE INDEX {TABLE}_labels ON {TABLE} USING gin (labels jsonb_path_ops);
CREATE INDEX {TABLE}_owners ON {TABLE} USING gin (owner_references jsonb_path_ops)
  WHERE owner_references <> '[]'::jsonb;
CREATE TRIGGER {TABLE}_stamp BEFORE INSERT OR UPDATE ON {TABLE}
  FOR EACH ROW EXECUTE FUNCTION qm_stamp_row();
ALTER PUBLICATION qm_stream ADD TABLE {TABLE};
GRANT SELECT ON {TABLE} TO qm_reporting;
"""
    )


def downgrade() -> None:
    op.execute(f"ALTER PUBLICATION qm_stream DROP TABLE {TABLE}")
    op.execute(f"DROP TABLE IF EXISTS {TABLE}")
