"""The watch cache: every object of every kind in memory, plus a window of recent changes.

Each API server keeps one. It starts from the revision log (latest entry of every object at
revision R, and the retained history after the last compaction), then tails the log, woken by
the revisioner's NOTIFY with a one-second tick as a safety net. Lists, gets and watches are
served from here; writes wait here until the revisioner has numbered them, so a client always
gets back the resourceVersion the stream will show.

Objects are held as ready-to-send JSON bytes with only their labels and selectable fields
parsed, which keeps 300,000 pods well inside the memory budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import msgspec
from sortedcontainers import SortedDict

from app.core.errors import Gone, Timeout
from app.core.kinds import BY_KIND, STREAMED, Kind
from app.core.objects import get_path
from app.stream.index import SelectorIndex, Term
from app.stream.log import OPS, TAIL_SETTINGS, LogEntry

log = logging.getLogger(__name__)
_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()

Matcher = Callable[[dict[str, str]], bool]


@dataclass(slots=True)
class Cached:
    """One version of one object, ready to send."""

    kind: Kind
    uid: str
    namespace: str
    name: str
    revision: int
    row_version: int
    raw: bytes
    labels: dict[str, str]
    fields: dict[str, str]

    def obj(self) -> dict[str, Any]:
        result: dict[str, Any] = _dec.decode(self.raw)
        return result


@dataclass(slots=True)
class Event:
    revision: int
    type: str  # ADDED / MODIFIED / DELETED
    new: Cached
    old: Cached | None


@dataclass(eq=False)
class Watcher:
    """A subscriber; events arrive in commit order through ``queue``."""

    kind: Kind
    namespace: str | None
    labels: Matcher | None
    fields: Matcher | None
    queue: asyncio.Queue[tuple[str, Cached] | None] = field(
        default_factory=lambda: asyncio.Queue(maxsize=50_000)
    )
    overflowed: bool = False

    def matches(self, c: Cached | None) -> bool:
        if c is None or c.kind is not self.kind:
            return False
        if self.namespace is not None and c.namespace != self.namespace:
            return False
        if self.labels is not None and not self.labels(c.labels):
            return False
        return self.fields is None or self.fields(c.fields)

    def offer(self, ev: Event) -> None:
        if self.overflowed:
            return
        new_ok = ev.type != "DELETED" and self.matches(ev.new)
        if ev.type == "ADDED":
            old_ok = False
        elif ev.old is None:
            old_ok = new_ok  # history rebuilt after a restart: the earlier version is compacted
        else:
            old_ok = self.matches(ev.old)
        if ev.type == "DELETED":
            item = ("DELETED", ev.new) if self.matches(ev.new) else None
        elif new_ok and old_ok:
            item = ("MODIFIED", ev.new)
        elif new_ok:
            item = ("ADDED", ev.new)
        elif old_ok:
            item = ("DELETED", ev.new)  # it left the selection
        else:
            item = None
        if item is None:
            return
        if self.queue.maxsize and self.queue.qsize() >= self.queue.maxsize - 1:
            # The client is too slow; it must re-watch from its last RV. The last slot is kept
            # for the end marker: a full queue without one would leave its reader waiting on a
            # watcher that no longer receives anything.
            self.overflowed = True
            self.queue.put_nowait(None)
            return
        self.queue.put_nowait(item)


def make_cached(kind: Kind, raw: str | bytes, revision: int, row_version: int) -> Cached:
    """Index one object version: its JSON text (already carrying its resourceVersion) is kept as
    bytes, and only labels and selectable fields are pulled out of it."""
    data = raw.encode() if isinstance(raw, str) else raw
    obj = _dec.decode(data)
    meta = obj.get("metadata") or {}
    fields = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
    }
    for path in kind.field_columns:
        value = get_path(obj, path)
        if value is not None:
            fields[path] = str(value).lower() if isinstance(value, bool) else str(value)
    return Cached(
        kind,
        meta.get("uid", ""),
        meta.get("namespace", ""),
        meta.get("name", ""),
        revision,
        row_version,
        data,
        meta.get("labels") or {},
        fields,
    )


class WatchCache:
    """All objects, recent history, watchers and write waiters of one API server."""

    def __init__(self, window: int = 100_000, window_bytes: int = 256 * 2**20) -> None:
        self.revision = 0
        self.window: deque[Event] = deque()
        self.window_max = window
        self.window_max_bytes = window_bytes
        self.window_bytes = 0
        self.window_floor = 0  # watching from below this revision is 410 Gone
        self.objects: dict[str, SortedDict] = {k.kind: SortedDict() for k in STREAMED}
        self.by_uid: dict[str, Cached] = {}
        self.index = SelectorIndex()  # selector terms -> keys (app.stream.index)
        self.deleted: dict[str, Cached] = {}  # recently deleted, for writers still waiting
        self.watchers: set[Watcher] = set()
        self._waiters: dict[str, list[tuple[int, asyncio.Future[Cached | None]]]] = {}
        self._rev_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        self.loads = 0  # whole loads from the log; a reader built from the objects rebuilds

    # -- loading and tailing ---------------------------------------------------------------
    async def start(self, dsn: str) -> None:
        # A direct connection of its own (it LISTENs), so its statements stay prepared: the
        # tail's query is not parsed again on every poll (but is planned for each value).
        conn = await asyncpg.connect(dsn, server_settings=TAIL_SETTINGS)
        await self._load(conn)
        await self._listen(conn)
        self._task = asyncio.create_task(self._tail(conn, dsn))
        self.ready.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _load(self, conn: asyncpg.Connection) -> None:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            state = await conn.fetchrow(
                "SELECT last_revision, compacted_revision FROM qm_stream_state WHERE id = 1"
            )
            assert state is not None
            rev, floor = int(state["last_revision"]), int(state["compacted_revision"])
            async for r in conn.cursor(
                "SELECT DISTINCT ON (uid) revision, kind, row_version, op::text, object::text AS o"
                " FROM qm_revision_log WHERE revision <= $1 ORDER BY uid, revision DESC",
                rev,
                prefetch=2000,
            ):
                if r["op"] == "D":
                    continue
                kind = BY_KIND[r["kind"]]
                self._put(make_cached(kind, r["o"], r["revision"], r["row_version"]))
            history: list[LogEntry] = []
            async for r in conn.cursor(
                "SELECT revision, kind, uid::text, namespace, name, row_version, op::text,"
                " object::text AS o FROM qm_revision_log WHERE revision > $1 AND revision <= $2"
                " ORDER BY revision",
                max(floor, rev - self.window_max),
                rev,
                prefetch=2000,
            ):
                history.append(_entry(r))
        self.window_floor = history[0].revision - 1 if history else rev
        self._rebuild_window(history, rev)
        self.revision = rev
        self.loads += 1

    def _rebuild_window(self, history: list[LogEntry], rev: int) -> None:
        """Recreate the recent events (with their previous versions) from retained history."""
        versions: dict[str, Cached] = {}
        for e in history:
            new = make_cached(e.kind, e.raw, e.revision, e.row_version)
            old = versions.get(e.uid)
            self._remember(Event(e.revision, OPS[e.op], new, old))
            versions[e.uid] = new

    async def _tail(self, conn: asyncpg.Connection, dsn: str) -> None:
        while True:
            try:
                rows = await conn.fetch(
                    "SELECT revision, kind, uid::text, namespace, name, row_version, op::text,"
                    " object::text AS o FROM qm_revision_log WHERE revision > $1"
                    " ORDER BY revision LIMIT 5000",
                    self.revision,
                )
                if rows:
                    if rows[0]["revision"] != self.revision + 1:
                        await self._reload(conn)  # behind the compacted floor: start over
                        continue
                    self.apply([_entry(r) for r in rows])
                    continue
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 1.0)
            except asyncio.CancelledError:
                await conn.close()
                raise
            except Exception:
                log.exception("watch cache could not read the revision log; retrying")
                await asyncio.sleep(1.0)
                if conn.is_closed():
                    with contextlib.suppress(Exception):
                        conn = await asyncpg.connect(dsn, server_settings=TAIL_SETTINGS)
                        await self._listen(conn)

    async def _listen(self, conn: asyncpg.Connection) -> None:
        await conn.add_listener("qm_stream", lambda *_: self._wake.set())

    async def _reload(self, conn: asyncpg.Connection) -> None:
        """Rebuild from the log after falling behind its compaction; every open watch ends
        (its clients resume, or relist on 410) because the events it missed are gone."""
        log.warning("watch cache at %d fell behind the compacted log; reloading", self.revision)
        for w in list(self.watchers):
            w.overflowed = True
            with contextlib.suppress(asyncio.QueueFull):
                w.queue.put_nowait(None)
        self.watchers.clear()
        self.window.clear()
        self.window_bytes = 0
        self.objects = {k.kind: SortedDict() for k in STREAMED}
        self.by_uid.clear()
        self.index.clear()
        await self._load(conn)
        self._resolve_revisions()

    # -- applying changes ------------------------------------------------------------------
    def apply(self, entries: list[LogEntry]) -> None:
        """Apply log entries in revision order; already-applied ones are skipped, and a gap
        stops the batch (the tail loop re-reads from the database)."""
        for e in entries:
            if e.revision <= self.revision:
                continue
            if e.revision != self.revision + 1:
                self._wake.set()
                break
            new = make_cached(e.kind, e.raw, e.revision, e.row_version)
            old = self.by_uid.get(e.uid)
            if e.op == "D":
                self._drop(new)
            else:
                self._put(new)
            ev = Event(e.revision, OPS[e.op], new, old)
            self._remember(ev)
            for w in self.watchers:
                w.offer(ev)
            self.revision = e.revision
            self._resolve(e.uid, new, e.op == "D")
        self._resolve_revisions()

    def _remember(self, ev: Event) -> None:
        """Keep ``ev`` in the history window, bounded by event count and by bytes."""
        self.window.append(ev)
        self.window_bytes += len(ev.new.raw)
        while self.window and (
            len(self.window) > self.window_max or self.window_bytes > self.window_max_bytes
        ):
            gone = self.window.popleft()
            self.window_bytes -= len(gone.new.raw)
            self.window_floor = gone.revision

    def _put(self, c: Cached) -> None:
        old = self.by_uid.get(c.uid)
        store = self.objects[c.kind.kind]
        if old is not None:
            self.index.remove(old)
            if (old.namespace, old.name) != (c.namespace, c.name):
                self.objects[old.kind.kind].pop((old.namespace, old.name), None)  # renamed
        replaced = store.get((c.namespace, c.name))
        if replaced is not None and replaced is not old:
            self.index.remove(replaced)
        store[(c.namespace, c.name)] = c
        self.by_uid[c.uid] = c
        self.index.add(c)

    def _drop(self, c: Cached) -> None:
        current = self.by_uid.pop(c.uid, None) or c
        store = self.objects[current.kind.kind]
        key = (current.namespace, current.name)
        if key in store and store[key].uid == c.uid:
            self.index.remove(store.pop(key))
        self.deleted[c.uid] = c
        if len(self.deleted) > 10_000:
            self.deleted.pop(next(iter(self.deleted)))

    def _resolve(self, uid: str, c: Cached, deleted: bool) -> None:
        waiting = self._waiters.get(uid)
        if not waiting:
            return
        keep = []
        for version, fut in waiting:
            if fut.done():
                continue
            if version == -1 and not deleted:
                keep.append((version, fut))
            elif version == -1:
                fut.set_result(None if deleted else c)
            elif c.row_version >= version:
                fut.set_result(c)
            else:
                keep.append((version, fut))
        if keep:
            self._waiters[uid] = keep
        else:
            del self._waiters[uid]

    def _resolve_revisions(self) -> None:
        remaining = []
        for rev, fut in self._rev_waiters:
            if fut.done():
                continue
            if self.revision >= rev:
                fut.set_result(None)
            else:
                remaining.append((rev, fut))
        self._rev_waiters = remaining

    # -- waiting for writes ----------------------------------------------------------------
    async def wait_for(self, uid: str, row_version: int, timeout: float = 10.0) -> Cached:
        """The cached version of a write this server just committed, once the stream has it."""
        current = self.by_uid.get(uid) or self.deleted.get(uid)
        if current is not None and current.row_version >= row_version:
            return self._exact(uid, row_version) or current
        result = await self._wait(uid, row_version, timeout)
        assert result is not None
        return result

    def _exact(self, uid: str, row_version: int, depth: int = 50_000) -> Cached | None:
        """The version a writer produced, if a later write already replaced it."""
        for i in range(len(self.window) - 1, max(-1, len(self.window) - 1 - depth), -1):
            c = self.window[i].new
            if c.uid == uid and c.row_version <= row_version:
                return c if c.row_version == row_version else None
        return None

    async def wait_deleted(self, uid: str, timeout: float = 10.0) -> None:
        if uid not in self.by_uid:
            return
        await self._wait(uid, -1, timeout)

    async def _wait(self, uid: str, version: int, timeout: float) -> Cached | None:
        fut: asyncio.Future[Cached | None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(uid, []).append((version, fut))
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError as exc:
            raise Timeout(
                "the write was committed but the revision stream has not shown it yet; "
                "read it back before retrying"
            ) from exc

    async def wait_revision(self, revision: int, timeout: float = 3.0) -> None:
        """Block until the cache has caught up with ``revision`` (for consistent reads)."""
        if self.revision >= revision:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._rev_waiters.append((revision, fut))
        try:
            await asyncio.wait_for(fut, timeout)
        except TimeoutError as exc:
            raise Timeout(
                f"too large resource version: {revision}, current: {self.revision}"
            ) from exc

    # -- reading ---------------------------------------------------------------------------
    def get(self, kind: Kind, namespace: str, name: str) -> Cached | None:
        return self.objects[kind.kind].get((namespace, name))

    def iter(
        self,
        kind: Kind,
        namespace: str | None,
        after: tuple[str, str] | None = None,
    ) -> Iterator[Cached]:
        store: SortedDict = self.objects[kind.kind]
        if namespace is None:
            keys = store.irange(minimum=after, inclusive=(False, True)) if after else store.keys()
        else:
            low = after if after and after[0] == namespace else (namespace, "")
            keys = store.irange(low, (namespace, "\U0010ffff"), inclusive=(after is None, True))
        for key in keys:
            yield store[key]

    def candidates(
        self,
        kind: Kind,
        namespace: str | None,
        after: tuple[str, str] | None,
        terms: list[Term],
        limit: int | None = None,
    ) -> list[tuple[str, str]] | None:
        """Sorted keys of the objects that may match ``terms`` (read them with :meth:`get`),
        or None when the list should walk :meth:`iter` instead (app.stream.index)."""
        total = len(self.objects[kind.kind])
        return self.index.candidates(kind.kind, total, terms, namespace, after, limit)

    def watch(self, w: Watcher, since: int | None) -> None:
        """Register ``w``; replay retained events after ``since`` first (None: from now, with
        the current objects as ADDED events)."""
        if since is None:
            for c in self.iter(w.kind, w.namespace):
                if w.matches(c):
                    w.queue.put_nowait(("ADDED", c))
        else:
            if since < self.window_floor:
                raise Gone(f"too old resource version: {since} ({self.window_floor + 1})")
            if since > self.revision:
                raise Timeout(f"too large resource version: {since}, current: {self.revision}")
            for ev in self._since(since):
                w.offer(ev)
        self.watchers.add(w)

    def _since(self, since: int) -> Iterator[Event]:
        if not self.window or since >= self.revision:
            return
        first = self.window[0].revision
        start = max(0, since + 1 - first)
        for i in range(start, len(self.window)):
            yield self.window[i]

    def unwatch(self, w: Watcher) -> None:
        self.watchers.discard(w)


def _entry(r: asyncpg.Record) -> LogEntry:
    return LogEntry(
        r["revision"],
        BY_KIND[r["kind"]],
        r["uid"],
        r["namespace"],
        r["name"],
        r["row_version"],
        r["op"],
        r["o"],
    )
