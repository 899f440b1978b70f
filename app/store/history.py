"""The change history's chain, seen from Python: seal, verify, status and archive (ADR 0052).

Migration 0014 does the work in SQL (``qm_history_seal``, ``qm_history_verify``,
``qm_history_status``, ``qm_history_archive``, ``qm_history_drop_archived``); this module calls
those functions for the revisioner leader's seal loop (``Sealer``), ``qm audit verify`` and
``qm audit archive`` (``app.cli.audit``), and the API's ``/metrics``. The archive export writes
one CSV file per detached partition (``COPY``: each row with its ``seq`` and ``hash`` from
``qm_history_links``) and a manifest naming the anchor and each file's SHA-256, then drops the
partition.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import psycopg
from psycopg import sql

from app.store.db import BOUNDED_WAITS

log = logging.getLogger(__name__)

SEAL_BATCH = 5000
SEAL_EVERY_S = 1.0
ARCHIVIST = "qm_archivist"


@dataclass(frozen=True)
class Status:
    """How far sealing is: the tip's seq and hash, the anchor verification starts from, and
    the rows not sealed yet (with the age of the oldest: the sealer's lag)."""

    sealed_seq: int
    anchor_seq: int
    unsealed: int
    oldest_unsealed: datetime | None
    tip_hash: str

    def lag_s(self, now: datetime) -> float:
        """Seconds the oldest unsealed row has waited (0 when every row is sealed)."""
        if self.oldest_unsealed is None:
            return 0.0
        return max(0.0, (now - self.oldest_unsealed).total_seconds())


@dataclass(frozen=True)
class Broken:
    """The first broken link: the row (None when the chain's tail is missing) and what is wrong."""

    seq: int | None
    id: int | None
    at: datetime | None
    problem: str

    def describe(self) -> str:
        if self.id is None:
            return self.problem
        at = self.at.astimezone(UTC) if self.at else None
        return f"seq {self.seq} (id {self.id}, at {at:%Y-%m-%dT%H:%M:%S.%fZ}): {self.problem}"


def seal(db: psycopg.Connection[Any], max_rows: int = SEAL_BATCH) -> int:
    """Chain up to ``max_rows`` committed, unsealed rows; the number sealed (0 if another
    sealer holds the lock). Commits unless the connection is in autocommit mode already."""
    row = db.execute("SELECT qm_history_seal(%s)", (max_rows,)).fetchone()
    if not db.autocommit:
        db.commit()
    return int(row[0]) if row else 0


def seal_all(db: psycopg.Connection[Any], max_rows: int = SEAL_BATCH) -> int:
    """Seal batch after batch until one seals nothing; the total sealed. (A call's own summary
    rows, folded from finished hours, belong to its transaction: the next call seals them.)"""
    total = 0
    while True:
        n = seal(db, max_rows)
        total += n
        if n == 0:
            return total


def status(db: psycopg.Connection[Any]) -> Status:
    row = db.execute(
        "SELECT sealed_seq, anchor_seq, unsealed, oldest_unsealed, tip_hash"
        " FROM qm_history_status()"
    ).fetchone()
    assert row is not None
    return Status(int(row[0]), int(row[1]), int(row[2]), row[3], str(row[4]))


def verify(db: psycopg.Connection[Any]) -> Broken | None:
    """The first broken link from the latest anchor, or None when the chain holds."""
    row = db.execute("SELECT seq, id, at, problem FROM qm_history_verify()").fetchone()
    if row is None:
        return None
    return Broken(row[0], row[1], row[2], str(row[3]))


@dataclass(frozen=True)
class ArchivedFile:
    partition: str
    file: str
    rows: int
    sha256: str
    first_seq: int | None
    last_seq: int | None


@dataclass(frozen=True)
class Manifest:
    """What ``qm audit archive`` wrote: the anchor the remaining chain starts from, and files."""

    before: str
    anchor_seq: int
    anchor_hash: str
    archived_at: str
    database: str
    files: list[ArchivedFile]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def _as_archivist(db: psycopg.Connection[Any]) -> None:
    """Act as ``qm_archivist`` when the login may (a superuser or a member); otherwise the
    login's own EXECUTE grant decides."""
    member = db.execute("SELECT pg_has_role(current_user, %s, 'MEMBER')", (ARCHIVIST,)).fetchone()
    if member and member[0]:
        db.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(ARCHIVIST)))


def archive(
    db: psycopg.Connection[Any], before: datetime, out_dir: Path, *, keep: bool = False
) -> Manifest:
    """Detach every sealed month ending at or before ``before``, export each to
    ``out_dir/<partition>.csv`` with ``COPY``, write ``manifest-<seq>.json``, then drop the
    partitions (unless ``keep``). Raises ``psycopg.Error`` with the database's refusal."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _as_archivist(db)
    with db.transaction():
        parts = [r[0] for r in db.execute("SELECT qm_history_archive(%s)", (before,))]
    anchor = db.execute(
        "SELECT last_seq, encode(last_hash, 'hex'), archived_at FROM qm_history_anchors"
        " ORDER BY last_seq DESC LIMIT 1"
    ).fetchone()
    assert anchor is not None
    files = [_export(db, part, out_dir) for part in parts]
    name = db.execute("SELECT current_database()").fetchone()
    manifest = Manifest(
        before=before.astimezone(UTC).isoformat(),
        anchor_seq=int(anchor[0]),
        anchor_hash=str(anchor[1]),
        archived_at=anchor[2].astimezone(UTC).isoformat(),
        database=str(name[0]) if name else "",
        files=files,
    )
    (out_dir / f"manifest-{manifest.anchor_seq}.json").write_text(manifest.to_json())
    if not keep:
        for f in files:
            with db.transaction():
                db.execute("SELECT qm_history_drop_archived(%s, %s)", (f.partition, f.sha256))
    return manifest


def _export(db: psycopg.Connection[Any], part: str, out_dir: Path) -> ArchivedFile:
    path = out_dir / f"{part}.csv"
    digest = hashlib.sha256()
    query = sql.SQL(
        "COPY (SELECT h.*, l.seq, l.hash FROM {} AS h"
        " JOIN qm_history_links AS l ON l.id = h.id AND l.at = h.at ORDER BY l.seq)"
        " TO STDOUT (FORMAT csv, HEADER)"
    ).format(sql.Identifier(part))
    with path.open("wb") as out, db.cursor() as cur, cur.copy(query) as copy:
        for chunk in copy:
            data = bytes(chunk)
            digest.update(data)
            out.write(data)
    row = db.execute(
        sql.SQL(
            "SELECT count(*), min(l.seq), max(l.seq) FROM {} AS h"
            " JOIN qm_history_links AS l ON l.id = h.id AND l.at = h.at"
        ).format(sql.Identifier(part))
    ).fetchone()
    assert row is not None
    return ArchivedFile(part, path.name, int(row[0]), digest.hexdigest(), row[1], row[2])


class Sealer:
    """The revisioner leader's seal loop: about once a second, seal what has committed.

    ``lag_s`` and ``sealed_total`` are read by whoever reports them; ``on_error`` sees a
    failed round (the loop carries on)."""

    def __init__(
        self,
        dsn: str,
        every_s: float = SEAL_EVERY_S,
        batch: int = SEAL_BATCH,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dsn = dsn
        self.every_s = every_s
        self.batch = batch
        self.clock = clock
        self.sealed_total = 0
        self.lag_s = 0.0

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                with psycopg.connect(self.dsn, autocommit=True, **BOUNDED_WAITS) as db:
                    db.execute("SET application_name = 'qm-history-sealer'")
                    while not stop.wait(self.every_s):
                        self.round(db)
            except psycopg.Error:
                log.exception("history sealer failed; retrying")
                stop.wait(self.every_s)

    def round(self, db: psycopg.Connection[Any]) -> int:
        n = seal_all(db, self.batch)
        self.sealed_total += n
        st = status(db)
        now = db.execute("SELECT now()").fetchone()
        self.lag_s = st.lag_s(now[0]) if now else 0.0
        return n


async def metric_lines(pool: asyncpg.Pool) -> list[str]:
    """The sealer's lag for an API server's ``/metrics``: rows not chained yet and how long the
    oldest has waited (one range scan of the (xid, id) index past the sealer's cursor). Empty
    when the query fails."""
    try:
        row = await pool.fetchrow(
            "SELECT unsealed, coalesce(extract(epoch FROM now() - oldest_unsealed), 0),"
            " sealed_seq FROM qm_history_status()"
        )
    except (asyncpg.PostgresError, OSError):
        return []
    if row is None:
        return []
    return [
        "# HELP qm_history_unsealed_rows History rows not chained by the sealer yet.",
        "# TYPE qm_history_unsealed_rows gauge",
        f"qm_history_unsealed_rows {int(row[0])}",
        "# HELP qm_history_seal_lag_seconds Age of the oldest history row not chained yet.",
        "# TYPE qm_history_seal_lag_seconds gauge",
        f"qm_history_seal_lag_seconds {float(row[1]):.3f}",
        "# HELP qm_history_sealed_seq The last seq of the history's hash chain.",
        "# TYPE qm_history_sealed_seq gauge",
        f"qm_history_sealed_seq {int(row[2])}",
    ]
