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
    assert "CREATE OR REPLACE FUNCTION qm_quantity(v text)" in sql  # 0006
    assert "SELECT qm_recount_allocations()" in sql


REPAIRED_POD = ("priority, req_cpu_milli, req_memory_bytes, quota_cpu_milli, quota_memory_bytes,"
                " quota_limit_cpu_milli")  # fmt: skip
REPAIRED_NODE = "alloc_cpu_milli, alloc_memory_bytes, alloc_pods, batch_cpu_milli"


def _quantity_rows(db: psycopg.Connection[Any], suffix: str) -> None:
    """A node and a pod bound to it whose amounts 0001's grammar misread, and one it read."""
    status = {"allocatable": {"cpu": "8.", "memory": "16.Gi", "pods": "1k"},
              "batchAllocatable": {"cpu": "4."}}  # fmt: skip
    db.execute("INSERT INTO nodes (uid, name, status) VALUES (%s, %s, %s)",
               (uuid.uuid4(), f"odd{suffix}", json.dumps(status)))  # fmt: skip
    plain = {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}
    db.execute("INSERT INTO nodes (uid, name, status) VALUES (%s, %s, %s)",
               (uuid.uuid4(), f"plain{suffix}", json.dumps(plain)))  # fmt: skip
    resources = {"requests": {"cpu": "1.", "memory": "1.Gi"}, "limits": {"cpu": "2."}}
    odd = {"nodeName": f"odd{suffix}", "priority": 2000000000,
           "containers": [{"name": "a", "image": "x", "resources": resources}]}  # fmt: skip
    one = {"requests": {"cpu": "1"}}
    fine = {"nodeName": f"plain{suffix}", "priority": 10,
            "containers": [{"name": "a", "image": "x", "resources": one}]}  # fmt: skip
    for name, spec in ((f"odd{suffix}", odd), (f"plain{suffix}", fine)):
        db.execute("INSERT INTO pods (uid, namespace, name, spec) VALUES (%s, 'm', %s, %s)",
                   (uuid.uuid4(), name, json.dumps(spec)))  # fmt: skip


def _read(db: psycopg.Connection[Any], suffix: str) -> dict[str, tuple[Any, ...]]:
    rows = db.execute(f"SELECT name, {REPAIRED_POD}, row_version FROM pods WHERE name LIKE %s",
                      (f"%{suffix}",)).fetchall()  # fmt: skip
    rows += db.execute(
        f"SELECT 'node-' || n.name, {REPAIRED_NODE}, a.cpu_milli, a.memory_bytes, n.row_version"
        " FROM nodes AS n JOIN nodes_allocated AS a ON a.node_uid = n.uid WHERE n.name LIKE %s",
        (f"%{suffix}",),
    ).fetchall()
    return {r[0].removesuffix(suffix): tuple(r[1:]) for r in rows}


def test_rows_stored_by_the_old_quantity_grammar_are_repaired(make_database: Any) -> None:
    url = make_database("qm_quantity_repair")
    alembic(url, "downgrade", "0005")
    with psycopg.connect(url, autocommit=True) as db:
        _quantity_rows(db, "-old")
        old = _read(db, "-old")
    assert old["odd"][:6] == (None, 0, 0, 0, 0, 0)  # 0001 misread all of them
    assert old["node-odd"][:6] == (None, None, None, None, 0, 0)
    alembic(url, "upgrade", "head")
    with psycopg.connect(url, autocommit=True) as db:
        repaired = _read(db, "-old")
        _quantity_rows(db, "-new")  # what the functions compute for a row written now
        fresh = _read(db, "-new")
        assert db.execute("SELECT qm_recount_allocations()").fetchone() == (0,)
    assert repaired["odd"][:6] == (2000000000, 1000, 2**30, 1000, 2**30, 2000)
    assert repaired["node-odd"][:6] == (8000, 16 * 2**30, 1000, 4000, 1000, 2**30)
    assert {k: v[:-1] for k, v in repaired.items()} == {k: v[:-1] for k, v in fresh.items()}
    # Rows the old grammar read correctly are left alone.
    assert repaired["plain"] == old["plain"] and repaired["node-plain"] == old["node-plain"]
    assert repaired["odd"][-1] != old["odd"][-1]
