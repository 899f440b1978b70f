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

from migrations.kind_table import kind_table

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

TABLE = "admissionpolicies"


def upgrade() -> None:
    op.execute(kind_table(TABLE))


def downgrade() -> None:
    op.execute(f"ALTER PUBLICATION qm_stream DROP TABLE {TABLE}")
    op.execute(f"DROP TABLE IF EXISTS {TABLE}")
