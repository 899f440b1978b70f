"""List then watch the revision log for chosen kinds (the scheduler, the controller dispatcher).

The same two steps as the API's watch cache (``app.stream.cache``), without the cache: ``list``
reads the latest entry of every live object at revision R = ``last_revision`` in one
repeatable-read snapshot, and ``changes`` tails the log after R, woken by ``NOTIFY qm_stream``
with a one-second tick as a safety net.

Only the chosen kinds are read, so revisions skip; the tail therefore cannot spot compaction by
a gap, as the cache does. Instead each read takes ``qm_stream_state`` in the same statement (one
snapshot) and bounds itself by ``last_revision``, which the revisioner moves in the transaction
that appends the entries: everything up to it is visible, and if ``compacted_revision`` has
passed the position, history was dropped and the caller must list again (``Gone``).

Objects are decoded with msgspec straight from the logged JSON text; nothing else is parsed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from app.core.errors import Gone
from app.core.kinds import BY_KIND
from app.stream.log import TAIL_SETTINGS

log = logging.getLogger(__name__)

CHANNEL = "qm_stream"
APPLICATION_NAME = "quaymaster-informer"
BATCH = 4000
TICK = 1.0

_dec = msgspec.json.Decoder()

_LIST_STATE = "SELECT last_revision, compacted_revision FROM qm_stream_state WHERE id = 1"

_LIST = """
SELECT revision, kind, uid::text, namespace, name, row_version, op::text, object::text
FROM (
  SELECT DISTINCT ON (uid) revision, kind, uid, namespace, name, row_version, op, object
  FROM qm_revision_log
  WHERE revision <= $1 AND kind = ANY($2::text[])
  ORDER BY uid, revision DESC
) latest
WHERE op <> 'D'"""

# The stream's state and the next entries, read in one statement so both come from one snapshot.
_TAIL = """
SELECT s.last_revision, s.compacted_revision,
       e.revision, e.kind, e.uid, e.namespace, e.name, e.row_version, e.op, e.object
FROM qm_stream_state s
LEFT JOIN LATERAL (
  SELECT revision, kind, uid::text AS uid, namespace, name, row_version, op::text AS op,
         object::text AS object
  FROM qm_revision_log
  WHERE revision > $1 AND revision <= s.last_revision AND kind = ANY($2::text[])
  ORDER BY revision
  LIMIT $3
) e ON true
WHERE s.id = 1
ORDER BY e.revision"""


# Which objects of the chosen kinds changed in a range of revisions, with their labels (the
# discovery service resumes subscribers from it), and how far the log is compacted.
_TOUCHED = """
SELECT DISTINCT kind, namespace, name, (object->'metadata'->'labels')::text AS labels
FROM qm_revision_log
WHERE revision > $1 AND revision <= $2 AND kind = ANY($3::text[])"""


@dataclass(slots=True)
class Change:
    """One logged change of an object: its revision, ``op`` ``A``/``M``/``D``, and the object
    (for a deletion, the last version as logged)."""

    revision: int
    kind: str
    op: str
    uid: str
    namespace: str
    name: str
    row_version: int
    obj: dict[str, Any]


# The informer has a ``list`` method, which hides the builtin inside its class body.
Changes = list[Change]
Touched = list[tuple[str, str, str, dict[str, str]]]  # kind, namespace, name, labels


class LogInformer:
    """Lists and tails the revision log for ``kinds`` (kind names such as ``"Pod"``).

    ``dsn`` must reach PostgreSQL directly (``QM_STREAM_DATABASE_URL``): the tail holds a
    ``LISTEN``. ``revision`` is the position the last batch from ``changes`` brought the
    informer to; every change of the chosen kinds up to it has been yielded."""

    def __init__(self, dsn: str, kinds: Collection[str], batch: int = BATCH) -> None:
        unknown = sorted(set(kinds) - set(BY_KIND))
        if unknown:
            raise ValueError(f"unknown kinds: {', '.join(unknown)}")
        if not kinds:
            raise ValueError("an informer needs at least one kind")
        self.dsn = dsn
        self.kinds = sorted(set(kinds))
        self.batch = batch
        self.revision = 0

    async def _connect(self) -> asyncpg.Connection:
        return await asyncpg.connect(
            self.dsn, server_settings={"application_name": APPLICATION_NAME, **TAIL_SETTINGS}
        )

    async def list(self) -> tuple[int, Changes]:
        """The latest version of every live object of the chosen kinds at revision R (the last
        revision logged), in no particular order, and R."""
        conn = await self._connect()
        items: list[Change] = []
        try:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                state = await conn.fetchrow(_LIST_STATE)
                assert state is not None, "qm_stream_state has no row; is the schema migrated?"
                rev = int(state[0])
                async for r in conn.cursor(_LIST, rev, self.kinds, prefetch=2000):
                    items.append(
                        Change(r[0], r[1], r[6], r[2], r[3], r[4], r[5], _dec.decode(r[7]))
                    )
        finally:
            await conn.close()
        self.revision = rev
        return rev, items

    async def touched(self, since: int, upto: int) -> Touched:
        """``(kind, namespace, name, labels)`` of every object of the chosen kinds changed in
        (``since``, ``upto``], deleted ones included; ``Gone`` when the log no longer holds
        every change after ``since`` (compaction removes only entries at or below
        ``compacted_revision``)."""
        conn = await self._connect()
        try:
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                state = await conn.fetchrow(_LIST_STATE)
                assert state is not None, "qm_stream_state has no row; is the schema migrated?"
                if since < int(state[1]):
                    raise Gone(f"the log is compacted up to {state[1]}, past {since}")
                rows = await conn.fetch(_TOUCHED, since, upto, self.kinds)
        finally:
            await conn.close()
        return [(r[0], r[1], r[2], _dec.decode(r[3]) if r[3] else {}) for r in rows]

    async def changes(self, since: int) -> AsyncIterator[Changes]:
        """Batches of changes of the chosen kinds after revision ``since``, in revision order,
        for as long as the caller iterates. Raises ``Gone`` when the log has been compacted past
        ``since`` (list again and continue from the new R). Connection errors are logged and
        retried; close the iterator (``contextlib.aclosing``) to release its connections."""
        pos = since
        self.revision = since
        wake = asyncio.Event()

        def notified(*_: object) -> None:
            wake.set()

        conn: asyncpg.Connection | None = None
        listener: asyncpg.Connection | None = None
        try:
            while True:
                try:
                    if conn is None or conn.is_closed():
                        conn = await self._connect()
                    if listener is None or listener.is_closed():
                        listener = await self._connect()
                        await listener.add_listener(CHANNEL, notified)
                    # Clear before reading: a NOTIFY that lands during the read wakes the
                    # next wait instead of being lost.
                    wake.clear()
                    rows = await conn.fetch(_TAIL, pos, self.kinds, self.batch)
                except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    log.warning("informer could not read the revision log (%s); retrying", exc)
                    await _close(conn)
                    await _close(listener)
                    conn = listener = None
                    await asyncio.sleep(TICK)
                    continue
                last, compacted = int(rows[0][0]), int(rows[0][1])
                if pos < compacted:
                    raise Gone(
                        f"too old resource version: {pos} (the log is compacted up to {compacted})"
                    )
                batch = [
                    Change(r[2], r[3], r[8], r[4], r[5], r[6], r[7], _dec.decode(r[9]))
                    for r in rows
                    if r[2] is not None
                ]
                # A short batch read everything up to ``last``; a full one stops at its end.
                full = len(batch) >= self.batch
                pos = batch[-1].revision if full else max(pos, last)
                self.revision = pos
                if batch:
                    yield batch
                if full:
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), TICK)
        finally:
            await _close(conn)
            await _close(listener)


async def _close(conn: asyncpg.Connection | None) -> None:
    if conn is not None and not conn.is_closed():
        try:
            await asyncio.wait_for(conn.close(), 2.0)
        except Exception:
            conn.terminate()
