"""Appending to the revision log, off the decoding thread, and compacting it.

The revisioner decodes and renders on one thread while ``LogWriter`` commits the previous
batch on its own connection; ``append`` is the one statement sequence that writes a batch, and
``compact`` trims history in small batches by revision range.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from app.store.db import BOUNDED_WAITS
from app.stream.log import LogEntry
from app.stream.pgoutput import format_lsn

log = logging.getLogger(__name__)


def _copy_text(value: str) -> str:
    """Escape a value for COPY's text format."""
    return (
        value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    )


def _copy_json(text: str) -> str:
    """JSON text holds no raw tab, newline or carriage return; only backslashes need escaping."""
    return text.replace("\\", "\\\\") if "\\" in text else text


def append(
    db: psycopg.Connection[Any], entries: list[LogEntry], expected: int, rev: int, lsn: int
) -> None:
    """Append one batch in one transaction that also moves the stream state from revision
    ``expected`` to ``rev`` (the compare-and-swap that keeps a deposed revisioner out) and
    wakes the caches with a single NOTIFY."""
    with db.transaction():
        if entries:
            lines = [
                f"{e.revision}\t{e.kind.kind}\t{e.uid}\t{_copy_text(e.namespace)}\t"
                f"{_copy_text(e.name)}\t{e.row_version}\t{e.op}\t{_copy_json(e.raw)}\t"
                f"{format_lsn(e.commit_lsn)}\n"
                for e in entries
            ]
            with db.cursor().copy(
                "COPY qm_revision_log (revision, kind, uid, namespace, name, row_version, op,"
                " object, commit_lsn) FROM STDIN"
            ) as copy:
                copy.write("".join(lines).encode())
        cur = db.execute(
            "UPDATE qm_stream_state SET last_revision = %s, last_commit_lsn = %s::pg_lsn,"
            " updated_at = now() WHERE id = 1 AND last_revision = %s",
            (rev, format_lsn(lsn), expected),
        )
        if cur.rowcount != 1:
            raise RuntimeError("another revisioner advanced the stream; stepping down")
        db.execute("SELECT pg_notify('qm_stream', %s)", (str(rev),))


def compact(db: psycopg.Connection[Any], upto: int, batch: int = 10_000) -> int:
    """Drop history up to revision ``upto`` in small batches, keeping the latest entry of
    every live object so the log always holds the whole current state."""
    total = 0
    row = db.execute("SELECT compacted_revision FROM qm_stream_state WHERE id = 1").fetchone()
    low = int(row[0]) if row else 0
    while low < upto:
        high = min(upto, low + batch)
        cur = db.execute(
            """
            DELETE FROM qm_revision_log l
            WHERE l.revision > %s AND l.revision <= %s
              AND (l.op = 'D' OR EXISTS (SELECT 1 FROM qm_revision_log n
                                         WHERE n.uid = l.uid AND n.revision > l.revision))
            """,
            (low, high),
        )
        total += cur.rowcount
        db.execute(
            "UPDATE qm_stream_state SET compacted_revision = GREATEST(compacted_revision, %s)"
            " WHERE id = 1",
            (high,),
        )
        low = high
    return total


@dataclass(slots=True)
class Batch:
    entries: list[LogEntry]
    revision: int
    commit_lsn: int
    end_lsn: int


def _merged(batches: list[Batch]) -> Batch:
    if len(batches) == 1:
        return batches[0]
    last = batches[-1]
    entries = [e for b in batches for e in b.entries]
    return Batch(entries, last.revision, last.commit_lsn, last.end_lsn)


class LogWriter:
    """Appends rendered batches to the log on its own connection and thread, so decoding the
    next batch overlaps with committing this one. Errors surface on the reader's next check."""

    def __init__(self, owner: Any) -> None:
        self.owner = owner
        self.queue: queue.Queue[Batch | None] = queue.Queue(maxsize=8)
        self.merge_max = 20_000  # entries in one append at most
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.confirmed_lsn = 0
        self.submitted = 0
        self.written = 0
        self._thread = threading.Thread(target=self._run, daemon=True, name="log-writer")

    def start(self) -> None:
        self._thread.start()

    def submit(self, batch: Batch) -> None:
        self.submitted += 1
        while True:
            self.check()
            try:
                self.queue.put(batch, timeout=0.5)
                return
            except queue.Full:
                continue

    def idle(self) -> bool:
        """True when every submitted batch has been committed (not merely dequeued)."""
        return self.written == self.submitted

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError("the log writer failed") from self.error
        if not self._thread.is_alive() and not self.done.is_set():
            raise RuntimeError("the log writer stopped")

    def close(self) -> None:
        self.done.set()
        with contextlib.suppress(queue.Full):
            self.queue.put_nowait(None)
        self._thread.join(timeout=10)

    def _gather(self, first: Batch) -> tuple[Batch, int, bool]:
        """``first`` and every batch already queued behind it, as one: when the writer falls
        behind, the backlog costs one transaction, one commit and one NOTIFY instead of one
        each (and the caches one poll). Batches are consecutive, so the merged one ends where
        the last ends. Returns the batch, how many were taken, and whether a stop was queued."""
        batches, size = [first], len(first.entries)
        while size < self.merge_max:
            try:
                nxt = self.queue.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                return _merged(batches), len(batches), True
            batches.append(nxt)
            size += len(nxt.entries)
        return _merged(batches), len(batches), False

    def _run(self) -> None:
        try:
            with psycopg.connect(self.owner.dsn, autocommit=True, **BOUNDED_WAITS) as db:
                while not self.done.is_set():
                    try:
                        batch = self.queue.get(timeout=0.5)
                    except queue.Empty:
                        continue
                    if batch is None:
                        return
                    batch, taken, last = self._gather(batch)
                    self.owner._write(db, batch.entries, batch.revision, batch.commit_lsn)
                    self.confirmed_lsn = batch.end_lsn
                    self.written += taken
                    self.owner.marks.append((batch.revision, time.monotonic()))
                    if self.owner.on_commit is not None and batch.entries:
                        self.owner.on_commit(batch.entries)
                    if last:
                        return
        except BaseException as exc:
            self.error = exc
            log.exception("log writer failed")
