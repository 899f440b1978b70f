"""The controllers' metrics scraped from real processes: a Celery worker (prefork, its
children's counts through Redis) and the dispatcher, while reconciles succeed and fail."""

from __future__ import annotations

import re
import socket
import urllib.request

from plane import Plane, start_worker
from test_controller_refusals import quota


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrape(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([^ #][^ ]*) (\S+)", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def test_reconciles_failures_and_queues_move_the_metrics(plane: Plane) -> None:
    workers, dispatch = _free_port(), _free_port()
    plane.env.update(QM_WORKER_METRICS_PORT=str(workers), QM_DISPATCH_METRICS_PORT=str(dispatch))
    start_worker(plane)
    plane.start("-m", "workers.dispatch")
    ok = 'qm_controller_reconciles_total{kind="ReplicaSet",result="ok"}'
    created = 'qm_controller_children_created_total{kind="ReplicaSet"}'
    plane.wait(lambda: 'qm_queue_depth{queue="control"}' in _scrape(workers), what="/metrics")
    uid = plane.replicaset("web", 3)
    plane.wait(lambda: len(plane.pods_of(uid)) == 3, what="3 pods")
    plane.wait(lambda: _scrape(workers).get(created, 0) >= 3, what="3 children counted")
    assert _scrape(workers)[ok] >= 1
    assert _scrape(workers)['qm_controller_reconcile_seconds_count{kind="ReplicaSet"}'] >= 1
    plane.wait(lambda: _scrape(dispatch).get("qm_dispatch_enqueued_total", 0) >= 1,
               what="the dispatcher's count")  # fmt: skip
    # A quota refusing the pods of a second ReplicaSet: refusals and their retries counted.
    import psycopg

    with psycopg.connect(plane.url, autocommit=True) as db:
        quota(db, 3)
    plane.replicaset("more", 2)
    refused = 'qm_controller_retries_total{kind="ReplicaSet",error="refused"}'
    plane.wait(lambda: _scrape(workers).get(refused, 0) >= 2, what="refusals retried")
    failed = _scrape(workers)['qm_controller_reconciles_total{kind="ReplicaSet",result="refused"}']
    assert failed >= 2
