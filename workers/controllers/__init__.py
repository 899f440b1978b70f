"""The controllers' I/O shells, by the kind whose key they reconcile."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from app.core.controllers.plan import Outcome
from workers.controllers import cronjob as cronjob_controller
from workers.controllers import deployment, disruption, quota, reclaim, replicaset
from workers.controllers import job as job_controller
from workers.runtime import Runtime

# ``reconcile_key(rt, namespace, name, now)``: hold the key's lock, read, plan, apply with
# ``workers.controllers.apply.apply_plan`` and return its outcome (``workers.tasks`` settles it).
Controller = Callable[[Runtime, str, str, float], Coroutine[Any, Any, Outcome]]

CONTROLLERS: dict[str, Controller] = {
    "ReplicaSet": replicaset.reconcile_key,
    "Deployment": deployment.reconcile_key,
    "PodDisruptionBudget": disruption.reconcile_key,
    "Job": job_controller.reconcile_key,
    "CronJob": cronjob_controller.reconcile_key,
    "ResourceQuota": quota.reconcile_key,
    "Node": reclaim.reconcile_key,  # batch-allocatable from usage (ADR 0021)
}

_TABLES = {
    "ReplicaSet": "replicasets",
    "Deployment": "deployments",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "Job": "jobs",
    "CronJob": "cronjobs",
    "ResourceQuota": "resourcequotas",
    "Node": "nodes",
}


async def list_keys(rt: Runtime, kinds: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """Every key some controller owns (for the periodic resync, or only those of ``kinds``)."""
    pool = await rt.pool()
    keys: list[tuple[str, str, str]] = []
    for kind, table in _TABLES.items():
        if kinds and kind not in kinds:
            continue
        for r in await pool.fetch(f"SELECT namespace, name FROM {table}"):
            keys.append((kind, r["namespace"], r["name"]))
    return keys
