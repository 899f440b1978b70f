"""The controllers' I/O shells, by the kind whose key they reconcile."""

from __future__ import annotations

import os
from collections.abc import Callable, Coroutine
from typing import Any

from app.core.controllers.plan import Outcome
from workers.controllers import cronjob as cronjob_controller
from workers.controllers import (
    deployment,
    disruption,
    endpointslice,
    garbage,
    namespace,
    quota,
    reclaim,
    replicaset,
)
from workers.controllers import job as job_controller
from workers.runtime import Runtime

# ``reconcile_key(rt, namespace, name, now)``: hold the key's lock, read, plan, apply with
# ``workers.controllers.apply.apply_plan`` and return its outcome (``workers.tasks`` settles it).
Controller = Callable[[Runtime, str, str, float], Coroutine[Any, Any, Outcome]]

ALL: dict[str, Controller] = {
    "ReplicaSet": replicaset.reconcile_key,
    "Deployment": deployment.reconcile_key,
    "PodDisruptionBudget": disruption.reconcile_key,
    "Job": job_controller.reconcile_key,
    "CronJob": cronjob_controller.reconcile_key,
    "ResourceQuota": quota.reconcile_key,
    "Node": reclaim.reconcile_key,  # batch-allocatable from usage (ADR 0021)
    "Namespace": namespace.reconcile_key,  # empties a deleted namespace (ADR 0032)
    garbage.KIND: garbage.reconcile_key,  # an owner's dependents, by owner uid (ADR 0032)
    "Service": endpointslice.reconcile_key,  # its EndpointSlices (ADR 0037)
}

# ``QM_CONTROLLERS``: the keys' kinds whose controllers run, comma-separated (all when unset),
# as kube-controller-manager's ``--controllers``. Read by the workers and the dispatcher alike.
_ONLY = [k for k in os.environ.get("QM_CONTROLLERS", "").split(",") if k]
CONTROLLERS = {k: c for k, c in ALL.items() if not _ONLY or k in _ONLY}

# Kinds a tick of their own covers in bulk (the reclaim sweep: every node every 10 s), so the
# resync and the dispatcher's initial list leave them out: queued one key each, 10,000 nodes
# were 10,000 per-node reconciles (and their status writes as many more) in the workers.
TICKED = ("Node",)
RESYNCED = tuple(k for k in CONTROLLERS if k not in TICKED)

_TABLES = {
    "ReplicaSet": "replicasets",
    "Deployment": "deployments",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "Job": "jobs",
    "CronJob": "cronjobs",
    "ResourceQuota": "resourcequotas",
    "Node": "nodes",
    "Namespace": "namespaces",
    "Service": "services",
}


async def list_keys(rt: Runtime, kinds: tuple[str, ...] = ()) -> list[tuple[str, str, str]]:
    """Every key some controller owns (for the periodic resync, or only those of ``kinds``)."""
    pool = await rt.pool()
    keys: list[tuple[str, str, str]] = []
    for kind, table in _TABLES.items():
        if (kinds and kind not in kinds) or kind not in CONTROLLERS:
            continue
        for r in await pool.fetch(f"SELECT namespace, name FROM {table}"):
            keys.append((kind, r["namespace"], r["name"]))
    if (not kinds or garbage.KIND in kinds) and garbage.KIND in CONTROLLERS:
        keys.extend(await garbage.waiting_keys(rt))
    return keys
