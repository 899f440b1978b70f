"""The Celery application every controller worker and the beat scheduler load.

A task carries a key (kind, namespace, name), never a payload: the worker re-reads the state,
so a duplicated or late task is harmless. Delivery is at least once on Redis: a task is
acknowledged only after it ran (``task_acks_late``), a task whose worker died is given back
(``task_reject_on_worker_lost``), and messages unacknowledged for ``visibility_timeout`` are
redelivered. Keys are routed by hash to ``QM_RECONCILE_QUEUES`` queues, so reconciles of one
key land on one queue and more worker processes or machines share the load.
"""

from __future__ import annotations

import os
import zlib

from celery import Celery
from celery.signals import worker_init
from kombu import Exchange, Queue

QUEUES = int(os.environ.get("QM_RECONCILE_QUEUES", "4"))
RESYNC_SECONDS = float(os.environ.get("QM_RESYNC_SECONDS", "60"))
# Nodes' batch-allocatable follows usage, sampled by the agents every 10 s (ADR 0021).
RECLAIM_SECONDS = float(os.environ.get("QM_RECLAIM_SECONDS", "10"))
# Nodes per reclaim task on that tick: one read of each kind per chunk instead of per node.
RECLAIM_CHUNK = max(1, int(os.environ.get("QM_RECLAIM_CHUNK", "500")))
# Messages a worker process holds ahead of the one it runs. More hides the broker's round
# trips (with one, every task waits for the previous one's acknowledgement before it is even
# fetched); the price is that a worker that dies holding them delays those keys until the
# visibility timeout gives them back (their next change or resync enqueues them sooner).
PREFETCH = int(os.environ.get("QM_WORKER_PREFETCH", "1"))


def queue_for(kind: str, namespace: str, name: str) -> str:
    """The queue of one key: stable across processes (crc32, not Python's salted hash)."""
    return reconcile_queue(zlib.crc32(f"{kind}/{namespace}/{name}".encode()))


def reconcile_queue(n: int) -> str:
    """The ``n``-th reconcile queue, modulo their number."""
    return f"reconcile-{n % QUEUES}"


app = Celery(
    "quaymaster",
    broker=os.environ.get("QM_BROKER_URL", "redis://127.0.0.1:6379/0"),
    include=["workers.tasks"],
)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    task_acks_on_failure_or_timeout=True,
    worker_prefetch_multiplier=PREFETCH,
    broker_transport_options={"visibility_timeout": 120},
    broker_connection_retry_on_startup=True,
    task_queues=[
        Queue(name, Exchange(name, type="direct"), routing_key=name)
        for name in [reconcile_queue(i) for i in range(QUEUES)] + ["control"]
    ],
    task_default_queue="control",
    task_ignore_result=True,
    task_serializer="json",
    accept_content=["json"],
    timezone="UTC",
    beat_schedule={
        "resync": {"task": "workers.tasks.resync", "schedule": RESYNC_SECONDS},
        "reclaim": {"task": "workers.tasks.reclaim_sweep", "schedule": RECLAIM_SECONDS},
    },
)


@worker_init.connect
def _check_schema(**_: object) -> None:
    """Refuse to start on a schema this code does not know (SystemExit passes Celery's signal)."""
    from app.store.db import database_url
    from app.store.schema_revision import require_known_schema

    require_known_schema(database_url(), "the Celery worker")


@worker_init.connect
def _serve_metrics(**_: object) -> None:
    """The main process serves every worker's counts (``workers.metrics``), if asked to."""
    from workers import metrics

    port = metrics.port_from_env("QM_WORKER_METRICS_PORT")
    if port is not None:
        metrics.serve_workers(port)
