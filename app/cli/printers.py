"""Rendering API objects for people and for scripts.

Tables (kubectl-style, driven by the printer columns in the kind registry), YAML / JSON /
name output, ages, and the ``describe`` view. Cells and ages come from ``app.core.columns``,
the grammar the API's server-side tables use too. Everything here is pure: it takes objects
and a ``now`` and returns text, so the formats are unit-testable without a server.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import yaml

from app.core.columns import (  # one grammar of cells, shared with the API's tables
    MISSING as MISSING,
)
from app.core.columns import NONE, format_age, format_value, lookup, parse_time
from app.core.kinds import Kind

Obj = dict[str, Any]

COLUMN_GAP = "   "


def column_widths(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            if i < len(widths):
                widths[i] = max(widths[i], len(cell))
    return widths


def format_row(cells: Sequence[str], widths: Sequence[int]) -> str:
    padded = [cell.ljust(widths[i]) if i < len(widths) else cell for i, cell in enumerate(cells)]
    return COLUMN_GAP.join(padded).rstrip()


def render_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by three spaces, header first, no trailing newline."""
    widths = column_widths(headers, rows)
    return "\n".join(format_row(r, widths) for r in [headers, *rows])


def table_headers(
    kind: Kind, *, wide: bool = False, all_namespaces: bool = False, event: bool = False
) -> list[str]:
    headers = ["EVENT"] if event else []
    if all_namespaces and kind.namespaced:
        headers.append("NAMESPACE")
    headers.append("NAME")
    headers += [header for header, _ in kind.columns]
    headers.append("AGE")
    if wide:
        headers.append("LABELS")
    return headers


def table_row(
    kind: Kind,
    obj: Obj,
    *,
    wide: bool = False,
    all_namespaces: bool = False,
    now: datetime | None = None,
    event: str | None = None,
    kind_prefix: bool = False,
) -> list[str]:
    """The cells for one object, matching ``table_headers`` with the same flags."""
    meta = obj.get("metadata") or {}
    row = [event or ""] if event is not None else []
    if all_namespaces and kind.namespaced:
        row.append(str(meta.get("namespace") or ""))
    name = str(meta.get("name") or "")
    row.append(f"{kind.singular}/{name}" if kind_prefix else name)
    row += [format_value(lookup(obj, path)) for _, path in kind.columns]
    row.append(format_age(meta.get("creationTimestamp"), now))
    if wide:
        row.append(format_value(meta.get("labels")))
    return row


def resource_name(kind: Kind, obj: Obj) -> str:
    """``pod/web``: the form ``-o name`` prints and ``apply`` reports."""
    return f"{kind.singular}/{(obj.get('metadata') or {}).get('name', '')}"


def to_yaml(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, default_flow_style=False, allow_unicode=True)


def to_json(obj: Any) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def as_list(items: Sequence[Obj], resource_version: str = "") -> Obj:
    """Wrap objects as a ``kind: List`` so that the output is itself an applicable manifest."""
    return {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": resource_version},
        "items": list(items),
    }


# ---- describe -------------------------------------------------------------------------------

_LABEL_WIDTH = 16
_SKIP_TOP = ("apiVersion", "kind", "metadata", "status")


def _field(label: str, value: str) -> str:
    return f"{label + ':':<{_LABEL_WIDTH}}{value}"


def _pairs(label: str, mapping: Any) -> list[str]:
    if not isinstance(mapping, dict) or not mapping:
        return [_field(label, NONE)]
    lines = []
    for i, (key, value) in enumerate(sorted(mapping.items())):
        text = f"{key}={value}"
        lines.append(_field(label, text) if i == 0 else " " * _LABEL_WIDTH + text)
    return lines


def _heading(key: str) -> str:
    return key[:1].upper() + key[1:]


def _indented_yaml(value: Any, indent: str = "  ") -> list[str]:
    return [indent + line for line in to_yaml(value).rstrip("\n").splitlines()]


def _section(key: str, value: Any) -> list[str]:
    if isinstance(value, dict | list):
        if not value:
            return [_field(_heading(key), NONE)]
        return [f"{_heading(key)}:", *_indented_yaml(value)]
    return [_field(_heading(key), format_value(value))]


def _mask_secret(obj: Obj) -> Obj:
    shown = dict(obj)
    for key in ("data", "stringData"):
        values = shown.get(key)
        if isinstance(values, dict):
            shown[key] = {k: f"<{len(str(v))} bytes>" for k, v in values.items()}
    return shown


def _event_time(event: Obj) -> datetime:
    for value in (
        event.get("lastTimestamp"),
        event.get("firstTimestamp"),
        (event.get("metadata") or {}).get("creationTimestamp"),
    ):
        parsed = parse_time(value)
        if parsed is not None:
            return parsed
    return datetime.min.replace(tzinfo=UTC)


def _event_age(event: Obj, now: datetime) -> str:
    last = event.get("lastTimestamp") or (event.get("metadata") or {}).get("creationTimestamp")
    age = format_age(last, now)
    count = event.get("count")
    first = event.get("firstTimestamp")
    if isinstance(count, int) and count > 1 and first:
        return f"{age} (x{count} over {format_age(first, now)})"
    return age


def _sub_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    underline = ["-" * len(h) for h in headers]
    return ["  " + line for line in render_table(headers, [underline, *rows]).splitlines()]


def _quota_usage(obj: Obj) -> list[str]:
    """A quota's limits as kubectl shows them: one row per resource, used next to hard."""
    hard = (obj.get("spec") or {}).get("hard") or {}
    used = (obj.get("status") or {}).get("used") or {}
    if not hard:
        return []
    rows = [[name, str(used.get(name, "-")), str(hard[name])] for name in sorted(hard)]
    return ["Usage:", *_sub_table(["Resource", "Used", "Hard"], rows)]


def describe(
    kind: Kind, obj: Obj, events: Sequence[Obj] | None, now: datetime | None = None
) -> str:
    """A human-readable page for one object, ending with its events (``None``: not fetched)."""
    now = now or datetime.now(UTC)
    meta = obj.get("metadata") or {}
    lines = [_field("Name", str(meta.get("name") or ""))]
    if kind.namespaced:
        lines.append(_field("Namespace", str(meta.get("namespace") or "")))
    lines += _pairs("Labels", meta.get("labels"))
    lines += _pairs("Annotations", meta.get("annotations"))
    created = meta.get("creationTimestamp")
    created_text = f"{created} ({format_age(created, now)} ago)" if created else NONE
    lines.append(_field("Created", created_text))
    lines.append(_field("UID", str(meta.get("uid") or NONE)))
    if meta.get("deletionTimestamp"):
        lines.append(_field("Terminating", f"since {meta['deletionTimestamp']}"))
    if meta.get("finalizers"):
        lines.append(_field("Finalizers", ", ".join(str(f) for f in meta["finalizers"])))
    owners = [o for o in meta.get("ownerReferences") or [] if isinstance(o, dict)]
    if owners:
        controllers = [o for o in owners if o.get("controller")] or owners
        text = ", ".join(f"{o.get('kind', '?')}/{o.get('name', '?')}" for o in controllers)
        lines.append(_field("Controlled By", text))

    shown = _mask_secret(obj) if kind.kind == "Secret" else obj
    for key, value in shown.items():
        if key not in _SKIP_TOP:
            lines += _section(key, value)

    status = obj.get("status")
    conditions: list[Any] = []
    if isinstance(status, dict):
        conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
        rest = {k: v for k, v in status.items() if k != "conditions"}
        if rest:
            lines += _section("status", rest)
    elif status is not None:
        lines += _section("status", status)
    if kind.kind == "ResourceQuota":
        lines += _quota_usage(obj)
    if conditions:
        lines.append("Conditions:")
        rows = [
            [str(c.get(k) or "") for k in ("type", "status", "reason", "message")]
            for c in conditions
        ]
        lines += _sub_table(["Type", "Status", "Reason", "Message"], rows)

    if events is None:
        lines.append(_field("Events", "<unavailable>"))
    elif not events:
        lines.append(_field("Events", NONE))
    else:
        lines.append("Events:")
        rows = [
            [
                str(e.get("type") or ""),
                str(e.get("reason") or ""),
                _event_age(e, now),
                str((e.get("source") or {}).get("component") or e.get("reportingComponent") or ""),
                str(e.get("message") or ""),
            ]
            for e in sorted(events, key=_event_time)
        ]
        lines += _sub_table(["Type", "Reason", "Age", "From", "Message"], rows)
    return "\n".join(lines) + "\n"
