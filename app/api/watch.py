"""Streaming watches: newline-delimited JSON events, in commit order, with bookmarks.

A watcher registers with the cache in the same synchronous step that replays retained history,
so no event can fall between the replay and the live stream. When the watcher's queue stays
empty for a while, every event up to the cache's current revision has already been sent, so a
BOOKMARK at that revision is truthful.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import msgspec

from app.core.errors import Gone
from app.core.kinds import API_VERSION, Kind
from app.stream.cache import WatchCache, Watcher

_enc = msgspec.json.Encoder()
BOOKMARK_EVERY_S = 5.0


def _line(event_type: str, raw: bytes) -> bytes:
    return b'{"type":"' + event_type.encode() + b'","object":' + raw + b"}\n"


def bookmark(kind: Kind, revision: int) -> bytes:
    obj = {
        "kind": kind.kind,
        "apiVersion": API_VERSION,
        "metadata": {"resourceVersion": str(revision)},
    }
    return _line("BOOKMARK", _enc.encode(obj))


def error_event(status: dict[str, object]) -> bytes:
    return _line("ERROR", _enc.encode(status))


async def stream(
    cache: WatchCache, w: Watcher, bookmarks: bool, timeout_s: float | None, kind: Kind
) -> AsyncIterator[bytes]:
    """Yield event lines until the client goes, the timeout passes, or the watcher overflows."""
    deadline = time.monotonic() + timeout_s if timeout_s else None
    try:
        while True:
            wait = BOOKMARK_EVERY_S
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    return
            try:
                item = await asyncio.wait_for(w.queue.get(), wait)
            except TimeoutError:
                if bookmarks:
                    yield bookmark(kind, cache.revision)
                continue
            if item is None:
                yield error_event(
                    Gone(
                        "the watch fell too far behind; resume from the last resourceVersion"
                    ).to_status()
                )
                return
            batch = [_line(item[0], item[1].raw)]
            while len(batch) < 500:
                try:
                    nxt = w.queue.get_nowait()
                except asyncio.QueueEmpty:
                    break
                if nxt is None:
                    w.queue.put_nowait(None)
                    break
                batch.append(_line(nxt[0], nxt[1].raw))
            yield b"".join(batch)
    finally:
        with contextlib.suppress(Exception):
            cache.unwatch(w)
