"""The scheduler's writes other than binds: why a pod is pending, and nominations.

Both are batched into one statement per kind of write. A pending pod's ``PodScheduled=False``
condition is rewritten only when its message changes, and its Events are deduplicated per pod
and reason (``app.store.events``), so a pod retried a hundred times costs one Event row, not a
hundred. Both carry the scheduler's write context (summarised by the history unless they
move a promoted column).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from app.core.audit import SCHEDULER, system
from app.core.objects import format_time
from app.store.sql import with_context

Conn = asyncpg.Connection | PoolConnectionProxy

COMPONENT = "quaymaster-scheduler"

_UNSCHEDULABLE = f"""
UPDATE pods p SET status = jsonb_set(
    p.status, '{{conditions}}',
    coalesce((SELECT jsonb_agg(c) FROM jsonb_array_elements(
                CASE WHEN jsonb_typeof(p.status->'conditions') = 'array'
                     THEN p.status->'conditions' ELSE '[]'::jsonb END) c
              WHERE c->>'type' IS DISTINCT FROM 'PodScheduled'), '[]'::jsonb)
    || jsonb_build_array(jsonb_build_object(
         'type', 'PodScheduled', 'status', 'False', 'reason', 'Unschedulable',
         'message', d.message, 'lastTransitionTime', $3::text)))
FROM unnest($1::uuid[], $2::text[]) AS d(uid, message)
WHERE p.uid = d.uid AND p.node_name IS NULL AND p.deletion_timestamp IS NULL
  AND NOT coalesce(p.status->'conditions' @> jsonb_build_array(jsonb_build_object(
        'type', 'PodScheduled', 'status', 'False', 'message', d.message)), false)
  AND {with_context("$4")}
"""

_NOMINATE = f"""
UPDATE pods p SET status = jsonb_set(p.status, '{{nominatedNodeName}}', to_jsonb(d.node))
FROM unnest($1::uuid[], $2::text[]) AS d(uid, node)
WHERE p.uid = d.uid AND p.node_name IS NULL AND p.deletion_timestamp IS NULL
  AND {with_context("$3")}
"""


def _status_context(reason: str) -> str:
    ctx = system(SCHEDULER, reason=reason)
    return ctx.defaults(verb="update", subresource="status").text()


_PENDING = _status_context("no node fits the pod")
_NOMINATED = _status_context("nominated onto a node it preempts for")


@dataclass(frozen=True, slots=True)
class PodRef:
    uid: str
    namespace: str
    name: str


async def mark_unschedulable(
    conn: Conn, items: Sequence[tuple[PodRef, str]], now: datetime
) -> None:
    if items:
        await conn.execute(
            _UNSCHEDULABLE,
            [p.uid for p, _m in items],
            [m for _p, m in items],
            format_time(now),
            _PENDING,
        )


async def nominate(conn: Conn, items: Sequence[tuple[PodRef, str]]) -> None:
    if items:
        nodes = [n for _p, n in items]
        await conn.execute(_NOMINATE, [p.uid for p, _n in items], nodes, _NOMINATED)
