"""The schema-revision check every component runs before it starts serving.

Called from the entry points of the API server, the scheduler, the revisioner, the Celery
workers, the dispatcher, the controller manager and the discovery replicas. Reads
``alembic_version`` and ``qm_schema_compat`` over one short connection and refuses
(``SystemExit`` with a message naming both revisions) when ``app.core.schema_compat`` says this
code must not run there.
"""

from __future__ import annotations

import logging

import psycopg

from app.core.schema_compat import CODE_REVISION, refusal

log = logging.getLogger(__name__)

_READ = """
SELECT v.version_num,
       (SELECT c.oldest_code_revision FROM qm_schema_compat c
         WHERE c.schema_revision = v.version_num)
  FROM alembic_version v
"""
_READ_BEFORE_COMPAT = "SELECT version_num, NULL FROM alembic_version"


class SchemaMismatch(SystemExit):
    """The database's schema revision is one this code must not run on."""


def read_revision(conn: psycopg.Connection) -> tuple[str | None, str | None]:
    """``(schema revision, oldest code revision it serves)``; ``None`` for what is missing."""
    with conn.transaction():
        exists = conn.execute(
            "SELECT to_regclass('alembic_version') IS NOT NULL,"
            " to_regclass('qm_schema_compat') IS NOT NULL"
        ).fetchone()
        if not exists or not exists[0]:
            return None, None
        row = conn.execute(_READ if exists[1] else _READ_BEFORE_COMPAT).fetchone()
    if row is None:
        return None, None
    return row[0], row[1]


def require_known_schema(url: str, component: str) -> str:
    """Return the database's schema revision, or raise :class:`SchemaMismatch` for ``component``."""
    with psycopg.connect(url, connect_timeout=10, autocommit=True) as conn:
        db_revision, oldest_code = read_revision(conn)
    reason = refusal(db_revision, oldest_code)
    if reason is not None:
        raise SchemaMismatch(f"{component} refuses to start: {reason}")
    if db_revision != CODE_REVISION:
        log.warning(
            "%s: schema revision %s is newer than this code's %s and still serves it",
            component,
            db_revision,
            CODE_REVISION,
        )
    return db_revision or ""
