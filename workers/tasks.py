"""Celery tasks: reconcile one key, resync every key, and the reclaim controller's tick over
the nodes in chunks.

``enqueue`` is how anything asks for a reconcile: it deduplicates through the key's pending
marker and routes the task to the key's queue.
"""

from __future__ import annotations

import logging
import time

from celery import Task

from app.core.controllers.plan import Outcome
from workers.app import RECLAIM_CHUNK, app, queue_for, reconcile_queue
from workers.context import reconciling
from workers.controllers import CONTROLLERS, RESYNCED, list_keys, reclaim
from workers.outcome import failure_of, settle
from workers.runtime import key_text, runtime

log = logging.getLogger(__name__)
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
    started = time.monotonic()
    try:
        with reconciling(self.request.id):  # the task's id: its writes' request id
            outcome = rt.run(controller(rt, namespace, name, time.time()))
    except Exception as exc:
        failure = failure_of(exc)
        if failure is None:  # a bug: counted, then Celery logs it with its traceback
            settle(kind, key, Outcome(), time.monotonic() - started, crashed=True)
            raise
        outcome = Outcome.failed(failure)
    step = settle(kind, key, outcome, time.monotonic() - started)
    if step.retry is not None:
        raise self.retry(countdown=min(step.retry, MAX_REQUEUE_SECONDS))
    if step.look is not None:
        _again(kind, namespace, name, step.look)


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


@app.task(bind=True, name="workers.tasks.reclaim_nodes")
def reclaim_nodes(self: Task, chunk: int, names: list[str]) -> int:
    rt = runtime()
    rt.clear_pending(f"ReclaimChunk/{chunk}")
    with reconciling(self.request.id):
        again = rt.run(reclaim.reconcile_nodes(rt, names, time.time()))
    for name, after in again.items():
        _again("Node", "", name, after)
    log.info("reclaim tick: %d node(s), %d to look at again", len(names), len(again))
    return len(names)
