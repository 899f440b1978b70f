"""The RBAC kinds' tables exist in the kinds' shape and join the revision stream."""

from __future__ import annotations

import psycopg

RBAC_TABLES = ("roles", "clusterroles", "rolebindings", "clusterrolebindings")


def test_rbac_tables_are_published_and_bindings_readable_by_reporting(pg_url: str) -> None:
    with psycopg.connect(pg_url) as conn:
        published = {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_publication_tables WHERE pubname = 'qm_stream'"
            )
        }
        assert set(RBAC_TABLES) <= published
        for table in RBAC_TABLES:
            conn.execute(f"SELECT uid, namespace, name, spec, row_version FROM {table} LIMIT 1")
        # Who may do what, for auditors: through the reporting schema (ADR 0054).
        (granted,) = conn.execute(
            "SELECT has_table_privilege('qm_reporting', 'reporting.role_bindings', 'SELECT')"
        ).fetchone()  # type: ignore[misc]
        assert granted
