"""The log writer's backlog merge: queued batches go as one append, in order, ending where the
last one ends, and a queued stop is still honoured."""

from __future__ import annotations

from app.core.kinds import BY_KIND
from app.stream.log import LogEntry
from app.stream.logwriter import Batch, LogWriter

LEASE = BY_KIND["Lease"]


def batch(first: int, n: int) -> Batch:
    entries = [
        LogEntry(r, LEASE, f"u{r}", "ns", f"l{r}", r, "M", "{}", 100 + r)
        for r in range(first, first + n)
    ]
    last = first + n - 1
    return Batch(entries, last if n else first - 1, 100 + last, 200 + last)


def test_a_lone_batch_is_written_as_it_is() -> None:
    w = LogWriter(owner=None)
    b = batch(1, 3)
    assert w._gather(b) == (b, 1, False)


def test_queued_batches_are_merged_in_order_and_end_where_the_last_ends() -> None:
    w = LogWriter(owner=None)
    for b in (batch(4, 2), batch(6, 0), batch(6, 3)):
        w.queue.put_nowait(b)
    merged, taken, stop = w._gather(batch(1, 3))
    assert (taken, stop) == (4, False)
    assert [e.revision for e in merged.entries] == list(range(1, 9))
    assert (merged.revision, merged.commit_lsn, merged.end_lsn) == (8, 108, 208)
    assert w.queue.empty()


def test_a_merge_stops_at_its_cap_and_leaves_the_rest_queued() -> None:
    w = LogWriter(owner=None)
    w.merge_max = 5
    for b in (batch(4, 3), batch(7, 3)):
        w.queue.put_nowait(b)
    merged, taken, _ = w._gather(batch(1, 3))
    assert taken == 2 and merged.revision == 6
    assert w.queue.get_nowait().entries[0].revision == 7


def test_a_queued_stop_ends_the_merge_and_is_reported() -> None:
    w = LogWriter(owner=None)
    w.queue.put_nowait(batch(4, 1))
    w.queue.put_nowait(None)
    w.queue.put_nowait(batch(5, 1))
    merged, taken, stop = w._gather(batch(1, 3))
    assert (taken, stop, merged.revision) == (2, True, 4)
