"""What a backup and a point-in-time restore cost, and how long the restore drill takes.

A fresh embedded PostgreSQL with a WAL archive and the migrations applied gets ``--objects``
ConfigMaps of ``--size`` bytes, half before the base backup and half after it (the WAL a
restore must replay); then the restore drill (``app.devstack.drill``) restores to a target
after the second half into a scratch directory, serves it with an API server and compares
every kind's count. Records each step's seconds, the backup's size and the WAL replayed.

    .venv/bin/python -m bench.backup.run [--objects 40000] [--size 512]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psycopg

from app.devstack import drill
from app.devstack.postgres import EmbeddedPostgres
from app.store.backup import take_backup, wait_archived
from bench.common import ROOT, write_result

NS = "bench-backup"
RESTORE_STEPS = ("copy", "replay_and_promote", "api_ready")
SEED = (
    "INSERT INTO configmaps (uid, namespace, name, spec)"
    " SELECT gen_random_uuid(), %s, %s || g, jsonb_build_object('data',"
    " jsonb_build_object('k', repeat('x', %s))) FROM generate_series(1, %s) g"
)


def _migrate(url: str) -> None:
    env = {**os.environ, "DATABASE_URL": url, "QM_MIGRATION_DATABASE_URL": url}
    argv = [sys.executable, "-m", "alembic", "upgrade", "head"]
    subprocess.run(argv, cwd=ROOT, env=env, check=True, capture_output=True)


def run(objects: int, size: int, base: Path) -> dict[str, Any]:
    source = EmbeddedPostgres(base / "source", wal_archive=base / "archive")
    try:
        url = source.start()
        _migrate(url)
        with psycopg.connect(url, autocommit=True) as db:
            db.execute(
                "INSERT INTO namespaces (uid, namespace, name, spec)"
                " VALUES (gen_random_uuid(), '', %s, '{}')",
                (NS,),
            )
            db.execute(SEED, (NS, "before-", size, objects // 2))
        started = time.monotonic()
        _, info = take_backup(url, base / "backups")
        backup_s = time.monotonic() - started
        with psycopg.connect(url, autocommit=True) as db:
            lsn = db.execute("SELECT pg_current_wal_lsn()").fetchone()
            db.execute(SEED, (NS, "after-", size, objects - objects // 2))
            row = db.execute(
                "SELECT clock_timestamp(), pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", lsn
            ).fetchone()
            assert row is not None
            target, wal = row
            db.execute(SEED, (NS, "late-", size, 1))  # a commit after the target
            wait_archived(db)
    finally:
        source.stop()
    report = drill.drill(base / "backups", base / "archive", target, base / "drill", base / "log")
    return {
        "objects": objects,
        "object_bytes": size,
        "backup_seconds": round(backup_s, 2),
        "backup_mib": round(info.bytes / 2**20, 1),
        "wal_replayed_mib": round(float(wal) / 2**20, 1),
        "drill_seconds": report.seconds,
        # until an API server serves the restored plane: copy, replay and promote, start
        "restore_seconds": round(sum(report.seconds.get(k, 0.0) for k in RESTORE_STEPS), 2),
        "configmaps": report.kinds["ConfigMap"],
        "ok": report.ok,
        "problems": report.problems,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--objects", type=int, default=40000)
    parser.add_argument("--size", type=int, default=512)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="qm-bench-backup-"))
    try:
        result = run(args.objects, args.size, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    path = write_result("backup", result)
    print(path)
    for key, value in result.items():
        print(f"  {key}: {value}")


if __name__ == "__main__":
    main()
