"""The ResourceQuota controller: keep ``status.hard`` and ``status.used`` true.

Admission does not write a quota's status: it sums usage from ``pods`` itself inside each
create's transaction (``app.store.quota``), so nothing it decides depends on this status. The
status is for people and tools: ``qm describe quota`` shows used against hard. The shell
(``workers.controllers.quota``) measures usage with the same aggregate admission uses and hands
it in; the dispatcher wakes every quota of a namespace when one of its pods changes.

``status.used`` lists every ``spec.hard`` resource that pods are charged for (``pods``,
``requests.cpu``, ``limits.memory``, ...); the others (``services``, ``count/configmaps``, ...)
appear in ``status.hard`` only, since nothing measures them yet.
"""

from __future__ import annotations

from app.core.controllers.plan import Obj, Plan, is_deleting
from app.core.quota import Usage, status_of


def reconcile(rq: Obj, used: Usage, now: float) -> Plan:
    """The status write (if any) that makes ``rq``'s status report ``used``.

    ``now`` is unused: a quota's status changes only with its pods, never with time alone."""
    del now
    if is_deleting(rq):
        return Plan()
    old = rq.get("status") or {}
    status = {**old, **status_of(rq, used)}
    return Plan(status=None if status == old else status)
