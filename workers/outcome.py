"""The one place where a controller's failures turn into what happens next.

``failure_of`` classifies any exception: the core's taxonomy (``app.core.errors.classify``) plus
the I/O errors only a shell sees (the database, Redis, a lost connection: temporary).
``failure_note`` says which failures are worth an Event on the owner, in Kubernetes' words.
``settle`` turns an ``Outcome`` into the next step of the key (a Celery retry after the
failure's delay, or the plan's timed look), logs it and counts it in the workers' metrics.

The applier (``workers.controllers.apply``) uses the first two; the reconcile task
(``workers.tasks``) and the controller manager's loops use ``settle``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import asyncpg
import redis

from app.core.controllers.plan import Note, Outcome
from app.core.errors import TEMPORARY_RETRY_SECONDS, ErrorKind, Failure, classify
from app.core.kinds import Kind

log = logging.getLogger(__name__)
_IO_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, redis.RedisError)
# A failed write's Event reason and wording, by verb, in Kubernetes' words.
_REASONS = {"create": "FailedCreate", "delete": "FailedDelete"}
_GERUNDS = {"create": "creating", "delete": "deleting", "update": "updating"}


def failure_of(exc: BaseException) -> Failure | None:
    """The failure ``exc`` is; ``None`` for an exception outside the taxonomy (a bug)."""
    failure = classify(exc)
    if failure is None and isinstance(exc, _IO_ERRORS):
        return Failure(ErrorKind.TEMPORARY, f"{type(exc).__name__}: {exc}", TEMPORARY_RETRY_SECONDS)
    return failure


def failure_note(verb: str, kind: Kind, shown: str, failure: Failure) -> Note | None:
    """The Warning Event a failed write is worth on its owner: a refusal or a permanent failure
    (which someone must act on); ``None`` for a conflict or a temporary failure, which the
    retry resolves by itself."""
    if failure.kind not in (ErrorKind.REFUSED, ErrorKind.PERMANENT):
        return None
    word = "forbidden" if failure.kind == ErrorKind.REFUSED else "invalid"
    doing = _GERUNDS.get(verb, "updating status of")
    message = f'Error {doing}: {kind.plural} "{shown}" is {word}: {failure.message}'
    return Note(_REASONS.get(verb, "FailedUpdate"), message, "Warning")


@dataclass(frozen=True)
class Next:
    """What a settled reconcile asks for: a retry (failures) or a timed look, in seconds."""

    retry: float | None = None
    look: float | None = None


def settle(kind: str, key: str, outcome: Outcome, seconds: float, crashed: bool = False) -> Next:
    """Log and count one reconcile of ``key`` that took ``seconds``; its next step.
    ``crashed``: it raised an exception outside the taxonomy (the caller re-raises it).

    Failures win over the plan's timed look only when they come sooner (``next_look``): a
    refusal retried in 5 s does not postpone a look the plan wanted in 1 s."""
    from workers import metrics  # the metrics module reads the broker; loaded when first used

    metrics.reconciled(kind, "crashed" if crashed else outcome.result, outcome, seconds)
    if crashed:
        return Next()
    for f in outcome.failures:
        log.log(
            logging.WARNING if f.kind in (ErrorKind.REFUSED, ErrorKind.PERMANENT) else logging.INFO,
            "%s: %s: %s",
            key,
            f.kind.value,
            f.message,
        )
    if outcome.failures and outcome.retry_after is not None:
        return Next(retry=outcome.next_look)
    log.info(
        "reconciled %s%s",
        key,
        "" if outcome.requeue_after is None else f", again in {outcome.requeue_after:.1f}s",
    )
    return Next(look=outcome.requeue_after)
