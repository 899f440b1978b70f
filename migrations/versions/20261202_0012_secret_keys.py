"""Encryption keys for Secrets at rest: no schema change.

The keys live in a file (``QM_SECRET_KEYS``), not in a table, and a Secret's sealed ``data`` is
a string in the same ``spec`` column (ADR 0048). Secrets stored before are sealed by the API
servers when they start, not here: a migration has no keys.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02
"""

from __future__ import annotations

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
