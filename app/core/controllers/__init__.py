"""Level-triggered controllers as pure functions.

Each controller is ``reconcile(desired, observed, now) -> Plan``: it reads the owner object and
the objects it owns as they are stored, with the time passed in, and returns the writes that
move the observed state toward the desired one. Nothing here performs I/O; a worker applies the
plan and calls again when something changes or ``requeue_after`` elapses.
"""

from app.core.controllers.plan import Delete, Plan

__all__ = ["Delete", "Plan"]
