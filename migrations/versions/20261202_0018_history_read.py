"""The application reads the change history, for the history read API (ADR 0061).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02

* ``qm_app`` gets ``SELECT`` on ``qm_history`` (the partitioned parent) and on
  ``qm_history_links`` (to say whether a row is sealed), so the API servers can serve
  ``GET /apis/audit.quaymaster.io/v1/history``. Read only: the append-only guards, and the
  absence of any other grant, still keep it from writing either table. A query through the
  parent is checked against the parent's privileges only, so the monthly partitions keep no
  grant (``qm_history_partition`` still revokes everything on each new month), and a session as
  ``qm_app`` cannot read a partition, archived or not, directly.
* ``GRANT`` takes an ACCESS SHARE lock on each table: it waits only behind an archive's
  partition detach, and gives up after the migration's ``lock_timeout``.

Expand-only: the previous release never reads the history.
"""

from __future__ import annotations

from alembic import op

from migrations.online import serves, unserve

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

PREVIOUS_RELEASE = "0013"
TABLES = "qm_history, qm_history_links"

# The role exists wherever 0014 ran; the guard keeps the offline SQL valid on its own.
GRANT = f"""
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'qm_app') THEN
    GRANT SELECT ON {TABLES} TO qm_app;
  END IF;
END
$$;
"""

REVOKE = f"""
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'qm_app') THEN
    REVOKE SELECT ON {TABLES} FROM qm_app;
  END IF;
END
$$;
"""


def upgrade() -> None:
    op.execute(GRANT)
    serves("0018", PREVIOUS_RELEASE, "qm_app may read the change history")


def downgrade() -> None:
    unserve("0018")
    op.execute(REVOKE)
