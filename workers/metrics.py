"""The controllers' metrics: what the workers, the dispatcher and the controller manager export.

**Workers.** A Celery worker is a main process and prefork children, one per slot; reconciles
run in the children. Each child adds its counts to one Redis hash, ``qm:metrics:workers``, in
one pipelined round trip after every reconcile (``reconciled``); the main process serves
``/metrics`` on ``QM_WORKER_METRICS_PORT`` from a thread, rendering that hash together with
what Redis knows now: the depth of every queue and the number of pending markers. Counts are
therefore the totals of every worker on the broker, and any one worker's endpoint shows them
(scrape one; ADR 0031 says why).

**Dispatcher and manager.** One process each, one event loop: their metrics live in process
(``DISPATCH``, ``MANAGER``) and are served on ``QM_DISPATCH_METRICS_PORT`` and
``QM_MANAGER_METRICS_PORT`` by ``app.metrics_endpoint``.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left

import redis

from app.core.controllers.plan import Outcome
from app.core.metrics import DEFAULT_BUCKETS, Registry

log = logging.getLogger(__name__)
HASH = "qm:metrics:workers"
BUCKETS = (*DEFAULT_BUCKETS, 30.0, 60.0)
_SEP = "\x1f"  # between a field's metric name and label values: never in a kind or a reason

_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ.get("QM_BROKER_URL", "redis://127.0.0.1:6379/0"))
    return _client


def _field(*parts: str) -> str:
    return _SEP.join(parts)


def reconciled(kind: str, result: str, outcome: Outcome, seconds: float) -> None:
    """Count one reconcile of a key of ``kind``: its result, duration, failures and retries,
    and the children it created. Never fails the reconcile: a broker that is down loses the
    counts of this one."""
    bucket = BUCKETS[bisect_left(BUCKETS, seconds)] if seconds <= BUCKETS[-1] else "+Inf"
    pipe = _redis().pipeline(transaction=False)
    pipe.hincrby(HASH, _field("reconciles", kind, result), 1)
    pipe.hincrby(HASH, _field("seconds_bucket", kind, str(bucket)), 1)
    pipe.hincrbyfloat(HASH, _field("seconds_sum", kind), seconds)
    for f in outcome.failures:
        pipe.hincrby(HASH, _field("failures", kind, f.kind.value), 1)
        if f.delay is not None:
            pipe.hincrby(HASH, _field("retries", kind, f.kind.value), 1)
    if outcome.created:
        pipe.hincrby(HASH, _field("created", kind), outcome.created)
    try:
        pipe.execute()
    except redis.RedisError as exc:
        log.info("metrics not counted: %s", exc)


def render_workers(client: redis.Redis, queues: list[str], pending_prefix: str) -> str:
    """The workers' metrics as exposition text, from Redis as it is now."""
    reg = Registry()
    total = reg.counter("qm_controller_reconciles_total", "Reconciles, by kind and result (ok, "
                        "the worst failure's kind, or crashed).", ("kind", "result"))  # fmt: skip
    took = reg.histogram("qm_controller_reconcile_seconds", "Time one reconcile took, by kind.",
                         ("kind",), BUCKETS)  # fmt: skip
    failures = reg.counter("qm_controller_failures_total", "Writes or reconciles that failed, "
                           "by kind and error kind.", ("kind", "error"))  # fmt: skip
    retries = reg.counter("qm_controller_retries_total", "Retries asked for, by kind and the "
                          "error kind that asked.", ("kind", "error"))  # fmt: skip
    created = reg.counter("qm_controller_children_created_total", "Children created, by the "
                          "owner's kind.", ("kind",))  # fmt: skip
    depth = reg.gauge("qm_queue_depth", "Tasks waiting in each queue.", ("queue",))
    pending = reg.gauge("qm_pending_markers", "Keys enqueued and not yet picked up.")
    for raw, value in client.hgetall(HASH).items():
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        name, *labels = text.split(_SEP)
        number = float(value)
        if name == "reconciles":
            total.labels(*labels).inc(number)
        elif name == "failures":
            failures.labels(*labels).inc(number)
        elif name == "retries":
            retries.labels(*labels).inc(number)
        elif name == "created":
            created.labels(*labels).inc(number)
        elif name == "seconds_sum":
            took.labels(*labels).sum += number
        elif name == "seconds_bucket":
            kind, le = labels
            child = took.labels(kind)
            child.counts[took.bounds.index(float(le))] += int(number)
    pipe = client.pipeline(transaction=False)
    for q in queues:
        pipe.llen(q)
    for q, n in zip(queues, pipe.execute(), strict=True):
        depth.labels(q).set(n)
    pending.set(sum(1 for _ in client.scan_iter(match=pending_prefix + "*", count=1000)))
    return reg.render()


def serve_workers(port: int) -> int | None:
    """Serve the workers' metrics from this (the Celery main) process; the port bound."""
    from app.metrics_endpoint import serve_in_thread
    from workers.app import QUEUES, reconcile_queue
    from workers.runtime import PENDING_PREFIX

    queues = [reconcile_queue(i) for i in range(QUEUES)] + ["control"]
    client = redis.Redis.from_url(os.environ.get("QM_BROKER_URL", "redis://127.0.0.1:6379/0"))
    try:
        return serve_in_thread(
            "127.0.0.1", port, lambda: render_workers(client, queues, PENDING_PREFIX)
        )
    except OSError as exc:
        log.warning("metrics endpoint not started on port %s: %s", port, exc)
        return None


# -- the dispatcher's and the manager's, in process ------------------------------------------

DISPATCH = Registry()
CHANGES = DISPATCH.counter("qm_dispatch_changes_total", "Changes read from the revision log.")
ENQUEUED = DISPATCH.counter("qm_dispatch_enqueued_total", "Keys enqueued for a reconcile.")
SKIPPED = DISPATCH.counter(
    "qm_dispatch_skipped_total", "Keys not enqueued because one was pending already."
)
RELISTS = DISPATCH.counter("qm_dispatch_relists_total", "Full relists of the watched kinds.")

MANAGER = Registry()
TICKS = MANAGER.histogram(
    "qm_manager_tick_seconds", "Time one tick of a singleton loop took.", ("loop",), BUCKETS
)
TICK_ERRORS = MANAGER.counter("qm_manager_tick_errors_total", "Ticks that failed.", ("loop",))
LEADING = MANAGER.gauge("qm_manager_leader", "1 while this manager holds the lease.")
SILENT = MANAGER.gauge("qm_node_lifecycle_silent_nodes", "Nodes whose lease is not renewed.")
DISRUPTED = MANAGER.gauge(
    "qm_node_lifecycle_disrupted_zones", "Zones judged disrupted (evictions slowed)."
)
EVICTIONS = MANAGER.counter("qm_node_lifecycle_evictions_total", "Pods evicted from silent nodes.")
NODE_FAILURES = MANAGER.counter(
    "qm_node_lifecycle_failures_total", "Node lifecycle writes that failed, by error kind.",
    ("error",),
)  # fmt: skip


async def serve_registry(var: str, registry: Registry) -> object | None:
    """Serve ``registry`` on the port ``var`` names, if any; the server, or ``None`` when off
    or the port is taken (the process's work matters more than its metrics)."""
    from app.metrics_endpoint import serve

    port = port_from_env(var)
    if port is None:
        return None
    try:
        return await serve("127.0.0.1", port, registry.render)
    except OSError as exc:
        log.warning("metrics endpoint not started on port %s: %s", port, exc)
        return None


def port_from_env(name: str) -> int | None:
    """The metrics port a process is told to use; ``None`` when unset or negative (off)."""
    text = os.environ.get(name, "")
    if not text:
        return None
    port = int(text)
    return None if port < 0 else port
