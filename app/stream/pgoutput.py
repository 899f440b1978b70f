"""A parser for PostgreSQL's built-in ``pgoutput`` logical decoding protocol (version 1).

The revisioner receives raw pgoutput messages from the replication slot and needs only the
relation, operation and the text value of each published column; this module turns bytes into
those values without any I/O so it can be tested on its own.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

UNCHANGED = object()
"""Marker for a TOASTed column an UPDATE did not change: pgoutput does not resend its value."""


@dataclass
class Relation:
    relid: int
    namespace: str
    name: str
    columns: list[str]


@dataclass
class Change:
    table: str
    op: str  # "I", "U", "D" or "T" (truncate: no values)
    values: dict[str, object]  # column -> str | None | UNCHANGED (new tuple; key tuple for D)


@dataclass
class Transaction:
    xid: int
    final_lsn: int
    commit_lsn: int = 0
    end_lsn: int = 0
    commit_time_us: int = 0
    changes: list[Change] = field(default_factory=list)


class Decoder:
    """Stateful decoder: keeps the relation map and the transaction being assembled."""

    def __init__(self) -> None:
        self.relations: dict[int, Relation] = {}
        self.current: Transaction | None = None

    def feed(self, payload: bytes) -> Transaction | None:
        """Consume one message; returns a transaction when its COMMIT arrives."""
        tag = payload[:1]
        if tag == b"B":
            final_lsn, _ts, xid = struct.unpack_from("!qqi", payload, 1)
            self.current = Transaction(xid=xid, final_lsn=final_lsn)
        elif tag == b"C":
            _flags, commit_lsn, end_lsn, ts = struct.unpack_from("!bqqq", payload, 1)
            tx = self.current
            self.current = None
            if tx is not None:
                tx.commit_lsn, tx.end_lsn, tx.commit_time_us = commit_lsn, end_lsn, ts
            return tx
        elif tag == b"R":
            self._relation(payload)
        elif tag in (b"I", b"U", b"D"):
            self._change(tag.decode(), payload)
        elif tag == b"T":
            self._truncate(payload)
        # Origin, Type and Message carry nothing the stream needs.
        return None

    def _relation(self, buf: bytes) -> None:
        (relid,) = struct.unpack_from("!i", buf, 1)
        pos = 5
        namespace, pos = _cstring(buf, pos)
        name, pos = _cstring(buf, pos)
        pos += 1  # replica identity setting
        (ncols,) = struct.unpack_from("!h", buf, pos)
        pos += 2
        cols = []
        for _ in range(ncols):
            pos += 1  # flags
            col, pos = _cstring(buf, pos)
            pos += 8  # type oid, type modifier
            cols.append(col)
        self.relations[relid] = Relation(relid, namespace, name, cols)

    def _change(self, op: str, buf: bytes) -> None:
        (relid,) = struct.unpack_from("!i", buf, 1)
        rel = self.relations[relid]
        pos = 5
        kind = buf[pos : pos + 1]
        if op == "U" and kind in (b"K", b"O"):
            _, pos = _tuple(buf, pos + 1, rel.columns)  # old tuple: not needed
            kind = buf[pos : pos + 1]
        values, pos = _tuple(buf, pos + 1, rel.columns)
        if self.current is not None:
            self.current.changes.append(Change(rel.name, op, values))

    def _truncate(self, buf: bytes) -> None:
        (nrels,) = struct.unpack_from("!i", buf, 1)
        relids = struct.unpack_from(f"!{nrels}i", buf, 6)
        for relid in relids:
            rel = self.relations.get(relid)
            if rel is not None and self.current is not None:
                self.current.changes.append(Change(rel.name, "T", {}))


def _cstring(buf: bytes, pos: int) -> tuple[str, int]:
    end = buf.index(b"\x00", pos)
    return buf[pos:end].decode(), end + 1


def _tuple(buf: bytes, pos: int, columns: list[str]) -> tuple[dict[str, object], int]:
    (ncols,) = struct.unpack_from("!h", buf, pos)
    pos += 2
    values: dict[str, object] = {}
    for i in range(ncols):
        kind = buf[pos : pos + 1]
        pos += 1
        name = columns[i] if i < len(columns) else f"col{i}"
        if kind == b"n":
            values[name] = None
        elif kind == b"u":
            values[name] = UNCHANGED
        else:  # b"t" text (or b"b" binary, which we never request)
            (length,) = struct.unpack_from("!i", buf, pos)
            pos += 4
            values[name] = buf[pos : pos + length].decode()
            pos += length
    return values, pos


def format_lsn(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)
