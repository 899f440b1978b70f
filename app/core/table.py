"""Objects as ``meta.k8s.io/v1`` ``Table`` answers, for clients that ask the server to print.

``kubectl get`` sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the
columns the server defines, so the columns are the kind registry's printer columns, the ones
``qm get`` shows: NAME, then the kind's own, then AGE (ADR 0050). Each row carries the object's
metadata (``includeObject=Metadata``, the default), the whole object (``Object``) or nothing
(``None``); kubectl reads the namespace and labels from it. Pure: the time is an argument.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from app.core.columns import format_age, format_value, lookup
from app.core.kinds import Kind

Obj = dict[str, Any]
Include = Literal["None", "Metadata", "Object"]
INCLUDE: tuple[Include, ...] = ("None", "Metadata", "Object")
TABLE_GROUP = "meta.k8s.io"
TABLE_VERSIONS = ("v1", "v1beta1")
NAME_DESCRIPTION = "Name must be unique within a namespace (metadata.name)."
AGE_DESCRIPTION = "The time since the object was created (metadata.creationTimestamp)."
LABELS_DESCRIPTION = "The object's labels (metadata.labels)."


def wants_table(accept: str) -> str | None:
    """The ``meta.k8s.io`` version of the first media range of ``accept`` that asks for a
    ``Table`` (``v1`` or ``v1beta1``); ``None`` when none does."""
    for media_range in accept.split(","):
        media, *params = (p.strip() for p in media_range.split(";"))
        values = dict(p.partition("=")[::2] for p in params)
        if media.lower() not in ("application/json", "*/*"):
            continue
        if values.get("as") == "Table" and values.get("g") == TABLE_GROUP:
            version = values.get("v", "v1")
            if version in TABLE_VERSIONS:
                return version
    return None


def column_definitions(kind: Kind) -> list[Obj]:
    """NAME, the kind's printer columns, AGE: the headers of ``qm get``; LABELS, priority 1,
    is what ``-o wide`` adds, as ``qm get -o wide`` does."""
    columns = [_column("Name", NAME_DESCRIPTION, "name")]
    columns += [_column(header, f"{path} of the object.") for header, path in kind.columns]
    columns.append(_column("Age", AGE_DESCRIPTION))
    columns.append(_column("Labels", LABELS_DESCRIPTION, priority=1))
    return columns


def _column(name: str, description: str, fmt: str = "", priority: int = 0) -> Obj:
    return {"name": name, "type": "string", "format": fmt, "description": description,
            "priority": priority}  # fmt: skip


def cells(kind: Kind, obj: Obj, now: datetime) -> list[str]:
    """One object's cells, in :func:`column_definitions` order, formatted as ``qm get``."""
    meta = obj.get("metadata") or {}
    return [
        str(meta.get("name") or ""),
        *(format_value(lookup(obj, path)) for _, path in kind.columns),
        format_age(meta.get("creationTimestamp"), now),
        format_value(meta.get("labels")),
    ]


def row(kind: Kind, obj: Obj, now: datetime, include: Include = "Metadata") -> Obj:
    out: Obj = {"cells": cells(kind, obj, now)}
    if include == "Object":
        out["object"] = obj
    elif include == "Metadata":
        out["object"] = {
            "kind": "PartialObjectMetadata",
            "apiVersion": f"{TABLE_GROUP}/v1",
            "metadata": obj.get("metadata") or {},
        }
    return out


def table(
    kind: Kind,
    objs: list[Obj],
    now: datetime,
    *,
    resource_version: str = "",
    cont: str | None = None,
    include: Include = "Metadata",
    version: str = "v1",
) -> Obj:
    """A ``Table`` of ``objs``; a watch event's object is a table of one row."""
    meta: Obj = {"resourceVersion": resource_version}
    if cont:
        meta["continue"] = cont
    return {
        "kind": "Table",
        "apiVersion": f"{TABLE_GROUP}/{version}",
        "metadata": meta,
        "columnDefinitions": column_definitions(kind),
        "rows": [row(kind, o, now, include) for o in objs],
    }


def include_object(value: str | None) -> Include | None:
    """``includeObject`` as given (default ``Metadata``); ``None`` when it is not a known value."""
    if value in (None, ""):
        return "Metadata"
    for known in INCLUDE:
        if value == known:
            return known
    return None
