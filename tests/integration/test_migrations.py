"""Alembic migrations as DBAs run them: down and up again with data in place, and emitted as
SQL. Checks that the pod derived-columns trigger (0004) computes what the triggers it replaced
computed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[2]
COLS = ("req_cpu_milli, req_memory_bytes, req_gpu, quota_cpu_milli, quota_memory_bytes,"
        " quota_gpu, quota_limit_cpu_milli, quota_limit_memory_bytes, quota_best_effort,"
        " quota_priority_class, quota_terminating, (bound_at IS NOT NULL)")  # fmt: skip


def alembic(url: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "alembic", *args], cwd=ROOT, check=True,
                          env={**os.environ, "DATABASE_URL": url}, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    return done.stdout


SPECS: list[dict[str, Any]] = [
    {"containers": [{"name": "a", "image": "x"}]},
    {"containers": [{"name": "a", "image": "x", "resources": {
        "requests": {"cpu": "250m", "memory": "1.5Gi", "nvidia.com/gpu": "1"},
        "limits": {"cpu": "1", "memory": "2Gi"}}},
        {"name": "b", "image": "x", "resources": {"requests": {"cpu": "0.5", "memory": "100M"}}}],
     "initContainers": [{"name": "i", "image": "x",
                         "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}],
     "priorityClassName": "batch", "activeDeadlineSeconds": 30, "nodeName": "n1"},
    {"containers": [{"name": "a", "image": "x", "resources": {"limits": {"memory": "1k"}}}],
     "initContainers": "not-a-list"},
]  # fmt: skip


def _insert_and_read(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    db.execute("DELETE FROM pods")
    for i, spec in enumerate(SPECS):
        db.execute("INSERT INTO pods (uid, namespace, name, spec) VALUES (%s, 'm', %s, %s)",
                   (uuid.uuid4(), f"p{i}", json.dumps(spec)))  # fmt: skip
    # An update that changes the containers recomputes; a bind sets bound_at.
    db.execute("UPDATE pods SET spec = jsonb_set(spec, '{containers,0,resources}',"
               " '{\"requests\": {\"cpu\": \"3\"}}') WHERE name = 'p0'")  # fmt: skip
    db.execute("UPDATE pods SET spec = spec || '{\"nodeName\": \"n2\"}' WHERE name = 'p2'")
    return db.execute(f"SELECT name, {COLS} FROM pods ORDER BY name").fetchall()


def test_down_and_up_again_with_the_same_derived_columns(make_database: Any) -> None:
    url = make_database("qm_migrations")
    with psycopg.connect(url, autocommit=True) as db:
        at_head = _insert_and_read(db)
    assert at_head[0][1] == 3000 and at_head[0][4] == 3000  # p0 after its update
    assert at_head[1][1:4] == (750, 1610612736 + 100_000_000, 1)
    assert at_head[1][4] == 2000  # the init container's cpu is the larger
    assert at_head[1][9:] == (False, "batch", True, True)
    assert at_head[2][8] == 1000 and at_head[2][9] is False  # a memory limit: not best effort
    assert at_head[2][12] is True  # bound by an update

    alembic(url, "downgrade", "0003")
    with psycopg.connect(url, autocommit=True) as db:
        before = _insert_and_read(db)
    alembic(url, "upgrade", "head")
    with psycopg.connect(url, autocommit=True) as db:
        again = _insert_and_read(db)
    assert before == at_head == again


def test_the_migrations_emit_as_sql_for_dbas(make_database: Any) -> None:
    url = make_database("qm_migrations_sql")
    sql = alembic(url, "upgrade", "0003:head", "--sql")
    assert "CREATE FUNCTION qm_pod_derived()" in sql
    assert "DROP TRIGGER pods_requests ON pods" in sql
