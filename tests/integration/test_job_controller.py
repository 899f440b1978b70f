"""The Job and CronJob controllers end to end: real PostgreSQL and revisioner, real Redis, a real
Celery worker and the dispatcher. There is no node agent: the tests play it (and the scheduler)
by writing pod status and ``spec.nodeName`` with SQL.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import pytest
from plane import NS, Plane, start_worker

from app.core.admission import admit
from app.core.kinds import BY_KIND

ACTIVE = "deletion_timestamp IS NULL AND coalesce(phase, '') NOT IN ('Succeeded', 'Failed')"


def _insert(plane: Plane, kind: str, obj: dict[str, Any], created_ago: float = 0.0) -> str:
    admitted = admit(BY_KIND[kind], obj, None)
    uid = str(uuid.uuid4())
    meta = admitted["metadata"]
    plane.db.execute(
        f"INSERT INTO {BY_KIND[kind].table} (uid, namespace, name, labels, owner_references,"
        " spec, creation_timestamp) VALUES (%s, %s, %s, %s, %s, %s,"
        " now() - make_interval(secs => %s))",
        (uid, NS, meta["name"], json.dumps(meta.get("labels") or {}),
         json.dumps(meta.get("ownerReferences") or []), json.dumps(admitted["spec"]),
         created_ago),
    )  # fmt: skip
    return uid


def job_obj(name: str, **spec: Any) -> dict[str, Any]:
    template = {
        "metadata": {"labels": {"app": name}},
        "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]},
    }
    meta = {"name": name, "namespace": NS}
    return {"apiVersion": "quaymaster.io/v1", "kind": "Job", "metadata": meta,
            "spec": {"template": template, **spec}}  # fmt: skip


def start(plane: Plane, **env: str) -> None:
    plane.env.update(env)
    start_worker(plane)
    plane.start("-m", "workers.dispatch")


def count(plane: Plane, uid: str, where: str = "true") -> int:
    row = plane.db.execute(
        f"SELECT count(*) FROM pods WHERE owner_references @> %s::jsonb AND {where}",
        (json.dumps([{"uid": uid}]),),
    ).fetchone()
    return int(row[0]) if row else 0


def finish(plane: Plane, uid: str, phase: str, n: int, disrupted: bool = False) -> list[str]:
    """The node agent: ``n`` active pods of the Job end in ``phase``."""
    conditions = [{"type": "DisruptionTarget", "status": "True",
                   "reason": "PreemptionByScheduler"}] if disrupted else []  # fmt: skip
    rows = plane.db.execute(
        f"UPDATE pods SET status = %s WHERE uid IN (SELECT uid FROM pods WHERE"
        f" owner_references @> %s::jsonb AND {ACTIVE} ORDER BY name LIMIT %s) RETURNING name",
        (json.dumps({"phase": phase, "conditions": conditions}),
         json.dumps([{"uid": uid}]), n),
    ).fetchall()  # fmt: skip
    return [r[0] for r in rows]


def status(plane: Plane, table: str, uid: str) -> dict[str, Any]:
    row = plane.db.execute(f"SELECT status FROM {table} WHERE uid = %s", (uid,)).fetchone()
    return dict(row[0]) if row and row[0] else {}


def condition(st: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in st.get("conditions") or [] if c.get("type") == kind), None)


def reasons(plane: Plane, uid: str) -> set[str]:
    rows = plane.db.execute("SELECT reason FROM events WHERE involved_uid = %s", (uid,))
    return {r[0] for r in rows.fetchall()}


def test_a_job_runs_its_completions_two_at_a_time_to_complete(plane: Plane) -> None:
    start(plane)
    uid = _insert(plane, "Job", job_obj("work", completions=5, parallelism=2))
    for done in range(1, 6):
        want = min(2, 6 - done)
        plane.wait(lambda w=want: count(plane, uid, ACTIVE) == w, what="active pods")
        assert count(plane, uid, ACTIVE) <= 2
        finish(plane, uid, "Succeeded", 1)
    plane.wait(lambda: condition(status(plane, "jobs", uid), "Complete") is not None,
               what="Complete")  # fmt: skip
    st = status(plane, "jobs", uid)
    assert (st["succeeded"], st["active"], st["failed"]) == (5, 0, 0)
    assert st["startTime"] <= st["completionTime"]
    time.sleep(2.5)  # a resync later the finished Job still created nothing
    assert count(plane, uid) == 5
    labels = plane.db.execute(
        "SELECT labels FROM pods WHERE owner_references @> %s::jsonb LIMIT 1",
        (json.dumps([{"uid": uid}]),),
    ).fetchone()[0]  # type: ignore[index]
    assert labels == {"app": "work", "job-name": "work", "controller-uid": uid}
    assert {"SuccessfulCreate", "Completed"} <= reasons(plane, uid)


def test_failed_pods_exhaust_the_backoff_limit_but_disrupted_ones_do_not(plane: Plane) -> None:
    start(plane)
    uid = _insert(plane, "Job", job_obj("flaky", completions=1, backoffLimit=1))
    plane.wait(lambda: count(plane, uid, ACTIVE) == 1, what="a pod")
    for n in range(3):  # preempted, evicted: replaced, never counted
        finish(plane, uid, "Failed", 1, disrupted=True)
        plane.wait(lambda n=n: count(plane, uid) == n + 2 and count(plane, uid, ACTIVE) == 1,
                   what="a replacement for a disrupted pod")  # fmt: skip
    victim = plane.db.execute(
        f"SELECT name FROM pods WHERE owner_references @> %s::jsonb AND {ACTIVE}",
        (json.dumps([{"uid": uid}]),),
    ).fetchone()[0]  # type: ignore[index]
    plane.db.execute("DELETE FROM pods WHERE namespace = %s AND name = %s", (NS, victim))
    plane.wait(lambda: count(plane, uid, ACTIVE) == 1, what="a replacement for a deleted pod")
    st = status(plane, "jobs", uid)
    assert st.get("failed", 0) == 0 and condition(st, "Failed") is None
    finish(plane, uid, "Failed", 1)  # failures of its own: the first is retried ...
    plane.wait(lambda: status(plane, "jobs", uid).get("failed") == 1
               and count(plane, uid, ACTIVE) == 1, what="a retry")  # fmt: skip
    finish(plane, uid, "Failed", 1)  # ... the second passes backoffLimit 1
    plane.wait(lambda: condition(status(plane, "jobs", uid), "Failed") is not None, what="Failed")
    failed = condition(status(plane, "jobs", uid), "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    time.sleep(2.5)
    assert count(plane, uid, ACTIVE) == 0
    assert "BackoffLimitExceeded" in reasons(plane, uid)


def test_an_active_deadline_deletes_the_pods_and_fails_the_job(plane: Plane) -> None:
    start(plane)
    uid = _insert(plane, "Job", job_obj("slow", completions=3, parallelism=3,
                                        activeDeadlineSeconds=3))  # fmt: skip
    plane.wait(lambda: count(plane, uid, ACTIVE) == 3, what="3 pods")
    plane.wait(lambda: condition(status(plane, "jobs", uid), "Failed") is not None,
               timeout=20, what="DeadlineExceeded")  # fmt: skip
    assert condition(status(plane, "jobs", uid), "Failed")["reason"] == "DeadlineExceeded"  # type: ignore[index]
    plane.wait(lambda: count(plane, uid, ACTIVE) == 0, what="pods deleted")


@pytest.mark.slow
def test_a_20000_task_job_is_paced_by_the_unbound_window(plane: Plane) -> None:
    batch, window, tasks = 1000, 2000, 20_000
    start(plane, QM_JOB_CREATE_BATCH=str(batch), QM_JOB_PENDING_WINDOW=str(window))
    uid = _insert(plane, "Job", job_obj("big", completions=tasks, parallelism=tasks))
    stop, worst = threading.Event(), [0]

    def sample() -> None:  # watch the unbound count as often as possible
        import psycopg

        with psycopg.connect(plane.url, autocommit=True) as db:
            while not stop.is_set():
                row = db.execute(
                    "SELECT count(*) FROM pods WHERE node_name IS NULL AND deletion_timestamp"
                    " IS NULL AND owner_references @> %s::jsonb", (json.dumps([{"uid": uid}]),)
                ).fetchone()  # fmt: skip
                worst[0] = max(worst[0], int(row[0]) if row else 0)
                time.sleep(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # No scheduler yet: creation stops once the window is full, and stays stopped.
    plane.wait(lambda: count(plane, uid) >= window, what="a full window")
    time.sleep(2.0)
    held = count(plane, uid)
    assert window <= held <= window + batch - 1
    time.sleep(1.0)
    assert count(plane, uid) == held
    deadline = time.monotonic() + 120
    try:
        while count(plane, uid) < tasks or count(plane, uid, "node_name IS NULL") > 0:
            assert time.monotonic() < deadline, f"{count(plane, uid)} pods after 120 s"
            time.sleep(0.3)  # the scheduler, slower than the controller: 1,500 binds a turn
            plane.db.execute(
                "UPDATE pods SET spec = jsonb_set(spec, '{nodeName}', '\"n1\"') WHERE uid IN"
                " (SELECT uid FROM pods WHERE node_name IS NULL LIMIT 1500)"
            )
    finally:
        stop.set()
        sampler.join()
    assert count(plane, uid) == tasks
    assert worst[0] <= window + batch - 1, worst[0]
    plane.wait(lambda: status(plane, "jobs", uid).get("active") == tasks, what="status")


def _cronjob(plane: Plane, name: str, created_ago: float, **spec: Any) -> str:
    template = job_obj(name)["spec"]
    template["parallelism"] = 0  # no pods needed: the test finishes the Jobs itself
    obj = {"apiVersion": "quaymaster.io/v1", "kind": "CronJob",
           "metadata": {"name": name, "namespace": NS},
           "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": template},
                    **spec}}  # fmt: skip
    return _insert(plane, "CronJob", obj, created_ago)


def jobs_of(plane: Plane, uid: str) -> list[tuple[str, str]]:
    rows = plane.db.execute(
        "SELECT name, annotations->>'quaymaster.io/scheduled-at' FROM jobs"
        " WHERE owner_references @> %s::jsonb ORDER BY name",
        (json.dumps([{"uid": uid}]),),
    )
    return [(r[0], r[1]) for r in rows.fetchall()]


def test_a_cronjob_starts_the_latest_missed_run_once_under_its_deterministic_name(
    plane: Plane,
) -> None:
    start(plane)
    uid = _cronjob(plane, "tick", created_ago=600, startingDeadlineSeconds=300)
    plane.wait(lambda: len(jobs_of(plane, uid)) >= 1, what="a Job")
    now = time.time()
    (name, scheduled), *rest = jobs_of(plane, uid)
    minute = int(now // 60)
    assert name in (f"tick-{minute}", f"tick-{minute - 1}")  # the latest run, not 10 missed
    assert scheduled is not None and scheduled.endswith(":00Z")
    assert not rest or rest[0][0] == f"tick-{minute}"  # a minute boundary may pass meanwhile
    plane.wait(lambda: status(plane, "cronjobs", uid).get("active"), what="active refs")
    assert status(plane, "cronjobs", uid)["lastScheduleTime"] == jobs_of(plane, uid)[-1][1]


def test_forbid_holds_a_run_back_while_a_job_is_active(plane: Plane) -> None:
    start(plane)
    uid = _cronjob(plane, "once", created_ago=90, concurrencyPolicy="Forbid",
                   startingDeadlineSeconds=600)  # fmt: skip
    # an active Job of the CronJob's from before: the due run must wait for it
    ref = {"apiVersion": "quaymaster.io/v1", "kind": "CronJob", "name": "once", "uid": uid,
           "controller": True, "blockOwnerDeletion": True}  # fmt: skip
    old = job_obj("once-old", parallelism=0, completions=1)
    old["metadata"]["ownerReferences"] = [ref]
    old_uid = _insert(plane, "Job", old)
    plane.wait(lambda: "JobAlreadyActive" in reasons(plane, uid), what="the run held back")
    assert [n for n, _ in jobs_of(plane, uid)] == ["once-old"]
    done = {"conditions": [{"type": "Complete", "status": "True",
                            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                time.gmtime())}]}  # fmt: skip
    plane.db.execute("UPDATE jobs SET status = %s WHERE uid = %s", (json.dumps(done), old_uid))
    plane.wait(lambda: len(jobs_of(plane, uid)) == 2, what="the held-back run")
    assert status(plane, "cronjobs", uid).get("lastSuccessfulTime")
