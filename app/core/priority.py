"""Priority bands.

Pod priorities (resolved from a PriorityClass by the API layer, not by admission) fall into
three bands that the scheduler, preemption and quota reports treat differently:

* ``production``  -- priority >= ``PRODUCTION_THRESHOLD`` (1000): long-running services that
  may preempt lower bands;
* ``batch``       -- 0 <= priority < 1000: jobs that run when capacity allows;
* ``best-effort`` -- priority < 0: work that may be preempted by anything.

A pod without a priority counts as priority 0 (``batch``), like Kubernetes' default.
"""

from __future__ import annotations

PRODUCTION_THRESHOLD = 1000
BATCH_THRESHOLD = 0
DEFAULT_PRIORITY = 0

PRODUCTION = "production"
BATCH = "batch"
BEST_EFFORT = "best-effort"
BANDS = (PRODUCTION, BATCH, BEST_EFFORT)


def band(priority: int | None) -> str:
    """The band of ``priority`` (``None`` means the default priority, 0)."""
    p = DEFAULT_PRIORITY if priority is None else priority
    if p >= PRODUCTION_THRESHOLD:
        return PRODUCTION
    if p >= BATCH_THRESHOLD:
        return BATCH
    return BEST_EFFORT


def in_band(priority: int | None, name: str) -> bool:
    return band(priority) == name
