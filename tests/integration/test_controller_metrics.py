"""The controllers' metrics scraped from real processes: a Celery worker (prefork, its
children's counts through Redis) and the dispatcher, while reconciles succeed and fail."""

from __future__ import annotations

from plane import Plane, scrape, start_dispatcher, start_worker
from test_controller_refusals import quota

from app.devstack.supervise import free_port


def test_reconciles_failures_and_queues_move_the_metrics(plane: Plane) -> None:
    workers, dispatch = free_port(), free_port()
    plane.env.update(QM_WORKER_METRICS_PORT=str(workers), QM_DISPATCH_METRICS_PORT=str(dispatch))
    start_worker(plane)
    start_dispatcher(plane)
    ok = 'qm_controller_reconciles_total{kind="ReplicaSet",result="ok"}'
    created = 'qm_controller_children_created_total{kind="ReplicaSet"}'
    plane.wait(lambda: 'qm_queue_depth{queue="control"}' in scrape(workers), what="/metrics")
    uid = plane.replicaset("web", 3)
    plane.wait(lambda: len(plane.pods_of(uid)) == 3, what="3 pods")
    plane.wait(lambda: scrape(workers).get(created, 0) >= 3, what="3 children counted")
    assert scrape(workers)[ok] >= 1
    assert scrape(workers)['qm_controller_reconcile_seconds_count{kind="ReplicaSet"}'] >= 1
    plane.wait(lambda: scrape(dispatch).get("qm_dispatch_enqueued_total", 0) >= 1,
               what="the dispatcher's count")  # fmt: skip
    # A quota refusing the pods of a second ReplicaSet: refusals and their retries counted.
    import psycopg

    with psycopg.connect(plane.url, autocommit=True) as db:
        quota(db, 3)
    plane.replicaset("more", 2)
    refused = 'qm_controller_retries_total{kind="ReplicaSet",error="refused"}'
    plane.wait(lambda: scrape(workers).get(refused, 0) >= 2, what="refusals retried")
    failed = scrape(workers)['qm_controller_reconciles_total{kind="ReplicaSet",result="refused"}']
    assert failed >= 2
