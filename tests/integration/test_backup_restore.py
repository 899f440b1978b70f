"""The backup drill: a base backup plus the WAL archive restore the control plane to a point in
time, in a fresh embedded PostgreSQL, and an API server started on it serves exactly what was
committed before that point (ADR 0058)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from app.cli.main import main
from app.devstack import drill
from app.devstack.apiserver import ApiServer
from app.devstack.postgres import EmbeddedPostgres
from app.devstack.supervise import free_port
from app.store.backup import (
    BackupInfo,
    archive_reaches,
    choose_backup,
    list_backups,
    prepare_restore,
    take_backup,
    wait_archived,
)

ROOT = Path(__file__).resolve().parents[2]
API = "/apis/quaymaster.io/v1"
NS = "drill"


@pytest.fixture
def scratch() -> Iterator[Path]:
    # Not tmp_path: the server runs as an unprivileged user that must reach these directories.
    base = Path(tempfile.mkdtemp(prefix="qm-backup-"))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _migrate(url: str) -> None:
    env = {**os.environ, "DATABASE_URL": url, "QM_MIGRATION_DATABASE_URL": url}
    subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )


def _api(url: str, redis_url: str, token: str, log: Path) -> ApiServer:
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "QM_STREAM_DATABASE_URL": url,
        "QM_BROKER_URL": redis_url,
        "QM_BOOTSTRAP_TOKEN": token,
        "QM_API_PORT": str(port),
        "QM_API_URL": f"http://127.0.0.1:{port}",
        "PYTHONUNBUFFERED": "1",
    }
    server = ApiServer(port, token, env, log, cwd=ROOT)
    server.start(timeout=60.0)
    return server


def _create(c: httpx.Client, names: list[str]) -> None:
    for name in names:
        body = {"metadata": {"name": name}, "data": {"name": name}}
        r = c.post(f"{API}/namespaces/{NS}/configmaps", json=body)
        assert r.status_code == 201, r.text


def _names(c: httpx.Client) -> set[str]:
    r = c.get(f"{API}/namespaces/{NS}/configmaps")
    assert r.status_code == 200, r.text
    return {item["metadata"]["name"] for item in r.json()["items"]}


def _metrics(c: httpx.Client) -> dict[str, float]:
    text = c.get("/metrics").text
    pairs = (line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("qm_wal_"))
    return {name: float(value) for name, value in pairs}


def _segments(archive: Path) -> list[str]:
    return sorted(p.name for p in archive.iterdir() if len(p.name) == 24)


def _qm(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    capsys.readouterr()
    assert main(list(argv)) == 0, capsys.readouterr().err
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def _server_now(url: str) -> datetime:
    with psycopg.connect(url, autocommit=True) as db:
        row = db.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    value: datetime = row[0]
    return value


@pytest.mark.slow
def test_restore_to_a_point_in_time_serves_what_committed_before_it_and_nothing_after(
    scratch: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    archive, backups = scratch / "archive", scratch / "backups"
    source = EmbeddedPostgres(scratch / "source", fsync=False, wal_archive=archive)
    restored = EmbeddedPostgres(scratch / "restored", fsync=False)
    token = secrets.token_urlsafe(24)
    servers: list[ApiServer] = []
    try:
        url = source.start()
        _migrate(url)
        servers.append(_api(url, redis_url, token, scratch / "source-api.log"))
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=servers[0].url, headers=auth, timeout=30) as c:
            r = c.post(f"{API}/namespaces", json={"metadata": {"name": NS}})
            assert r.status_code == 201, r.text
            before_backup = [f"before-backup-{i}" for i in range(3)]
            _create(c, before_backup)
            taken = _qm(capsys, "db", "backup", "--url", url, "--dir", str(backups), "-o", "json")
            assert taken["verified"] and taken["archive"] == str(archive)
            assert taken["schema_revision"]  # the schema the backup holds is named
            before_target = [f"before-target-{i}" for i in range(3)]
            _create(c, before_target)
            target = _server_now(url)
            after_target = [f"after-target-{i}" for i in range(3)]
            _create(c, after_target)
            assert _names(c) == {*before_backup, *before_target, *after_target}
            metrics = _metrics(c)
            assert metrics["qm_wal_archive_enabled"] == 1 and metrics["qm_wal_archive_failing"] == 0
            assert metrics["qm_wal_archive_archived_total"] >= 1
        with psycopg.connect(url, autocommit=True) as db:
            wait_archived(db)  # the archive now holds a commit after the target
        servers.pop().stop()
        source.stop()  # the restore needs nothing of the source but its files

        assert choose_backup(backups, target) == Path(taken["path"])
        restore = ["db", "restore", "--from", str(backups), "--archive", str(archive)]
        into = ["--into", str(restored.data_dir)]
        assert main([*restore, "--target-time", target.isoformat(), *into]) == 0
        restored_url = restored.start()  # replays to the target and promotes first
        with psycopg.connect(restored_url, autocommit=True) as db:
            assert db.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
            assert db.execute("SHOW archive_mode").fetchone() == ("off",)  # not the source's
            assert db.execute("SELECT count(*) FROM pg_replication_slots").fetchone() == (0,)
        # The recovery settings are cleared, so no later start replays anything again.
        assert "recovery_target" not in (restored.data_dir / "postgresql.auto.conf").read_text()

        servers.append(_api(restored_url, redis_url, token, scratch / "restored-api.log"))
        with httpx.Client(base_url=servers[0].url, headers=auth, timeout=30) as c:
            assert _names(c) == {*before_backup, *before_target}
            r = c.get(f"{API}/namespaces/{NS}/configmaps/before-target-2")
            assert r.status_code == 200 and r.json()["data"] == {"name": "before-target-2"}
            assert c.get(f"{API}/namespaces/{NS}/configmaps/after-target-0").status_code == 404
            assert _metrics(c)["qm_wal_archive_enabled"] == 0
            # The restored plane takes writes: it is a control plane, not a read-only copy.
            _create(c, ["after-restore"])
            assert "after-restore" in _names(c)  # through the restored plane's own stream
        # The change history was restored to the same point, and its chain still verifies.
        with psycopg.connect(restored_url, autocommit=True) as db:
            logged = db.execute(
                "SELECT name FROM qm_history"
                " WHERE table_name = 'configmaps' AND namespace = %s AND op = 'insert'",
                (NS,),
            ).fetchall()
        assert {name for (name,) in logged} == {*before_backup, *before_target, "after-restore"}
        assert main(["audit", "verify", "--url", restored_url, "--seal"]) == 0

        # The operator's drill finds the same, on a restore of its own.
        capsys.readouterr()
        assert drill.main([*restore[2:], "--target-time", target.isoformat()]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["kinds"]["ConfigMap"] == {"stored": 6, "served": 6}
        assert report["history"] == "intact" and report["backup"] == taken["path"]
    finally:
        for server in servers:
            server.stop()
        restored.stop()
        source.stop()


def test_pruning_keeps_what_the_newest_backup_needs_to_replay_the_whole_archive(
    scratch: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive, backups = scratch / "archive", scratch / "backups"
    source = EmbeddedPostgres(scratch / "source", fsync=False, wal_archive=archive)
    restored = EmbeddedPostgres(scratch / "restored", fsync=False)
    try:
        url = source.start()
        early = _server_now(url)
        first, _ = take_backup(url, backups)
        before = _segments(archive)
        taken = _qm(capsys, "db", "backup", "--url", url, "--dir", str(backups), "--keep", "1",
                    "-o", "json")  # fmt: skip
        second, start = Path(taken["path"]), taken["start_wal_file"]
        assert taken["pruned"] == [str(first)] and not first.exists()
        assert [p for p, _ in list_backups(backups)] == [second]
        left = _segments(archive)  # WAL segments; the small .backup history files stay
        assert min(left) == start and not set(before) & set(left)  # only the first one's: gone
        written = _server_now(url)
        with psycopg.connect(url, autocommit=True) as db:
            db.execute("CREATE TABLE written_after (x int)")
            wait_archived(db)
        source.stop()

        into = ["--into", str(restored.data_dir), "--archive", str(archive)]
        assert main(["db", "restore", "--from", str(backups), "--target-time", early.isoformat(),
                     *into]) == 1  # fmt: skip
        assert not restored.data_dir.exists()  # refused before anything was copied
        reached = archive_reaches(archive, BackupInfo.read(second))
        assert reached is not None and written < reached < datetime.now(UTC)
        beyond = reached + timedelta(microseconds=1)  # nothing archived ends after it
        assert main(["db", "restore", "--from", str(backups), "--target-time", beyond.isoformat(),
                     *into]) == 1  # fmt: skip
        assert "nothing in it comes after" in capsys.readouterr().err
        assert not restored.data_dir.exists()
        # Laid out anyway, PostgreSQL stops rather than promote short of the target, and the
        # start says why (from pg_ctl or from the wait for the promotion, whichever sees it).
        prepare_restore(second, restored.data_dir, archive=archive, target=beyond)
        with pytest.raises(RuntimeError, match="recovery ended before configured recovery target"):
            restored.start()
        shutil.rmtree(restored.data_dir)
        assert main(["db", "restore", "--from", str(backups), *into]) == 0  # to the archive's end
        with psycopg.connect(restored.start(), autocommit=True) as db:
            found = db.execute("SELECT to_regclass('written_after')::text").fetchone()
            assert found == ("written_after",)
            assert db.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)
    finally:
        restored.stop()
        source.stop()
