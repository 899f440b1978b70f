"""The Job controller's reads: a summary of a Job's pods in one aggregate query, and the few pods
a plan deletes.

A Job may own 100,000 pods; loading and rendering them on every reconcile would make a large
Job cost seconds per look. The summary instead counts pods by state in PostgreSQL (the
``owner_references`` GIN index finds them, the promoted ``phase``, ``node_name`` and ``ready``
columns classify them), so a reconcile reads a handful of numbers, plus the index sets of an
Indexed Job. ``app.core.controllers.job.PodSummary`` documents what each count means.
"""

from __future__ import annotations

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from app.core.controllers.job import INDEX_KEY, PodSummary
from app.core.kinds import BY_KIND
from app.store.sql import COLS
from app.store.store import Stored

Conn = asyncpg.Connection | PoolConnectionProxy | asyncpg.Pool
POD = BY_KIND["Pod"]

_FINISHED = "phase IN ('Succeeded', 'Failed')"
_ACTIVE = f"deletion_timestamp IS NULL AND NOT coalesce({_FINISHED}, false)"
_DISRUPTED = (
    'coalesce(status->\'conditions\' @> \'[{"type": "DisruptionTarget", "status": "True"}]\','
    " false)"
)
_RESTARTS = (
    "(SELECT coalesce(sum(qm_int(c->>'restartCount')), 0) FROM jsonb_array_elements("
    "CASE WHEN jsonb_typeof(status->'containerStatuses') = 'array'"
    " THEN status->'containerStatuses' ELSE '[]'::jsonb END) c)"
)
_INDEX = f"qm_int(annotations->>'{INDEX_KEY}')"

# ``<> '[]'`` matches the owners index's predicate, so the planner can use it.
_MINE = "namespace = $1 AND owner_references <> '[]'::jsonb AND owner_references @> $2::jsonb"

SUMMARY = f"""
SELECT count(*) FILTER (WHERE {_ACTIVE}) AS active,
       count(*) FILTER (WHERE {_ACTIVE} AND coalesce(ready, false)) AS ready,
       count(*) FILTER (WHERE {_ACTIVE} AND node_name IS NULL) AS unbound,
       count(*) FILTER (WHERE deletion_timestamp IS NOT NULL
                          AND NOT coalesce({_FINISHED}, false)) AS terminating,
       count(*) FILTER (WHERE phase = 'Succeeded') AS succeeded,
       count(*) FILTER (WHERE phase = 'Failed' AND NOT {_DISRUPTED}) AS failed,
       count(*) FILTER (WHERE phase = 'Failed' AND {_DISRUPTED}) AS disrupted,
       coalesce(sum({_RESTARTS}) FILTER (WHERE $3 AND {_ACTIVE}), 0) AS restarts,
       array_agg(DISTINCT {_INDEX}) FILTER (WHERE $4 AND phase = 'Succeeded'
                                              AND {_INDEX} IS NOT NULL) AS succeeded_indexes,
       array_agg(DISTINCT {_INDEX}) FILTER (WHERE $4 AND {_ACTIVE}
                                              AND {_INDEX} IS NOT NULL) AS active_indexes
FROM pods WHERE {_MINE}"""

# The order Kubernetes deletes a Job's surplus pods in: not yet on a node, then not ready,
# then the newest (they have done the least work).
CANDIDATES = f"""
SELECT {COLS} FROM pods WHERE {_MINE} AND {_ACTIVE}
ORDER BY node_name IS NOT NULL, coalesce(ready, false), creation_timestamp DESC, name
LIMIT $3"""


def _owner(uid: str) -> list[dict[str, str]]:
    # A Python value, not JSON text: the pool's jsonb codec encodes parameters itself.
    return [{"uid": uid}]


async def summarise(
    conn: Conn, namespace: str, job_uid: str, *, restarts: bool, indexed: bool
) -> PodSummary:
    """Count the Job's pods by state. ``restarts`` sums container restarts of active pods (for
    ``restartPolicy: OnFailure``); ``indexed`` collects the index sets."""
    rec = await conn.fetchrow(SUMMARY, namespace, _owner(job_uid), restarts, indexed)
    assert rec is not None  # an aggregate always returns one row
    return PodSummary(
        active=int(rec["active"]),
        ready=int(rec["ready"]),
        unbound=int(rec["unbound"]),
        terminating=int(rec["terminating"]),
        succeeded=int(rec["succeeded"]),
        failed=int(rec["failed"]),
        disrupted=int(rec["disrupted"]),
        restarts=int(rec["restarts"]),
        succeeded_indexes=frozenset(rec["succeeded_indexes"] or ()),
        active_indexes=frozenset(rec["active_indexes"] or ()),
    )


async def deletion_candidates(conn: Conn, namespace: str, job_uid: str, limit: int) -> list[Stored]:
    """The first ``limit`` active pods of the Job in deletion order."""
    if limit <= 0:
        return []
    rows = await conn.fetch(CANDIDATES, namespace, _owner(job_uid), limit)
    return [Stored(POD, str(r["uid"]), int(r["row_version"]), dict(r)) for r in rows]
