"""The watch cache's in-memory rules: ordering, replay, 410, selector transitions, bounds."""

from __future__ import annotations

import asyncio
import json

import pytest

from app.core.errors import Gone
from app.core.kinds import BY_KIND
from app.stream.cache import WatchCache, Watcher
from app.stream.log import LogEntry

POD = BY_KIND["Pod"]


def entry(
    rev: int, name: str, op: str = "M", labels: dict | None = None, node: str = ""
) -> LogEntry:
    obj = {
        "apiVersion": "quaymaster.io/v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": str(rev),
            "labels": labels or {},
        },
        "spec": {"nodeName": node} if node else {},
        "status": {},
    }
    return LogEntry(rev, POD, f"uid-{name}", "ns", name, rev * 10, op, json.dumps(obj))


def drain(w: Watcher) -> list[tuple[str, str, int]]:
    out = []
    while not w.queue.empty():
        item = w.queue.get_nowait()
        assert item is not None
        out.append((item[0], item[1].name, item[1].revision))
    return out


def test_apply_in_order_and_skip_duplicates_and_stop_at_gaps() -> None:
    c = WatchCache()
    c.apply([entry(1, "a", "A"), entry(2, "b", "A")])
    c.apply([entry(2, "b", "A"), entry(3, "a")])  # 2 again is skipped
    assert c.revision == 3
    c.apply([entry(5, "c", "A")])  # a gap: not applied
    assert c.revision == 3 and c.get(POD, "ns", "c") is None
    assert c.get(POD, "ns", "a").revision == 3  # type: ignore[union-attr]


def test_watch_replays_exactly_the_suffix_then_goes_live() -> None:
    c = WatchCache()
    c.apply([entry(i, f"p{i % 3}", "A" if i <= 3 else "M") for i in range(1, 8)])
    w = Watcher(POD, "ns", None, None)
    c.watch(w, 4)
    assert [r for _, _, r in drain(w)] == [5, 6, 7]
    c.apply([entry(8, "p2")])
    assert drain(w) == [("MODIFIED", "p2", 8)]


def test_watch_from_before_the_window_is_gone() -> None:
    c = WatchCache(window=3)
    c.apply([entry(i, f"p{i}", "A") for i in range(1, 8)])
    assert c.window_floor == 4
    with pytest.raises(Gone):
        c.watch(Watcher(POD, None, None, None), 3)
    w = Watcher(POD, None, None, None)
    c.watch(w, 4)
    assert [r for _, _, r in drain(w)] == [5, 6, 7]


def test_window_is_bounded_by_bytes() -> None:
    c = WatchCache(window=1000, window_bytes=2000)
    c.apply([entry(i, f"p{i}", "A") for i in range(1, 50)])
    assert c.window_bytes <= 2000
    assert len(c.window) < 49 and c.window_floor == c.window[0].revision - 1


def test_label_selector_transitions_become_added_and_deleted() -> None:
    c = WatchCache()
    c.apply([entry(1, "a", "A", {"app": "x"})])
    w = Watcher(POD, "ns", lambda labels: labels.get("app") == "web", None)
    c.watch(w, 1)
    c.apply(
        [
            entry(2, "a", "M", {"app": "web"}),
            entry(3, "a", "M", {"app": "web", "v": "2"}),
            entry(4, "a", "M", {"app": "x"}),
            entry(5, "a", "D", {"app": "x"}),
        ]
    )
    assert drain(w) == [("ADDED", "a", 2), ("MODIFIED", "a", 3), ("DELETED", "a", 4)]


def test_field_selector_on_promoted_field() -> None:
    c = WatchCache()
    w = Watcher(POD, None, None, lambda f: f.get("spec.nodeName") == "n1")
    c.watch(w, 0)
    c.apply([entry(1, "a", "A"), entry(2, "a", "M", node="n1"), entry(3, "b", "A", node="n2")])
    assert drain(w) == [("ADDED", "a", 2)]


def test_watch_from_now_lists_current_objects_as_added() -> None:
    c = WatchCache()
    c.apply([entry(1, "a", "A"), entry(2, "b", "A"), entry(3, "a", "D")])
    w = Watcher(POD, "ns", None, None)
    c.watch(w, None)
    assert drain(w) == [("ADDED", "b", 2)]


def test_a_slow_watcher_is_cut_off_not_blocking_others() -> None:
    c = WatchCache()
    slow = Watcher(POD, None, None, None, queue=asyncio.Queue(maxsize=2))
    fast = Watcher(POD, None, None, None)
    c.watch(slow, 0)
    c.watch(fast, 0)
    c.apply([entry(i, f"p{i}", "A") for i in range(1, 6)])
    assert slow.overflowed
    assert len(drain(fast)) == 5
    # What it got is in order and ends with the end marker, so its reader stops waiting.
    assert slow.queue.get_nowait() == ("ADDED", c.get(POD, "ns", "p1"))
    assert slow.queue.get_nowait() is None


async def test_writers_wait_for_their_revision() -> None:
    c = WatchCache()
    waiter = asyncio.create_task(c.wait_for("uid-a", 20, timeout=2))
    await asyncio.sleep(0)
    c.apply([entry(1, "a", "A")])  # row_version 10: not yet
    await asyncio.sleep(0)
    assert not waiter.done()
    c.apply([entry(2, "a")])  # row_version 20
    got = await waiter
    assert got.revision == 2


def test_an_object_renamed_by_sql_leaves_no_ghost() -> None:
    c = WatchCache()
    c.apply([entry(1, "old", "A")])
    renamed = entry(2, "new")
    renamed.uid = "uid-old"
    renamed.raw = renamed.raw.replace('"uid": "uid-new"', '"uid": "uid-old"')
    c.apply([renamed])
    assert c.get(POD, "ns", "old") is None
    assert c.get(POD, "ns", "new") is not None


async def test_a_writer_whose_object_was_already_deleted_is_answered() -> None:
    c = WatchCache()
    c.apply([entry(1, "a", "A"), entry(2, "a"), entry(3, "a", "D")])
    got = await c.wait_for("uid-a", 20, timeout=0.5)
    assert got.revision == 2  # the version this writer made, though it is deleted since
    assert (await c.wait_for("uid-a", 30, timeout=0.5)).revision == 3


def test_history_rebuilt_without_previous_versions_reports_modified() -> None:
    c = WatchCache()
    c._rebuild_window([entry(5, "a", "M"), entry(6, "a", "M")], 6)
    c.revision = 6
    c.window_floor = 4
    w = Watcher(POD, "ns", lambda labels: True, None)
    c.watch(w, 4)
    assert [t for t, _, _ in drain(w)] == ["MODIFIED", "MODIFIED"]


async def test_a_writer_gets_its_own_version_even_when_a_later_one_is_cached() -> None:
    c = WatchCache()
    c.apply([entry(1, "a", "A"), entry(2, "a"), entry(3, "a")])
    got = await c.wait_for("uid-a", 20, timeout=0.5)
    assert got.revision == 2
