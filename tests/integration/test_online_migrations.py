"""The online-safety helpers of ``migrations/online.py`` and ``migrations/env.py``'s retry."""

from __future__ import annotations

import io
import os
import secrets
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest
from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import create_engine, pool

from app.core.schema_compat import CODE_REVISION
from app.devstack.postgres import create_database
from migrations import online
from tests.conftest import REPO_ROOT


def _engine(url: str):
    return create_engine(
        url.replace("postgresql://", "postgresql+psycopg://", 1), poolclass=pool.NullPool
    )


def _run(url: str, step) -> None:
    """Run ``step`` as the body of one migration (its own transaction), online."""
    with _engine(url).connect() as connection:
        ctx = MigrationContext.configure(connection, opts={"transaction_per_migration": True})
        with Operations.context(ctx), ctx.begin_transaction(_per_migration=True):
            online.set_timeouts()
            step()


def _offline(step) -> str:
    buf = io.StringIO()
    ctx = MigrationContext.configure(
        dialect_name="postgresql",
        opts={"as_sql": True, "output_buffer": buf, "transaction_per_migration": True},
    )
    with Operations.context(ctx), ctx.begin_transaction(_per_migration=True):
        online.set_timeouts()
        step()
    return buf.getvalue()


@pytest.fixture
def table(pg_url):
    name = f"online_{secrets.token_hex(3)}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id int PRIMARY KEY, v int, w int)")
        conn.execute(f"INSERT INTO {name} SELECT g, g, NULL FROM generate_series(1, 2500) g")
    yield name
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP TABLE {name}")


def _index_valid(url: str, name: str) -> bool | None:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(%s)", (name,)
        ).fetchone()
    return None if row is None else row[0]


def test_offline_sql_builds_the_index_outside_the_transaction():
    sql = _offline(lambda: online.create_index_concurrently("t_v", "t", "v", where="v > 0"))
    begin = sql.index("SET LOCAL lock_timeout = '500ms'")
    commit = sql.index("COMMIT;", begin)
    create = sql.index("CREATE INDEX CONCURRENTLY IF NOT EXISTS t_v ON t (v) WHERE v > 0;")
    assert begin < commit < sql.index("SET lock_timeout = '500ms'") < create
    assert sql.index("BEGIN;", create) < sql.rindex("SET LOCAL statement_timeout = '5min'")


def test_concurrent_index_replaces_an_invalid_one(pg_url, table):
    index = f"{table}_v"
    _run(pg_url, lambda: online.create_index_concurrently(index, table, "v"))
    assert _index_valid(pg_url, index) is True
    with psycopg.connect(pg_url, autocommit=True) as conn:  # what a failed build leaves
        conn.execute(
            "UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(%s)", (index,)
        )
    _run(pg_url, lambda: online.create_index_concurrently(index, table, "v"))
    assert _index_valid(pg_url, index) is True
    _run(pg_url, lambda: online.drop_index_concurrently(index))
    assert _index_valid(pg_url, index) is None


def test_backfill_fills_every_row_and_waits_out_a_locked_one(pg_url, table):
    holder = psycopg.connect(pg_url)
    holder.execute(f"SELECT 1 FROM {table} WHERE id = 7 FOR UPDATE")
    release = threading.Timer(1.0, holder.commit)
    release.start()
    started = time.monotonic()
    _run(pg_url, lambda: online.backfill(table, "w = v * 2", "w IS NULL", key="id", batch=300))
    release.join()
    holder.close()
    assert time.monotonic() - started >= 0.9  # it came back for the locked row
    with psycopg.connect(pg_url) as conn:
        assert conn.execute(f"SELECT count(*) FROM {table} WHERE w = v * 2").fetchone() == (2500,)


def test_insert_batched_copies_every_row_once(pg_url, table):
    target = f"{table}_copy"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {target} (id int PRIMARY KEY, v int)")
    try:
        copy = lambda: online.insert_batched(  # noqa: E731
            target, "id, v", f"SELECT id, v FROM {table}", key="id", batch=700
        )
        _run(pg_url, copy)
        _run(pg_url, copy)  # a re-run adds nothing
        with psycopg.connect(pg_url) as conn:
            assert conn.execute(f"SELECT count(*), sum(v) FROM {target}").fetchone() == (
                2500,
                2500 * 2501 // 2,
            )
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {target}")


def _alembic(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "alembic", *args],
        cwd=REPO_ROOT,
        env={
            **os.environ,
            "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
            "QM_MIGRATION_DATABASE_URL": url,
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def _migration_waited(url: str) -> bool:
    """Whether a migration session has waited on a lock and given up (it is gone or retrying)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'qm-migrate'"
            " AND wait_event_type = 'Lock'"
        ).fetchone()
    return bool(row and row[0])


def test_a_migration_that_times_out_on_a_lock_is_retried(pg_server_url):
    url = create_database(pg_server_url, f"qm_retry_{secrets.token_hex(4)}")
    assert _alembic(url, "upgrade", "0015").returncode == 0
    holder = psycopg.connect(url)
    holder.execute("LOCK TABLE alembic_version IN ACCESS EXCLUSIVE MODE")
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(_alembic, url, "upgrade", "head", QM_MIGRATION_LOCK_TIMEOUT="300ms")
        deadline = time.monotonic() + 60
        while not _migration_waited(url) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(1.0)  # at least one lock timeout and a retry
        holder.commit()
        result = future.result()
    holder.close()
    assert result.returncode == 0, result.stderr
    assert "waited longer than lock_timeout (300ms); retrying" in result.stdout
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT version_num FROM alembic_version").fetchone() == (
            CODE_REVISION,
        )


def test_lock_tables_in_order_and_statements_alone():
    sql = _offline(
        lambda: (
            online.lock_tables("pods", "qm_audit"),
            online.each_in_own_transaction(["CREATE OR REPLACE TRIGGER a ON b"]),
        )
    )
    lock = sql.index("LOCK TABLE pods, qm_audit IN SHARE ROW EXCLUSIVE MODE;")
    assert lock < sql.index("COMMIT;", lock) < sql.index("CREATE OR REPLACE TRIGGER a ON b;")
    assert "statement_timeout = 0" not in sql
    with pytest.raises(ValueError):
        online.lock_tables("pods; DROP TABLE x")


def test_a_concurrent_build_that_gives_way_is_retried(pg_url, table, monkeypatch, capsys):
    index = f"{table}_w"
    monkeypatch.setenv(online.LOCK_TIMEOUT_ENV, "200ms")
    holder = psycopg.connect(pg_url)
    holder.execute(f"LOCK TABLE {table} IN SHARE UPDATE EXCLUSIVE MODE")  # as a build would
    release = threading.Timer(1.0, holder.commit)
    release.start()
    _run(pg_url, lambda: online.create_index_concurrently(index, table, "w"))
    release.join()
    holder.close()
    assert _index_valid(pg_url, index) is True
    assert "waited longer than lock_timeout (200ms); retrying" in capsys.readouterr().out


PARTLY = """
from alembic import op
from migrations import online

revision = "p1"
down_revision = None


def upgrade():
    op.execute("CREATE TABLE IF NOT EXISTS partly_first (id int)")
    online.each_in_own_transaction(["CREATE TABLE IF NOT EXISTS partly_second (id int)"])
    op.execute("LOCK TABLE partly_held IN ACCESS EXCLUSIVE MODE")


def downgrade():
    pass
"""


def test_a_migration_that_fails_after_committing_part_of_itself_is_not_retried(
    pg_server_url, tmp_path
):
    url = create_database(pg_server_url, f"qm_partly_{secrets.token_hex(4)}")
    scripts = tmp_path / "scripts"
    (scripts / "versions").mkdir(parents=True)
    (scripts / "env.py").write_text((REPO_ROOT / "migrations" / "env.py").read_text())
    (scripts / "versions" / "p1_partly.py").write_text(PARTLY)
    ini = tmp_path / "alembic.ini"
    ini.write_text(f"[alembic]\nscript_location = {scripts}\nprepend_sys_path = {REPO_ROOT}\n")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE partly_held (id int)")
    holder = psycopg.connect(url)
    holder.execute("LOCK TABLE partly_held IN ACCESS EXCLUSIVE MODE")
    try:
        result = _alembic(url, "-c", str(ini), "upgrade", "head", QM_MIGRATION_LOCK_TIMEOUT="200ms")
    finally:
        holder.close()
    assert result.returncode != 0
    assert "migration p1 waited longer than lock_timeout (200ms) after committing" in result.stderr
    assert "retrying" not in result.stdout
    with psycopg.connect(url) as conn:
        tables = {
            r[0]
            for r in conn.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'partly%'")
        }
        assert tables == {"partly_first", "partly_second", "partly_held"}
        assert conn.execute("SELECT count(*) FROM alembic_version").fetchone() == (0,)
