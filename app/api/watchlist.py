"""Watch-list: a watch that starts with the current objects and says where they end.

client-go's informers (``kubectl wait``, ``kubectl rollout status``) open ``watch=true&
sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true`` instead
of a list and a watch: the server sends every current object as ``ADDED``, then a
``BOOKMARK`` annotated ``k8s.io/initial-events-end: "true"`` at the revision those objects
were read at, then the changes after it. A server that never sends that bookmark leaves them
waiting for ever. The watch cache already replays the current objects as ``ADDED`` when a
watcher registers without a revision; :func:`initial_events` takes them off the watcher's
queue in the same synchronous step and closes them with the bookmark (ADR 0050).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import msgspec

from app.api.watch import _line
from app.core.kinds import API_VERSION, Kind
from app.stream.cache import WatchCache, Watcher

INITIAL_EVENTS_END = "k8s.io/initial-events-end"
_enc = msgspec.json.Encoder()


def wants_initial_events(query: Mapping[str, str]) -> bool:
    return query.get("sendInitialEvents") in ("true", "1", "True")


def initial_events(cache: WatchCache, kind: Kind, w: Watcher) -> bytes:
    """The ``ADDED`` events ``cache.watch(w, None)`` just queued, and the closing bookmark.
    Must run right after that call, with no ``await`` between."""
    lines = []
    while True:
        try:
            item = w.queue.get_nowait()
        except asyncio.QueueEmpty:
            break
        if item is None:  # overflowed: the stream reports it
            w.queue.put_nowait(None)
            break
        lines.append(_line(item[0], item[1].raw))
    end = {
        "kind": kind.kind,
        "apiVersion": API_VERSION,
        "metadata": {
            "resourceVersion": str(cache.revision),
            "annotations": {INITIAL_EVENTS_END: "true"},
        },
    }
    lines.append(_line("BOOKMARK", _enc.encode(end)))
    return b"".join(lines)


async def prepend(first: bytes, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    yield first
    async for chunk in rest:
        yield chunk
