"""Entries of the revision log, shared by the revisioner that writes them and the caches that
read them."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.kinds import Kind

OPS = {"A": "ADDED", "M": "MODIFIED", "D": "DELETED"}


@dataclass(slots=True)
class LogEntry:
    revision: int
    kind: Kind
    uid: str
    namespace: str
    name: str
    row_version: int
    op: str  # "A", "M" or "D"
    raw: str  # the object as JSON text, resourceVersion included
    commit_lsn: int = 0

    @property
    def event_type(self) -> str:
        return OPS[self.op]
