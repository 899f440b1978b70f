"""Rendering decoded rows straight to JSON text, without parsing them.

Logical decoding hands the revisioner each column as PostgreSQL's text output, and JSONB text
output is already valid JSON, so an object can be assembled by concatenation: no decode and
re-encode per change, which is most of the revisioner's budget at thousands of changes a
second. The result must match ``app.core.objects.render`` (tests hold the two together).
"""

from __future__ import annotations

from typing import Any

import msgspec

from app.core.kinds import API_VERSION, Kind
from app.core.objects import format_time

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()
EMPTY = (None, "", "{}", "[]", "null")
META_JSON = (
    ("labels", "labels"),
    ("annotations", "annotations"),
    ("owner_references", "ownerReferences"),
    ("finalizers", "finalizers"),
)


def _s(value: str) -> str:
    return _enc.encode(value).decode()


def pg_time(text: str) -> str:
    """PostgreSQL ISO text in UTC (the replication session runs with TimeZone=UTC) to RFC 3339."""
    if len(text) >= 19 and text.endswith("+00") and text[10] == " ":
        return f"{text[:10]}T{text[11:19]}Z"
    return format_time(text) or ""


def render_json(kind: Kind, v: dict[str, Any], revision: int) -> str:
    """The API object for decoded column texts ``v``, with ``resourceVersion`` = ``revision``."""
    meta = [f'"name":{_s(v["name"])}']
    if kind.namespaced:
        meta.append(f'"namespace":{_s(v["namespace"] or "")}')
    if v.get("generate_name"):
        meta.append(f'"generateName":{_s(v["generate_name"])}')
    meta.append(f'"uid":"{v["uid"]}"')
    meta.append(f'"resourceVersion":"{revision}"')
    meta.append(f'"generation":{int(v["generation"])}')
    meta.append(f'"creationTimestamp":"{pg_time(v["creation_timestamp"])}"')
    if v.get("deletion_timestamp"):
        meta.append(f'"deletionTimestamp":"{pg_time(v["deletion_timestamp"])}"')
        if v.get("deletion_grace_period_seconds") not in (None, ""):
            meta.append(f'"deletionGracePeriodSeconds":{int(v["deletion_grace_period_seconds"])}')
    for column, key in META_JSON:
        text = v.get(column)
        if text not in EMPTY:
            meta.append(f'"{key}":{text}')
    parts = [
        f'"apiVersion":"{API_VERSION}"',
        f'"kind":"{kind.kind}"',
        '"metadata":{' + ",".join(meta) + "}",
    ]
    spec = v.get("spec") or "{}"
    if kind.spec_fields == ("spec",):
        parts.append(f'"spec":{spec}')
    else:
        fields = _dec.decode(spec)
        if isinstance(fields, dict):
            parts.extend(
                f'"{k}":{_enc.encode(fields[k]).decode()}' for k in kind.spec_fields if k in fields
            )
    if kind.has_status:
        parts.append(f'"status":{v.get("status") or "{}"}')
    return "{" + ",".join(parts) + "}"


def columns_from_object(kind: Kind, obj: dict[str, Any]) -> dict[str, str]:
    """Column texts recovered from a rendered object (for TOAST values a change left out)."""
    meta = obj.get("metadata") or {}
    if kind.spec_fields == ("spec",):
        spec = obj.get("spec") or {}
    else:
        spec = {k: obj[k] for k in kind.spec_fields if k in obj}
    cols = {"spec": spec, "status": obj.get("status") or {}}
    for column, key in META_JSON:
        cols[column] = meta.get(key) or ([] if column in ("owner_references", "finalizers") else {})
    return {k: _enc.encode(val).decode() for k, val in cols.items()}


def with_revision(raw: str, revision: int) -> str:
    """The same object text with its ``resourceVersion`` replaced (for DELETED entries)."""
    obj = _dec.decode(raw)
    obj.setdefault("metadata", {})["resourceVersion"] = str(revision)
    return _enc.encode(obj).decode()
