"""Entries of the revision log, shared by the revisioner that writes them and the caches that
read them."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.kinds import Kind

OPS = {"A": "ADDED", "M": "MODIFIED", "D": "DELETED"}

# Session settings for a connection that tails the log with prepared statements. The tail's
# ``revision > $1 ... LIMIT`` must be planned for the value it is given: a generic plan cached
# while the log was small is a sequential scan, and stays one as the log grows to minutes of
# history (it cost a watch cache's backend ~12 ms of CPU per poll, half a core at 200 writes/s).
# Planning each poll costs about 0.1 ms.
TAIL_SETTINGS = {"plan_cache_mode": "force_custom_plan"}


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
