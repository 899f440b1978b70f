"""The revisioner: the single writer of the revision stream.

It reads every committed change to the kind tables from a logical replication slot (streaming
protocol, ``pgoutput``), numbers the changes 1, 2, 3 ... in commit order, appends them to
``qm_revision_log`` together with the rendered object, and wakes the watch caches with one
NOTIFY per batch. Because numbers are assigned only to committed changes by one process reading
the WAL in commit order, the stream has no gaps and no reordering, whatever the writers did
(rolled back, ran long, or were a DBA typing UPDATE in psql).

Exactly-once: a batch of whole transactions is appended in one local transaction that also
moves ``qm_stream_state.last_commit_lsn``; only then is the slot told it may forget them. After a
crash the slot re-sends what was not confirmed and anything at or below ``last_commit_lsn`` is
skipped. Leadership is a session advisory lock; the slot itself can be used by one connection.

Runs as a thread (psycopg2 is the only driver that speaks the streaming replication protocol).
"""

from __future__ import annotations

import logging
import re
import select
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import msgspec
import psycopg
import psycopg2
import psycopg2.extras

from app.core.kinds import BY_KIND, BY_TABLE, Kind
from app.core.objects import COLUMNS, render
from app.store.db import BOUNDED_WAITS
from app.store.history import Sealer
from app.stream.log import LogEntry
from app.stream.logwriter import Batch, LogWriter, append, compact
from app.stream.pgoutput import UNCHANGED, Change, Decoder, Transaction, parse_lsn
from app.stream.render import columns_from_object, render_json, with_revision

log = logging.getLogger(__name__)

SLOT_PREFIX = "qm_rev_"
PUBLICATION = "qm_stream"
LOCK_KEY = 0x716D_7265_7600  # "qmrev"
TOASTABLE = ("labels", "annotations", "owner_references", "finalizers", "spec", "status")
_dec = msgspec.json.Decoder()
_enc = msgspec.json.Encoder()


@dataclass(slots=True)
class Previous:
    """What the revisioner remembers of an object's last logged version."""

    kind: Kind
    namespace: str
    name: str
    row_version: int
    raw: str
    columns: dict[str, str]


class Revisioner:
    """Consume the slot and append numbered changes to the revision log, until ``stop`` is set."""

    def __init__(
        self,
        dsn: str,
        on_commit: Callable[[list[LogEntry]], None] | None = None,
        *,
        batch_max: int = 5000,
        linger_s: float = 0.005,
        compact_every_s: float = 10.0,
        retain_s: float = 300.0,
        slot: str | None = None,
    ) -> None:
        self.dsn = dsn
        self.on_commit = on_commit
        self.batch_max = batch_max
        self.linger_s = linger_s
        self.compact_every_s = compact_every_s
        self.retain_s = retain_s
        self.slot: str | None = slot
        self.is_leader = threading.Event()
        self._rows: OrderedDict[str, Previous] = OrderedDict()
        self._rows_max = 20_000
        self._seed_lsn = 0
        self.last_revision = 0
        self.last_lsn = 0
        self.marks: deque[tuple[int, float]] = deque()
        self.sealer = Sealer(dsn)

    # -- lifecycle -----------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self._run_once(stop)
            except Exception:
                log.exception("revisioner failed; retrying")
                self.is_leader.clear()
                stop.wait(1.0)

    def _run_once(self, stop: threading.Event) -> None:
        with psycopg.connect(self.dsn, autocommit=True, **BOUNDED_WAITS) as db:
            while not db.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,)).fetchone()[0]:  # type: ignore[index]
                if stop.wait(1.0):
                    return
            self.is_leader.set()
            if self.slot is None:
                dbname = db.execute("SELECT current_database()").fetchone()[0]  # type: ignore[index]
                self.slot = slot_name(dbname)
            created = self._ensure_slot(db)
            state = db.execute(
                "SELECT last_revision, last_commit_lsn::text FROM qm_stream_state WHERE id = 1"
            ).fetchone()
            assert state is not None
            self.last_revision, self.last_lsn = int(state[0]), parse_lsn(state[1])
            seeded: dict[str, int] = {}
            if created:
                seeded = self._reseed(db)
            writer = LogWriter(self)
            compactor = threading.Thread(
                target=self._compact_loop, args=(writer.done,), daemon=True, name="compactor"
            )
            # The leader also chains the change history (ADR 0052), about once a second.
            sealer = threading.Thread(
                target=self.sealer.run, args=(writer.done,), daemon=True, name="sealer"
            )
            writer.start()
            compactor.start()
            sealer.start()
            try:
                self._stream(db, writer, stop, seeded)
            finally:
                writer.close()
                compactor.join(timeout=5)
                sealer.join(timeout=5)

    def _ensure_slot(self, db: psycopg.Connection[Any]) -> bool:
        row = db.execute(
            "SELECT wal_status FROM pg_replication_slots WHERE slot_name = %s", (self.slot,)
        ).fetchone()
        if row is not None and row[0] != "lost":
            return False
        if row is not None:
            log.warning(
                "replication slot %s was invalidated; rebuilding from the tables", self.slot
            )
            db.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
        db.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (self.slot,))
        return True

    # -- streaming -----------------------------------------------------------------------
    def _stream(
        self,
        lookups: psycopg.Connection[Any],
        writer: LogWriter,
        stop: threading.Event,
        seeded: dict[str, int],
    ) -> None:
        """Decode and render on this thread while ``writer`` appends the previous batch."""
        repl = psycopg2.connect(
            self.dsn,
            connection_factory=psycopg2.extras.LogicalReplicationConnection,
            options="-c TimeZone=UTC -c DateStyle=ISO",
            **BOUNDED_WAITS,
        )
        try:
            cur = repl.cursor()
            cur.start_replication(
                slot_name=self.slot,
                decode=False,
                options={"proto_version": "1", "publication_names": PUBLICATION},
            )
            decoder = Decoder()
            pending: list[Transaction] = []
            npending = 0
            first_at = 0.0
            next_revision = self.last_revision
            last_lsn = self.last_lsn
            while not stop.is_set():
                writer.check()
                msg = cur.read_message()
                if msg is not None:
                    tx = decoder.feed(msg.payload)
                    if tx is not None and tx.changes and tx.commit_lsn > last_lsn:
                        if not pending:
                            first_at = time.monotonic()
                        pending.append(tx)
                        npending += len(tx.changes)
                    elif tx is not None and not pending and writer.idle():
                        cur.send_feedback(flush_lsn=tx.end_lsn)  # nothing of ours in flight
                    # Batch while changes keep coming, but never hold one back for long.
                    if npending < self.batch_max and (
                        not pending or time.monotonic() - first_at < self.linger_s
                    ):
                        continue
                if pending:
                    entries = self._render(lookups, pending, seeded, next_revision)
                    if entries:
                        next_revision = entries[-1].revision
                    last_lsn = pending[-1].commit_lsn
                    writer.submit(Batch(entries, next_revision, last_lsn, pending[-1].end_lsn))
                    if seeded and last_lsn > self._seed_lsn:
                        seeded.clear()  # the stream is past the reseed snapshot
                    pending, npending = [], 0
                    continue
                confirmed = writer.confirmed_lsn
                select.select([cur], [], [], 0.2)
                if confirmed:
                    cur.send_feedback(flush_lsn=confirmed)
                else:
                    cur.send_feedback()
        finally:
            repl.close()

    def _render(
        self,
        db: psycopg.Connection[Any],
        txs: list[Transaction],
        seeded: dict[str, int],
        revision: int,
    ) -> list[LogEntry]:
        entries: list[LogEntry] = []
        missing = self._missing_rows(db, txs)
        for tx in txs:
            for change in tx.changes:
                if change.op == "T":
                    gone = self._truncated(db, change.table, tx.commit_lsn, revision + 1)
                    revision += len(gone)
                    entries.extend(gone)
                    continue
                entry = self._entry(change, tx.commit_lsn, missing, seeded, revision + 1)
                if entry is not None:
                    revision += 1
                    entries.append(entry)
        return entries

    def _truncated(
        self, db: psycopg.Connection[Any], table: str, lsn: int, revision: int
    ) -> list[LogEntry]:
        """A TRUNCATE removed every row: one DELETED entry per object the log holds as live."""
        kind = BY_TABLE.get(table)
        if kind is None:
            return []
        out = []
        rows = db.execute(
            "SELECT * FROM (SELECT DISTINCT ON (uid) uid::text, namespace, name, row_version,"
            " op::text AS op, object::text FROM qm_revision_log WHERE kind = %s"
            " ORDER BY uid, revision DESC) latest WHERE op <> 'D'",
            (kind.kind,),
        ).fetchall()
        for uid, namespace, name, version, _op, text in rows:
            self._rows.pop(uid, None)
            out.append(
                LogEntry(
                    revision,
                    kind,
                    uid,
                    namespace,
                    name,
                    int(version),
                    "D",
                    with_revision(text, revision),
                    lsn,
                )
            )
            revision += 1
        return out

    def _write(
        self, db: psycopg.Connection[Any], entries: list[LogEntry], rev: int, lsn: int
    ) -> None:
        append(db, entries, self.last_revision, rev, lsn)
        self.last_revision, self.last_lsn = rev, lsn

    def _entry(
        self,
        change: Change,
        lsn: int,
        missing: dict[str, Previous],
        seeded: dict[str, int],
        revision: int,
    ) -> LogEntry | None:
        kind = BY_TABLE.get(change.table)
        if kind is None:
            return None
        uid = str(change.values["uid"])
        prev = self._rows.get(uid) or missing.get(uid)
        if change.op == "D":
            self._rows.pop(uid, None)
            if prev is None:
                return None  # never logged: no watcher can know about it
            return LogEntry(
                revision,
                kind,
                uid,
                prev.namespace,
                prev.name,
                prev.row_version,
                "D",
                with_revision(prev.raw, revision),
                lsn,
            )
        cols: dict[str, Any] = {}
        for col, val in change.values.items():
            cols[col] = (prev.columns.get(col) if prev else None) if val is UNCHANGED else val
        version = int(cols["row_version"])
        if seeded.get(uid, -1) >= version:
            return None  # already in the log from the reseed
        raw = render_json(kind, cols, revision)
        namespace, name = cols["namespace"] or "", cols["name"]
        self._remember(
            uid,
            Previous(
                kind,
                namespace,
                name,
                version,
                raw,
                {c: cols[c] for c in TOASTABLE if cols.get(c) is not None},
            ),
        )
        return LogEntry(
            revision,
            kind,
            uid,
            namespace,
            name,
            version,
            "A" if change.op == "I" else "M",
            raw,
            lsn,
        )

    def _remember(self, uid: str, prev: Previous) -> None:
        self._rows[uid] = prev
        self._rows.move_to_end(uid)
        if len(self._rows) > self._rows_max:
            self._rows.popitem(last=False)

    def _missing_rows(
        self, db: psycopg.Connection[Any], txs: Iterable[Transaction]
    ) -> dict[str, Previous]:
        """Previous versions the LRU lacks but a change needs (deletes, unchanged TOAST)."""
        need = {
            str(c.values["uid"])
            for tx in txs
            for c in tx.changes
            if c.op != "T"
            and (c.op == "D" or UNCHANGED in c.values.values())
            and str(c.values["uid"]) not in self._rows
        }
        if not need:
            return {}
        found: dict[str, Previous] = {}
        rows = db.execute(
            "SELECT DISTINCT ON (uid) uid::text, kind, namespace, name, row_version, op::text,"
            " object::text FROM qm_revision_log WHERE uid = ANY(%s::uuid[])"
            " ORDER BY uid, revision DESC",
            (list(need),),
        ).fetchall()
        for uid, kind_name, namespace, name, version, op, text in rows:
            if op != "D":
                kind = BY_KIND[kind_name]
                cols = columns_from_object(kind, _dec.decode(text))
                found[uid] = Previous(kind, namespace, name, int(version), text, cols)
        return found

    # -- reseeding and compaction --------------------------------------------------------
    def _reseed(self, db: psycopg.Connection[Any]) -> dict[str, int]:
        """Make the log agree with the tables after the slot was (re)created.

        Rows whose version the log lacks are appended, log objects gone from the tables get a
        DELETED entry. Changes committed after the slot's start may be seen twice (here and in
        the stream); the returned versions let the stream skip those.
        """
        latest: dict[str, tuple[str, int, str]] = {}
        for uid, kind_name, version, op in db.execute(
            "SELECT DISTINCT ON (uid) uid::text, kind, row_version, op::text FROM qm_revision_log"
            " ORDER BY uid, revision DESC"
        ):
            latest[uid] = (kind_name, int(version), op)
        entries: list[LogEntry] = []
        seen: dict[str, int] = {}
        rev = self.last_revision
        lsn_row = db.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert lsn_row is not None
        self._seed_lsn = parse_lsn(lsn_row[0])
        for kind in BY_TABLE.values():
            cols = ", ".join(COLUMNS)
            for rec in db.execute(f"SELECT {cols} FROM {kind.table}"):
                row = dict(zip(COLUMNS, rec, strict=True))
                row["uid"] = str(row["uid"])
                uid, version = row["uid"], int(row["row_version"])
                seen[uid] = version
                known = latest.get(uid)
                if known is not None and known[1] == version and known[2] != "D":
                    continue
                rev += 1
                op = "A" if known is None or known[2] == "D" else "M"
                entries.append(
                    LogEntry(
                        rev,
                        kind,
                        uid,
                        row["namespace"],
                        row["name"],
                        version,
                        op,
                        _raw(kind, row, rev),
                        parse_lsn(lsn_row[0]),
                    )
                )
        for uid, (kind_name, version, op) in latest.items():
            if op != "D" and uid not in seen:
                kind = BY_KIND[kind_name]
                last = db.execute(
                    "SELECT object::text FROM qm_revision_log WHERE uid = %s"
                    " ORDER BY revision DESC LIMIT 1",
                    (uid,),
                ).fetchone()
                assert last is not None
                meta = _dec.decode(last[0])["metadata"]
                rev += 1
                entries.append(
                    LogEntry(
                        rev,
                        kind,
                        uid,
                        meta.get("namespace", ""),
                        meta["name"],
                        version,
                        "D",
                        with_revision(last[0], rev),
                        parse_lsn(lsn_row[0]),
                    )
                )
        if entries:
            self._write(db, entries, rev, self.last_lsn)
            if self.on_commit is not None:
                self.on_commit(entries)
        return seen

    def _compact_loop(self, stop: threading.Event) -> None:
        with psycopg.connect(self.dsn, autocommit=True, **BOUNDED_WAITS) as db:
            while not stop.wait(self.compact_every_s):
                cutoff = self._cutoff()
                if cutoff:
                    compact(db, cutoff)

    def _cutoff(self) -> int:
        """The newest revision written more than ``retain_s`` ago (0: none yet)."""
        limit = time.monotonic() - self.retain_s
        best = 0
        while self.marks and self.marks[0][1] < limit:
            best = self.marks.popleft()[0]
        return best


def _raw(kind: Kind, row: dict[str, Any], revision: int) -> str:
    obj = render(kind, row)
    obj["metadata"]["resourceVersion"] = str(revision)
    return _enc.encode(obj).decode()


def slot_name(database: str) -> str:
    """One slot per database (slots are cluster-wide objects; names allow [a-z0-9_])."""
    clean = re.sub(r"[^a-z0-9_]", "_", database.lower())
    return (SLOT_PREFIX + clean)[:63]


# A slot is also "active" while ``pg_create_logical_replication_slot`` builds it, before the
# reseed; only a walsender holding it means the revisioner is streaming.
_STREAMING = """
SELECT 1 FROM pg_replication_slots s JOIN pg_stat_activity a ON a.pid = s.active_pid
WHERE s.database = current_database() AND s.slot_name LIKE %s AND a.backend_type = 'walsender'
"""


def streaming(db: psycopg.Connection[Any]) -> bool:
    """True once a revisioner streams this database: every commit from now on is logged."""
    return db.execute(_STREAMING, (SLOT_PREFIX + "%",)).fetchone() is not None
