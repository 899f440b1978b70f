"""Before and after, line by line: the one diff the UI shows (revisions, history rows).

Both sides are rendered as sorted, indented JSON (so a change of one field is one line, and
key order never shows as a change), then compared with :mod:`difflib`. Pure.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import Any

CONTEXT = 3


@dataclass(frozen=True)
class Line:
    op: str  # " " unchanged, "-" only before, "+" only after, "@" a hunk header
    text: str


def lines_of(value: Any) -> list[str]:
    if value is None:
        return []
    return json.dumps(value, indent=2, sort_keys=True, default=str).splitlines()


def diff(before: Any, after: Any, context: int = CONTEXT) -> list[Line]:
    """The lines that differ between ``before`` and ``after``, with ``context`` lines around
    each change; empty when they are equal."""
    out: list[Line] = []
    a, b = lines_of(before), lines_of(after)
    for raw in difflib.unified_diff(a, b, lineterm="", n=context):
        if raw.startswith(("---", "+++")):
            continue
        if raw.startswith("@@"):
            out.append(Line("@", raw))
        else:
            out.append(Line(raw[:1] or " ", raw[1:]))
    return out
