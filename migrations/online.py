"""Helpers that keep a migration safe to run while the previous release serves traffic.

``migrations/env.py`` runs every migration in its own transaction and starts each one with
:func:`set_timeouts`, so a DDL statement that would queue behind a long transaction gives up
after ``lock_timeout`` instead of stalling every query that queues behind *it*, and a statement
that rewrites more than expected stops at ``statement_timeout``. The same statements appear in
the offline SQL (``alembic upgrade --sql``) a DBA reviews and lints with squawk.

Migrations call:

* :func:`create_index_concurrently` / :func:`drop_index_concurrently` for an index on a table
  that already holds rows (an index on a table the same migration creates needs neither);
* :func:`backfill` to fill a new column from existing rows in batches, each batch its own
  transaction, so no row lock is held for longer than one batch; :func:`insert_batched` to
  copy rows into a new table the same way;
* :func:`lock_tables` to take, late and at once, the locks DDL needs on tables the application
  writes, in the application's order; :func:`each_in_own_transaction` for DDL one statement
  (one lock) per transaction;
* :func:`serves` to say which code revisions the schema still serves (see 0016).

An autocommit block commits the migration's statements before it, and what it runs commits as
it goes. Its statements are tried again where they gave way on a lock, so each must be safe to
run twice (the helpers' are: ``IF NOT EXISTS``, an invalid index left by a failed build is
dropped first, a backfill only touches rows it has not filled yet). A migration that fails
after such a block is not retried as a whole (env.py), since its first part would run twice:
put autocommit work last, where nothing transactional follows it but the version stamp.

Frozen like ``kind_table``: migrations already applied import it; add, never change outputs.
"""

from __future__ import annotations

import itertools
import os
import random
import re
import time
from collections.abc import Callable

from alembic import op
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

RETRIES_ENV = "QM_MIGRATION_LOCK_RETRIES"
DEFAULT_RETRIES = 10
# SQLSTATEs after which the work is tried again: it gave way and left nothing behind.
RETRIED = {"55P03": "waited longer than lock_timeout ({})", "40P01": "broke a deadlock"}
# Whether the running migration has committed part of itself (an autocommit block), set here
# and reset by env.py when a migration starts.
progress: dict[str, object] = {"committed": False, "revision": None}
LOCK_TIMEOUT_ENV = "QM_MIGRATION_LOCK_TIMEOUT"
STATEMENT_TIMEOUT_ENV = "QM_MIGRATION_STATEMENT_TIMEOUT"
# Shorter than PostgreSQL's default deadlock_timeout (1 s), which the application's sessions
# keep: when a migration and a request wait on each other, the migration's lock wait ends
# first and it gives way, so the request never sees a deadlock error (and env.py retries).
DEFAULT_LOCK_TIMEOUT = "500ms"
DEFAULT_STATEMENT_TIMEOUT = "5min"
# The migration's own deadlock check runs this soon after it starts waiting, so a lock cycle
# it closes is broken on its side. Set only where the migration owner may (superuser, or
# GRANT SET ON PARAMETER deadlock_timeout).
MIGRATION_DEADLOCK_TIMEOUT = "50ms"

# PostgreSQL's duration syntax for these settings: a number and an optional unit.
_DURATION = re.compile(r"^\d+(us|ms|s|min|h|d)?$")
_IDENT = re.compile(r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$")
_REVISION = re.compile(r"^[0-9a-z_]+$")


def _duration(value: str, setting: str) -> str:
    value = value.strip()
    if not _DURATION.match(value):
        raise ValueError(f"{setting}: {value!r} is not a duration such as '2s' or '5min'")
    return value


def _ident(name: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"{name!r} is not a plain lower-case SQL identifier")
    return name


def _revision(rev: str) -> str:
    if not _REVISION.match(rev):
        raise ValueError(f"{rev!r} is not a revision id")
    return rev


def lock_timeout() -> str:
    """How long one statement of a migration may wait for a lock (``QM_MIGRATION_LOCK_TIMEOUT``)."""
    return _duration(os.environ.get(LOCK_TIMEOUT_ENV) or DEFAULT_LOCK_TIMEOUT, LOCK_TIMEOUT_ENV)


def statement_timeout() -> str:
    """How long one statement of a migration may run (``QM_MIGRATION_STATEMENT_TIMEOUT``)."""
    value = os.environ.get(STATEMENT_TIMEOUT_ENV) or DEFAULT_STATEMENT_TIMEOUT
    return _duration(value, STATEMENT_TIMEOUT_ENV)


def set_timeouts(lock: str | None = None, statement: str | None = None) -> None:
    """``SET LOCAL`` both timeouts for the rest of the current transaction."""
    lock = _duration(lock or lock_timeout(), "lock_timeout")
    statement = _duration(statement or statement_timeout(), "statement_timeout")
    op.execute(f"SET LOCAL lock_timeout = '{lock}'")
    op.execute(f"SET LOCAL statement_timeout = '{statement}'")
    op.execute(_deadlock_timeout(local=True))


def _deadlock_timeout(*, local: bool) -> str:
    scope = "true" if local else "false"
    return (
        f"SELECT set_config('deadlock_timeout', '{MIGRATION_DEADLOCK_TIMEOUT}', {scope})"
        " WHERE has_parameter_privilege('deadlock_timeout', 'SET')"
    )


def retries() -> int:
    """How often work that gave way on a lock is tried again (``QM_MIGRATION_LOCK_RETRIES``)."""
    return int(os.environ.get(RETRIES_ENV) or DEFAULT_RETRIES)


def pause(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1``: 0.5 s doubling to 10 s, jittered."""
    return min(10.0, 0.5 * 2.0**attempt) * random.uniform(0.5, 1.0)


def retried_cause(exc: BaseException) -> str | None:
    """Why ``exc`` is worth another attempt (a lock timeout or a deadlock), else ``None``."""
    orig = getattr(exc, "orig", None)
    return RETRIED.get(getattr(orig, "sqlstate", None) or "")


def _in_autocommit(
    statements: list[str] | Callable[[], list[str]], *, lift_statement_timeout: bool = True
) -> None:
    """Run ``statements`` outside any transaction, then restore the migration's timeouts.

    Session-level ``lock_timeout`` still bounds every lock wait (a concurrent build waits for
    older transactions through locks); ``statement_timeout`` is lifted, since a build or a
    batched backfill is long by design and blocks no one. Online, statements that gave way on
    a lock run again, all of them (each is idempotent), after a pause; ``statements`` may be a
    function, to decide them again on each attempt. The migration's own transaction is
    committed here: from now on a failure of the migration is not retried as a whole
    (:data:`progress`).
    """
    build = statements if callable(statements) else (lambda: statements)
    progress["committed"] = True
    with op.get_context().autocommit_block():
        op.execute(f"SET lock_timeout = '{lock_timeout()}'")
        if lift_statement_timeout:
            op.execute("SET statement_timeout = 0")
        op.execute(_deadlock_timeout(local=False))
        for attempt in itertools.count():
            try:
                for statement in build():
                    op.execute(statement)
                break
            except DBAPIError as exc:
                cause = retried_cause(exc)
                if cause is None or attempt >= retries() or op.get_context().as_sql:
                    raise
                wait = pause(attempt)
                print(f"a statement outside the transaction {cause.format(lock_timeout())};"
                      f" retrying in {wait:.1f}s", flush=True)  # fmt: skip
                time.sleep(wait)
        op.execute(f"SET statement_timeout = '{statement_timeout()}'")
    set_timeouts()


def _invalid_index(name: str) -> bool:
    """Whether a concurrent build of ``name`` failed earlier and left an invalid index."""
    if op.get_context().as_sql:
        return False
    row = (
        op.get_bind()
        .execute(
            text(
                "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE c.oid = to_regclass(:name)"
            ),
            {"name": name},
        )
        .first()
    )
    return bool(row and row[0])


def create_index_concurrently(
    name: str,
    table: str,
    columns: str,
    *,
    unique: bool = False,
    using: str | None = None,
    where: str | None = None,
) -> None:
    """``CREATE INDEX CONCURRENTLY IF NOT EXISTS`` in its own autocommit block.

    ``columns`` is the SQL between the parentheses (``"namespace, name"``, ``"(spec->'x')"``).
    An invalid index of that name (a build that failed or timed out) is dropped first, since
    ``IF NOT EXISTS`` would otherwise keep it. In the offline SQL that check cannot run: the
    runbook says how to spot and drop an invalid index before re-running.
    """
    kind = "UNIQUE INDEX" if unique else "INDEX"
    method = f" USING {_ident(using)}" if using else ""
    predicate = f" WHERE {where}" if where else ""
    create = (
        f"CREATE {kind} CONCURRENTLY IF NOT EXISTS {_ident(name)}"
        f" ON {_ident(table)}{method} ({columns}){predicate}"
    )

    def statements() -> list[str]:  # asked again after a build that gave way
        drop = [f"DROP INDEX CONCURRENTLY IF EXISTS {_ident(name)}"] if _invalid_index(name) else []
        return [*drop, create]

    _in_autocommit(statements)


def lock_tables(*tables: str, mode: str = "SHARE ROW EXCLUSIVE") -> None:
    """Take the locks a migration's DDL needs on tables the application writes, all at once.

    Call it just before that DDL, at the end of the migration's transaction (everything that
    touches no such table goes first), so the locks are held for milliseconds. List the tables
    in the order the application's transactions take them (kind tables before ``qm_audit``,
    which a write's statement inserts into last): a migration that locks ``qm_audit`` and
    then waits for a kind table while a write holds the kind table and waits for ``qm_audit``
    closes a cycle. The migration then loses (its ``deadlock_timeout`` is shorter) and is
    retried, but under steady writes it may lose every time.
    """
    if mode not in ("SHARE ROW EXCLUSIVE", "SHARE", "EXCLUSIVE", "ACCESS EXCLUSIVE"):
        raise ValueError(f"lock mode {mode!r}")
    op.execute(f"LOCK TABLE {', '.join(_ident(t) for t in tables)} IN {mode} MODE")


def each_in_own_transaction(statements: list[str]) -> None:
    """Run each statement in a transaction of its own, outside the migration's.

    For DDL on many tables the application writes (a trigger on every kind table): each lock
    is held for one statement, so no write waits on more than one, and no cycle can form.
    Statements must be idempotent (``CREATE OR REPLACE TRIGGER``, ``IF NOT EXISTS``), since a
    retried migration runs them again.
    """
    _in_autocommit(statements, lift_statement_timeout=False)


def drop_index_concurrently(name: str) -> None:
    """``DROP INDEX CONCURRENTLY IF EXISTS`` in its own autocommit block (for downgrades)."""
    _in_autocommit([f"DROP INDEX CONCURRENTLY IF EXISTS {_ident(name)}"])


def backfill(
    table: str, assignments: str, pending: str, *, key: str = "ctid", batch: int = 1000
) -> None:
    """``UPDATE table SET assignments`` on every row matching ``pending``, ``batch`` rows at a time.

    Each batch is its own transaction (a ``DO`` block that commits, run outside any
    transaction), so row locks last one batch and autovacuum can follow. ``pending`` must stop
    matching a row once it is filled (``new_col IS NULL``), which makes the loop end and a re-run
    after a failure resume where it stopped. Batches skip rows another transaction holds and
    come back for them. ``key`` picks rows to lock: ``ctid`` for any table, or a unique column.
    """
    if batch < 1:
        raise ValueError("batch must be positive")
    column = _ident(key) if key != "ctid" else "ctid"
    _in_autocommit(
        [
            f"""DO $backfill$
DECLARE
  n bigint;
BEGIN
  LOOP
    UPDATE {_ident(table)} SET {assignments}
     WHERE {column} IN (SELECT {column} FROM {_ident(table)} WHERE {pending}
                        LIMIT {int(batch)} FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS n = ROW_COUNT;
    COMMIT;
    EXIT WHEN n = 0 AND NOT EXISTS (SELECT 1 FROM {_ident(table)} WHERE {pending});
    IF n = 0 THEN
      PERFORM pg_sleep(0.05);
    END IF;
  END LOOP;
END
$backfill$"""
        ]
    )


def insert_batched(target: str, columns: str, select: str, *, key: str, batch: int = 1000) -> None:
    """``INSERT INTO target (columns)`` the rows of ``select`` in batches by ascending ``key``.

    Each batch is its own transaction (as in :func:`backfill`) and takes the next ``batch``
    rows past the last ``key`` copied. ``select`` yields ``columns`` by name, ``key`` among
    them, and ``target`` has a ``key`` column of the same type. A re-run after a failure starts
    again from the first key: give ``target`` a unique constraint the rows conflict on, or make
    ``select`` skip the rows already copied.
    """
    if batch < 1:
        raise ValueError("batch must be positive")
    column = _ident(key)
    _in_autocommit(
        [
            f"""DO $backfill$
DECLARE
  n bigint;
  last {_ident(target)}.{column}%TYPE;
BEGIN
  LOOP
    WITH b AS (
      SELECT {columns} FROM ({select}) AS s
       WHERE last IS NULL OR s.{column} > last
       ORDER BY s.{column} LIMIT {int(batch)}
    ), i AS (
      INSERT INTO {_ident(target)} ({columns}) SELECT {columns} FROM b ON CONFLICT DO NOTHING
    )
    SELECT count(*), max(b.{column}) INTO n, last FROM b;
    COMMIT;
    EXIT WHEN n = 0;
  END LOOP;
END
$backfill$"""
        ]
    )


def serves(revision: str, oldest_code: str, note: str = "") -> None:
    """Record that schema ``revision`` still serves code built for ``oldest_code`` onward.

    An expand-only migration passes the previous release's revision; one that contracts
    (drops or renames what older code uses) passes its own. Components refuse to start on a
    schema they do not know unless it names a revision they do (``app.store.schema_revision``).
    """
    note_sql = note.replace("'", "''")
    op.execute(
        "INSERT INTO qm_schema_compat (schema_revision, oldest_code_revision, note)"
        f" VALUES ('{_revision(revision)}', '{_revision(oldest_code)}', '{note_sql}')"
        " ON CONFLICT (schema_revision) DO UPDATE"
        " SET oldest_code_revision = EXCLUDED.oldest_code_revision, note = EXCLUDED.note"
    )


def unserve(revision: str) -> None:
    """Remove ``revision``'s row (a downgrade of the migration that added it)."""
    op.execute(f"DELETE FROM qm_schema_compat WHERE schema_revision = '{_revision(revision)}'")
