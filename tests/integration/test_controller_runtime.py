"""The controller runtime end to end: real PostgreSQL and revisioner, real Redis, a real Celery
worker and the dispatcher, on a database of their own.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from plane import NS, Plane, start_worker


def test_a_replicaset_gets_its_pods_and_replaces_lost_ones(plane: Plane) -> None:
    start_worker(plane)
    plane.start("-m", "workers.dispatch")
    time.sleep(1.0)
    uid = plane.replicaset("web", 3)
    plane.wait(lambda: len(plane.pods_of(uid)) == 3, what="3 pods")
    victim = plane.pods_of(uid)[0]
    plane.db.execute("DELETE FROM pods WHERE namespace = %s AND name = %s", (NS, victim))
    plane.wait(
        lambda: len(plane.pods_of(uid)) == 3 and victim not in plane.pods_of(uid),
        what="a replacement",
    )

    def status() -> dict[str, Any]:
        row = plane.db.execute("SELECT status FROM replicasets WHERE uid = %s", (uid,)).fetchone()
        return row[0] if row else {}

    plane.wait(lambda: status().get("replicas") == 3, what="status.replicas 3")
    event = plane.db.execute(
        "SELECT spec FROM events WHERE spec->'involvedObject'->>'uid' = %s"
        " AND spec->>'reason' = 'SuccessfulCreate'",
        (uid,),
    ).fetchone()
    assert event is not None and event[0]["involvedObject"]["kind"] == "ReplicaSet"
    assert event[0]["count"] >= 2  # the first pods and the replacement


def test_a_burst_of_changes_is_one_reconcile_and_duplicates_are_harmless(plane: Plane) -> None:
    from workers.runtime import PENDING_PREFIX

    plane.start("-m", "workers.dispatch")
    time.sleep(2.0)  # listening
    uid = plane.replicaset("burst", 2)
    # 1,000 changes to the ReplicaSet before any worker runs ...
    for i in range(1000):
        plane.db.execute(
            "UPDATE replicasets SET annotations = %s WHERE uid = %s",
            (json.dumps({"n": str(i)}), uid),
        )
    # ... reach the queue as one task: count the messages waiting in Redis.
    import redis

    r = redis.Redis.from_url(plane.env["QM_BROKER_URL"])
    plane.wait(lambda: r.exists(PENDING_PREFIX + f"ReplicaSet/{NS}/burst"), what="the key pending")
    time.sleep(2.0)  # the dispatcher has seen every change by now
    queued = sum(int(r.llen(f"reconcile-{i}")) for i in range(4))
    assert queued == 1
    # Duplicated and late tasks change nothing: enqueue the key again and again.
    from celery import Celery

    sender = Celery(broker=plane.env["QM_BROKER_URL"])
    for _ in range(5):
        sender.send_task(
            "workers.tasks.reconcile", ("ReplicaSet", NS, "burst"), queue="reconcile-0"
        )
    start_worker(plane, concurrency=3)
    plane.wait(lambda: len(plane.pods_of(uid)) == 2, what="2 pods")
    time.sleep(3.0)  # every duplicate has run, and a resync too
    assert len(plane.pods_of(uid)) == 2


def _deployment(plane: Plane, name: str, image: str, replicas: int = 3) -> str:
    from app.core.admission import admit
    from app.core.kinds import BY_KIND

    obj = admit(
        BY_KIND["Deployment"],
        {
            "apiVersion": "quaymaster.io/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": NS, "labels": {"app": name}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "c", "image": image}]},
                },
            },
        },
        None,
    )
    uid = str(uuid.uuid4())
    plane.db.execute(
        "INSERT INTO deployments (uid, namespace, name, labels, spec) VALUES (%s, %s, %s, %s, %s)",
        (uid, NS, name, json.dumps(obj["metadata"]["labels"]), json.dumps(obj["spec"])),
    )
    return uid


def _make_ready(plane: Plane) -> None:
    """What node agents would report: every live pod running and ready."""
    plane.db.execute(
        """UPDATE pods SET status = jsonb_build_object('phase', 'Running', 'conditions',
             jsonb_build_array(jsonb_build_object('type', 'Ready', 'status', 'True',
               'lastTransitionTime', to_char(now() AT TIME ZONE 'utc',
                                             'YYYY-MM-DD"T"HH24:MI:SS"Z"'))))
           WHERE deletion_timestamp IS NULL AND NOT coalesce(ready, false)"""
    )
    # the node agent would also confirm terminated pods
    plane.db.execute("DELETE FROM pods WHERE deletion_timestamp IS NOT NULL")


def test_a_deployment_rolls_out_a_new_template_as_pods_become_ready(plane: Plane) -> None:
    start_worker(plane)
    plane.start("-m", "workers.dispatch")
    time.sleep(1.0)
    _deployment(plane, "web", "web:v1")

    def images() -> dict[str, int]:
        rows = plane.db.execute(
            "SELECT spec->'containers'->0->>'image', count(*) FROM pods"
            " WHERE deletion_timestamp IS NULL GROUP BY 1"
        ).fetchall()
        return {r[0]: r[1] for r in rows}

    plane.wait(lambda: images() == {"web:v1": 3}, what="3 v1 pods")
    _make_ready(plane)
    plane.db.execute(
        "UPDATE deployments SET spec = jsonb_set(spec, '{template,spec,containers,0,image}',"
        " '\"web:v2\"') WHERE name = 'web'"
    )
    # New pods that never become ready: the rollout stalls with the old pods serving.
    plane.wait(lambda: images().get("web:v2", 0) >= 1, what="a v2 pod")
    time.sleep(2.0)
    assert images()["web:v1"] >= 3 - 0  # maxUnavailable 25% of 3 rounds down to 0
    assert sum(images().values()) <= 4  # maxSurge 25% of 3 rounds up to 1
    # As the new pods become ready, the rollout completes.
    deadline = time.monotonic() + 60
    while images() != {"web:v2": 3} and time.monotonic() < deadline:
        _make_ready(plane)
        time.sleep(0.3)
    assert images() == {"web:v2": 3}
    plane.wait(
        lambda: (
            plane.db.execute(
                "SELECT status->>'updatedReplicas', status->>'availableReplicas'"
                " FROM deployments WHERE name = 'web'"
            ).fetchone()
            == ("3", "3")
        ),
        what="the deployment's status",
    )


def test_a_worker_killed_mid_reconcile_leaves_no_duplicates(plane: Plane, tmp_path: Path) -> None:
    plane.env["QM_PENDING_TTL"] = "3"
    worker = start_worker(plane, concurrency=1)
    plane.start("-m", "workers.dispatch")
    plane.start(
        "-m", "celery", "-A", "workers.app", "beat", "--loglevel=WARNING",
        "--schedule", str(tmp_path / "beat-schedule"),
    )  # fmt: skip
    time.sleep(1.0)
    uid = plane.replicaset("big", 1500)  # three plans of at most 500 creates each
    plane.wait(lambda: len(plane.pods_of(uid)) >= 1, what="the first pods")
    worker.kill()  # SIGKILL to the main process, mid-burst
    worker.wait()
    # Its task is lost until the broker's visibility timeout; the key's pending marker expires
    # after QM_PENDING_TTL and the resync enqueues it again for the new worker.
    start_worker(plane, concurrency=2)
    plane.wait(lambda: len(plane.pods_of(uid)) == 1500, timeout=120, what="1,500 pods")
    time.sleep(3.0)
    assert len(plane.pods_of(uid)) == 1500


def test_two_workers_racing_on_one_key_are_safe(plane: Plane) -> None:
    from celery import Celery

    uid = plane.replicaset("race", 40)
    sender = Celery(broker=plane.env["QM_BROKER_URL"])
    for i in range(60):  # the same key, on every queue, many times
        sender.send_task(
            "workers.tasks.reconcile", ("ReplicaSet", NS, "race"), queue=f"reconcile-{i % 4}"
        )
    start_worker(plane, concurrency=3)
    start_worker(plane, concurrency=3)
    plane.wait(lambda: len(plane.pods_of(uid)) == 40, what="40 pods")
    time.sleep(3.0)  # every task has run
    assert len(plane.pods_of(uid)) == 40
