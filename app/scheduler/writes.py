"""The scheduler's writes other than binds: why a pod is pending, nominations, and Events.

All of them are batched into one statement per kind of write. A pending pod's
``PodScheduled=False`` condition is rewritten only when its message changes, and Events are
deduplicated per pod and reason (the count and last timestamp move), so a pod retried a
hundred times costs one Event row, not a hundred.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from app.core.objects import format_time

Conn = asyncpg.Connection | PoolConnectionProxy

COMPONENT = "quaymaster-scheduler"

_UNSCHEDULABLE = """
UPDATE pods p SET status = jsonb_set(
    p.status, '{conditions}',
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
"""

_NOMINATE = """
UPDATE pods p SET status = jsonb_set(p.status, '{nominatedNodeName}', to_jsonb(d.node))
FROM unnest($1::uuid[], $2::text[]) AS d(uid, node)
WHERE p.uid = d.uid AND p.node_name IS NULL AND p.deletion_timestamp IS NULL
"""

_EVENTS = """
INSERT INTO events (uid, namespace, name, spec)
SELECT gen_random_uuid(), d.namespace, d.name, d.spec
FROM unnest($1::text[], $2::text[], $3::jsonb[]) AS d(namespace, name, spec)
ON CONFLICT (namespace, name) DO UPDATE SET spec = events.spec
  || jsonb_build_object(
       'count', coalesce((events.spec->>'count')::integer, 1) + 1,
       'lastTimestamp', EXCLUDED.spec->'lastTimestamp',
       'message', EXCLUDED.spec->'message')
"""


@dataclass(frozen=True, slots=True)
class PodRef:
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class EventNote:
    pod: PodRef
    reason: str
    message: str
    type: str = "Normal"


def _event_name(pod: PodRef, reason: str) -> str:
    digest = hashlib.sha256(f"{pod.uid}/{reason}".encode()).hexdigest()[:10]
    return f"{pod.name[:200]}.{digest}"


def event_spec(note: EventNote, now: datetime) -> dict[str, Any]:
    stamp = format_time(now)
    return {
        "involvedObject": {
            "kind": "Pod",
            "apiVersion": "quaymaster.io/v1",
            "namespace": note.pod.namespace,
            "name": note.pod.name,
            "uid": note.pod.uid,
        },
        "reason": note.reason,
        "message": note.message[:1024],
        "type": note.type,
        "count": 1,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
    }


async def mark_unschedulable(
    conn: Conn, items: Sequence[tuple[PodRef, str]], now: datetime
) -> None:
    if items:
        await conn.execute(
            _UNSCHEDULABLE,
            [p.uid for p, _m in items],
            [m for _p, m in items],
            format_time(now),
        )


async def nominate(conn: Conn, items: Sequence[tuple[PodRef, str]]) -> None:
    if items:
        await conn.execute(_NOMINATE, [p.uid for p, _n in items], [n for _p, n in items])


async def record_events(conn: Conn, notes: Sequence[EventNote], now: datetime) -> None:
    if not notes:
        return
    # One row per (pod, reason) per statement: ON CONFLICT may not touch a row twice.
    unique = {(n.pod.uid, n.reason): n for n in notes}
    await conn.execute(
        _EVENTS,
        [n.pod.namespace for n in unique.values()],
        [_event_name(n.pod, n.reason) for n in unique.values()],
        [event_spec(n, now) for n in unique.values()],
    )
