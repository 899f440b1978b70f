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

from migrations.kind_table import kind_table

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

TABLES = ("roles", "clusterroles", "rolebindings", "clusterrolebindings")


def upgrade() -> None:
    for table in TABLES:
        op.execute(kind_table(table))


def downgrade() -> None:
    for table in reversed(TABLES):
        op.execute(f"ALTER PUBLICATION qm_stream DROP TABLE {table}")
        op.execute(f"DROP TABLE IF EXISTS {table}")
