"""The embedded PostgreSQL and Redis servers behave as the dev stack and the tests rely on."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from app.devstack.postgres import EmbeddedPostgres
from app.devstack.redis import EmbeddedRedis
from app.devstack.supervise import pid_alive, port_is_free


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="qm-devstack-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def postgres(scratch: Path) -> Iterator[EmbeddedPostgres]:
    server = EmbeddedPostgres(scratch / "pg")
    server.start()
    yield server
    server.stop()


def _process_uid(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def test_url_points_at_loopback_tcp(postgres: EmbeddedPostgres) -> None:
    assert re.fullmatch(r"postgresql://postgres@127\.0\.0\.1:\d+/quaymaster", postgres.url)
    with psycopg.connect(postgres.url) as conn:
        row = conn.execute(
            "SELECT current_database(), current_user, inet_server_addr()::text,"
            " (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)"
        ).fetchone()
    assert row == ("quaymaster", "postgres", "127.0.0.1/32", True)


def test_server_runs_unprivileged(postgres: EmbeddedPostgres) -> None:
    pid = postgres.pid
    assert pid is not None
    uid = _process_uid(pid)
    if os.geteuid() == 0:
        assert uid != 0
        assert pwd.getpwuid(uid).pw_name in ("quaymaster", "nobody")
        assert (postgres.data_dir).stat().st_uid == uid
    else:
        assert uid == os.geteuid()


def test_settings(postgres: EmbeddedPostgres) -> None:
    expected = {
        "wal_level": "logical",
        "max_replication_slots": "20",
        "max_wal_senders": "20",
        "max_slot_wal_keep_size": "4GB",
        "wal_writer_delay": "10ms",
        "max_connections": "300",
        "shared_buffers": "256MB",
        "max_wal_size": "4GB",
        "fsync": "on",
        "listen_addresses": "127.0.0.1",
    }
    actual = {}
    with psycopg.connect(postgres.url) as conn:
        for name in expected:
            row = conn.execute(f"SHOW {name}").fetchone()
            assert row is not None
            actual[name] = row[0]
    assert actual == expected


def test_logical_replication_slot(postgres: EmbeddedPostgres) -> None:
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute("SELECT pg_create_logical_replication_slot('qm_devstack_t', 'pgoutput')")
        slots = conn.execute(
            "SELECT plugin, database FROM pg_replication_slots WHERE slot_name = 'qm_devstack_t'"
        ).fetchall()
        conn.execute("SELECT pg_drop_replication_slot('qm_devstack_t')")
    assert slots == [("pgoutput", "quaymaster")]


def test_replication_connection(postgres: EmbeddedPostgres) -> None:
    with psycopg.connect(postgres.url, autocommit=True, replication="database") as conn:
        cur = psycopg.ClientCursor(conn)  # the replication protocol takes simple queries only
        cur.execute("IDENTIFY_SYSTEM")
        row = cur.fetchone()
    assert row is not None
    assert row[3] == "quaymaster"


def test_logical_changes_stream_over_tcp(postgres: EmbeddedPostgres) -> None:
    """pg_recvlogical, from the same build, streams decoded changes over a replication link."""
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE devstack_stream (id int PRIMARY KEY, note text)")
        conn.execute("SELECT pg_create_logical_replication_slot('qm_devstack_s', 'test_decoding')")
        try:
            conn.execute("INSERT INTO devstack_stream VALUES (1, 'hello')")
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
            assert row is not None
            result = subprocess.run(
                [
                    str(postgres.bin_dir / "pg_recvlogical"),
                    "--dbname",
                    postgres.url,
                    "--slot",
                    "qm_devstack_s",
                    "--start",
                    "--endpos",
                    row[0],
                    "--no-loop",
                    "--file",
                    "-",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        finally:
            conn.execute("SELECT pg_drop_replication_slot('qm_devstack_s')")
            conn.execute("DROP TABLE devstack_stream")
    assert result.returncode == 0, result.stderr
    assert "table public.devstack_stream: INSERT: id[integer]:1 note[text]:'hello'" in result.stdout


def test_pgbench_is_available(postgres: EmbeddedPostgres) -> None:
    result = subprocess.run(
        [str(postgres.pgbench_path), "--version"], capture_output=True, text=True, check=True
    )
    assert "pgbench" in result.stdout


def test_restart_keeps_data_and_stop_ends_the_server(scratch: Path) -> None:
    server = EmbeddedPostgres(scratch / "pg-restart")
    url = server.start()
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE survives (v text)")
            conn.execute("INSERT INTO survives VALUES ('kept')")
        assert server.start() == url  # starting a running server adopts it
        first_pid = server.pid
        assert first_pid is not None
        port = server.port
        server.stop()
        assert not pid_alive(first_pid)
        assert server.pid is None
        assert port_is_free(port)

        again = EmbeddedPostgres(scratch / "pg-restart")
        url = again.start()
        assert again.pid not in (None, first_pid)
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT v FROM survives").fetchall() == [("kept",)]
        second_pid = again.pid
        assert second_pid is not None
        again.stop()
        assert not pid_alive(second_pid)
    finally:
        server.stop()


def test_redis_answers_ping_and_stops(scratch: Path) -> None:
    server = EmbeddedRedis(scratch / "redis")
    url = server.start()
    try:
        assert re.fullmatch(r"redis://127\.0\.0\.1:\d+/0", url)
        client = redis.Redis.from_url(url, decode_responses=True)
        assert client.ping() is True
        assert client.config_get("appendonly") == {"appendonly": "no"}
        client.close()
        pid = server.pid
        assert pid is not None
    finally:
        server.stop()
    assert not pid_alive(pid)
    assert server.pid is None
