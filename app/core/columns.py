"""The cells of an object's row: one grammar for ``qm get`` and the API's ``Table`` answers.

``qm get`` (``app.cli.printers``) prints tables itself and ``kubectl get`` asks the server for
them (``app.api.table``); both read the printer columns of the kind registry with the same path
lookup, cell formatting and ages defined here, so the two show the same columns and the same
values. Pure: the time is an argument.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

NONE = "<none>"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

_INDEXED = re.compile(r"^(.*)\[(\d+)\]$")


def _step(value: Any, key: str) -> Any:
    """Index one path segment, allowing a trailing ``[N]`` list index."""
    if isinstance(value, dict) and key in value:
        return value[key]
    match = _INDEXED.match(key)
    if match and isinstance(value, dict) and match.group(1) in value:
        seq = value[match.group(1)]
        idx = int(match.group(2))
        if isinstance(seq, list) and idx < len(seq):
            return seq[idx]
    return MISSING


def lookup(obj: Any, path: str) -> Any:
    """Follow a dotted path such as ``metadata.labels.topology.kubernetes.io/zone``.

    Keys may themselves contain dots, so at each level the longest run of segments that names
    an existing key wins, falling back to shorter runs. Returns ``MISSING`` when nothing
    matches.
    """
    parts = path.split(".") if path else []

    def walk(value: Any, rest: list[str]) -> Any:
        if not rest:
            return value
        for end in range(len(rest), 0, -1):
            child = _step(value, ".".join(rest[:end]))
            if child is MISSING:
                continue
            found = walk(child, rest[end:])
            if found is not MISSING:
                return found
        return MISSING

    return walk(obj, parts)


def format_value(value: Any) -> str:
    """One table cell: ``<none>`` for absent values, compact forms for maps and lists."""
    if value is MISSING or value is None or value == "":
        return NONE
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        if not value:
            return NONE
        return ",".join(f"{k}={format_value(v)}" for k, v in value.items())
    if isinstance(value, list):
        if not value:
            return NONE
        return ",".join(format_value(v) for v in value)
    return str(value)


def parse_time(value: Any) -> datetime | None:
    """Parse an RFC 3339 timestamp (``Z`` or offset, optional fraction); ``None`` if not one."""
    if not isinstance(value, str) or not value:
        return None
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


def human_duration(seconds: float) -> str:
    """``5s``, ``3m``, ``2h``, ``4d``, ``2y``: the largest whole unit, as kubectl prints ages."""
    secs = max(0, int(seconds))
    if secs < 60:
        return f"{secs}s"
    if secs < 3600:
        return f"{secs // 60}m"
    if secs < 86400:
        return f"{secs // 3600}h"
    if secs < 86400 * 365:
        return f"{secs // 86400}d"
    return f"{secs // (86400 * 365)}y"


def format_age(timestamp: Any, now: datetime | None = None) -> str:
    """The time since ``timestamp``; ``<unknown>`` when it is missing or unparsable."""
    parsed = parse_time(timestamp)
    if parsed is None:
        return "<unknown>"
    now = now or datetime.now(UTC)
    return human_duration((now - parsed).total_seconds())
