"""Fair shares of the API across servers: the live API servers, so each takes 1/N of every
priority level's concurrency (ADR 0049).

Each API server upserts its row every ``QM_API_HEARTBEAT_S`` seconds and counts the rows
renewed within the lease; a stopped server deletes its row, a killed one ages out.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-02
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE qm_api_servers (
            id text PRIMARY KEY,
            started_at timestamptz NOT NULL DEFAULT now(),
            renewed_at timestamptz NOT NULL DEFAULT now()
        )
        """
    )
    op.execute("GRANT SELECT ON qm_api_servers TO qm_reporting")


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS qm_api_servers")
