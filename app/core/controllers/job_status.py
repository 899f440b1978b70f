"""Reading and writing a Job's status: its conditions and the compact list of completed indexes.

Shared by the Job controller, which writes them, and the CronJob controller, which reads whether
its Jobs finished and when.
"""

from __future__ import annotations

from app.core.controllers.plan import Obj, format_time, parse_time

FAILED = "Failed"
COMPLETE = "Complete"


def condition(status: Obj, kind: str) -> Obj | None:
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return None


def with_condition(
    status: Obj, kind: str, reason: str, message: str, now: float, value: str = "True"
) -> Obj:
    """``status`` with the condition set; its transition time moves only when its value does."""
    old = condition(status, kind)
    if old is not None and (old.get("status"), old.get("reason", ""), old.get("message", "")) == (
        value,
        reason,
        message,
    ):
        return status
    since = old.get("lastTransitionTime") if old and old.get("status") == value else None
    new: Obj = {"type": kind, "status": value, "lastTransitionTime": since or format_time(now)}
    if reason:
        new["reason"] = reason
    if message:
        new["message"] = message
    rest = [c for c in status.get("conditions") or [] if c is not old]
    return {**status, "conditions": [*rest, new]}


def finish_time(status: Obj) -> float | None:
    """When the Job finished (its Complete or Failed condition turned True), else ``None``."""
    for kind in ("Complete", FAILED):
        c = condition(status, kind)
        if c is not None and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime")) or 0.0
    return None


def parse_indexes(text: str) -> set[int]:
    """``"0-2,5"`` -> ``{0, 1, 2, 5}``; unreadable parts are ignored."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def format_indexes(indexes: set[int]) -> str:
    """The compact form Kubernetes uses for ``completedIndexes``: ``"0-2,5"``."""
    parts: list[str] = []
    start = prev = -2
    for i in sorted(indexes):
        if i != prev + 1:
            if start >= 0:
                parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = i
        prev = i
    if start >= 0:
        parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)
