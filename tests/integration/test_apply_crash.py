"""A worker killed in the middle of applying a plan leaves no extra children, for every kind of
child a controller creates: Pods of a ReplicaSet, ReplicaSets of a Deployment, Pods of a Job
(created in parallel chunks that each commit on their own) and Jobs of a CronJob.

The worst point is made to happen on purpose: a test trigger holds the child table's insert
statements (after their rows are written, before they commit) on an advisory lock this test
holds; the first ``allowed`` statements pass. The worker (a solo pool, so the task runs in the
process killed) is killed with SIGKILL while its statements wait there, so they are still
running in the database. A second worker reconciles the key; then the lock is released, and
the dead worker's statements commit after all. Exactly the wanted number of children must
exist once everything settled.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from celery import Celery
from plane import NS, Plane
from test_controller_runtime import _deployment
from test_job_controller import _cronjob, _insert, job_obj

HOLD = 4242


def _worker(plane: Plane) -> Any:
    return plane.start(
        "-m", "celery", "-A", "workers.app", "worker", "--loglevel=WARNING", "--pool=solo",
        "--without-gossip", "--without-mingle",
    )  # fmt: skip


def _hold_inserts(plane: Plane, table: str, allowed: int) -> None:
    plane.db.execute("CREATE SEQUENCE qm_test_inserts")
    plane.db.execute(
        f"""CREATE FUNCTION qm_test_hold() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF nextval('qm_test_inserts') > {allowed} THEN
            PERFORM pg_advisory_xact_lock_shared({HOLD});
          END IF;
          RETURN NULL;
        END $$"""
    )
    plane.db.execute(
        f"CREATE TRIGGER qm_test_hold AFTER INSERT ON {table}"
        " FOR EACH STATEMENT EXECUTE FUNCTION qm_test_hold()"
    )
    plane.db.execute("SELECT pg_advisory_lock(%s)", (HOLD,))


def _waiting(plane: Plane) -> int:
    row = plane.db.execute("SELECT count(DISTINCT pid) FROM pg_locks WHERE NOT granted").fetchone()
    return int(row[0]) if row else 0


def _reconcile(plane: Plane, kind: str, name: str) -> None:
    from workers.app import queue_for

    sender = Celery(broker=plane.env["QM_BROKER_URL"])
    sender.send_task("workers.tasks.reconcile", (kind, NS, name), queue=queue_for(kind, NS, name))


def _children(plane: Plane, table: str, uid: str) -> int:
    row = plane.db.execute(  # deleted ones too: an extra child deleted later still ran
        f"SELECT count(*) FROM {table} WHERE owner_references @> %s::jsonb",
        (json.dumps([{"uid": uid}]),),
    ).fetchone()
    return int(row[0]) if row else 0


def _crash_mid_apply(plane: Plane, kind: str, name: str, held: int) -> None:
    """Reconcile ``kind/name`` until ``held`` insert statements wait on the hold, kill the
    worker, let a second worker reconcile the key until it waits too (on the apply lock, or on
    the hold), then release the hold."""
    first = _worker(plane)
    _reconcile(plane, kind, name)
    plane.wait(lambda: _waiting(plane) >= held, what=f"{held} insert(s) held")
    first.kill()
    first.wait()
    _worker(plane)
    _reconcile(plane, kind, name)
    plane.wait(lambda: _waiting(plane) >= held + 1, what="the second reconcile waiting")
    plane.db.execute("SELECT pg_advisory_unlock(%s)", (HOLD,))
    plane.wait(lambda: _waiting(plane) == 0, what="every statement ended")
    _reconcile(plane, kind, name)  # and once more, on the state as it settled
    time.sleep(3.0)


@pytest.mark.parametrize("allowed", [0, 1], ids=["every-chunk-held", "one-chunk-committed"])
def test_pods_of_a_job(plane: Plane, allowed: int) -> None:
    plane.env["QM_JOB_CREATE_BATCH"] = "900"  # three chunks of 300
    _hold_inserts(plane, "pods", allowed)
    uid = _insert(plane, "Job", job_obj("work", parallelism=900, completions=900))
    _crash_mid_apply(plane, "Job", "work", held=3 - allowed)
    assert _children(plane, "pods", uid) == 900


def test_pods_of_a_replicaset(plane: Plane) -> None:
    _hold_inserts(plane, "pods", 0)
    uid = plane.replicaset("web", 5)
    _crash_mid_apply(plane, "ReplicaSet", "web", held=1)
    assert _children(plane, "pods", uid) == 5


def test_replicasets_of_a_deployment(plane: Plane) -> None:
    _hold_inserts(plane, "replicasets", 0)
    uid = _deployment(plane, "front", "web:v1", replicas=2)
    _crash_mid_apply(plane, "Deployment", "front", held=1)
    assert _children(plane, "replicasets", uid) == 1


def test_jobs_of_a_cronjob(plane: Plane) -> None:
    _hold_inserts(plane, "jobs", 0)
    uid = _cronjob(plane, "tick", created_ago=120, startingDeadlineSeconds=300)
    _crash_mid_apply(plane, "CronJob", "tick", held=1)
    assert _children(plane, "jobs", uid) == 1
