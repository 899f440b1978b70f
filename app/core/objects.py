"""Turning stored rows into API objects and back.

A row keeps metadata in typed columns and the desired/observed state in ``spec``/``status``;
the object a client sees is assembled here. The store (reading rows through asyncpg) and the
revisioner (reading the same columns out of logical decoding) both call ``render`` so an object
looks identical whichever path produced it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.core.kinds import API_VERSION, Kind

# The columns every kind table has, in table order; the store and the revisioner select these.
COLUMNS = (
    "uid",
    "namespace",
    "name",
    "generate_name",
    "labels",
    "annotations",
    "owner_references",
    "finalizers",
    "creation_timestamp",
    "deletion_timestamp",
    "deletion_grace_period_seconds",
    "generation",
    "row_version",
    "spec",
    "status",
)


def format_time(value: datetime | str | None) -> str | None:
    """RFC 3339 in UTC with second precision, as Kubernetes prints timestamps."""
    if value is None:
        return None
    if isinstance(value, str):
        value = parse_pg_time(value)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_pg_time(text: str) -> datetime:
    """Parse PostgreSQL's ISO text output (``2026-11-29 09:30:00.12+00``)."""
    if text.endswith(("+00", "-00")) or (
        len(text) > 3 and text[-3] in "+-" and ":" not in text[-3:]
    ):
        text = text + ":00"
    return datetime.fromisoformat(text)


def render(kind: Kind, row: dict[str, Any]) -> dict[str, Any]:
    """Assemble the API object (without ``resourceVersion``) from a row's column values."""
    meta: dict[str, Any] = {"name": row["name"]}
    if kind.namespaced:
        meta["namespace"] = row["namespace"]
    if row.get("generate_name"):
        meta["generateName"] = row["generate_name"]
    meta["uid"] = str(row["uid"])
    meta["generation"] = int(row["generation"])
    meta["creationTimestamp"] = format_time(row["creation_timestamp"])
    if row.get("deletion_timestamp") is not None:
        meta["deletionTimestamp"] = format_time(row["deletion_timestamp"])
        grace = row.get("deletion_grace_period_seconds")
        if grace is not None:
            meta["deletionGracePeriodSeconds"] = int(grace)
    for column, key in (
        ("labels", "labels"),
        ("annotations", "annotations"),
        ("owner_references", "ownerReferences"),
        ("finalizers", "finalizers"),
    ):
        value = row.get(column)
        if value:
            meta[key] = value
    obj: dict[str, Any] = {"apiVersion": API_VERSION, "kind": kind.kind, "metadata": meta}
    spec = row.get("spec") or {}
    if kind.spec_fields == ("spec",):
        obj["spec"] = spec
    else:
        for key in kind.spec_fields:
            if key in spec:
                obj[key] = spec[key]
    if kind.has_status:
        obj["status"] = row.get("status") or {}
    return obj


def split(kind: Kind, obj: dict[str, Any]) -> dict[str, Any]:
    """The inverse of ``render`` for the fields a client may set: column name -> value."""
    meta = obj.get("metadata") or {}
    if kind.spec_fields == ("spec",):
        spec = obj.get("spec") or {}
    else:
        spec = {k: obj[k] for k in kind.spec_fields if k in obj}
    return {
        "namespace": meta.get("namespace", "") if kind.namespaced else "",
        "name": meta.get("name"),
        "generate_name": meta.get("generateName"),
        "labels": meta.get("labels") or {},
        "annotations": meta.get("annotations") or {},
        "owner_references": meta.get("ownerReferences") or [],
        "finalizers": meta.get("finalizers") or [],
        "spec": spec,
        "status": (obj.get("status") or {}) if kind.has_status else {},
    }


def get_path(obj: dict[str, Any], path: str) -> Any:
    """Value at a dotted path, for field selectors on promoted fields; ``None`` if absent."""
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    """The condition of type ``kind`` in ``obj``'s status ({} when it has none)."""
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return {}
