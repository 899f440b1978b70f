"""The write context of controllers: who writes (``system:controller:<name>``) and in which
reconcile (the Celery task's id, or one id per pass of a controller-manager loop).

``workers.tasks.reconcile`` and the manager's loops open :func:`reconciling` around their work;
the plan applier (``workers.controllers.apply``) and the controllers' own writes ask
:func:`write_context` for the context of each step, adding what the step does as its reason.
Outside a reconcile (a test calling a controller directly) the controller's principal is still
recorded, with no request id.
"""

from __future__ import annotations

import contextlib
import contextvars
import uuid
from collections.abc import Iterator

from app.core.audit import WriteContext, controller

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "qm_reconcile_id", default=None
)


@contextlib.contextmanager
def reconciling(request_id: str | None = None) -> Iterator[str]:
    """Mark the code inside as one reconcile (``request_id``: the task's id; a new one when
    None); yields the id."""
    rid = request_id or uuid.uuid4().hex
    token = _current.set(rid)
    try:
        yield rid
    finally:
        _current.reset(token)


def write_context(name: str, reason: str | None = None) -> WriteContext:
    """The context of a write by the controller ``name`` in the current reconcile."""
    return controller(name, request_id=_current.get(), reason=reason)
