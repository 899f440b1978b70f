"""Recording Events: what every control-plane component writes when something a human would look
for happens (a pod preempted, a node tainted, a rollout stalled, a budget refusing an eviction).

Events are deduplicated by (object, reason): the row's name is derived from the involved
object's uid and the reason, so the same thing happening again moves ``count``,
``lastTimestamp`` and ``message`` of one row instead of adding rows. A note with
``distinct=True`` is deduplicated by its message too (scaling events, whose messages name
different ReplicaSets, each keep a row). Many notes are written in
one statement. Old Events are removed by the controller manager's retention loop.

Events about cluster-scoped objects (nodes) are kept in the ``default`` namespace, as
Kubernetes does.
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

Conn = asyncpg.Connection | PoolConnectionProxy | asyncpg.Pool
CLUSTER_EVENTS_NAMESPACE = "default"
MESSAGE_MAX = 1024

_EVENTS = """
INSERT INTO events (uid, namespace, name, spec)
SELECT gen_random_uuid(), d.namespace, d.name, d.spec
FROM unnest($1::text[], $2::text[], $3::jsonb[]) AS d(namespace, name, spec)
ON CONFLICT (namespace, name) DO UPDATE SET spec = events.spec
  || jsonb_build_object(
       'count', coalesce(qm_int(events.spec->>'count'), 1) + 1,
       'lastTimestamp', EXCLUDED.spec->'lastTimestamp',
       'message', EXCLUDED.spec->'message',
       'type', EXCLUDED.spec->'type')
"""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about. ``namespace`` is empty for cluster-scoped kinds."""

    kind: str
    uid: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: dict[str, Any]) -> ObjectRef:
        meta = obj.get("metadata") or {}
        return cls(
            str(obj.get("kind", "")),
            str(meta.get("uid", "")),
            str(meta.get("namespace") or ""),
            str(meta.get("name", "")),
        )


@dataclass(frozen=True, slots=True)
class EventNote:
    obj: ObjectRef
    reason: str
    message: str
    type: str = "Normal"  # or "Warning"
    component: str = "quaymaster-controller"
    distinct: bool = False

    @property
    def key(self) -> str:
        return f"{self.obj.uid}/{self.reason}" + (f"/{self.message}" if self.distinct else "")


def event_name(note: EventNote) -> str:
    digest = hashlib.sha256(note.key.encode()).hexdigest()[:10]
    return f"{note.obj.name[:200]}.{digest}"


def event_namespace(obj: ObjectRef) -> str:
    return obj.namespace or CLUSTER_EVENTS_NAMESPACE


def event_spec(note: EventNote, now: datetime) -> dict[str, Any]:
    stamp = format_time(now)
    involved: dict[str, Any] = {
        "kind": note.obj.kind,
        "apiVersion": "quaymaster.io/v1",
        "name": note.obj.name,
        "uid": note.obj.uid,
    }
    if note.obj.namespace:
        involved["namespace"] = note.obj.namespace
    return {
        "involvedObject": involved,
        "reason": note.reason,
        "message": note.message[:MESSAGE_MAX],
        "type": note.type,
        "count": 1,
        "source": {"component": note.component},
        "reportingComponent": note.component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
    }


async def record_events(conn: Conn, notes: Sequence[EventNote], now: datetime) -> None:
    """Write (or bump) one Event per distinct (object, reason) among ``notes``."""
    if not notes:
        return
    # One row per key per statement: ON CONFLICT may not touch a row twice.
    unique = {n.key: n for n in notes}
    await conn.execute(
        _EVENTS,
        [event_namespace(n.obj) for n in unique.values()],
        [event_name(n) for n in unique.values()],
        [event_spec(n, now) for n in unique.values()],
    )
