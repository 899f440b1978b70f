"""Refused creates against a real PostgreSQL: the controller shells run in this process on a
worker ``Runtime``, and what they leave in the database is read back.

A ReplicaSet and a Job are refused by a real ResourceQuota. Quota admission counts only pods,
so a CronJob's Job is refused by the same ``Forbidden`` the quota raises, injected at the
store's create of Jobs: the applier cannot tell the two apart, which is the point.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from plane import NS
from test_job_controller import job_obj

from app.core.admission import admit
from app.core.controllers.plan import Outcome
from app.core.errors import Forbidden
from app.core.kinds import BY_KIND
from app.store.store import Store
from workers.controllers import cronjob, job, replicaset
from workers.outcome import settle
from workers.runtime import Runtime


@pytest.fixture
def db(make_database: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[psycopg.Connection[Any]]:
    url = make_database("qm_refuse")
    monkeypatch.setenv("DATABASE_URL", url)
    with psycopg.connect(url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def rt() -> Iterator[Runtime]:
    runtime = Runtime()
    yield runtime
    if runtime._pool is not None:
        runtime.run(runtime._pool.close())
    runtime.loop.close()


def insert(db: psycopg.Connection[Any], kind: str, obj: dict[str, Any], ago: float = 0) -> str:
    admitted = admit(BY_KIND[kind], obj, None)
    uid, meta = str(uuid.uuid4()), admitted["metadata"]
    db.execute(
        f"INSERT INTO {BY_KIND[kind].table} (uid, namespace, name, labels, spec,"
        " creation_timestamp) VALUES (%s, %s, %s, %s, %s, now() - make_interval(secs => %s))",
        (uid, NS, meta["name"], json.dumps(meta.get("labels") or {}),
         json.dumps(admitted["spec"]), ago),
    )  # fmt: skip
    return uid


def quota(db: psycopg.Connection[Any], pods: int) -> None:
    insert(db, "ResourceQuota", {"kind": "ResourceQuota", "metadata": {"name": "q",
           "namespace": NS}, "spec": {"hard": {"pods": str(pods)}}})  # fmt: skip


def events(db: psycopg.Connection[Any], uid: str) -> dict[str, str]:
    rows = db.execute("SELECT reason, spec->>'message' FROM events WHERE involved_uid = %s", (uid,))
    return {r[0]: r[1] for r in rows.fetchall()}


def children(db: psycopg.Connection[Any], table: str, uid: str) -> int:
    row = db.execute(
        f"SELECT count(*) FROM {table} WHERE owner_references @> %s::jsonb",
        (json.dumps([{"uid": uid}]),),
    ).fetchone()
    return int(row[0]) if row else 0


def status(db: psycopg.Connection[Any], table: str, uid: str) -> dict[str, Any]:
    row = db.execute(f"SELECT status FROM {table} WHERE uid = %s", (uid,)).fetchone()
    return dict(row[0]) if row and row[0] else {}


def test_a_replicaset_refused_by_a_quota_tells_what_it_made_and_retries(
    db: psycopg.Connection[Any], rt: Runtime
) -> None:
    quota(db, 1)
    template = {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip
    uid = insert(db, "ReplicaSet", {"kind": "ReplicaSet", "metadata": {"name": "web",
                 "namespace": NS}, "spec": {"replicas": 3, "selector": {"matchLabels":
                 {"app": "web"}}, "template": template}})  # fmt: skip
    out = rt.run(replicaset.reconcile_key(rt, NS, "web", time.time()))
    assert children(db, "pods", uid) == 1  # the half that fitted
    told = events(db, uid)
    assert "exceeded quota" in told["FailedCreate"]
    assert told["SuccessfulCreate"] == "Created 1 of 3 pods"  # not "Created 3 pod(s)"
    # The status tells what the reconcile observed, never the pods it was refused.
    assert status(db, "replicasets", uid)["replicas"] == 0
    assert settle("ReplicaSet", "web", out, 0.0).retry == pytest.approx(5.0)
    rt.run(replicaset.reconcile_key(rt, NS, "web", time.time()))  # the retry: refused again
    assert children(db, "pods", uid) == 1
    assert status(db, "replicasets", uid)["replicas"] == 1


def test_a_job_refused_by_a_quota_keeps_its_counts_and_retries(
    db: psycopg.Connection[Any], rt: Runtime
) -> None:
    quota(db, 0)
    uid = insert(db, "Job", job_obj("batch", parallelism=4, completions=4))
    out = rt.run(job.reconcile_key(rt, NS, "batch", time.time()))
    assert children(db, "pods", uid) == 0
    told = events(db, uid)
    assert "FailedCreate" in told and "SuccessfulCreate" not in told
    assert status(db, "jobs", uid).get("active") is None  # the counts assumed the pods
    assert out.result == "refused" and out.retry_after == pytest.approx(5.0)
    db.execute("DELETE FROM resourcequotas")  # room again: the retry makes all four
    out = rt.run(job.reconcile_key(rt, NS, "batch", time.time()))
    assert out.ok and children(db, "pods", uid) == 4
    assert status(db, "jobs", uid)["active"] == 4


def test_a_cronjob_run_refused_is_not_lost(
    db: psycopg.Connection[Any], rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = job_obj("tick")["spec"]
    template["parallelism"] = 0
    uid = insert(db, "CronJob", {"apiVersion": "quaymaster.io/v1", "kind": "CronJob",
                 "metadata": {"name": "tick", "namespace": NS}, "spec": {"schedule":
                 "* * * * *", "startingDeadlineSeconds": 300, "jobTemplate":
                 {"spec": template}}}, ago=120)  # fmt: skip
    real = Store.create_many

    async def refusing(self: Store, kind: Any, objs: list[dict[str, Any]], ctx: Any = None) -> Any:
        if kind.kind == "Job":
            raise Forbidden("exceeded quota: q, requested: count/jobs=1", kind="jobs")
        return await real(self, kind, objs, ctx)

    monkeypatch.setattr(Store, "create_many", refusing)
    out = rt.run(cronjob.reconcile_key(rt, NS, "tick", time.time()))
    assert children(db, "jobs", uid) == 0
    told = events(db, uid)
    assert "exceeded quota" in told.get("FailedCreate", "")
    assert "SuccessfulCreate" not in told  # no Event for a Job that does not exist
    assert "lastScheduleTime" not in status(db, "cronjobs", uid)  # the run is still due
    step = settle("CronJob", "tick", out, 0.0)
    assert step.retry is not None and step.retry <= 5.0  # not the next minute's run
    monkeypatch.setattr(Store, "create_many", real)
    out = rt.run(cronjob.reconcile_key(rt, NS, "tick", time.time()))
    assert isinstance(out, Outcome) and out.ok
    (name,) = [r[0] for r in db.execute("SELECT name FROM jobs").fetchall()]
    assert status(db, "cronjobs", uid)["lastScheduleTime"]
    assert "SuccessfulCreate" in events(db, uid) and name.startswith("tick-")
