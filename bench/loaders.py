"""Loading objects straight into a benchmark's database with COPY, as the benchmarks share it.

A benchmark that needs 10,000 nodes or 300,000 pods in place before it measures anything
cannot afford the API's one request per object. These rows go into the kind tables in one
COPY per transaction; the tables' own triggers fill the derived columns and the history, and
the revision stream picks them up from the WAL like any other commit (so start a revisioner
before loading if the objects must reach watch caches).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

NODE_COLUMNS = ("uid", "name", "labels", "spec", "status")
POD_COLUMNS = ("uid", "namespace", "name", "labels", "owner_references", "spec")


def _cell(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, dict | list) else value


def copy_rows(
    db: psycopg.Connection[Any], table: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]
) -> int:
    """One transaction: COPY ``rows`` (dicts and lists written as JSON) into ``table``. A
    ``None`` uid is replaced by a fresh one. Returns the number of rows."""
    n = 0
    uid_at = columns.index("uid") if "uid" in columns else -1
    with (
        db.transaction(),
        db.cursor() as cur,
        cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as cp,
    ):
        for row in rows:
            cells = [_cell(v) for v in row]
            if uid_at >= 0 and cells[uid_at] is None:
                cells[uid_at] = uuid.uuid4()
            cp.write_row(cells)
            n += 1
    return n


def copy_in_chunks(
    db: psycopg.Connection[Any],
    table: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    chunk: int = 5000,
) -> int:
    """:func:`copy_rows` in transactions of ``chunk`` rows (the revision stream keeps up with
    many small commits better than with one huge one)."""
    batch: list[Sequence[Any]] = []
    n = 0
    for row in rows:
        batch.append(row)
        if len(batch) == chunk:
            n += copy_rows(db, table, columns, batch)
            batch = []
    if batch:
        n += copy_rows(db, table, columns, batch)
    return n
