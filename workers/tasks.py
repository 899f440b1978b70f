"""Celery tasks: reconcile one key, resync every key, and the reclaim controller's tick over
the nodes in chunks.

``enqueue`` is how anything asks for a reconcile: it deduplicates through the key's pending
marker and routes the task to the key's queue.
"""

from __future__ import annotations

import logging
import time

from celery import Task

from workers.app import RECLAIM_CHUNK, app, queue_for, reconcile_queue
from workers.controllers import CONTROLLERS, RESYNCED, list_keys, reclaim
from workers.runtime import Busy, key_text, runtime

log = logging.getLogger(__name__)
BUSY_RETRY_SECONDS = 0.2
MAX_REQUEUE_SECONDS = 60.0


def enqueue(kind: str, namespace: str, name: str) -> bool:
    """Ask for a reconcile of one key; False when one is already pending."""
    if not runtime().mark_pending(key_text(kind, namespace, name)):
        return False
    reconcile.apply_async((kind, namespace, name), queue=queue_for(kind, namespace, name))
    return True


@app.task(bind=True, name="workers.tasks.reconcile", max_retries=None)
def reconcile(self: Task, kind: str, namespace: str, name: str) -> None:
    key = key_text(kind, namespace, name)
    rt = runtime()
    rt.clear_pending(key)  # before reading: a change from now on enqueues the key again
    controller = CONTROLLERS.get(kind)
    if controller is None:
        log.warning("no controller for %s", key)
        return
    try:
        requeue_after: float | None = rt.run(controller(rt, namespace, name, time.time()))
    except Busy:
        raise self.retry(countdown=BUSY_RETRY_SECONDS) from None
    log.info(
        "reconciled %s%s", key, "" if requeue_after is None else f", again in {requeue_after:.1f}s"
    )
    if requeue_after is not None:
        _again(kind, namespace, name, requeue_after)


def _again(kind: str, namespace: str, name: str, after: float) -> None:
    # A timed look later: not through the pending marker, which would swallow every change
    # until then. Capped below the broker's visibility timeout; resync covers longer waits.
    reconcile.apply_async(
        (kind, namespace, name),
        queue=queue_for(kind, namespace, name),
        countdown=min(max(0.0, after), MAX_REQUEUE_SECONDS),
    )


@app.task(name="workers.tasks.resync")
def resync(*kinds: str) -> int:
    """Enqueue every key every controller owns (or only those of ``kinds``): the
    level-triggered safety net. Nodes are left to the reclaim tick, which covers them all
    every 10 s, unless asked for by name."""
    rt = runtime()
    count = 0
    for kind, namespace, name in rt.run(list_keys(rt, kinds or RESYNCED)):
        count += enqueue(kind, namespace, name)
    return count


@app.task(name="workers.tasks.reclaim_sweep")
def reclaim_sweep() -> int:
    """The reclaim controller's tick: every node, one ``reclaim_nodes`` task per chunk, spread
    over the reconcile queues. A chunk whose previous task has not run yet is not queued again
    (a backlog never grows); returns how many chunks were queued."""
    rt = runtime()
    names = rt.run(reclaim.node_names(rt))
    queued = 0
    for i, start in enumerate(range(0, len(names), RECLAIM_CHUNK)):
        if rt.mark_pending(f"ReclaimChunk/{i}"):
            chunk = names[start : start + RECLAIM_CHUNK]
            reclaim_nodes.apply_async((i, chunk), queue=reconcile_queue(i))
            queued += 1
    return queued


@app.task(name="workers.tasks.reclaim_nodes")
def reclaim_nodes(chunk: int, names: list[str]) -> int:
    rt = runtime()
    rt.clear_pending(f"ReclaimChunk/{chunk}")
    again = rt.run(reclaim.reconcile_nodes(rt, names, time.time()))
    for name, after in again.items():
        _again("Node", "", name, after)
    log.info("reclaim tick: %d node(s), %d to look at again", len(names), len(again))
    return len(names)
