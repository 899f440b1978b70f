"""Which code revisions a schema revision still serves.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02

* ``qm_schema_compat``: one row per schema revision (from this one on): the oldest code
  revision it still serves. Every component reads its database's row at start
  (``app.store.schema_revision``) and refuses to run on a revision it does not know unless the
  row names one it does. An expand-only migration (adds, never drops or renames what older code
  uses) records the previous release's revision, so that release keeps running during a rolling
  upgrade; a contracting one records its own. Later migrations add their row with
  ``migrations.online.serves``.
* 0014 (history), 0015 (reporting) and this revision only expand: all three serve the code of
  revision 0013 (release v0.14.0) onward.
* The application role reads it; only the migration owner writes it.
"""

from __future__ import annotations

from alembic import op

from migrations.online import serves, unserve

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

PREVIOUS_RELEASE = "0013"

TABLE = """
CREATE TABLE qm_schema_compat (
  schema_revision text PRIMARY KEY,
  oldest_code_revision text NOT NULL,
  note text NOT NULL DEFAULT '',
  recorded_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE qm_schema_compat IS
  'Per schema revision, the oldest code revision it still serves (components check at start)';
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'qm_app') THEN
    REVOKE ALL ON qm_schema_compat FROM qm_app;
    GRANT SELECT ON qm_schema_compat, alembic_version TO qm_app;
  END IF;
END
$$;
"""


def upgrade() -> None:
    op.execute(TABLE)
    serves("0014", PREVIOUS_RELEASE, "adds the change history; qm_audit stays")
    serves("0015", PREVIOUS_RELEASE, "adds the reporting schema")
    serves("0016", PREVIOUS_RELEASE, "adds qm_schema_compat")


def downgrade() -> None:
    for rev in ("0016", "0015", "0014"):
        unserve(rev)
    op.execute("DROP TABLE qm_schema_compat")
