"""Marking pods the platform takes away: the ``DisruptionTarget`` condition.

A pod removed by the platform rather than by its own failure (preempted by the scheduler,
evicted through the eviction API or a drain, evicted from a silent node) gets the condition
``DisruptionTarget=True`` with a reason saying who took it, written before it is deleted. Job
controllers read it so such pods never count against a Job's ``backoffLimit``, and people read
it to tell "it crashed" from "we moved it".
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from app.core.audit import WriteContext, text_of
from app.core.objects import format_time
from app.store.sql import with_context

Conn = asyncpg.Connection | PoolConnectionProxy | asyncpg.Pool

PREEMPTION = "PreemptionByScheduler"
EVICTION_API = "EvictionByEvictionAPI"
NODE_LIFECYCLE = "DeletionByNodeLifecycle"

_MARK = """
UPDATE pods p SET status = jsonb_set(
    CASE WHEN jsonb_typeof(p.status) = 'object' THEN p.status ELSE '{}'::jsonb END,
    '{conditions}',
    coalesce((SELECT jsonb_agg(c) FROM jsonb_array_elements(
                CASE WHEN jsonb_typeof(p.status->'conditions') = 'array'
                     THEN p.status->'conditions' ELSE '[]'::jsonb END) c
              WHERE c->>'type' IS DISTINCT FROM 'DisruptionTarget'), '[]'::jsonb)
    || jsonb_build_array(jsonb_build_object(
         'type', 'DisruptionTarget', 'status', 'True', 'reason', $2::text,
         'message', d.message, 'lastTransitionTime', $3::text)))
FROM unnest($1::uuid[], $4::text[]) AS d(uid, message)
WHERE p.uid = d.uid AND p.deletion_timestamp IS NULL AND """ + with_context(
    "coalesce($5::text, current_setting('qm.context', true))"
)  # without a context of its own, the one its transaction set holds


async def mark_disruption_targets(
    conn: Conn,
    items: Sequence[tuple[str, str]],
    reason: str,
    now: datetime,
    ctx: WriteContext | None = None,
) -> None:
    """Set ``DisruptionTarget=True`` with ``reason`` on each ``(pod uid, message)``, under
    the write context ``ctx`` (None: the one the caller's transaction set, if any)."""
    if items:
        await conn.execute(
            _MARK,
            [u for u, _m in items],
            reason,
            format_time(now),
            [m for _u, m in items],
            None if ctx is None else text_of(ctx.defaults(verb="update", subresource="status")),
        )
